package etcdstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/keys"
)

// verifyFixture is a store of the capacity layout with damage to come:
// thread "a" holds turns 2 and 3 of the capacity workload (turn 1 pruned),
// thread "f" a fork of turn 3, and "s" one small version-1 checkpoint.
type verifyFixture struct {
	e     *v2Env
	s     *Store
	turns []cairn.Checkpoint // turns 1..3 of "a"
	// prunedKVs are the etcd records of turn 1 as they were before the
	// prune (its checkpoint and index records): putting them back leaves
	// what a prune whose cleanup failed leaves.
	prunedKVs [][2]string
}

// rootOf returns the root object of c and the root it decodes to.
func rootOf(t *testing.T, c cairn.Checkpoint) (object, objRoot) {
	t.Helper()
	root, _, _, err := splitCheckpointBody(&c)
	if err != nil {
		t.Fatal(err)
	}
	r, err := objDecodeRoot(root.data)
	if err != nil {
		t.Fatal(err)
	}
	return root, r
}

func newVerifyFixture(t *testing.T, cli *clientv3.Client, prefix string) *verifyFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &v2Env{t: t, ctx: ctx, cli: cli, prefix: prefix, mem: bucket.NewMemory(nil)}
	s := e.store(true, 0)
	f := &verifyFixture{e: e, s: s}
	w := e.writer(s, "a")
	for turn := 1; turn <= 3; turn++ {
		c := capacityTurn("a", turn, 1000, 4000)
		e.append(s, w, c)
		f.turns = append(f.turns, c)
	}
	l := s.layout
	for _, k := range []string{string(l.Checkpoint("a", f.turns[0].CreatedAt, f.turns[0].ID)), string(l.Index(f.turns[0].ID))} {
		resp, err := cli.Get(e.ctx, k)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("read %q: %v", k, err)
		}
		f.prunedKVs = append(f.prunedKVs, [2]string{k, string(resp.Kvs[0].Value)})
	}
	if _, err := s.DeleteCheckpoints(e.ctx, cairn.DeleteCheckpointsInput{ThreadID: "a", Keep: 2, Writer: w}); err != nil {
		t.Fatal(err)
	}
	fw := e.writer(s, "f")
	if _, err := s.ForkFromCheckpoint(e.ctx, cairn.ForkInput{SourceThreadID: "a", SourceCheckpointID: f.turns[2].ID,
		DestinationThreadID: "f", DestinationCheckpointID: "f-1", CreatedAt: 5000, Writer: fw}); err != nil {
		t.Fatal(err)
	}
	sw := e.writer(s, "s")
	e.append(s, sw, cairn.Checkpoint{ID: "s-1", ThreadID: "s", CreatedAt: 1, Reason: cairn.ReasonAutomatic,
		Files: []cairn.Entry{{Path: "x", Kind: cairn.KindFile, BlobKey: objTestFileKey("x"), Size: 1}}, Conversation: []byte(`[]`)})
	return f
}

// seqOf returns the sequence number and nonce of a checkpoint's record.
func (f *verifyFixture) seqOf(t *testing.T, c cairn.Checkpoint) (uint64, keys.Nonce) {
	t.Helper()
	resp, err := f.e.cli.Get(f.e.ctx, string(f.s.layout.Checkpoint(c.ThreadID, c.CreatedAt, c.ID)))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the record of %s: %v", c.ID, err)
	}
	m, err := parseMeta(resp.Kvs[0])
	if err != nil {
		t.Fatal(err)
	}
	n, err := parseNonce(m.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	return m.Seq, n
}

func (f *verifyFixture) put(t *testing.T, k, v string) {
	t.Helper()
	if _, err := f.e.cli.Put(f.e.ctx, k, v); err != nil {
		t.Fatal(err)
	}
}

func (f *verifyFixture) del(t *testing.T, k string, opts ...clientv3.OpOption) {
	t.Helper()
	if resp, err := f.e.cli.Delete(f.e.ctx, k, opts...); err != nil || resp.Deleted == 0 {
		t.Fatalf("delete %q: %d deleted, %v", k, resp.Deleted, err)
	}
}

func (f *verifyFixture) delObject(t *testing.T, key string) {
	t.Helper()
	if _, err := f.e.mem.Head(f.e.ctx, key); err != nil {
		t.Fatalf("object %s: %v", key, err)
	}
	if _, err := f.e.mem.Delete(f.e.ctx, []string{key}); err != nil {
		t.Fatal(err)
	}
}

// restoreLeftovers puts back the records of the pruned turn 1.
func (f *verifyFixture) restoreLeftovers(t *testing.T) {
	t.Helper()
	for _, kv := range f.prunedKVs {
		f.put(t, kv[0], kv[1])
	}
}

// TestVerifyObjectLayoutDamage damages a store of the capacity layout one way
// at a time, in etcd or in the bucket, and checks that Verify (with Objects)
// reports exactly the expected problems and garbage, each with a message
// that names what is wrong, and that Repair deletes exactly the garbage:
// afterwards the problems are all still there, the garbage is gone, and the
// live checkpoints still read back as they were written.
func TestVerifyObjectLayoutDamage(t *testing.T) {
	writeUnpacked(t)
	type want = finding
	cases := []struct {
		name     string
		damage   func(t *testing.T, f *verifyFixture)
		problems []want
		garbage  []string
		// unreadable are the checkpoints that Get must fail on after the
		// damage.
		unreadable []string
	}{
		{
			name: "LostRootReference",
			damage: func(t *testing.T, f *verifyFixture) {
				seq, _ := f.seqOf(t, f.turns[2])
				f.del(t, string(f.s.layout.RefSeq(keys.RootShard, "a", seq)), clientv3.WithPrefix())
			},
			problems: []want{{"reference-mismatch", "no shard-4 record does"}},
		},
		{
			name: "AlteredRootReference",
			damage: func(t *testing.T, f *verifyFixture) {
				seq, n := f.seqOf(t, f.turns[2])
				root, _ := rootOf(t, f.turns[1])
				f.put(t, string(f.s.layout.Ref(keys.RootShard, "a", seq, n, 0)), string(root.digest[:]))
			},
			problems: []want{{"reference-mismatch", "its shard-4 record names"}},
		},
		{
			name: "OrphanRootReference",
			damage: func(t *testing.T, f *verifyFixture) {
				root, _ := rootOf(t, f.turns[2])
				f.put(t, string(f.s.layout.Ref(keys.RootShard, "a", 99, keys.Nonce{9}, 0)), string(root.digest[:]))
			},
			problems: []want{{"orphan-reference-record", "belongs to no checkpoint"}},
		},
		{
			name: "ReferencesInAVersion1Shard",
			damage: func(t *testing.T, f *verifyFixture) {
				seq, n := f.seqOf(t, f.turns[2])
				d := sha256.Sum256([]byte("extra"))
				f.put(t, string(f.s.layout.Ref(1, "a", seq, n, 0)), string(d[:]))
			},
			problems: []want{{"reference-mismatch", "a version-2 checkpoint has none there"}},
		},
		{
			name: "MissingRootObject",
			damage: func(t *testing.T, f *verifyFixture) {
				root, _ := rootOf(t, f.turns[1])
				f.delObject(t, root.key)
			},
			problems:   []want{{"missing-object", "not found"}},
			unreadable: []string{"a-2"},
		},
		{
			name: "MissingLeaf",
			damage: func(t *testing.T, f *verifyFixture) {
				_, r := rootOf(t, f.turns[1])
				// The last leaf: turn 3 rewrote the leaves of the files
				// changed since turn 2, and the last holds none of them.
				f.delObject(t, objectKey(r.leaves[len(r.leaves)-1].digest))
			},
			// Turns 2 and 3 and the fork share the leaf.
			problems:   []want{{"missing-object", "not found"}, {"missing-object", "not found"}, {"missing-object", "not found"}},
			unreadable: []string{"a-2", "a-3", "f-1"},
		},
		{
			name: "MissingReferenceChunk",
			damage: func(t *testing.T, f *verifyFixture) {
				// A chunk of turn 3 that turn 2 does not share.
				_, r := rootOf(t, f.turns[2])
				_, r2 := rootOf(t, f.turns[1])
				for _, p := range r.refs {
					if !slices.ContainsFunc(r2.refs, func(q objPart) bool { return q.digest == p.digest }) {
						f.delObject(t, objectKey(p.digest))
						return
					}
				}
				t.Fatal("turn 3 has no reference chunk of its own")
			},
			// Reads need no reference chunk; the sweep's counts do: turn 3
			// and its fork.
			problems: []want{{"missing-object", "not found"}, {"missing-object", "not found"}},
		},
		{
			name: "AlteredConversationChunk",
			damage: func(t *testing.T, f *verifyFixture) {
				_, r := rootOf(t, f.turns[2])
				key := objectKey(r.conv[len(r.conv)-1].digest)
				if err := f.e.mem.Put(f.e.ctx, key, []byte("C\x01 not the chunk")); err != nil {
					t.Fatal(err)
				}
			},
			// Every message names its turn: turn 3 and its fork only.
			problems:   []want{{"missing-object", "do not match the object's digest"}, {"missing-object", "do not match the object's digest"}},
			unreadable: []string{"a-3", "f-1"},
		},
		{
			name: "ReferenceChunksOfAnotherBody",
			damage: func(t *testing.T, f *verifyFixture) {
				// A root whose leaves are turn 3's and whose reference
				// chunks are turn 2's: the body reads back, but the sweep
				// would count turn 2's keys for it.
				old, r := rootOf(t, f.turns[2])
				_, r2 := rootOf(t, f.turns[1])
				r.refs = r2.refs
				forged := objNewObject(objEncodeRoot(&r))
				if err := f.e.mem.Put(f.e.ctx, forged.key, forged.data); err != nil {
					t.Fatal(err)
				}
				seq, n := f.seqOf(t, f.turns[2])
				f.put(t, string(f.s.layout.Ref(keys.RootShard, "a", seq, n, 0)), string(forged.digest[:]))
				k := string(f.s.layout.Checkpoint("a", f.turns[2].CreatedAt, f.turns[2].ID))
				resp, err := f.e.cli.Get(f.e.ctx, k)
				if err != nil || len(resp.Kvs) != 1 {
					t.Fatal(err)
				}
				v := string(resp.Kvs[0].Value)
				oldHex, newHex := hex.EncodeToString(old.digest[:]), hex.EncodeToString(forged.digest[:])
				if strings.Count(v, oldHex) != 1 {
					t.Fatalf("the record does not name its root once: %q", v)
				}
				f.put(t, k, strings.Replace(v, oldHex, newHex, 1))
			},
			problems: []want{{"reference-chunk-mismatch", "is counted"}},
		},
		{
			name: "LostTranscriptReference",
			damage: func(t *testing.T, f *verifyFixture) {
				f.del(t, string(f.s.layout.RefThread(keys.TranscriptShard, "f")))
			},
			problems: []want{{"bad-transcript", "without its reference record"}},
		},
		{
			name: "OrphanTranscriptReference",
			damage: func(t *testing.T, f *verifyFixture) {
				root, _ := rootOf(t, f.turns[2])
				f.put(t, string(f.s.layout.RefThread(keys.TranscriptShard, "ghost")), string(root.digest[:]))
			},
			problems: []want{{"orphan-reference-record", "a thread without a record"}},
		},
		{
			name:    "PruneLeftovers",
			damage:  func(t *testing.T, f *verifyFixture) { f.restoreLeftovers(t) },
			garbage: []string{"pruned-checkpoint-record", "stale-index-record"},
		},
		{
			name: "ProblemAndLeftovers",
			damage: func(t *testing.T, f *verifyFixture) {
				f.restoreLeftovers(t)
				seq, _ := f.seqOf(t, f.turns[2])
				f.del(t, string(f.s.layout.RefSeq(keys.RootShard, "a", seq)), clientv3.WithPrefix())
			},
			problems: []want{{"reference-mismatch", "no shard-4 record does"}},
			garbage:  []string{"pruned-checkpoint-record", "stale-index-record"},
		},
	}
	_, cli := embedetcd.ForTest(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newVerifyFixture(t, cli, fmt.Sprintf("verify-objects-%d/", i))
			ctx := f.e.ctx
			if r, err := f.s.Verify(ctx, VerifyOptions{Objects: true}); err != nil || !r.OK() || len(r.Garbage) != 0 {
				t.Fatalf("before the damage: %v, garbage %v, %v", r.Problems, r.Garbage, err)
			}
			tc.damage(t, f)
			// A store of its own: its object cache is empty.
			s := f.e.store(true, 0)
			r, err := s.Verify(ctx, VerifyOptions{Objects: true})
			if err != nil {
				t.Fatal(err)
			}
			checkFindings(t, "problems", r.Problems, tc.problems)
			var gotGarbage []string
			for _, g := range r.Garbage {
				gotGarbage = append(gotGarbage, g.Kind)
			}
			slices.Sort(gotGarbage)
			wantGarbage := slices.Sorted(slices.Values(tc.garbage))
			if !slices.Equal(gotGarbage, wantGarbage) {
				t.Fatalf("garbage %v, want kinds %v", r.Garbage, wantGarbage)
			}
			for _, p := range r.Problems {
				t.Logf("problem: %s", p)
			}

			before := f.e.keysUnder(s.layout.Root())
			rr, err := s.Verify(ctx, VerifyOptions{Objects: true, Repair: true})
			if err != nil {
				t.Fatal(err)
			}
			if rr.Repaired != len(tc.garbage) {
				t.Fatalf("Repair deleted %d records, want %d", rr.Repaired, len(tc.garbage))
			}
			after := f.e.keysUnder(s.layout.Root())
			for _, g := range r.Garbage {
				if _, ok := after[g.Key]; ok {
					t.Errorf("Repair left the garbage %s", g)
				}
				delete(before, g.Key)
			}
			if len(before) != len(after) {
				t.Errorf("Repair changed %d records besides the garbage", len(before)-len(after))
			}
			for k, v := range before {
				if string(after[k]) != string(v) {
					t.Errorf("Repair changed %q", k)
				}
			}
			again, err := s.Verify(ctx, VerifyOptions{Objects: true})
			if err != nil {
				t.Fatal(err)
			}
			checkFindings(t, "problems after Repair", again.Problems, tc.problems)
			if len(again.Garbage) != 0 {
				t.Errorf("garbage after Repair: %v", again.Garbage)
			}
			// What was live still reads back, except what the damage broke.
			for _, c := range append(slices.Clone(f.turns[1:]), cairn.ForkRoot(&f.turns[2], &cairn.ForkInput{DestinationThreadID: "f", DestinationCheckpointID: "f-1", CreatedAt: 5000})) {
				got, err := s.Get(ctx, c.ID)
				if slices.Contains(tc.unreadable, c.ID) {
					if err == nil {
						t.Errorf("Get %s: no error after its object was damaged", c.ID)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Get %s: %v", c.ID, err)
				}
				sameCheckpoint(t, "after Repair", got, c)
			}
		})
	}
}

// finding is a problem a test expects: its kind and a part of its detail.
type finding struct{ kind, detail string }

// checkFindings checks that got holds exactly the kinds of want, each with a
// detail containing the wanted text.
func checkFindings(t *testing.T, what string, got []Problem, want []finding) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %v, want %d: %v", what, got, len(want), want)
	}
	used := make([]bool, len(got))
	for _, w := range want {
		found := false
		for i, p := range got {
			if !used[i] && p.Kind == w.kind && strings.Contains(p.Detail, w.detail) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Fatalf("%s: %v, want one of kind %s saying %q", what, got, w.kind, w.detail)
		}
	}
}
