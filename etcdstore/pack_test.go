package etcdstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/keys"
)

// readCounter counts the reads a store sends its object bucket: whole
// objects and ranges.
type readCounter struct {
	*bucket.Memory
	reads atomic.Int64
}

func (c *readCounter) Get(ctx context.Context, key string) ([]byte, error) {
	c.reads.Add(1)
	return c.Memory.Get(ctx, key)
}

func (c *readCounter) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	c.reads.Add(1)
	return c.Memory.GetRange(ctx, key, off, n)
}

// newMetaKeys returns the sandbox-meta/ keys of mem that are not in before.
func newMetaKeys(t *testing.T, mem *bucket.Memory, before []string) []string {
	t.Helper()
	var out []string
	for _, k := range memKeysOf(t, mem, cairn.ObjectPrefix) {
		if !slices.Contains(before, k) {
			out = append(out, k)
		}
	}
	return out
}

// TestPackedCompatibility writes one thread in every form the store has
// written: version 1 (a store without Objects), the capacity layout with
// every part an object of its own (as written before packs), packed roots
// of version 3 (members as they are), then of version 4 (members
// compressed), which name the version-3 packs they inherit from, then of
// version 5 (reference chunks made from leaves, leaves stored as patches)
// on those. It checks that each packed append puts at most a pack and a root,
// that every packed root names at most objRootPacks packs and a cold Get
// reads at most 1+objRootPacks times, and then prunes, forks and sweeps:
// the sweep keeps exactly the blobs and objects live checkpoints name (a
// pack written by a pruned checkpoint stays while a live root names it),
// and every live checkpoint reads back exactly from a fresh store.
func TestPackedCompatibility(t *testing.T) {
	e := newV2Env(t)
	old := e.store(false, 0)
	ol, err := old.AcquireWriter(e.ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]cairn.Checkpoint{}
	var all []cairn.Checkpoint
	turn := 0
	next := func() cairn.Checkpoint {
		turn++
		c := capacityTurn("a", turn, 2000, 8000)
		all = append(all, c)
		byID[c.ID] = c
		return c
	}
	for range 2 {
		e.append(old, ol.Writer, next())
	}
	ol.Release(e.ctx)
	s := e.store(true, 0)
	w := e.writer(s, "a")
	writePacked = false
	for range 2 {
		e.append(s, w, next())
	}
	writePacked = true
	roots := map[string]keys.Digest{} // packed checkpoint → its root
	packsOf := map[string][]string{}  // packed checkpoint → the packs it wrote
	// a-5..a-7 are packed as before compression (root version 3, packs
	// 'P' 1), a-8 and a-9 with compressed members (version 4, 'P' 2),
	// a-10..a-12 with reference chunks made from their leaves (version 5,
	// 'P' 2), each on the packs of the ones before.
	t.Cleanup(func() { writePackVersion, writeDerivedRefs = objPackRuns, true })
	compressed, plain, derived, patched := 0, 0, 0, 0
	for i := range 8 {
		wantRoot, wantPack := byte(objRootDerived), byte(objPackCompressed)
		switch {
		case i < 3:
			wantRoot, wantPack = objRootPacked, objVersion
		case i < 5:
			wantRoot = objRootCompressed
		}
		writePackVersion, writeDerivedRefs = wantPack, wantRoot == objRootDerived
		before := memKeysOf(t, e.mem, cairn.ObjectPrefix)
		c := next()
		e.append(s, w, c)
		added := newMetaKeys(t, e.mem, before)
		if len(added) > 3 {
			t.Fatalf("append %s put %d objects, want at most two packs and a root", c.ID, len(added))
		}
		for _, k := range added {
			b, err := e.mem.Get(e.ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			switch b[0] {
			case objTypeRoot:
				d, _ := parseRoot(k[len(objPrefix):])
				roots[c.ID] = d
				r, err := objDecodeRoot(b)
				if err != nil || r.version != wantRoot {
					t.Fatalf("root of %s: version %d, %v; want version %d", c.ID, r.version, err, wantRoot)
				}
				if len(r.packs) > objRootPacks {
					t.Fatalf("root of %s names %d packs", c.ID, len(r.packs))
				}
				for _, p := range append(append(slices.Clone(r.leaves), r.conv...), r.refs...) {
					if p.at.from > 0 {
						derived++
					}
					if p.at.delta != nil {
						patched++
					}
					if p.at.raw > 0 {
						compressed++
					} else {
						plain++
					}
				}
			case objTypePack:
				if b[1] != wantPack {
					t.Fatalf("pack of %s: version %d, want %d", c.ID, b[1], wantPack)
				}
				packsOf[c.ID] = append(packsOf[c.ID], k)
			default:
				t.Fatalf("append %s put an object of type %q", c.ID, b[0])
			}
		}
		if b, _ := e.mem.Get(e.ctx, objectKey(roots[c.ID])); len(packsOf[c.ID]) == 2 {
			// Two packs only when nothing stays in the parent's.
			r, _ := objDecodeRoot(b)
			if len(r.packs) != 2 {
				t.Fatalf("append %s wrote two packs and its root names %d", c.ID, len(r.packs))
			}
		}
		cold := &readCounter{Memory: e.mem}
		fresh, err := New(e.cli, e.prefix, Options{Objects: cold})
		if err != nil {
			t.Fatal(err)
		}
		got, err := fresh.Get(e.ctx, c.ID)
		fresh.Close()
		if err != nil {
			t.Fatal(err)
		}
		sameCheckpoint(t, "cold packed read", got, c)
		if n := cold.reads.Load(); n > 1+objRootPacks {
			t.Fatalf("a cold Get of %s read the bucket %d times", c.ID, n)
		}
	}
	if compressed == 0 || plain == 0 || derived == 0 || patched == 0 {
		t.Fatalf("packed roots name %d compressed and %d uncompressed members, %d reference chunks made from leaves and %d leaves stored as patches: the test covers each only with some of each", compressed, plain, derived, patched)
	}
	// Forks of the unpacked a-4, the packed a-6 (pruned below), the
	// compressed a-9 and a-10, whose reference chunks are made from its
	// leaves.
	// a-1..a-7 go (a-5, a-6, a-7 were packed), then the head a-12.
	live := []string{"a-8", "a-9", "a-10", "a-11", "f1-root", "f2-root", "f3-root", "f4-root"}
	liveCps := e.forkPruneCheck(t, s, w, map[string]string{"f1": "a-4", "f2": "a-6", "f3": "a-9", "f4": "a-10"}, 5, "a-12", live, byID)

	// The bucket holds every blob ever used and one never used.
	wantLive := e.putBlobs(all, liveCps)
	// a-4 (by the fork f1) names its objects of its own; the packed live
	// checkpoints their roots and the packs those name.
	addUnpackedObjects(t, wantLive, byID["a-4"])
	for _, id := range []string{"a-6", "a-8", "a-9", "a-10", "a-11"} {
		b, err := e.mem.Get(e.ctx, objectKey(roots[id]))
		if err != nil {
			t.Fatal(err)
		}
		r, err := objDecodeRoot(b)
		if err != nil {
			t.Fatal(err)
		}
		wantLive[objectKey(roots[id])] = true
		for _, p := range r.packs {
			wantLive[objectKey(p)] = true
		}
	}
	if len(packsOf["a-5"]) != 2 {
		t.Fatalf("a-5, the first packed checkpoint, wrote %d packs, want 2 (its files' parts apart)", len(packsOf["a-5"]))
	}
	if !slices.ContainsFunc(packsOf["a-5"], func(k string) bool { return wantLive[k] }) {
		t.Fatal("no live root names a pack of the pruned a-5: the test does not cover a partly dead pack")
	}
	mixed := false
	for _, id := range []string{"a-8", "a-9", "a-10", "a-11"} {
		b, _ := e.mem.Get(e.ctx, objectKey(roots[id]))
		r, _ := objDecodeRoot(b)
		for _, p := range r.packs {
			k := objectKey(p)
			mixed = mixed || slices.Contains(packsOf["a-5"], k) || slices.Contains(packsOf["a-6"], k) || slices.Contains(packsOf["a-7"], k)
		}
	}
	if !mixed {
		t.Fatal("no live compressed root names a pack of version 1: the test does not cover the two forms in one root")
	}
	// A root of version 5 that names a pack written with a root of
	// version 4 (whose members include reference chunks).
	mixed = false
	for _, id := range []string{"a-10", "a-11"} {
		b, _ := e.mem.Get(e.ctx, objectKey(roots[id]))
		r, _ := objDecodeRoot(b)
		for _, p := range r.packs {
			k := objectKey(p)
			mixed = mixed || slices.Contains(packsOf["a-8"], k) || slices.Contains(packsOf["a-9"], k)
		}
	}
	if !mixed {
		t.Fatal("no live root of version 5 names a pack of a version-4 root: the test does not cover the two forms in one root")
	}
	e.sweepKeeps(s, wantLive, live, byID)
}

// TestPackedRepackOnAnotherState checks that an append whose thread record
// changed after the parent's append (a prune) packs every part anew: its
// root names only its own pack, and it reads back.
func TestPackedRepackOnAnotherState(t *testing.T) {
	e := newV2Env(t)
	s := e.store(true, 0)
	w := e.writer(s, "a")
	for turn := 1; turn <= 3; turn++ {
		e.append(s, w, capacityTurn("a", turn, 1000, 8000))
	}
	// A prune changes the thread record: the next append's inherited packs
	// are not on the state it commits on.
	if _, err := s.DeleteCheckpoints(e.ctx, cairn.DeleteCheckpointsInput{ThreadID: "a", Keep: 2, Writer: w}); err != nil {
		t.Fatal(err)
	}
	before := memKeysOf(t, e.mem, cairn.ObjectPrefix)
	c := capacityTurn("a", 4, 1000, 8000)
	e.append(s, w, c)
	// The root the record names (the first attempt's pack and root are
	// garbage now: put, never named).
	named := func(k string) bool {
		for _, v := range e.keysUnder(s.layout.Root()) {
			if bytes.Contains(v, []byte(`"root":"`+k[len(objPrefix):]+`"`)) {
				return true
			}
		}
		return false
	}
	var root *objRoot
	added := newMetaKeys(t, e.mem, before)
	for _, k := range added {
		b, _ := e.mem.Get(e.ctx, k)
		if b[0] == objTypeRoot && named(k) {
			r, err := objDecodeRoot(b)
			if err != nil {
				t.Fatal(err)
			}
			root = &r
		}
	}
	if root == nil {
		t.Fatal("no new root is named")
	}
	for _, p := range root.packs {
		if !slices.Contains(added, objectKey(p)) {
			t.Fatalf("the append after a prune names the pack %s, want its own only", objectKey(p))
		}
	}
	got, err := e.store(true, 0).Get(e.ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, "repacked", got, c)
}

// TestPackedReadVerifiesMembers alters one byte of a pack: a cold Get fails
// naming the member (no byte is returned unverified), and Verify with
// Objects reports it.
func TestPackedReadVerifiesMembers(t *testing.T) {
	e := newV2Env(t)
	s := e.store(true, 0)
	w := e.writer(s, "a")
	c := capacityTurn("a", 1, 1000, 8000)
	e.append(s, w, c)
	var pack string
	for _, k := range memKeysOf(t, e.mem, cairn.ObjectPrefix) {
		if b, _ := e.mem.Get(e.ctx, k); b[0] == objTypePack {
			pack = k
		}
	}
	if pack == "" {
		t.Fatal("no pack in the bucket")
	}
	b, _ := e.mem.Get(e.ctx, pack)
	b[len(b)-1] ^= 1 // the last leaf
	e.mem.Delete(e.ctx, []string{pack})
	e.mem.Put(e.ctx, pack, b)
	fresh := e.store(true, 0)
	if _, err := fresh.Get(e.ctx, c.ID); err == nil || !strings.Contains(err.Error(), pack) {
		t.Fatalf("Get of an altered pack: %v, want an error naming %s", err, pack)
	}
	rep, err := fresh.Verify(e.ctx, VerifyOptions{Objects: true})
	if err != nil || rep.OK() {
		t.Fatalf("Verify of an altered pack: %v, %v", rep.Problems, err)
	}
}

func TestParsePacks(t *testing.T) {
	d := strings.Repeat("ab", keys.DigestLen)
	for _, tc := range []struct {
		name string
		in   string
		n    int
		ok   bool
	}{
		{"Empty", "", 0, true},
		{"One", d, 1, true},
		{"Three", d + d + d, 3, true},
		{"Four", d + d + d + d, 0, false},
		{"Short", d[1:], 0, false},
		{"NotHex", strings.Repeat("zz", keys.DigestLen), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePacks(tc.in)
			if (err == nil) != tc.ok || len(got) != tc.n {
				t.Fatalf("parsePacks: %d digests, %v; want %d, ok %v", len(got), err, tc.n, tc.ok)
			}
		})
	}
}

// TestPackedFirstPackShared checks that the first checkpoints of two
// threads with the same files and different conversations share the pack
// of their files' parts: the second append creates only the pack of its
// conversation and its root, and both read back from a fresh store.
func TestPackedFirstPackShared(t *testing.T) {
	e := newV2Env(t)
	s := e.store(true, 0)
	rootPacks := map[string][]keys.Digest{}
	added := map[string][]string{}
	cps := map[string]cairn.Checkpoint{}
	for _, th := range []string{"a", "b"} {
		w := e.writer(s, th)
		c := capacityTurn(th, 1, 1000, 8000)
		c.Conversation = json.RawMessage(fmt.Sprintf(`[{"role":"user","content":"thread %s: %s"}]`, th, strings.Repeat("go on ", 2000)))
		before := memKeysOf(t, e.mem, cairn.ObjectPrefix)
		e.append(s, w, c)
		added[th] = newMetaKeys(t, e.mem, before)
		cps[th] = c
		for _, k := range added[th] {
			if b, _ := e.mem.Get(e.ctx, k); b[0] == objTypeRoot {
				r, err := objDecodeRoot(b)
				if err != nil {
					t.Fatal(err)
				}
				rootPacks[th] = r.packs
			}
		}
	}
	if len(added["a"]) != 3 || len(added["b"]) != 2 {
		t.Fatalf("the first appends created %d and %d objects, want 3 (two packs and a root) and 2 (the files' pack is there)", len(added["a"]), len(added["b"]))
	}
	shared := 0
	for _, p := range rootPacks["b"] {
		if slices.Contains(rootPacks["a"], p) {
			shared++
		}
	}
	if len(rootPacks["a"]) != 2 || len(rootPacks["b"]) != 2 || shared != 1 {
		t.Fatalf("roots name packs %v and %v, want two each, one shared", rootPacks["a"], rootPacks["b"])
	}
	fresh := e.store(true, 0)
	for th, c := range cps {
		got, err := fresh.Get(e.ctx, c.ID)
		if err != nil {
			t.Fatalf("Get %s: %v", th, err)
		}
		sameCheckpoint(t, "first checkpoint", got, c)
	}
}

// forkPruneCheck forks each source checkpoint of thread "a" (forks: the
// destination thread by source) to a checkpoint "<thread>-root", prunes "a"
// to its last keep checkpoints with w, deletes its head head, and checks that
// Verify finds nothing and that the blob references are those of the
// checkpoints live names (by id in byID, which gains the forks); it returns
// those checkpoints.
func (e *v2Env) forkPruneCheck(t *testing.T, s *Store, w cairn.Writer, forks map[string]string, keep float64, head string, live []string, byID map[string]cairn.Checkpoint) []cairn.Checkpoint {
	t.Helper()
	for dest, src := range forks {
		fw := e.writer(s, dest)
		root, err := s.ForkFromCheckpoint(e.ctx, cairn.ForkInput{SourceThreadID: "a", SourceCheckpointID: src,
			DestinationThreadID: dest, DestinationCheckpointID: dest + "-root", CreatedAt: 5000, Writer: fw})
		if err != nil {
			t.Fatal(err)
		}
		byID[root.ID] = *root
	}
	if _, err := s.DeleteCheckpoints(e.ctx, cairn.DeleteCheckpointsInput{ThreadID: "a", Keep: keep, Writer: w}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteHead(e.ctx, cairn.DeleteHeadInput{ThreadID: "a", CheckpointID: head, Writer: w}); err != nil {
		t.Fatal(err)
	}
	var liveCps []cairn.Checkpoint
	for _, id := range live {
		liveCps = append(liveCps, byID[id])
	}
	rep, err := s.Verify(e.ctx, VerifyOptions{Objects: true})
	if err != nil || !rep.OK() {
		t.Fatalf("Verify: %v %v", rep.Problems, err)
	}
	refs, err := s.ListBlobReferences(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := wantRefs(liveCps...); !slices.Equal(refs, want) {
		t.Fatalf("ListBlobReferences: %d references, want %d", len(refs), len(want))
	}
	return liveCps
}
