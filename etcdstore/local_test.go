package etcdstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// TestLocalReads checks what Options.LocalReads does on one member: Gets of
// live checkpoints are answered from the member's state, every other Get
// falls back and answers as before, every deletion withdraws the thread's
// read permit and puts it back in its own transaction (whichever store
// deletes), and a thread no local store wrote has no permit.
func TestLocalReads(t *testing.T) {
	srv, cli := embedetcd.ForTest(t)
	_ = srv
	ctx := testContext(t)
	local := newStore(t, cli, "local/", etcdstore.Options{LocalReads: true})
	plain := newStore(t, cli, "local/", etcdstore.Options{})
	permit := func(thread string) (create, mod int64) {
		t.Helper()
		r, err := cli.Get(ctx, string(local.Layout().ReadPermit(thread)))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) == 0 {
			return 0, 0
		}
		return r.Kvs[0].CreateRevision, r.Kvs[0].ModRevision
	}
	threadRev := func(thread string) int64 {
		t.Helper()
		r, err := cli.Get(ctx, string(local.Layout().Thread(thread)))
		if err != nil || len(r.Kvs) == 0 {
			t.Fatalf("thread record of %q: %v", thread, err)
		}
		return r.Kvs[0].ModRevision
	}
	appendChain := func(s *etcdstore.Store, thread string, ids ...string) cairn.Writer {
		t.Helper()
		l, err := s.AcquireWriter(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		parent := ""
		for _, id := range ids {
			if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint(id, thread, parent, id), Writer: l.Writer, ExpectedHeadID: parent}); err != nil {
				t.Fatal(err)
			}
			parent = id
		}
		return l.Writer
	}
	counts := func() [2]int64 {
		a, b := local.LocalReadCounts()
		return [2]int64{a, b}
	}
	get := func(id string) *cairn.Checkpoint {
		t.Helper()
		c, err := local.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want, err := plain.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if (c == nil) != (want == nil) || c != nil && c.ID != want.ID {
			t.Fatalf("Get(%q) = %v locally, %v linearizably", id, c, want)
		}
		return c
	}

	w := appendChain(local, "t", "c1", "c2", "c3")
	if c, m := permit("t"); c == 0 || m != threadRev("t") {
		t.Fatalf("permit of t: created %d, modified %d; thread record at %d", c, m, threadRev("t"))
	}
	for _, id := range []string{"c1", "c2", "c3"} {
		if get(id) == nil {
			t.Fatalf("Get(%q) = nil", id)
		}
	}
	if got := counts(); got != [2]int64{3, 0} {
		t.Fatalf("served, fell back = %v after three Gets of live checkpoints, want [3 0]", got)
	}
	get("missing")
	if got := counts(); got != [2]int64{3, 1} {
		t.Fatalf("served, fell back = %v after a Get of a missing id, want [3 1]", got)
	}

	// A prune by the store without LocalReads withdraws the permit too: the
	// thread record says the thread has one.
	created, _ := permit("t")
	if _, err := plain.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: 1, Writer: w}); err != nil {
		t.Fatal(err)
	}
	if c, m := permit("t"); c <= created || m != threadRev("t") {
		t.Fatalf("after the prune the permit was created at %d (before: %d), modified at %d; thread record at %d: not withdrawn and put back with the prune", c, created, m, threadRev("t"))
	}
	if get("c1") != nil || get("c2") != nil || get("c3") == nil {
		t.Fatal("Gets after the prune disagree with it")
	}
	if got := counts(); got != [2]int64{4, 3} {
		t.Fatalf("served, fell back = %v after the prune, want [4 3]", got)
	}

	created, _ = permit("t")
	if err := local.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "t", CheckpointID: "c3", Writer: w}); err != nil {
		t.Fatal(err)
	}
	if c, m := permit("t"); c <= created || m != threadRev("t") {
		t.Fatalf("after deleteHead the permit was created at %d (before: %d), modified at %d; thread record at %d", c, created, m, threadRev("t"))
	}
	if get("c3") != nil {
		t.Fatal("Get(c3) after its deleteHead is not nil")
	}

	w = appendChain(local, "u", "u1", "u2")
	created, _ = permit("u")
	if _, err := plain.DeleteThread(ctx, cairn.DeleteThreadInput{ThreadID: "u", Writer: w}); err != nil {
		t.Fatal(err)
	}
	if c, m := permit("u"); c <= created || m != threadRev("u") {
		t.Fatalf("after deleteThread the permit was created at %d (before: %d), modified at %d; thread record at %d", c, created, m, threadRev("u"))
	}
	if get("u1") != nil || get("u2") != nil {
		t.Fatal("Gets after deleteThread are not nil")
	}

	// A thread only the plain store wrote has no permit, and its Gets fall
	// back.
	w = appendChain(plain, "p", "p1", "p2")
	if c, _ := permit("p"); c != 0 {
		t.Fatal("a thread no local store wrote has a read permit")
	}
	before := counts()
	if get("p1") == nil {
		t.Fatal("Get(p1) = nil")
	}
	if got := counts(); got[0] != before[0] || got[1] != before[1]+1 {
		t.Fatalf("served, fell back = %v, before %v: a Get in a thread without a permit must fall back", got, before)
	}
	if _, err := plain.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "p", Keep: 1, Writer: w}); err != nil {
		t.Fatal(err)
	}
	if c, _ := permit("p"); c != 0 {
		t.Fatal("a prune of a thread without permits put one")
	}
}

// lagging answers every member status with a revision below any deletion's,
// as a member that has not caught up would.
type lagging struct{ on bool }

func (l *lagging) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if r, ok := reply.(*etcdserverpb.StatusResponse); ok && err == nil && l.on && r.Header != nil {
		r.Header.Revision = 1
	}
	return err
}

// TestDeletionWaitsForMembers checks that a deletion of checkpoints of a
// thread with read permits commits only once every member has applied the
// permit's withdrawal: while the (only) member reports an older revision,
// the prune fails with ctx's error and removes nothing; once it has caught
// up, the same prune succeeds.
func TestDeletionWaitsForMembers(t *testing.T) {
	srv, _ := embedetcd.ForTest(t)
	lag := &lagging{}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(lag.intercept)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx := testContext(t)
	s := newStore(t, cli, "wait/", etcdstore.Options{LocalReads: true})
	l, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"c1", "c2"} {
		parent := []string{"", "c1"}[i]
		if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint(id, "t", parent, id), Writer: l.Writer, ExpectedHeadID: parent}); err != nil {
			t.Fatal(err)
		}
	}
	lag.on = true
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = s.DeleteCheckpoints(short, cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: 1, Writer: l.Writer})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("prune while a member lags: %v, want it to wait until ctx ends", err)
	}
	t.Logf("prune while a member lags: %v", err)
	if c, err := s.Get(ctx, "c1"); err != nil || c == nil {
		t.Fatalf("Get(c1) after the prune that waited = %v, %v; want it still there", c, err)
	}
	if err := s.DeleteHead(short, cairn.DeleteHeadInput{ThreadID: "t", CheckpointID: "c2", Writer: l.Writer}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deleteHead while a member lags: %v, want it to wait until ctx ends", err)
	}
	lag.on = false
	ids, err := s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: 1, Writer: l.Writer})
	if err != nil || len(ids) != 1 || ids[0] != "c1" {
		t.Fatalf("prune once the member caught up = %v, %v", ids, err)
	}
	if c, err := s.Get(ctx, "c1"); err != nil || c != nil {
		t.Fatalf("Get(c1) after the prune = %v, %v", c, err)
	}
}
