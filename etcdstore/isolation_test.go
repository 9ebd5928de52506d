package etcdstore_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/keys"
)

func smallCheckpoint(id, thread, parent string, keys ...string) cairn.Checkpoint {
	c := cairn.Checkpoint{ID: id, ThreadID: thread, ParentCheckpointID: parent, CreatedAt: 1, Reason: cairn.ReasonNamed}
	for i, k := range keys {
		c.Files = append(c.Files, cairn.Entry{Path: "f" + string(rune('a'+i)), Kind: cairn.KindFile, BlobKey: fileKey(k), Size: 1})
	}
	return c
}

// TestTenantsIsolated runs the same operations, with the same thread and
// checkpoint ids, in two stores on one cluster, with prefixes where one is a
// prefix of the other, and checks that neither sees or changes the other.
func TestTenantsIsolated(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	a := newStore(t, cli, "tenant-a/", etcdstore.Options{})
	b := newStore(t, cli, "tenant-b/", etcdstore.Options{})
	nested := newStore(t, cli, "tenant-a/b/", etcdstore.Options{})

	la, err := a.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	// A lease on the same thread in another tenant is independent.
	lb, err := b.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatalf("tenant b's lease on thread t: %v", err)
	}
	ln, err := nested.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatalf("nested tenant's lease on thread t: %v", err)
	}
	if _, err := a.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("c1", "t", "", "x", "y"), Writer: la.Writer}); err != nil {
		t.Fatal(err)
	}
	// The same id is free in tenant b: ids are unique per store, not per cluster.
	if _, err := b.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("c1", "t", "", "y"), Writer: lb.Writer}); err != nil {
		t.Fatal(err)
	}
	// A writer of one tenant is not a writer of another.
	_, err = nested.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("c9", "t", ""), Writer: la.Writer})
	if !errors.Is(err, cairn.ErrWriterLost) {
		t.Fatalf("tenant a's writer in the nested tenant: %v, want WRITER_LOST", err)
	}
	if _, err := nested.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("c9", "t", ""), Writer: ln.Writer}); err != nil {
		t.Fatal(err)
	}

	want := func(s *etcdstore.Store, head string, refs map[string]int, threads []string) {
		t.Helper()
		if h, _ := s.GetHead(ctx, "t"); h != head {
			t.Fatalf("head %q, want %q", h, head)
		}
		got, err := s.ListBlobReferences(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gm := map[string]int{}
		for _, r := range got {
			gm[r.Key] = r.References
		}
		if !reflect.DeepEqual(gm, refs) {
			t.Fatalf("refs %v, want %v", gm, refs)
		}
		ts, err := s.ListThreads(ctx, "", 0)
		if err != nil || !reflect.DeepEqual(ts, threads) {
			t.Fatalf("threads %v, %v, want %v", ts, err, threads)
		}
	}
	want(a, "c1", map[string]int{fileKey("x"): 1, fileKey("y"): 1}, []string{"t"})
	want(b, "c1", map[string]int{fileKey("y"): 1}, []string{"t"})
	want(nested, "c9", map[string]int{}, []string{"t"})

	if err := b.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "t", CheckpointID: "c1", Writer: lb.Writer}); err != nil {
		t.Fatal(err)
	}
	want(a, "c1", map[string]int{fileKey("x"): 1, fileKey("y"): 1}, []string{"t"})
	want(b, "", map[string]int{}, nil)
	if err := a.Instances().Upsert(ctx, cairn.InstanceRecord{Key: "k", Provider: "p"}); err != nil {
		t.Fatal(err)
	}
	if rec, err := b.Instances().Get(ctx, "k"); err != nil || rec != nil {
		t.Fatalf("tenant b sees tenant a's instance record: %v, %v", rec, err)
	}
}

// TestReferencesAcrossCompaction compacts the revision a walk has pinned,
// while it walks: the walk must fail cleanly and the list form must start
// again and return the exact references.
func TestReferencesAcrossCompaction(t *testing.T) {
	srv, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	s := newStore(t, cli, "compact/", etcdstore.Options{})
	l, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	var want []cairn.Checkpoint
	prev := ""
	for i := range 20 {
		// Keys spread over every shard, so the walk reads many pages.
		var ks []string
		for j := range 40 {
			ks = append(ks, string(rune('a'+i))+string(rune('a'+j%26))+string(rune('0'+j/26)))
		}
		c := smallCheckpoint(string(rune('A'+i)), "t", prev, ks...)
		if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: prev, Writer: l.Writer}); err != nil {
			t.Fatal(err)
		}
		want, prev = append(want, c), c.ID
	}
	compactNow := func(ctx context.Context) {
		r, err := cli.Get(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, "unrelated", "x"); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, r.Header.Revision+1); err != nil {
			t.Fatal(err)
		}
	}
	seen := 0
	err = s.WalkBlobReferences(ctx, func(cairn.BlobReference) error {
		if seen++; seen == 1 {
			compactNow(ctx)
		}
		return nil
	})
	if !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("walk across a compaction: %v, want ErrCompacted", err)
	}
	// The list form restarts on compaction: compact once, before the third
	// page of its first attempt.
	var ranges atomic.Int64
	compacting := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "KV/Range") && ranges.Add(1) == 3 {
			compactNow(ctx)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cc, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(compacting)}})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	checkRefs(t, newStore(t, cc, "compact/", etcdstore.Options{}), map[string]int{}, want...)
	if ranges.Load() <= keys.NumShards {
		t.Fatalf("only %d reads: the listing did not start again", ranges.Load())
	}
}
