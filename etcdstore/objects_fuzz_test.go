package etcdstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// Every decoder refuses what its encoder would not write: whatever decodes
// encodes back to the same bytes.

func FuzzLeafDecode(f *testing.F) {
	f.Add(objEncodeLeaf(objTestFiles(3, "")))
	f.Add(objEncodeLeaf([]cairn.Entry{{Path: "\xff", Kind: cairn.KindDir, Size: -1}}))
	f.Add([]byte{objTypeLeaf, objVersion, 1, 0, 0, 0, 0})
	f.Add([]byte{objTypeLeaf, objVersion, 0x80, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		files, err := objDecodeLeaf(b)
		if err != nil {
			return
		}
		if !bytes.Equal(objEncodeLeaf(files), b) {
			t.Fatalf("leaf %x decodes into entries that encode differently", b)
		}
	})
}

func FuzzObjectRootDecode(f *testing.F) {
	c := cairn.Checkpoint{Files: objTestFiles(200, ""), Conversation: []byte(`[1]`),
		Artifacts: []cairn.Artifact{{ArtifactID: "a", Name: "\xff", Size: 1, BlobKey: objTestArtifactKey("a"), CreatedAt: 1}}}
	root, _, _, err := splitCheckpointBody(&c)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(root.data)
	_, objs, refs, err := splitCheckpointBody(&c)
	if err != nil {
		f.Fatal(err)
	}
	for _, r := range refs {
		objs = append(objs, r.object)
	}
	ps, err := newPackSplit(root, objs, len(refs), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ps.pack(nil).root.data) // a packed root (version 6, runs)
	writePackVersion = objPackCompressed
	f.Add(ps.pack(nil).root.data) // version 4
	writePackVersion = objVersion
	f.Add(ps.pack(nil).root.data) // version 3
	// Roots of versions 5 and 6: the leaves' reference chunks made from
	// them; in the next checkpoint of the thread, with a changed entry, its
	// leaf stored as a patch of the one before.
	for _, v := range []struct{ pack, root byte }{{objPackCompressed, objRootDerived}, {objPackRuns, objRootRuns}} {
		writePackVersion = v.pack
		first, memo := packTurn(f, &c, nil, nil)
		if r, err := objDecodeRoot(first.root.data); err != nil || r.version != v.root || r.refs[0].at.from == 0 {
			f.Fatalf("the seed is not a root of version %d with chunks made from leaves: %v", v.root, err)
		}
		f.Add(first.root.data)
		c2 := c
		c2.Files = slices.Clone(c.Files)
		c2.Files[5].BlobKey = objTestFileKey("changed")
		second, _ := packTurn(f, &c2, memo, first.locs)
		if r, err := objDecodeRoot(second.root.data); err != nil || !slices.ContainsFunc(r.leaves, func(p objPart) bool { return p.at.delta != nil }) {
			f.Fatalf("the seed has no leaf stored as a patch: %v", err)
		}
		f.Add(second.root.data)
	}
	writePackVersion = objPackRuns
	f.Add(objEncodeRoot(&objRoot{version: objRootPacked, packs: []keys.Digest{{1}, {2}}}))
	f.Add(objEncodeRoot(&objRoot{}))
	f.Add(objEncodeRoot(&objRoot{convPresent: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := objDecodeRoot(b)
		if err != nil {
			return
		}
		if !bytes.Equal(objEncodeRoot(&r), b) {
			t.Fatalf("root %x decodes into a root that encodes differently", b)
		}
		_ = r.objectKeys()
	})
}

func FuzzRefChunkDecode(f *testing.F) {
	refs, err := splitRefChunks(objRefCheckpoint([]string{objTestArtifactKey("a"), objTestFileKey("a"), objTestFileKey("b")}))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(refs[0].data)
	f.Add([]byte{objTypeRefs, objVersion, 1, 1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		ks, err := decodeRefChunk(b)
		if err != nil {
			return
		}
		enc := binary.AppendUvarint([]byte{objTypeRefs, objVersion}, uint64(len(ks)))
		for i, k := range ks {
			shard, d, ok := keys.BlobShard(k)
			if !ok || i > 0 && ks[i-1] >= k {
				t.Fatalf("chunk %x decodes into key %q, out of order or invalid", b, k)
			}
			enc = append(enc, objNamespace(shard))
			enc = append(enc, d[:]...)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("chunk %x decodes into keys that encode differently", b)
		}
	})
}

// objFuzzCheckpoint builds a checkpoint from fuzz input: n entries whose
// paths mix the given path with an index (a small modulus makes paths and
// keys repeat), a conversation, and artifacts.
func objFuzzCheckpoint(path string, n uint16, mod uint8, conv []byte, nilConv bool, artName string, arts uint8) cairn.Checkpoint {
	var c cairn.Checkpoint
	m := int(mod) + 1
	for i := range int(n) % 3000 {
		e := cairn.Entry{Path: fmt.Sprintf("%s%d", path, i%m)}
		if i%7 != 3 {
			e.Kind, e.BlobKey, e.Size = cairn.KindFile, objTestFileKey(fmt.Sprint(i%m)), int64(i)-5
		} else {
			e.Kind = cairn.EntryKind(path)
		}
		c.Files = append(c.Files, e)
	}
	if !nilConv {
		// Repeat short inputs so that conversations cross chunk bounds.
		c.Conversation = json.RawMessage{}
		for len(conv) > 0 && len(c.Conversation) < int(n)*97 {
			c.Conversation = append(c.Conversation, conv...)
		}
	}
	for i := range int(arts) % 8 {
		c.Artifacts = append(c.Artifacts, cairn.Artifact{ArtifactID: fmt.Sprint(i), Name: artName, MimeType: path,
			Size: int64(n) * int64(i), BlobKey: objTestArtifactKey(fmt.Sprint(i % 3)), CreatedAt: float64(mod) / 3})
	}
	return c
}

// Split and assemble give back the body exactly; a corrupted object is
// refused, naming it.
func FuzzObjectSplitAssemble(f *testing.F) {
	f.Add("src/a", uint16(600), uint8(255), []byte(`{"role":"user"}`), false, "x", uint8(2), uint16(3))
	f.Add("\xff\x00", uint16(1), uint8(0), []byte(nil), true, "\xed\xa0\x80", uint8(1), uint16(0))
	f.Add("", uint16(0), uint8(0), []byte{}, false, "", uint8(0), uint16(0))
	f.Fuzz(func(t *testing.T, path string, n uint16, mod uint8, conv []byte, nilConv bool, artName string, arts uint8, corrupt uint16) {
		c := objFuzzCheckpoint(path, n, mod, conv, nilConv, artName, arts)
		objCheckRoundTrip(t, &c)
		root, objs, _, b := objSplit(t, &c)
		all := append([]object{root}, objs...)
		o := all[int(corrupt)%len(all)]
		bad := bytes.Clone(o.data)
		bad[int(corrupt)%len(bad)] ^= 0x40
		b[o.key] = bad
		_, _, _, err := assembleCheckpointBody(root.digest, b.fetch)
		if !errors.Is(err, errObjDigest) || !bytes.Contains([]byte(err.Error()), []byte(o.key)) {
			t.Fatalf("corrupting %s: %v", o.key, err)
		}
	})
}

// Assembling objects that hash to their keys but hold anything never panics,
// and whatever assembles is what the objects say.
func FuzzObjectAssemble(f *testing.F) {
	leaf := objEncodeLeaf(objTestFiles(2, ""))
	f.Add(leaf, uint16(2), []byte("Cx"), uint32(1), true, uint8(1), []byte(nil))
	f.Add([]byte{objTypeLeaf, objVersion, 1, 0, 0, 0, 0}, uint16(1), []byte{objTypeConv, objVersion}, uint32(0), false, uint8(3), []byte{0, 1, 2})
	f.Fuzz(func(t *testing.T, leaf []byte, leafN uint16, chunk []byte, chunkN uint32, present bool, repeat uint8, tail []byte) {
		b := objBucket{}
		lo, co := objNewObject(leaf), objNewObject(chunk)
		b.put(lo, co)
		r := objRoot{convPresent: present}
		for range int(repeat) % 4 {
			r.leaves = append(r.leaves, objPart{digest: lo.digest, n: int(leafN)})
			if present {
				r.conv = append(r.conv, objPart{digest: co.digest, n: int(chunkN)})
			}
		}
		data := append(objEncodeRoot(&r), tail...)
		root := objNewObject(data)
		b.put(root)
		files, conv, arts, err := assembleCheckpointBody(root.digest, b.fetch)
		if err != nil {
			return
		}
		dec, err := objDecodeRoot(data)
		if err != nil {
			t.Fatalf("assembled a body from a root that does not decode: %v", err)
		}
		want, err := objDecodeLeaf(leaf)
		if len(dec.leaves) > 0 && err != nil {
			t.Fatalf("assembled a body from a leaf that does not decode: %v", err)
		}
		if len(files) != len(dec.leaves)*len(want) || (conv != nil) != dec.convPresent ||
			len(conv) != len(dec.conv)*(len(chunk)-2) || len(arts) != len(dec.artifacts) {
			t.Fatalf("assembled %d files, %d conversation bytes, %d artifacts from %d leaves of %d, %d chunks of %d bytes",
				len(files), len(conv), len(arts), len(dec.leaves), len(want), len(dec.conv), len(chunk))
		}
	})
}

// countReferences agrees with counting each checkpoint's keys.
func FuzzRefCount(f *testing.F) {
	f.Add([]byte{1, 2, 3, 200, 7, 7, 0, 9}, uint8(3), uint16(500))
	f.Add([]byte{0}, uint8(0), uint16(0))
	f.Fuzz(func(t *testing.T, seeds []byte, checkpoints uint8, n uint16) {
		cps := make([]cairn.Checkpoint, int(checkpoints)%6+1)
		size := int(n) % 2000
		for ci := range cps {
			// Each checkpoint keeps its predecessor's keys but those the
			// seeds pick, so chunks are shared.
			for i := range size {
				key := objTestFileKey(fmt.Sprint(i))
				if len(seeds) > 0 && int(seeds[(i+ci)%len(seeds)])%(ci+2) == 0 {
					key = objTestFileKey(fmt.Sprint(ci, i))
				}
				cps[ci].Files = append(cps[ci].Files, cairn.Entry{Path: fmt.Sprint(i), Kind: cairn.KindFile, BlobKey: key})
			}
			if len(seeds) > ci {
				cps[ci].Artifacts = append(cps[ci].Artifacts, cairn.Artifact{BlobKey: objTestArtifactKey(fmt.Sprint(seeds[ci] % 4))})
			}
		}
		b := objBucket{}
		var listings []refListing
		for i := range cps {
			// Roots of both versions, as a store written before version 2
			// and since holds them.
			version := byte(objRootTree)
			if len(seeds) > i && seeds[i]%3 == 0 {
				version = objVersion
			}
			_, _, refs, err := splitCheckpointBodyAt(&cps[i], version)
			if err != nil {
				t.Fatal(err)
			}
			b.putRefs(refs)
			l := refListing{chunks: objDigests(refs), keyOrder: version == objVersion}
			listings = append(listings, l)
			if len(seeds) > i && seeds[i]%5 == 0 { // a fork lists the same chunks
				listings = append(listings, l)
				cps = append(cps, cps[i])
			}
		}
		got, err := countListings(listings, b.fetch)
		if err != nil {
			t.Fatal(err)
		}
		if want := objNaiveCounts(cps); !slices.Equal(got, want) {
			t.Fatalf("counts differ from the naive count: %v, want %v", got, want)
		}
	})
}

// The chunkers' cuts depend on what precedes them only: the chunks of a
// prefix are the chunks of the whole, but the last.
func FuzzChunkConvPrefix(f *testing.F) {
	f.Add([]byte("abc"), uint32(100000), uint32(70000))
	f.Fuzz(func(t *testing.T, seed []byte, n, cut uint32) {
		h := sha256.Sum256(seed)
		data := make([]byte, int(n)%(300<<10))
		for i := range data {
			if i%32 == 0 {
				h = sha256.Sum256(h[:])
			}
			data[i] = h[i%32] & 0x7F // text-like: the high bit clear
		}
		prefix := data[:int(cut)%(len(data)+1)]
		var whole, part []int
		for rest := data; len(rest) > 0; rest = rest[objConvCut(rest):] {
			whole = append(whole, len(data)-len(rest))
		}
		for rest := prefix; len(rest) > 0; rest = rest[objConvCut(rest):] {
			part = append(part, len(prefix)-len(rest))
		}
		// Every chunk start of the prefix is one of the whole's.
		for _, s := range part {
			if _, ok := slices.BinarySearch(whole, s); !ok {
				t.Fatalf("prefix of %d bytes starts a chunk at %d, the whole at %v", len(prefix), s, whole)
			}
		}
	})
}
