package etcdstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

func objTestFileKey(s string) string {
	return fmt.Sprintf("%s%x", cairn.FileBlobPrefix, sha256.Sum256([]byte(s)))
}

func objTestArtifactKey(s string) string {
	return fmt.Sprintf("%s%x", cairn.ArtifactBlobPrefix, sha256.Sum256([]byte(s)))
}

// objTestConversation returns n bytes of JSON-like conversation text, the
// same for the same generator state.
func objTestConversation(r *rand.Rand, n int) []byte {
	words := []string{"the", "file", "func", "return", "err", "nil", "test", "build", "package", "import",
		"tool_use", "result", "assistant", "user", "ok", "diff", "main.go", "\\n", "{", "}"}
	out := make([]byte, 0, n+4096)
	for len(out) < n {
		out = append(out, `{"role":"assistant","content":"`...)
		for k := 10 + r.IntN(300); k > 0; k-- {
			out = append(out, words[r.IntN(len(words))]...)
			out = append(out, ' ')
			if r.IntN(16) == 0 {
				out = fmt.Appendf(out, "%d ", r.IntN(1_000_000))
			}
		}
		out = append(out, `"},`...)
	}
	return out[:n]
}

// objTestFiles returns n file entries with paths like a source tree's and a
// blob key each.
func objTestFiles(n int, salt string) []cairn.Entry {
	files := make([]cairn.Entry, n)
	for i := range files {
		files[i] = cairn.Entry{Path: fmt.Sprintf("src/pkg%03d/file%04d.go", i/100, i), Kind: cairn.KindFile,
			BlobKey: objTestFileKey(salt + fmt.Sprint(i)), Size: int64(i * 37)}
	}
	return files
}

// objBucket is a bucket of body objects for tests: key → bytes.
type objBucket map[string][]byte

// put stores the objects and reports how many of them, and how many of their
// bytes, were new.
func (b objBucket) put(objs ...object) (n, size int) {
	for _, o := range objs {
		if _, ok := b[o.key]; !ok {
			b[o.key] = o.data
			n++
			size += len(o.data)
		}
	}
	return n, size
}

func (b objBucket) putRefs(refs []refChunk) (n, size int) {
	for _, r := range refs {
		m, s := b.put(r.object)
		n, size = n+m, size+s
	}
	return n, size
}

func (b objBucket) fetch(key string) ([]byte, error) {
	data, ok := b[key]
	if !ok {
		return nil, fmt.Errorf("no such object")
	}
	return data, nil
}

// objSplit splits c, checks what every object must satisfy, and returns the
// parts with a bucket holding them.
func objSplit(t testing.TB, c *cairn.Checkpoint) (object, []object, []refChunk, objBucket) {
	t.Helper()
	return objSplitAt(t, c, objRootTree)
}

// objSplitAt is objSplit with a root of the given version.
func objSplitAt(t testing.TB, c *cairn.Checkpoint, version byte) (object, []object, []refChunk, objBucket) {
	t.Helper()
	root, objs, refs, err := splitCheckpointBodyAt(c, version)
	if err != nil {
		t.Fatal(err)
	}
	b := objBucket{}
	b.put(root)
	b.put(objs...)
	b.putRefs(refs)
	for _, o := range append(append([]object{root}, objs...), objRefObjects(refs)...) {
		if o.key != objPrefix+fmt.Sprintf("%x", sha256.Sum256(o.data)) || o.key != objectKey(o.digest) {
			t.Fatalf("object key %s does not name its bytes", o.key)
		}
		v := byte(objVersion)
		if o.key == root.key {
			v = version
		}
		if len(o.data) < 2 || o.data[1] != v || !strings.ContainsRune("LCRK", rune(o.data[0])) {
			t.Fatalf("object %s starts with %x", o.key, o.data[:min(2, len(o.data))])
		}
	}
	// The root alone names every object: its leaves and conversation
	// chunks, then its reference chunks in order.
	r, err := objDecodeRoot(root.data)
	if err != nil {
		t.Fatalf("root: %v", err)
	}
	if r.version != version {
		t.Fatalf("root of version %d, want %d", r.version, version)
	}
	if len(r.refs) != len(refs) {
		t.Fatalf("root names %d reference chunks, the split made %d", len(r.refs), len(refs))
	}
	for i, rc := range refs {
		if r.refs[i].digest != rc.digest || r.refs[i].n != rc.n {
			t.Fatalf("root reference chunk %d is %x/%d, want %x/%d", i, r.refs[i].digest, r.refs[i].n, rc.digest, rc.n)
		}
	}
	if got, want := len(r.allDigests()), len(objs)+len(refs); got > want {
		t.Fatalf("root names %d distinct objects, the split made %d", got, want)
	}
	seen := map[string]bool{}
	for _, o := range objs {
		if seen[o.key] {
			t.Fatalf("object %s listed twice", o.key)
		}
		seen[o.key] = true
	}
	return root, objs, refs, b
}

// objRefCheckpoint returns a checkpoint whose blob keys are ks, as
// artifacts.
func objRefCheckpoint(ks []string) *cairn.Checkpoint {
	var c cairn.Checkpoint
	for _, k := range ks {
		c.Artifacts = append(c.Artifacts, cairn.Artifact{BlobKey: k})
	}
	return &c
}

func objRefObjects(refs []refChunk) []object {
	out := make([]object, len(refs))
	for i := range refs {
		out[i] = refs[i].object
	}
	return out
}

// objCheckRoundTrip splits c and assembles it again, and fails unless the
// body comes back exactly.
// objCheckRoundTrip splits c with roots of both versions and checks that
// the body assembles back and that the reference chunks hold each distinct
// blob key of c exactly once: in key order for a version-1 root; for a
// version-2 root, each leaf's keys in the chunk of the first leaf that holds
// them, then the artifacts' other keys.
func objCheckRoundTrip(t testing.TB, c *cairn.Checkpoint) {
	t.Helper()
	for _, version := range []byte{objVersion, objRootTree} {
		root, _, refs, b := objSplitAt(t, c, version)
		files, conv, arts, err := assembleCheckpointBody(root.digest, b.fetch)
		if err != nil {
			t.Fatalf("version %d: assemble: %v", version, err)
		}
		objCheckBody(t, c, files, conv, arts)
		var got []string
		for _, r := range refs {
			ks, err := decodeRefChunk(r.data)
			if err != nil {
				t.Fatalf("version %d: reference chunk %s: %v", version, r.key, err)
			}
			if len(ks) != r.n {
				t.Fatalf("version %d: reference chunk %s holds %d keys, says %d", version, r.key, len(ks), r.n)
			}
			got = append(got, ks...)
		}
		if version == objRootTree {
			if want := objTreeOrder(c); !slices.Equal(got, want) {
				t.Fatalf("version 2: reference chunks hold %d keys, want %d in leaf order", len(got), len(want))
			}
			slices.Sort(got)
		}
		if want := c.BlobKeys(); !slices.Equal(got, want) {
			t.Fatalf("version %d: reference chunks hold %d keys, want the checkpoint's %d", version, len(got), len(want))
		}
	}
}

// objTreeOrder returns the distinct blob keys of c in the order of a
// version-2 root's reference chunks, computed naively: per leaf of the
// root's split, the sorted keys of its files that no earlier leaf holds,
// then the sorted artifact keys that no leaf holds.
func objTreeOrder(c *cairn.Checkpoint) []string {
	root, _, _, err := splitCheckpointBody(c)
	if err != nil {
		panic(err)
	}
	r, err := objDecodeRoot(root.data)
	if err != nil {
		panic(err)
	}
	seen := map[string]bool{}
	var out []string
	at := 0
	take := func(ks []string) {
		slices.Sort(ks)
		for _, k := range slices.Compact(ks) {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	for _, l := range r.leaves {
		var ks []string
		for _, f := range c.Files[at : at+l.n] {
			if f.Kind == cairn.KindFile {
				ks = append(ks, f.BlobKey)
			}
		}
		take(ks)
		at += l.n
	}
	var ks []string
	for _, a := range c.Artifacts {
		ks = append(ks, a.BlobKey)
	}
	take(ks)
	return out
}

func objCheckBody(t testing.TB, c *cairn.Checkpoint, files []cairn.Entry, conv json.RawMessage, arts []cairn.Artifact) {
	t.Helper()
	if files == nil || arts == nil {
		t.Fatalf("nil files or artifacts")
	}
	if len(files) != len(c.Files) {
		t.Fatalf("%d files, want %d", len(files), len(c.Files))
	}
	for i := range files {
		w := c.Files[i]
		if files[i] != (cairn.Entry{Path: w.Path, Kind: w.Kind, BlobKey: w.BlobKey, Size: w.Size}) {
			t.Fatalf("file %d: %#v, want %#v", i, files[i], w)
		}
	}
	if (conv == nil) != (c.Conversation == nil) || !bytes.Equal(conv, c.Conversation) {
		t.Fatalf("conversation of %d bytes (nil %v), want %d (nil %v)", len(conv), conv == nil, len(c.Conversation), c.Conversation == nil)
	}
	if len(arts) != len(c.Artifacts) {
		t.Fatalf("%d artifacts, want %d", len(arts), len(c.Artifacts))
	}
	for i := range arts {
		w := c.Artifacts[i]
		w2 := cairn.Artifact{ArtifactID: w.ArtifactID, Name: w.Name, MimeType: w.MimeType, Size: w.Size, BlobKey: w.BlobKey, CreatedAt: w.CreatedAt}
		if arts[i] != w2 {
			t.Fatalf("artifact %d: %#v, want %#v", i, arts[i], w2)
		}
	}
}

func TestObjectRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 1<<20)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	arts := []cairn.Artifact{
		{ArtifactID: "a1", Name: "report.txt", MimeType: "text/plain", Size: 3, BlobKey: objTestArtifactKey("a"), CreatedAt: 1.5},
		{ArtifactID: "\xff\x00", Name: "\xed\xa0\x80", MimeType: "", Size: 0, BlobKey: objTestArtifactKey("b"), CreatedAt: -1e300},
		{ArtifactID: "a3", Name: "same blob as a1", Size: 3, BlobKey: objTestArtifactKey("a"), CreatedAt: 0},
	}
	odd := []cairn.Entry{
		{Path: "\xff\xfe", Kind: cairn.KindFile, BlobKey: objTestFileKey("x"), Size: 1},
		{Path: "a\x00b", Kind: cairn.KindDir},
		{Path: "\xed\xa0\x80/\xc0\xaf", Kind: cairn.KindFile, BlobKey: objTestFileKey("x"), Size: 1 << 53},
		{Path: "", Kind: "", Size: -1},
		{Path: "dir", Kind: cairn.KindDir},
		{Path: "dir", Kind: cairn.KindDir}, // a duplicate: the codec keeps what it is given
	}
	cases := []struct {
		name string
		c    cairn.Checkpoint
	}{
		{"empty", cairn.Checkpoint{}},
		{"empty conversation", cairn.Checkpoint{Conversation: json.RawMessage{}, Files: []cairn.Entry{}}},
		{"one byte", cairn.Checkpoint{Conversation: json.RawMessage("1")}},
		{"one entry", cairn.Checkpoint{Files: objTestFiles(1, "")}},
		{"511 entries", cairn.Checkpoint{Files: objTestFiles(511, ""), Conversation: []byte("null")}},
		{"512 entries", cairn.Checkpoint{Files: objTestFiles(512, "")}},
		{"513 entries", cairn.Checkpoint{Files: objTestFiles(513, ""), Artifacts: arts}},
		{"20000 entries", cairn.Checkpoint{Files: objTestFiles(20000, ""), Conversation: objTestConversation(r, 400<<10), Artifacts: arts}},
		{"odd entries", cairn.Checkpoint{Files: odd, Artifacts: arts}},
		{"conversation 4095", cairn.Checkpoint{Conversation: random[:objConvMin-1]}},
		{"conversation 4096", cairn.Checkpoint{Conversation: random[:objConvMin]}},
		{"conversation 4097", cairn.Checkpoint{Conversation: random[:objConvMin+1]}},
		{"conversation 64 KiB", cairn.Checkpoint{Conversation: random[:objConvMax]}},
		{"conversation 64 KiB + 1", cairn.Checkpoint{Conversation: random[:objConvMax+1]}},
		{"conversation 1 MiB random", cairn.Checkpoint{Conversation: random}},
		{"conversation 1 MiB zeros", cairn.Checkpoint{Conversation: make([]byte, 1<<20)}},
		{"conversation 1 MiB text", cairn.Checkpoint{Conversation: objTestConversation(r, 1<<20)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { objCheckRoundTrip(t, &tc.c) })
	}
}

// The splits respect their bounds, and leaves end where the rule says.
func TestObjectBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	c := cairn.Checkpoint{Files: objTestFiles(20000, ""), Conversation: objTestConversation(r, 2<<20)}
	root, _, refs, b := objSplit(t, &c)
	rt, err := objDecodeRoot(root.data)
	if err != nil {
		t.Fatal(err)
	}
	at := 0
	for i, l := range rt.leaves {
		if l.n < 1 || l.n > objLeafMax {
			t.Fatalf("leaf %d has %d entries", i, l.n)
		}
		at += l.n
		if last := i == len(rt.leaves)-1; !last && l.n < objLeafMax && !objLeafCut(c.Files[at-1].Path) {
			t.Fatalf("leaf %d ends at entry %d, which is no cut", i, at-1)
		}
		for _, e := range c.Files[at-l.n : at-1] {
			if objLeafCut(e.Path) {
				t.Fatalf("leaf %d holds a cut before its end", i)
			}
		}
	}
	for i, p := range rt.conv {
		if p.n > objConvMax || p.n < objConvMin && i != len(rt.conv)-1 {
			t.Fatalf("conversation chunk %d has %d bytes", i, p.n)
		}
		if len(b[objectKey(p.digest)]) != 2+p.n {
			t.Fatalf("conversation chunk %d: object of %d bytes for %d", i, len(b[objectKey(p.digest)]), p.n)
		}
	}
	avg := len(c.Conversation) / len(rt.conv)
	if avg < 12<<10 || avg > 20<<10 {
		t.Errorf("conversation chunks average %d bytes, want about 16 KiB", avg)
	}
	for _, rc := range refs {
		if rc.n < 1 || rc.n > objRefMax {
			t.Fatalf("reference chunk of %d keys", rc.n)
		}
	}
	t.Logf("20,000 entries: %d leaves (%.1f entries a leaf), root %d bytes; 2 MiB conversation: %d chunks (%d bytes average); %d reference chunks (%.1f keys a chunk)",
		len(rt.leaves), 20000/float64(len(rt.leaves)), len(root.data), len(rt.conv), avg, len(refs), 20000/float64(len(refs)))
}

// A run of entries without a cut is cut at objLeafMax entries, and keys
// without a cut at objRefMax keys.
func TestLeafForcedCut(t *testing.T) {
	var files []cairn.Entry
	for i := 0; len(files) < 1500; i++ {
		p := fmt.Sprintf("f%d", i)
		if !objLeafCut(p) {
			files = append(files, cairn.Entry{Path: p, Kind: cairn.KindDir})
		}
	}
	root, _, _, b := objSplit(t, &cairn.Checkpoint{Files: files})
	rt, _ := objDecodeRoot(root.data)
	var ns []int
	for _, l := range rt.leaves {
		ns = append(ns, l.n)
	}
	if !slices.Equal(ns, []int{512, 512, 476}) {
		t.Fatalf("leaves of %v entries, want 512, 512, 476", ns)
	}
	if _, _, _, err := assembleCheckpointBody(root.digest, b.fetch); err != nil {
		t.Fatal(err)
	}

	var ks []string
	for i := 0; len(ks) < 1100; i++ {
		k := objTestFileKey(fmt.Sprint(i))
		_, d, _ := keys.BlobShard(k)
		if !objRefCut(&d) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	refs, err := splitRefChunks(objRefCheckpoint(ks))
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 3 || refs[0].n != 512 || refs[1].n != 512 || refs[2].n != 76 {
		t.Fatalf("%d reference chunks", len(refs))
	}
}

// A split is a function of the body: the same body, copied, or under another
// header (a fork), gives the same objects.
func TestObjectDeterminism(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	c := cairn.Checkpoint{ID: "a", ThreadID: "t", Files: objTestFiles(3000, ""), Conversation: objTestConversation(r, 300<<10),
		Artifacts: []cairn.Artifact{{ArtifactID: "x", BlobKey: objTestArtifactKey("x")}}}
	root, objs, refs, _ := objSplit(t, &c)
	fork := c.Clone()
	fork.ID, fork.ThreadID, fork.ParentCheckpointID, fork.CreatedAt = "b", "u", "a", 99
	root2, objs2, refs2, _ := objSplit(t, &fork)
	if root.key != root2.key || !bytes.Equal(root.data, root2.data) || len(objs) != len(objs2) || len(refs) != len(refs2) {
		t.Fatal("the same body split differently")
	}
	for i := range objs {
		if objs[i].key != objs2[i].key || !bytes.Equal(objs[i].data, objs2[i].data) {
			t.Fatalf("object %d differs", i)
		}
	}
	for i := range refs {
		if refs[i].key != refs2[i].key || !bytes.Equal(refs[i].data, refs2[i].data) || refs[i].n != refs2[i].n {
			t.Fatalf("reference chunk %d differs", i)
		}
	}
}

// The format is pinned: the gear table is the one objGear's comment names,
// and a fixed body splits into the same objects as when the format was
// written (a change here is a new object version, not a fix of the test).
func TestObjectFormatPinned(t *testing.T) {
	for i := range objGear {
		h := sha256.Sum256([]byte{'c', 'a', 'i', 'r', 'n', '/', 'g', 'e', 'a', 'r', '/', byte(i)})
		if objGear[i] != binary.BigEndian.Uint64(h[:8]) {
			t.Fatalf("gear entry %d is not the one the format names", i)
		}
	}
	var conv []byte
	for i := 0; len(conv) < 100<<10; i++ {
		conv = fmt.Appendf(conv, `{"role":"user","content":"message %d: %x"},`, i, sha256.Sum256([]byte(fmt.Sprint(i))))
	}
	c := cairn.Checkpoint{Files: objTestFiles(1000, ""), Conversation: conv,
		Artifacts: []cairn.Artifact{{ArtifactID: "a", Name: "n", MimeType: "m", Size: 1, BlobKey: objTestArtifactKey("a"), CreatedAt: 2}}}
	for _, tc := range []struct {
		version byte
		want    string
	}{
		{objVersion, "19 leaves and chunks, 10 reference chunks, root sandbox-meta/sha256/4885ec88c648a7a31d413794af5758f35a42d15e06f125e0bb75ead5401ef0b5, all d840dbfb9b9bc8e768311773babdede9727318ac59afac107b429f7ea9e992c8"},
		{objRootTree, "19 leaves and chunks, 13 reference chunks, root sandbox-meta/sha256/cfafa927f9035b2173a12df65ae68f645a495c80fe3920c7745007b95f0bdb04, all fbdecf3e172e2b87e85554115148d17db54b747871e5404e3ccc1f9ba2bf4f07"},
	} {
		root, objs, refs, _ := objSplitAt(t, &c, tc.version)
		all := sha256.New()
		for _, o := range append(append([]object{root}, objs...), objRefObjects(refs)...) {
			all.Write([]byte(o.key))
		}
		got := fmt.Sprintf("%d leaves and chunks, %d reference chunks, root %s, all %x", len(objs), len(refs), root.key, all.Sum(nil))
		if got != tc.want {
			t.Fatalf("the split of the pinned body with a version-%d root changed:\n got %s\nwant %s", tc.version, got, tc.want)
		}
	}
}

// newKeys returns how many of the objects are not in the bucket, and their
// bytes.
func (b objBucket) newKeys(objs []object) (n, size int) {
	for _, o := range objs {
		if _, ok := b[o.key]; !ok {
			n++
			size += len(o.data)
		}
	}
	return n, size
}

func objLeaves(objs []object) (leaves, chunks []object) {
	for _, o := range objs {
		if o.data[0] == objTypeLeaf {
			leaves = append(leaves, o)
		} else {
			chunks = append(chunks, o)
		}
	}
	return leaves, chunks
}

// Editing 1% of the entries of a 2,000-file manifest rewrites about one leaf
// and two reference chunks an edited file; inserting or removing an entry
// rewrites at most two leaves.
func TestLeafSharing(t *testing.T) {
	base := cairn.Checkpoint{Files: objTestFiles(2000, "")}
	root, objs, _, b := objSplit(t, &base)
	leaves, _ := objLeaves(objs)
	rb, err := objDecodeRoot(root.data)
	if err != nil {
		t.Fatal(err)
	}
	for trial := range 50 {
		r := rand.New(rand.NewPCG(uint64(trial), 7))
		c := base.Clone()
		touched := map[int]bool{}
		for len(touched) < 20 {
			i := r.IntN(len(c.Files))
			touched[i] = true
			c.Files[i].BlobKey = objTestFileKey(fmt.Sprint("edit", trial, i))
			c.Files[i].Size++
		}
		_, objs2, refs2, _ := objSplit(t, &c)
		newLeaves, _ := b.newKeys(objs2)
		// The leaves that hold an edited entry, and no other, are new.
		holding := map[int]bool{}
		at, leaf := 0, 0
		for _, l := range rb.leaves {
			for i := at; i < at+l.n; i++ {
				if touched[i] {
					holding[leaf] = true
				}
			}
			at += l.n
			leaf++
		}
		if newLeaves != len(holding) {
			t.Fatalf("trial %d: %d new leaves, want the %d that hold an edited entry (of %d)", trial, newLeaves, len(holding), len(leaves))
		}
		newRefs, _ := b.newKeys(objRefObjects(refs2))
		if newRefs > 3*len(touched) || newRefs > len(refs2) {
			t.Fatalf("trial %d: %d new reference chunks of %d for %d edited files", trial, newRefs, len(refs2), len(touched))
		}
	}

	// Inserting or removing one entry anywhere.
	for _, at := range []int{0, 1, 700, 1999} {
		ins := base.Clone()
		ins.Files = slices.Insert(ins.Files, at, cairn.Entry{Path: fmt.Sprintf("src/pkg%03d/new.go", at/100), Kind: cairn.KindFile, BlobKey: objTestFileKey("new"), Size: 1})
		_, objs2, _, _ := objSplit(t, &ins)
		if n, _ := b.newKeys(objs2); n > 2 {
			t.Fatalf("inserting at %d wrote %d new leaves", at, n)
		}
		del := base.Clone()
		del.Files = slices.Delete(del.Files, at, at+1)
		_, objs2, _, _ = objSplit(t, &del)
		if n, _ := b.newKeys(objs2); n > 1 {
			t.Fatalf("removing entry %d wrote %d new leaves", at, n)
		}
	}
}

// A conversation that grows at the end keeps every chunk but its last; the
// new chunks hold only that last chunk's bytes and the appended ones.
func TestConvChunkSharing(t *testing.T) {
	hist := map[int]int{}
	written := 0
	const trials = 200
	for trial := range trials {
		r := rand.New(rand.NewPCG(uint64(trial), 8))
		conv := objTestConversation(r, 420<<10)
		old := cairn.Checkpoint{Conversation: conv[:400<<10]}
		root, _, _, b := objSplit(t, &old)
		rt, _ := objDecodeRoot(root.data)
		grown := cairn.Checkpoint{Conversation: conv}
		root2, objs2, _, _ := objSplit(t, &grown)
		rt2, _ := objDecodeRoot(root2.data)
		// Every chunk of the old conversation but the last is the new one's.
		for i := range len(rt.conv) - 1 {
			if rt2.conv[i] != rt.conv[i] {
				t.Fatalf("trial %d: chunk %d of %d changed", trial, i, len(rt.conv))
			}
		}
		n, size := b.newKeys(objs2)
		last := rt.conv[len(rt.conv)-1].n
		if size-2*n != last+20<<10 && size-2*n != 20<<10 {
			t.Fatalf("trial %d: %d new bytes, want the last chunk's %d and the 20 KiB appended", trial, size-2*n, last)
		}
		if n > (last+20<<10+objConvMin-1)/objConvMin {
			t.Fatalf("trial %d: %d new chunks", trial, n)
		}
		hist[n]++
		written += size
	}
	if hist[1]+hist[2] < trials/2 {
		t.Errorf("fewer than half the turns write one or two chunks: %v", hist)
	}
	t.Logf("appending 20 KiB to 400 KiB, %d conversations: new chunks → turns %v; %.1f KiB written a turn on average",
		trials, hist, float64(written)/trials/1024)

	// An edit in the middle rewrites the chunks around it only.
	r := rand.New(rand.NewPCG(9, 9))
	conv := objTestConversation(r, 400<<10)
	_, objs, _, b := objSplit(t, &cairn.Checkpoint{Conversation: conv})
	edited := slices.Insert(slices.Clone(conv), 200<<10, []byte("an inserted sentence")...)
	_, objs2, _, _ := objSplit(t, &cairn.Checkpoint{Conversation: edited})
	if n, _ := b.newKeys(objs2); n > 3 {
		t.Fatalf("an edit in the middle wrote %d of %d chunks", n, len(objs))
	}
}

func TestObjectAssembleErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 11))
	c := cairn.Checkpoint{Files: objTestFiles(1000, ""), Conversation: objTestConversation(r, 100<<10)}
	root, objs, _, b := objSplit(t, &c)
	leaves, chunks := objLeaves(objs)

	check := func(name string, bucket objBucket, rootDigest keys.Digest, wantKey string, wantErr error) {
		t.Helper()
		_, _, _, err := assembleCheckpointBody(rootDigest, bucket.fetch)
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if !strings.Contains(err.Error(), wantKey) || wantErr != nil && !errors.Is(err, wantErr) {
			t.Fatalf("%s: %v, want an error naming %s (%v)", name, err, wantKey, wantErr)
		}
	}
	without := func(key string) objBucket {
		out := objBucket{}
		for k, v := range b {
			if k != key {
				out[k] = v
			}
		}
		return out
	}
	with := func(key string, data []byte) objBucket {
		out := without(key)
		out[key] = data
		return out
	}
	flip := func(data []byte, i int) []byte {
		out := bytes.Clone(data)
		out[i] ^= 1
		return out
	}
	check("missing root", without(root.key), root.digest, root.key, nil)
	check("missing leaf", without(leaves[3].key), root.digest, leaves[3].key, nil)
	check("missing chunk", without(chunks[2].key), root.digest, chunks[2].key, nil)
	check("corrupt root", with(root.key, flip(root.data, 5)), root.digest, root.key, errObjDigest)
	check("corrupt leaf", with(leaves[0].key, flip(leaves[0].data, len(leaves[0].data)-1)), root.digest, leaves[0].key, errObjDigest)
	check("corrupt chunk", with(chunks[0].key, chunks[0].data[:100]), root.digest, chunks[0].key, errObjDigest)

	// Objects whose digests match but that are not what the root says.
	put := func(bucket objBucket, data []byte) keys.Digest {
		o := objNewObject(data)
		bucket[o.key] = data
		return o.digest
	}
	rt, err := objDecodeRoot(root.data)
	if err != nil {
		t.Fatal(err)
	}
	variant := func(name string, edit func(r *objRoot, bucket objBucket) string) {
		t.Helper()
		bucket := with(root.key, root.data)
		r2 := rt
		r2.leaves, r2.conv = slices.Clone(rt.leaves), slices.Clone(rt.conv)
		want := edit(&r2, bucket)
		check(name, bucket, put(bucket, objEncodeRoot(&r2)), want, errCodec)
	}
	variant("leaf count", func(r *objRoot, _ objBucket) string { r.leaves[1].n++; return objectKey(r.leaves[1].digest) })
	variant("chunk length", func(r *objRoot, _ objBucket) string { r.conv[0].n--; return objectKey(r.conv[0].digest) })
	variant("a chunk as a leaf", func(r *objRoot, _ objBucket) string {
		r.leaves[0] = objPart{digest: r.conv[0].digest, n: r.leaves[0].n}
		return objectKey(r.conv[0].digest)
	})
	variant("a leaf as a chunk", func(r *objRoot, bucket objBucket) string {
		r.conv[0] = objPart{digest: r.leaves[0].digest, n: len(bucket[objectKey(r.leaves[0].digest)]) - 2}
		return objectKey(r.leaves[0].digest)
	})
	variant("leaf of another version", func(r *objRoot, bucket objBucket) string {
		data := bytes.Clone(bucket[objectKey(r.leaves[2].digest)])
		data[1] = objVersion + 1
		r.leaves[2].digest = put(bucket, data)
		return objectKey(r.leaves[2].digest)
	})
	variant("leaf with trailing bytes", func(r *objRoot, bucket objBucket) string {
		r.leaves[2].digest = put(bucket, append(bytes.Clone(bucket[objectKey(r.leaves[2].digest)]), 0))
		return objectKey(r.leaves[2].digest)
	})
	leafKey := leaves[0].key
	check("a leaf as the root", b, leaves[0].digest, leafKey, errCodec)

	// Fetch is asked once for each distinct object, even when the root names
	// one twice.
	run := objTestFiles(1, "")
	for i := 0; len(run) < 3 || !objLeafCut(run[len(run)-1].Path); i++ {
		run = append(run, cairn.Entry{Path: fmt.Sprintf("r%d", i), Kind: cairn.KindDir})
	}
	twice := cairn.Checkpoint{Files: append(slices.Clone(run), run...), Conversation: bytes.Repeat(make([]byte, objConvMax), 3)}
	root2, objs2, _, b2 := objSplit(t, &twice)
	if len(objs2) != 2 {
		t.Fatalf("%d distinct objects, want one leaf and one chunk", len(objs2))
	}
	asked := map[string]int{}
	files, conv, _, err := assembleCheckpointBody(root2.digest, func(key string) ([]byte, error) { asked[key]++; return b2.fetch(key) })
	if err != nil || len(files) != len(twice.Files) || len(conv) != len(twice.Conversation) {
		t.Fatal(err)
	}
	for k, n := range asked {
		if n != 1 {
			t.Fatalf("%s fetched %d times", k, n)
		}
	}
}

func TestObjectDecodersStrict(t *testing.T) {
	leaf := objEncodeLeaf(objTestFiles(3, ""))
	if _, err := objDecodeLeaf(leaf); err != nil {
		t.Fatal(err)
	}
	refs, err := splitRefChunks(objRefCheckpoint([]string{objTestArtifactKey("a"), objTestFileKey("b")}))
	if err != nil || len(refs) != 1 {
		t.Fatal(refs, err)
	}
	ref := refs[0].data
	if ks, err := decodeRefChunk(ref); err != nil || len(ks) != 2 {
		t.Fatal(ks, err)
	}
	root := objEncodeRoot(&objRoot{leaves: []objPart{{n: 3}}, convPresent: true, conv: []objPart{{n: 5}}})
	if _, err := objDecodeRoot(root); err != nil {
		t.Fatal(err)
	}
	longCount := func(b []byte) []byte { // the count as a two-byte varint
		return append(append(bytes.Clone(b[:2]), b[2]|0x80, 0), b[3:]...)
	}
	set := func(b []byte, i int, v byte) []byte { b = bytes.Clone(b); b[i] = v; return b }
	refKeys := ref[3:]
	bad := map[string]struct {
		data   []byte
		decode func([]byte) error
	}{}
	leafDec := func(b []byte) error { _, err := objDecodeLeaf(b); return err }
	rootDec := func(b []byte) error { _, err := objDecodeRoot(b); return err }
	refDec := func(b []byte) error { _, err := decodeRefChunk(b); return err }
	add := func(name string, data []byte, dec func([]byte) error) {
		bad[name] = struct {
			data   []byte
			decode func([]byte) error
		}{data, dec}
	}
	add("leaf: empty", nil, leafDec)
	add("leaf: wrong type", set(leaf, 0, objTypeRoot), leafDec)
	add("leaf: wrong version", set(leaf, 1, 2), leafDec)
	add("leaf: long count", longCount(leaf), leafDec)
	add("leaf: trailing byte", append(bytes.Clone(leaf), 0), leafDec)
	add("leaf: truncated", leaf[:len(leaf)-1], leafDec)
	add("leaf: no entries", []byte{objTypeLeaf, objVersion, 0}, leafDec)
	add("leaf: 513 entries", objEncodeLeaf(make([]cairn.Entry, 513)), leafDec)
	add("leaf: count beyond the bytes", []byte{objTypeLeaf, objVersion, 2, 0, 0, 0, 0}, leafDec)
	add("root: wrong type", set(root, 0, objTypeLeaf), rootDec)
	add("root: trailing byte", append(bytes.Clone(root), 0), rootDec)
	add("root: long count", longCount(root), rootDec)
	add("root: leaf of 0 entries", objEncodeRoot(&objRoot{leaves: []objPart{{n: 0}}}), rootDec)
	add("root: leaf of 513 entries", objEncodeRoot(&objRoot{leaves: []objPart{{n: 513}}}), rootDec)
	add("root: chunk of 0 bytes", objEncodeRoot(&objRoot{convPresent: true, conv: []objPart{{n: 0}}}), rootDec)
	add("root: chunk over 64 KiB", objEncodeRoot(&objRoot{convPresent: true, conv: []objPart{{n: objConvMax + 1}}}), rootDec)
	add("root: presence 2", set(objEncodeRoot(&objRoot{}), 3, 2), rootDec)
	add("root: absent conversation with chunks", set(root, 2+1+32+1, 0), rootDec)
	add("root: truncated", root[:len(root)-1], rootDec)
	add("refs: wrong type", set(ref, 0, objTypeLeaf), refDec)
	add("refs: wrong version", set(ref, 1, 0), refDec)
	add("refs: long count", longCount(ref), refDec)
	add("refs: trailing byte", append(bytes.Clone(ref), 0), refDec)
	add("refs: truncated", ref[:len(ref)-1], refDec)
	add("refs: no keys", []byte{objTypeRefs, objVersion, 0}, refDec)
	add("refs: namespace 2", set(ref, 3, 2), refDec)
	add("refs: unsorted", append([]byte{objTypeRefs, objVersion, 2}, append(bytes.Clone(refKeys[33:]), refKeys[:33]...)...), refDec)
	add("refs: duplicate", append([]byte{objTypeRefs, objVersion, 2}, append(bytes.Clone(refKeys[:33]), refKeys[:33]...)...), refDec)
	add("refs: count over 512", append(binary.AppendUvarint([]byte{objTypeRefs, objVersion}, 513), make([]byte, 513*33)...), refDec)
	for name, tc := range bad {
		if err := tc.decode(tc.data); !errors.Is(err, errCodec) {
			t.Errorf("%s: %v, want errCodec", name, err)
		}
	}
	if _, _, _, err := splitCheckpointBody(&cairn.Checkpoint{Files: []cairn.Entry{{Path: "a", Kind: cairn.KindFile, BlobKey: "sandbox-files/sha256/AB"}}}); !errors.Is(err, errObjBlobKey) {
		t.Errorf("split of an invalid blob key: %v", err)
	}
}

// objNaiveCounts counts, for each key, the checkpoints whose BlobKeys hold it.
func objNaiveCounts(cps []cairn.Checkpoint) []cairn.BlobReference {
	counts := map[string]int{}
	for i := range cps {
		for _, k := range cps[i].BlobKeys() {
			counts[k]++
		}
	}
	out := make([]cairn.BlobReference, 0, len(counts))
	for k, n := range counts {
		out = append(out, cairn.BlobReference{Key: k, References: n})
	}
	slices.SortFunc(out, func(a, b cairn.BlobReference) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func objDigests(refs []refChunk) []keys.Digest {
	out := make([]keys.Digest, len(refs))
	for i := range refs {
		out[i] = refs[i].digest
	}
	return out
}

func TestCountReferences(t *testing.T) {
	// A thread of 20 turns that each change 1% of 2,000 files and add an
	// artifact now and then, and a fork of turn 10 (same body).
	r := rand.New(rand.NewPCG(12, 13))
	c := cairn.Checkpoint{Files: objTestFiles(2000, "")}
	var cps []cairn.Checkpoint
	for turn := range 20 {
		c = c.Clone()
		for range 20 {
			i := r.IntN(len(c.Files))
			c.Files[i].BlobKey = objTestFileKey(fmt.Sprint(turn, i))
		}
		if turn%5 == 0 {
			c.Artifacts = append(c.Artifacts, cairn.Artifact{ArtifactID: fmt.Sprint(turn), BlobKey: objTestArtifactKey(fmt.Sprint(turn))})
		}
		c.Files[turn].BlobKey = c.Files[turn+1].BlobKey // a key used twice
		cps = append(cps, c)
	}
	cps = append(cps, cps[10], cairn.Checkpoint{}) // a fork, and a checkpoint without keys
	// Version-1 roots: chunks in key order, which countReferences checks.
	b := objBucket{}
	var listings [][]keys.Digest
	for i := range cps {
		_, _, refs, _ := objSplitAt(t, &cps[i], objVersion)
		b.putRefs(refs)
		listings = append(listings, objDigests(refs))
	}
	// Version-2 roots of the same checkpoints, alone and beside the
	// version-1 ones (a store written before and after version 2): the
	// same counts, doubled.
	b2 := objBucket{}
	var tree, mixed []refListing
	for i := range cps {
		_, _, refs, _ := objSplit(t, &cps[i])
		b2.putRefs(refs)
		tree = append(tree, refListing{chunks: objDigests(refs)})
		mixed = append(mixed, refListing{chunks: listings[i], keyOrder: true}, tree[i])
	}
	want := objNaiveCounts(cps)
	if got, err := countListings(tree, b2.fetch); err != nil || !slices.Equal(got, want) {
		t.Fatalf("version-2 counts differ from the naive count: %d keys, want %d (%v)", len(got), len(want), err)
	}
	both := objBucket{}
	maps.Copy(both, b)
	maps.Copy(both, b2)
	got, err := countListings(mixed, both.fetch)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if i >= len(want) || got[i].Key != want[i].Key || got[i].References != 2*want[i].References {
			t.Fatalf("mixed counts: %v, want twice %v", got[i], want[min(i, len(want)-1)])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("mixed counts: %d keys, want %d", len(got), len(want))
	}
	if len(b2) >= len(b) {
		t.Logf("version 2 wrote %d distinct chunks, version 1 %d", len(b2), len(b))
	}

	asked := map[string]int{}
	fetch := func(key string) ([]byte, error) { asked[key]++; return b.fetch(key) }
	got, err = countReferences(listings, fetch)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("counts differ from the naive count: %d keys, want %d", len(got), len(want))
	}
	if len(asked) != len(b) {
		t.Fatalf("fetched %d chunks of %d", len(asked), len(b))
	}
	for k, n := range asked {
		if n != 1 {
			t.Fatalf("chunk %s fetched %d times", k, n)
		}
	}
	total := 0
	for _, l := range listings {
		total += len(l)
	}
	t.Logf("%d checkpoints list %d chunks, %d distinct: %d keys counted", len(listings), total, len(b), len(got))

	// Listings that name a key twice, and missing or corrupt chunks, fail.
	if _, err := countReferences([][]keys.Digest{{listings[0][0], listings[0][0]}}, b.fetch); !errors.Is(err, errCodec) {
		t.Fatalf("a chunk listed twice: %v", err)
	}
	if _, err := countReferences([][]keys.Digest{{listings[0][1], listings[0][0]}}, b.fetch); !errors.Is(err, errCodec) {
		t.Fatalf("chunks out of order: %v", err)
	}
	// Two checkpoints' chunks over the same range: fine apart, not in one
	// listing.
	var x, y keys.Digest
	for _, d := range listings[19] {
		if !slices.Contains(listings[0], d) {
			x = d
			break
		}
	}
	keysX, _ := decodeRefChunk(b[objectKey(x)])
	for _, d := range listings[0] {
		ks, _ := decodeRefChunk(b[objectKey(d)])
		if ks[0] <= keysX[len(keysX)-1] && keysX[0] <= ks[len(ks)-1] {
			y = d
			break
		}
	}
	if _, err := countReferences([][]keys.Digest{{x}, {y}}, b.fetch); err != nil {
		t.Fatal(err)
	}
	if _, err := countReferences([][]keys.Digest{{x, y}}, b.fetch); !errors.Is(err, errCodec) {
		t.Fatalf("overlapping chunks in one listing: %v", err)
	}
	missing := objectKey(listings[3][2])
	bad := objBucket{}
	for k, v := range b {
		if k != missing {
			bad[k] = v
		}
	}
	if _, err := countReferences(listings, bad.fetch); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("a missing chunk: %v", err)
	}
	bad[missing] = b[objectKey(listings[3][3])]
	if _, err := countReferences(listings, bad.fetch); !errors.Is(err, errObjDigest) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("a chunk with the wrong bytes: %v", err)
	}
	if got, err := countReferences(nil, b.fetch); err != nil || len(got) != 0 {
		t.Fatalf("no listings: %v %v", got, err)
	}
}

// TestObjectCapacityWorkload prints what the capacity workload writes a turn:
// a 2,000-file thread whose turns each change 1% of the files and add 20 KiB
// of conversation, to 400 KiB.
func TestObjectCapacityWorkload(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 15))
	conv := objTestConversation(r, 400<<10)
	c := cairn.Checkpoint{Files: objTestFiles(2000, ""),
		Artifacts: []cairn.Artifact{{ArtifactID: "a1", Name: "plan.md", MimeType: "text/markdown", Size: 100, BlobKey: objTestArtifactKey("a1"), CreatedAt: 1}}}
	b := objBucket{}
	var sum struct{ leaves, leafBytes, chunks, chunkBytes, refs, refBytes, root, list int }
	const turns = 20
	t.Logf("turn  leaves(new/all, bytes)  conv chunks(new/all, bytes)  ref chunks(new/all, bytes)  root bytes  etcd chunk list bytes  v1 body+refs bytes")
	for turn := 1; turn <= turns; turn++ {
		c = c.Clone()
		if turn > 1 {
			for _, i := range r.Perm(len(c.Files))[:len(c.Files)/100] {
				c.Files[i].BlobKey = objTestFileKey(fmt.Sprint("turn", turn, i))
				c.Files[i].Size += 10
			}
		}
		c.Conversation = conv[:turn*20<<10]
		root, objs, refs, err := splitCheckpointBody(&c)
		if err != nil {
			t.Fatal(err)
		}
		leaves, chunks := objLeaves(objs)
		nl, bl := b.put(leaves...)
		nc, bc := b.put(chunks...)
		nr, br := b.putRefs(refs)
		b.put(root)
		v1 := len(encodeCheckpoint(&c)) + 32*len(c.BlobKeys())
		t.Logf("%4d  %3d/%3d %7d B       %3d/%3d %7d B            %3d/%3d %6d B        %6d      %6d               %7d",
			turn, nl, len(leaves), bl, nc, len(chunks), bc, nr, len(refs), br, len(root.data), 32*len(refs), v1)
		if turn > 1 {
			sum.leaves += nl
			sum.leafBytes += bl
			sum.chunks += nc
			sum.chunkBytes += bc
			sum.refs += nr
			sum.refBytes += br
			sum.root += len(root.data)
			sum.list += 32 * len(refs)
			if nl > 20 || nc > 5 || nr > 60 {
				t.Errorf("turn %d wrote %d leaves, %d chunks, %d reference chunks", turn, nl, nc, nr)
			}
		}
	}
	n := float64(turns - 1)
	t.Logf("average over turns 2..%d: %.1f leaves (%.1f KiB), %.1f conversation chunks (%.1f KiB), %.1f reference chunks (%.1f KiB), root %.0f B; bucket writes %.1f KiB a turn; etcd chunk list %.0f B",
		turns, float64(sum.leaves)/n, float64(sum.leafBytes)/n/1024, float64(sum.chunks)/n, float64(sum.chunkBytes)/n/1024,
		float64(sum.refs)/n, float64(sum.refBytes)/n/1024, float64(sum.root)/n,
		float64(sum.leafBytes+sum.chunkBytes+sum.refBytes+sum.root)/n/1024, float64(sum.list)/n)
}

// countReferences is countListings for listings that are all in key order
// (version-1 roots).
func countReferences(listings [][]keys.Digest, fetch func(key string) ([]byte, error)) ([]cairn.BlobReference, error) {
	ls := make([]refListing, len(listings))
	for i, l := range listings {
		ls[i] = refListing{chunks: l, keyOrder: true}
	}
	return countListings(ls, fetch)
}
