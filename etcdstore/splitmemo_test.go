package etcdstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairnstore/cairn"
)

// The split with a memo is byte for byte the split without one, whatever
// changed since the memo's split: keys, sizes, kinds and paths of entries,
// entries inserted, removed and moved, keys repeated across leaves, runs of
// paths without a cut, artifacts. And it reuses the leaves and chunks that
// did not change.
// TestSplitMemo runs testSplitMemo with the leaf cut of root version 2 and
// with that of packs, which also depends on an entry's place in its leaf.
func TestSplitMemo(t *testing.T) {
	t.Run("Tree", func(t *testing.T) { testSplitMemo(t, func(path string, _ int) bool { return objLeafCut(path) }) })
	t.Run("Packed", func(t *testing.T) { testSplitMemo(t, objPackLeafCut) })
}

// testSplitMemo checks with the given leaf cut that the split of a
// checkpoint with the memo of the one before is the split without it.
func testSplitMemo(t *testing.T, cut func(path string, n int) bool) {
	r := rand.New(rand.NewPCG(21, 22))
	c := cairn.Checkpoint{Files: objTestFiles(5000, ""), Conversation: objTestConversation(r, 100<<10),
		Artifacts: []cairn.Artifact{{ArtifactID: "a", BlobKey: objTestArtifactKey("a")}, {ArtifactID: "b", BlobKey: objTestFileKey("7")}}}
	var noCut []cairn.Entry // paths without a cut: leaves forced at objLeafMax entries
	for i := 0; len(noCut) < 1200; i++ {
		if p := fmt.Sprintf("gen/x%d", i); !objLeafCut(p) {
			noCut = append(noCut, cairn.Entry{Path: p, Kind: cairn.KindFile, BlobKey: objTestFileKey("gen" + p), Size: int64(i)})
		}
	}
	edits := []struct {
		name string
		edit func(files []cairn.Entry) []cairn.Entry
	}{
		{"nothing", func(f []cairn.Entry) []cairn.Entry { return f }},
		{"new keys at the end", func(f []cairn.Entry) []cairn.Entry {
			for i := len(f) - 50; i < len(f); i++ {
				f[i].BlobKey = objTestFileKey(fmt.Sprint("end", r.Uint64()))
			}
			return f
		}},
		{"new keys spread", func(f []cairn.Entry) []cairn.Entry {
			for range 50 {
				f[r.IntN(len(f))].BlobKey = objTestFileKey(fmt.Sprint("spread", r.Uint64()))
			}
			return f
		}},
		{"a size", func(f []cairn.Entry) []cairn.Entry { f[r.IntN(len(f))].Size++; return f }},
		{"a kind", func(f []cairn.Entry) []cairn.Entry {
			i := r.IntN(len(f))
			f[i].Kind, f[i].BlobKey, f[i].Size = cairn.KindDir, "", 0
			return f
		}},
		{"a path", func(f []cairn.Entry) []cairn.Entry { f[r.IntN(len(f))].Path += "~"; return f }},
		{"keys repeated from far away", func(f []cairn.Entry) []cairn.Entry {
			for range 20 {
				f[r.IntN(len(f))].BlobKey = f[r.IntN(len(f))].BlobKey
			}
			return f
		}},
		{"the first occurrence of a repeated key changed", func(f []cairn.Entry) []cairn.Entry {
			f[10].BlobKey = f[len(f)*4/5].BlobKey
			f[len(f)*3/5].BlobKey = f[len(f)*4/5].BlobKey
			return f
		}},
		{"insertions", func(f []cairn.Entry) []cairn.Entry {
			for range 5 {
				i := r.IntN(len(f))
				f = slices.Insert(f, i, cairn.Entry{Path: fmt.Sprint("ins/", r.Uint64()), Kind: cairn.KindFile, BlobKey: objTestFileKey(fmt.Sprint(r.Uint64()))})
			}
			return f
		}},
		{"removals", func(f []cairn.Entry) []cairn.Entry {
			for range 5 {
				i := r.IntN(len(f))
				f = slices.Delete(f, i, i+1)
			}
			return f
		}},
		{"the first entry removed", func(f []cairn.Entry) []cairn.Entry { return f[1:] }},
		{"a run without cuts in the middle", func(f []cairn.Entry) []cairn.Entry {
			return slices.Insert(f, len(f)/2, noCut...)
		}},
		{"a key in the run", func(f []cairn.Entry) []cairn.Entry {
			i := slices.IndexFunc(f, func(e cairn.Entry) bool { return e.Path == noCut[700].Path })
			f[i].BlobKey = objTestFileKey("run")
			return f
		}},
		{"appended", func(f []cairn.Entry) []cairn.Entry {
			return append(f, cairn.Entry{Path: "zz/last", Kind: cairn.KindFile, BlobKey: objTestFileKey("last")})
		}},
		{"truncated", func(f []cairn.Entry) []cairn.Entry { return f[:len(f)-300] }},
		{"ends in the run", func(f []cairn.Entry) []cairn.Entry { return append(f, noCut[:600]...) }},
		{"continues after the run", func(f []cairn.Entry) []cairn.Entry { return append(f, objTestFiles(100, "after")...) }},
		{"shuffled", func(f []cairn.Entry) []cairn.Entry {
			r.Shuffle(len(f), func(i, j int) { f[i], f[j] = f[j], f[i] })
			return f
		}},
		{"one entry", func(f []cairn.Entry) []cairn.Entry { return f[:1] }},
		{"none", func(f []cairn.Entry) []cairn.Entry { return nil }},
		{"back to many", func(f []cairn.Entry) []cairn.Entry { return objTestFiles(3000, "") }},
	}
	_, _, _, memo, err := splitTreeCut(&c, nil, cut)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		for _, e := range edits {
			c = c.Clone()
			c.Files = e.edit(c.Files)
			if round == 1 {
				c.Artifacts = append(c.Artifacts, cairn.Artifact{ArtifactID: e.name, BlobKey: objTestArtifactKey(e.name)})
			}
			prev := memo
			root, objs, refs, next, err := splitTreeCut(&c, prev, cut)
			if err != nil {
				t.Fatal(err)
			}
			wroot, wobjs, wrefs, _, err := splitTreeCut(&c, nil, cut)
			if err != nil {
				t.Fatal(err)
			}
			if root.key != wroot.key || !bytes.Equal(root.data, wroot.data) || len(objs) != len(wobjs) || len(refs) != len(wrefs) {
				t.Fatalf("round %d, %s: the split with the memo differs (%d objects, %d chunks; want %d, %d)", round, e.name, len(objs), len(refs), len(wobjs), len(wrefs))
			}
			for i := range objs {
				if objs[i].key != wobjs[i].key || !bytes.Equal(objs[i].data, wobjs[i].data) {
					t.Fatalf("round %d, %s: object %d differs", round, e.name, i)
				}
			}
			for i := range refs {
				if refs[i].key != wrefs[i].key || !bytes.Equal(refs[i].data, wrefs[i].data) || refs[i].n != wrefs[i].n {
					t.Fatalf("round %d, %s: reference chunk %d differs", round, e.name, i)
				}
			}
			objCheckRoundTrip(t, &c)
			if e.name == "new keys at the end" || e.name == "nothing" {
				// Every leaf that holds none of the changed entries, and
				// its chunk, come from the memo: the very same bytes.
				changed := len(c.Files)
				if e.name != "nothing" {
					changed -= 50
				}
				leaves, chunks := map[*byte]bool{}, map[*refChunk]bool{}
				for _, l := range prev.leaves {
					leaves[&l.leaf.data[0]] = true
					chunks[l.chunk] = true
				}
				at := 0
				for _, l := range next.leaves {
					if at+l.n <= changed && (!leaves[&l.leaf.data[0]] || l.chunk != nil && !chunks[l.chunk]) {
						t.Fatalf("round %d, %s: the leaf of entries %d to %d was split again", round, e.name, at, at+l.n)
					}
					at += l.n
				}
			}
			memo = next
		}
	}
}

func BenchmarkSplitTree(b *testing.B) {
	c := cairn.Checkpoint{Files: objTestFiles(20000, "")}
	_, _, _, memo, _ := splitTree(&c, nil)
	for _, withMemo := range []bool{false, true} {
		b.Run(fmt.Sprint("memo=", withMemo), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				d := c.Clone()
				for j := len(d.Files) - 200; j < len(d.Files); j++ {
					d.Files[j].BlobKey = objTestFileKey(fmt.Sprint(i, j))
				}
				m := memo
				if !withMemo {
					m = nil
				}
				if _, _, _, _, err := splitTree(&d, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The split of a checkpoint with the memo of any other checkpoint's split is
// the split without a memo. The second checkpoint is the first edited by
// the fuzzer's ops: each op byte picks an entry and what to do to it. An
// odd mod cuts leaves as packs do.
func FuzzSplitMemo(f *testing.F) {
	f.Add("src/a", uint16(600), uint8(255), []byte{0, 1, 2, 3, 4, 5, 250, 9})
	f.Add("", uint16(1200), uint8(3), []byte{7, 7, 7})
	f.Add("x", uint16(40), uint8(0), []byte{})
	f.Add("", uint16(600), uint8(0xa1), []byte("0")) // a directory's empty key copied to a file
	f.Fuzz(func(t *testing.T, path string, n uint16, mod uint8, ops []byte) {
		cut := func(path string, _ int) bool { return objLeafCut(path) }
		if mod&1 == 1 {
			cut = objPackLeafCut
		}
		a := objFuzzCheckpoint(path, n, mod, nil, true, "", 2)
		_, _, _, memo, err := splitTreeCut(&a, nil, cut)
		if err != nil {
			t.Fatal(err)
		}
		b := a.Clone()
		for k, op := range ops {
			if len(b.Files) == 0 {
				b.Files = append(b.Files, cairn.Entry{Path: path, Kind: cairn.KindFile, BlobKey: objTestFileKey(path)})
				continue
			}
			i := (int(op) * 131 * (k + 1)) % len(b.Files)
			switch op % 5 {
			case 0:
				b.Files[i].BlobKey = objTestFileKey(fmt.Sprint("op", k))
			case 1:
				b.Files[i].Size++
			case 2:
				b.Files = slices.Delete(b.Files, i, i+1)
			case 3:
				b.Files = slices.Insert(b.Files, i, cairn.Entry{Path: fmt.Sprint(path, "+", k), Kind: cairn.KindFile, BlobKey: b.Files[len(b.Files)-1-i].BlobKey})
			case 4:
				b.Files[i].BlobKey = b.Files[len(b.Files)-1-i].BlobKey
			}
		}
		root, objs, refs, _, err := splitTreeCut(&b, memo, cut)
		wroot, wobjs, wrefs, _, werr := splitTreeCut(&b, nil, cut)
		if (err == nil) != (werr == nil) {
			t.Fatalf("with the memo: %v; without: %v", err, werr)
		}
		if err != nil {
			return // a key of neither namespace (copied from a directory entry)
		}
		if !bytes.Equal(root.data, wroot.data) || len(objs) != len(wobjs) || len(refs) != len(wrefs) {
			t.Fatalf("the split with the memo differs")
		}
		for i := range objs {
			if !bytes.Equal(objs[i].data, wobjs[i].data) {
				t.Fatalf("object %d differs", i)
			}
		}
		for i := range refs {
			if !bytes.Equal(refs[i].data, wrefs[i].data) || refs[i].n != wrefs[i].n {
				t.Fatalf("reference chunk %d differs", i)
			}
		}
	})
}
