package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/keys"
)

// buildChain appends n small checkpoints c0..c(n-1) to thread t, sharing
// some keys, and returns them.
func buildChain(t *testing.T, s *etcdstore.Store, l *cairn.Lease, thread string, n int) []cairn.Checkpoint {
	t.Helper()
	var out []cairn.Checkpoint
	prev := ""
	for i := range n {
		c := smallCheckpoint(fmt.Sprintf("%s-c%d", thread, i), thread, prev, "shared", fmt.Sprintf("%s-%d", thread, i), fmt.Sprintf("%s-%d", thread, i+1))
		if _, err := s.Append(testContext(t), cairn.AppendInput{Checkpoint: c, ExpectedHeadID: prev, Writer: l.Writer}); err != nil {
			t.Fatal(err)
		}
		out, prev = append(out, c), c.ID
	}
	return out
}

func kinds(ps []etcdstore.Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Kind)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestVerifyHealthyStore(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	s := newStore(t, cli, "verify/", etcdstore.Options{})
	l, _ := s.AcquireWriter(ctx, "a")
	chain := buildChain(t, s, l, "a", 6)
	if _, err := s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "a", Keep: 3, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "a", CheckpointID: chain[5].ID, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	fl, _ := s.AcquireWriter(ctx, "b")
	if _, err := s.ForkFromCheckpoint(ctx, cairn.ForkInput{SourceThreadID: "a", SourceCheckpointID: chain[3].ID, DestinationThreadID: "b", DestinationCheckpointID: "fork", CreatedAt: 9, Writer: fl.Writer}); err != nil {
		t.Fatal(err)
	}
	big := largeCheckpoint("big", "b", "fork", 3000, 2<<20)
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: big, ExpectedHeadID: "fork", Writer: fl.Writer}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Verify(ctx, etcdstore.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || len(r.Garbage) != 0 {
		t.Fatalf("problems %v, garbage %v", r.Problems, r.Garbage)
	}
	refs, _ := s.ListBlobReferences(ctx)
	total := 0
	for _, ref := range refs {
		total += ref.References
	}
	if r.Threads != 2 || r.Checkpoints != 4 || r.BlobKeys != len(refs) || r.References != total {
		t.Fatalf("report %+v; store has %d keys and %d references", r, len(refs), total)
	}
}

// TestVerifyFindsDamage damages a store behind its back, one way at a time,
// and checks that Verify names each damage.
func TestVerifyFindsDamage(t *testing.T) {
	cases := []struct {
		name   string
		damage func(ctx context.Context, cli *clientv3.Client, l keys.Layout)
		want   string
	}{
		{"LostReferenceRecord", func(ctx context.Context, cli *clientv3.Client, l keys.Layout) {
			r, _ := cli.Get(ctx, string(l.Refs()), clientv3.WithPrefix(), clientv3.WithLimit(1))
			cli.Delete(ctx, string(r.Kvs[0].Key))
		}, "reference-mismatch"},
		{"ExtraReferenceRecord", func(ctx context.Context, cli *clientv3.Client, l keys.Layout) {
			cli.Put(ctx, string(l.Ref(3, "t", 99, keys.Nonce{7}, 0)), string(make([]byte, 32)))
		}, "orphan-reference-record"},
		{"LostIndexRecord", func(ctx context.Context, cli *clientv3.Client, l keys.Layout) {
			cli.Delete(ctx, string(l.Index("t-c1")))
		}, "missing-index-record"},
		{"DanglingHead", func(ctx context.Context, cli *clientv3.Client, l keys.Layout) {
			cli.Put(ctx, string(l.Thread("t")), `{"head":"nowhere","headSeq":42,"lastSeq":42}`)
		}, "dangling-head"},
		{"LostChunk", func(ctx context.Context, cli *clientv3.Client, l keys.Layout) {
			r, _ := cli.Get(ctx, string(l.Chunks("big")), clientv3.WithPrefix(), clientv3.WithLimit(1))
			cli.Delete(ctx, string(r.Kvs[0].Key))
		}, "bad-body"},
		{"DamagedInlineBody", func(ctx context.Context, cli *clientv3.Client, l keys.Layout) {
			r, _ := cli.Get(ctx, string(l.Checkpoints("t")), clientv3.WithPrefix(), clientv3.WithLimit(1))
			cli.Put(ctx, string(r.Kvs[0].Key), string(r.Kvs[0].Value)+"x")
		}, "bad-body"},
		{"LostParent", func(ctx context.Context, cli *clientv3.Client, l keys.Layout) {
			// The middle checkpoint: an older one is still live.
			r, _ := cli.Get(ctx, string(l.Checkpoints("t")), clientv3.WithPrefix(), clientv3.WithLimit(2))
			cli.Delete(ctx, string(r.Kvs[1].Key))
		}, "broken-chain"},
		{"LostOldestRecordOnly", func(ctx context.Context, cli *clientv3.Client, l keys.Layout) {
			// A chain may end at a parent pruned under the alarm, which
			// deletes its reference records too: left, they are orphans.
			r, _ := cli.Get(ctx, string(l.Checkpoints("t")), clientv3.WithPrefix(), clientv3.WithLimit(1))
			cli.Delete(ctx, string(r.Kvs[0].Key))
		}, "orphan-reference-record"},
	}
	srv, _ := embedetcd.ForTest(t)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cli, err := srv.NewClient()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cli.Close() }) // after the store's own cleanup
			ctx := testContext(t)
			s := newStore(t, cli, fmt.Sprintf("damage%d/", i), etcdstore.Options{})
			l, _ := s.AcquireWriter(ctx, "t")
			buildChain(t, s, l, "t", 3)
			// And one checkpoint whose body is kept in chunks.
			bl, _ := s.AcquireWriter(ctx, "big")
			if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: largeCheckpoint("b1", "big", "", 500, 200<<10), Writer: bl.Writer}); err != nil {
				t.Fatal(err)
			}
			c.damage(ctx, cli, s.Layout())
			r, err := s.Verify(ctx, etcdstore.VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(kinds(r.Problems), c.want) {
				t.Fatalf("problems %v, want one of kind %s", r.Problems, c.want)
			}
		})
	}
}

// TestVerifyRepairsPruneLeftovers makes the cleanup after a large prune fail,
// so that pruned records stay behind the floor, and checks that they are
// invisible, that Verify reports them as garbage, and that Repair removes
// them.
func TestVerifyRepairsPruneLeftovers(t *testing.T) {
	srv, _ := embedetcd.ForTest(t)
	f := &faults{method: "KV/Txn", writesOnly: true}
	cli := faultyClient(t, srv, f)
	ctx := testContext(t)
	s := newStore(t, cli, "leftovers/", etcdstore.Options{})
	l, _ := s.AcquireWriter(ctx, "t")
	chain := buildChain(t, s, l, "t", 80)
	f.reset()
	f.failAt.Store(2) // the prune's transaction succeeds, its cleanup fails
	f.sticky.Store(true)
	removed, err := s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: 2, Writer: l.Writer})
	f.reset()
	if err != nil || len(removed) != 78 {
		t.Fatalf("prune: %d removed, %v", len(removed), err)
	}
	if got, _ := s.Get(ctx, chain[0].ID); got != nil {
		t.Fatal("a pruned checkpoint is visible")
	}
	if st := readState(t, s, "t"); len(st.Lists["t"]) != 2 {
		t.Fatalf("list after prune: %v", st.Lists["t"])
	}
	checkRefs(t, s, map[string]int{}, chain[78:]...)
	r, err := s.Verify(ctx, etcdstore.VerifyOptions{Repair: true})
	if err != nil || !r.OK() {
		t.Fatalf("verify: %v %v", r.Problems, err)
	}
	if len(r.Garbage) == 0 || r.Repaired != len(r.Garbage) {
		t.Fatalf("garbage %d, repaired %d", len(r.Garbage), r.Repaired)
	}
	// A pruned id can be used again, in another thread.
	l2, _ := s.AcquireWriter(ctx, "u")
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint(chain[0].ID, "u", "", "x"), Writer: l2.Writer}); err != nil {
		t.Fatal(err)
	}
	r, err = s.Verify(ctx, etcdstore.VerifyOptions{})
	if err != nil || !r.OK() || len(r.Garbage) != 0 {
		t.Fatalf("after repair: %v %v %v", r.Problems, r.Garbage, err)
	}
}

// TestReuseIdAfterLargePrune reuses the id of a checkpoint whose index record
// a prune left behind, which the append must recognise as stale.
func TestReuseIdAfterLargePrune(t *testing.T) {
	srv, _ := embedetcd.ForTest(t)
	f := &faults{method: "KV/Txn", writesOnly: true}
	cli := faultyClient(t, srv, f)
	ctx := testContext(t)
	s := newStore(t, cli, "reuse/", etcdstore.Options{})
	l, _ := s.AcquireWriter(ctx, "t")
	chain := buildChain(t, s, l, "t", 60)
	f.reset()
	f.failAt.Store(2)
	f.sticky.Store(true)
	if _, err := s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: 1, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	f.reset()
	head := chain[59].ID
	c := smallCheckpoint(chain[0].ID, "t", head, "again")
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: head, Writer: l.Writer}); err != nil {
		t.Fatalf("append of a pruned id: %v", err)
	}
	if got, err := s.Get(ctx, c.ID); err != nil || got == nil || got.ParentCheckpointID != head {
		t.Fatalf("get: %v %v", got, err)
	}
	// And the id is taken again now.
	_, err := s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint(c.ID, "t", c.ID), ExpectedHeadID: c.ID, Writer: l.Writer})
	if !errors.Is(err, cairn.ErrDuplicateID) {
		t.Fatalf("second append: %v, want DUPLICATE_ID", err)
	}
}

// TestGuarded checks that a guarded view's writes need the guard, and change
// nothing without it.
func TestGuarded(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	s := newStore(t, cli, "guarded/", etcdstore.Options{})
	if _, err := cli.Put(ctx, "lock", "me"); err != nil {
		t.Fatal(err)
	}
	g := s.Guarded(clientv3.Compare(clientv3.Value("lock"), "=", "me"))
	l, _ := s.AcquireWriter(ctx, "t")
	if _, err := g.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("c1", "t", "", "a"), Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("c2", "t", "c1", "a"), ExpectedHeadID: "c1", Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "lock", "someone else"); err != nil {
		t.Fatal(err)
	}
	before := readState(t, s, "t")
	writes := map[string]func() error{
		"Append": func() error {
			_, err := g.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("c3", "t", "c2"), ExpectedHeadID: "c2", Writer: l.Writer})
			return err
		},
		"DeleteHead": func() error {
			return g.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "t", CheckpointID: "c2", Writer: l.Writer})
		},
		"DeleteCheckpoints": func() error {
			_, err := g.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: 1, Writer: l.Writer})
			return err
		},
	}
	for name, w := range writes {
		if err := w(); !errors.Is(err, etcdstore.ErrGuardFailed) {
			t.Errorf("%s without the guard: %v, want ErrGuardFailed", name, err)
		}
	}
	if after := readState(t, s, "t"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("guarded writes changed the store: %+v -> %+v", before, after)
	}
}

// TestNegativeZeroCreatedAt appends a checkpoint whose createdAt is -0, a
// finite number the contract accepts: it reads back as -0, Verify finds the
// store consistent, and a prune whose cleanup runs after the transaction
// leaves no garbage behind.
func TestNegativeZeroCreatedAt(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	s := newStore(t, cli, "negzero/", etcdstore.Options{})
	l, _ := s.AcquireWriter(ctx, "t")
	prev := ""
	for i := range 60 {
		c := smallCheckpoint(fmt.Sprintf("c%02d", i), "t", prev, "k")
		c.CreatedAt = math.Copysign(0, -1)
		if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: prev, Writer: l.Writer}); err != nil {
			t.Fatal(err)
		}
		prev = c.ID
	}
	got, err := s.Get(ctx, "c00")
	if err != nil || got == nil || !math.Signbit(got.CreatedAt) {
		t.Fatalf("get: %v, %v", got, err)
	}
	if r, err := s.Verify(ctx, etcdstore.VerifyOptions{}); err != nil || !r.OK() {
		t.Fatalf("verify: %v, %v", r.Problems, err)
	}
	if _, err := s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: 1, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Verify(ctx, etcdstore.VerifyOptions{}); err != nil || !r.OK() || len(r.Garbage) != 0 {
		t.Fatalf("verify after prune: %v %v, %v", r.Problems, r.Garbage, err)
	}
}

// TestRepairNeedsTheGuard shows that a Guarded view repairs only while its
// guard holds.
func TestRepairNeedsTheGuard(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	s := newStore(t, cli, "repairguard/", etcdstore.Options{})
	// Garbage: an index record that names nothing.
	if _, err := cli.Put(ctx, string(s.Layout().Index("ghost")), `{"thread":"t","createdAt":1,"seq":1,"nonce":"00000000000000000000000000000000"}`); err != nil {
		t.Fatal(err)
	}
	g := s.Guarded(clientv3.Compare(clientv3.Value("lock"), "=", "me"))
	r, err := g.Verify(ctx, etcdstore.VerifyOptions{Repair: true})
	if !errors.Is(err, etcdstore.ErrGuardFailed) || r.Repaired != 0 || len(r.Garbage) != 1 {
		t.Fatalf("repair without the guard: %+v, %v", r, err)
	}
	if _, err := cli.Put(ctx, "lock", "me"); err != nil {
		t.Fatal(err)
	}
	if r, err := g.Verify(ctx, etcdstore.VerifyOptions{Repair: true}); err != nil || r.Repaired != 1 {
		t.Fatalf("repair with the guard: %+v, %v", r, err)
	}
}
