package etcdstore

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// TestRootVersion5Bounds checks the root decoder on the reference chunks of
// a root of version 5: a chunk made from a leaf names one of the root's
// leaves and a bitmap of exactly its entries, with no bit past them and at
// least as many bits as the chunk has keys.
func TestRootVersion5Bounds(t *testing.T) {
	pack := keys.Digest{1}
	leaf := objPart{digest: keys.Digest{2}, n: 10, at: partLoc{pack: pack, off: 2, size: 10}}
	for _, tc := range []struct {
		name string
		from int
		pick string
		n    int
		ok   bool
	}{
		{"Valid", 1, "\x03\x02", 3, true},
		{"AllEntries", 1, "\xff\x03", 10, true},
		{"NoLeaf", 2, "\x03\x02", 1, false},
		{"ShortBitmap", 1, "\x03", 1, false},
		{"LongBitmap", 1, "\x03\x00\x00", 1, false},
		{"BitPastTheLeaf", 1, "\x01\x04", 1, false},
		{"FewerBitsThanKeys", 1, "\x01\x00", 2, false},
		{"NoBits", 1, "\x00\x00", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := objRoot{version: objRootDerived, packs: []keys.Digest{pack}, leaves: []objPart{leaf},
				refs: []objPart{{digest: keys.Digest{3}, n: tc.n, at: partLoc{from: tc.from, pick: tc.pick}}}}
			got, ok := rootRoundTrip(t, &r, nil, tc.ok)
			if !ok {
				return
			}
			at := got.refs[0].at
			if at.from != tc.from || at.pick != tc.pick || at.base == nil || *at.base != leaf {
				t.Fatalf("decoded %+v, want made from %+v with bitmap %x", at, leaf, tc.pick)
			}
		})
	}
}

// rootRoundTrip encodes r, edits the bytes (when edit is not nil) and
// decodes them: it fails t unless the decoder's verdict is ok, and unless a
// root it decodes encodes to the same bytes; it returns the decoded root and
// whether there is one.
func rootRoundTrip(t *testing.T, r *objRoot, edit func([]byte) []byte, ok bool) (objRoot, bool) {
	t.Helper()
	b := objEncodeRoot(r)
	if edit != nil {
		b = edit(b)
	}
	got, err := objDecodeRoot(b)
	if (err == nil) != ok {
		t.Fatalf("objDecodeRoot: %v, want ok %v", err, ok)
	}
	if err == nil && !bytes.Equal(objEncodeRoot(&got), b) {
		t.Fatal("the decoded root encodes differently")
	}
	return got, err == nil
}

// v5Root appends one capacity checkpoint with a fresh store and returns the
// env, the checkpoint and its root (version 5 or later: version 6 is
// version 5 with runs), decoded.
func v5Root(t *testing.T) (*v2Env, cairn.Checkpoint, objRoot) {
	t.Helper()
	e := newV2Env(t)
	s := e.store(true, 0)
	c := capacityTurn("a", 1, 1000, 8000)
	// The last file holds the first one's key: its leaf's chunk does not.
	c.Files[len(c.Files)-1].BlobKey = c.Files[0].BlobKey
	e.append(s, e.writer(s, "a"), c)
	for _, k := range memKeysOf(t, e.mem, cairn.ObjectPrefix) {
		if b, _ := e.mem.Get(e.ctx, k); b[0] == objTypeRoot {
			r, err := objDecodeRoot(b)
			if err != nil || r.version < objRootDerived {
				t.Fatalf("root %s: version %d, %v; want version %d or later", k, r.version, err, objRootDerived)
			}
			return e, c, r
		}
	}
	t.Fatal("no root in the bucket")
	return nil, cairn.Checkpoint{}, objRoot{}
}

// TestDerivedRefChunks checks the reference chunks of a root of version 5:
// every chunk of the leaves is made from its leaf, none is in a pack, a
// fresh store reads them back as exactly the checkpoint's distinct blob
// keys, and a bitmap that picks other entries of the leaf makes a chunk
// that fails its digest, naming the chunk.
func TestDerivedRefChunks(t *testing.T) {
	e, c, r := v5Root(t)
	got, err := e.store(true, 0).fetchParts(e.ctx, r.refs)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	made := 0
	for i, p := range r.refs {
		ks, err := decodeRefChunk(got[objectKey(p.digest)])
		if err != nil {
			t.Fatal(err)
		}
		have = append(have, ks...)
		if p.at.from > 0 && p.at.base != nil && !p.at.inPack() {
			made++
			continue
		}
		// Only the chunks of artifact keys no leaf holds are members.
		if !p.at.inPack() || !strings.HasPrefix(ks[0], cairn.ArtifactBlobPrefix) {
			t.Fatalf("reference chunk %d of %d is at %+v and holds %s, want made from a leaf", i, len(r.refs), p.at, ks[0])
		}
	}
	if made == 0 {
		t.Fatal("no reference chunk is made from a leaf")
	}
	slices.Sort(have)
	if want := c.BlobKeys(); !slices.Equal(have, want) {
		t.Fatalf("the chunks hold %d keys, the checkpoint %d distinct ones", len(have), len(want))
	}
	for _, tc := range []struct {
		name string
		bit  int
	}{{"OneMore", -1}, {"OneLess", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			bad := slices.Clone(r.refs)
			// The first chunk made from a leaf with an entry it does
			// not pick (OneMore), or any (OneLess), and the entry to flip.
			var p *objPart
			i := -1
			for j := range bad {
				if p = &bad[j]; p.at.from == 0 {
					continue
				}
				for k := range p.at.base.n {
					if picked := p.at.pick[k/8]>>(k%8)&1 == 1; picked == (tc.bit == 0) {
						i = k
						break
					}
				}
				if i >= 0 {
					break
				}
			}
			if i < 0 {
				t.Fatal("no chunk to alter")
			}
			pick := []byte(p.at.pick)
			pick[i/8] ^= 1 << (i % 8)
			p.at.pick = string(pick)
			_, err := e.store(true, 0).fetchParts(e.ctx, bad)
			if !errors.Is(err, errObjDigest) || !bytes.Contains([]byte(err.Error()), []byte(objectKey(p.digest))) {
				t.Fatalf("fetchParts with another bitmap: %v, want %v naming %s", err, errObjDigest, objectKey(p.digest))
			}
		})
	}
}

// TestDeriveRefChunk checks objDeriveRefChunk on leaves it must refuse.
func TestDeriveRefChunk(t *testing.T) {
	files := objTestFiles(10, "")
	files[3] = cairn.Entry{Path: files[3].Path, Kind: cairn.KindDir}
	leaf := objEncodeLeaf(files)
	for _, tc := range []struct {
		name string
		leaf []byte
		pick string
		ok   bool
	}{
		{"Files", leaf, "\x07\x02", true},
		{"ADirectory", leaf, "\x08\x00", false},
		{"NotALeaf", []byte("K\x01\x00"), "\x01", false},
		{"BitmapOfAnotherLeaf", leaf, "\x01", false},
		{"None", leaf, "\x00\x00", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := objDeriveRefChunk(tc.leaf, tc.pick)
			if (err == nil) != tc.ok {
				t.Fatalf("objDeriveRefChunk: %v, want ok %v", err, tc.ok)
			}
			if err != nil {
				return
			}
			ks, err := decodeRefChunk(o.data)
			if err != nil || len(ks) != 4 {
				t.Fatalf("made %d keys (%v), want 4", len(ks), err)
			}
		})
	}
}

// FuzzDeriveRefChunk checks that objDeriveRefChunk never panics, and that
// what it makes is a reference chunk of keys of the picked entries.
func FuzzDeriveRefChunk(f *testing.F) {
	files := objTestFiles(20, "")
	f.Add(objEncodeLeaf(files), []byte("\xff\xff\x0f"))
	f.Add(objEncodeLeaf(files[:3]), []byte("\x05"))
	f.Add(objEncodeLeaf(files[:9]), []byte("\x00\x01"))
	f.Add([]byte("L\x01\x00"), []byte{})
	f.Fuzz(func(t *testing.T, leaf, pick []byte) {
		o, err := objDeriveRefChunk(leaf, string(pick))
		if err != nil {
			return
		}
		ks, err := decodeRefChunk(o.data)
		if err != nil {
			t.Fatalf("made a chunk that does not decode: %v", err)
		}
		es, _ := objDecodeLeaf(leaf)
		picked := map[string]bool{}
		for i, e := range es {
			if pick[i/8]>>(i%8)&1 == 1 {
				picked[e.BlobKey] = true
			}
		}
		if len(ks) != len(picked) {
			t.Fatalf("made %d keys of %d picked", len(ks), len(picked))
		}
		for _, k := range ks {
			if !picked[k] {
				t.Fatalf("made key %s, not picked", k)
			}
		}
	})
}
