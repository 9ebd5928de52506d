package integration

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/integration/internal/harness"
)

// overclaimStatus answers every member status request itself, without
// asking the member, with a revision no deletion has reached: a store
// behind it believes every member has applied its permit withdrawal at
// once. It is the broken store of regionLocalReads.
func overclaimStatus(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r, ok := reply.(*etcdserverpb.StatusResponse); ok {
		r.Header = &etcdserverpb.ResponseHeader{Revision: math.MaxInt64}
		return nil
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// regionLocalReads checks local reads on the test bed, with the leader in
// A. A Get from region C of a committed checkpoint is answered by C's own
// member, at a local round trip, where a linearizable Get pays the round
// trip to the leader. A member applies a commit only when the leader tells
// it so, about one one-way delay (55 ms from A) after the commit: a prune
// from A followed at once by a Get from C is the case local reads must get
// right. With the real store the prune returns only once C applied the
// permit's withdrawal, so C's Get never returns a pruned checkpoint; a
// broken store that believes every member caught up at once (its status
// answers overclaim) lets C answer with the pruned checkpoint, and the test
// shows that it is caught.
func regionLocalReads(t *testing.T, c *harness.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	moveLeaderTo(t, ctx, c, c.RegionOf("A"))
	_, el := harness.RegionTimers(harness.ThreeRegions)
	lease := 3 * harness.MinLeaseTTL(el)
	opts := etcdstore.Options{Options: cairn.Options{LeaseDuration: lease, RenewAfter: lease / 3}, LocalReads: true}
	client := func(m *harness.Member, dial ...grpc.DialOption) *clientv3.Client {
		t.Helper()
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: []string{m.RegionURL}, DialTimeout: 5 * time.Second, TLS: c.ClientTLS(), Logger: zap.NewNop(), DialOptions: dial,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	store := func(cli *clientv3.Client, prefix string, o etcdstore.Options) *etcdstore.Store {
		t.Helper()
		s, err := etcdstore.New(cli, prefix, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	cliA, cliC := client(c.RegionOf("A")), client(c.RegionOf("C"))
	brokenA := client(c.RegionOf("A"), grpc.WithChainUnaryInterceptor(overclaimStatus))

	// run appends rounds checkpoints in A and prunes each one's parent while
	// C's member is paused (SIGSTOP): C's clients still reach it (their
	// requests wait in its sockets), but it applies nothing. A Get of the
	// pruned checkpoint is sent to C, then C resumes. A store that waits for
	// every member cannot finish its prune while C is paused; a broken one
	// finishes it, and C, which answers the queued Get before it has even
	// written the new entries to its log, answers with the pruned
	// checkpoint. After the prune, C's Get must return nothing. run returns
	// how many of C's Gets that began after a prune had returned showed the
	// pruned checkpoint, and how many prunes returned while C was paused.
	paused := c.RegionOf("C")
	run := func(prefix string, writer *etcdstore.Store, rounds int) (stale, early int) {
		t.Helper()
		reader := store(cliC, prefix, opts)
		l, err := writer.AcquireWriter(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		acquired := time.Now()
		prev := ""
		for i := range rounds {
			id := fmt.Sprintf("c%d", i)
			if _, err := writer.Append(ctx, cairn.AppendInput{Writer: l.Writer, ExpectedHeadID: prev, Checkpoint: cairn.Checkpoint{
				ID: id, ThreadID: "t", ParentCheckpointID: prev, CreatedAt: float64(i + 1), Reason: cairn.ReasonAutomatic,
				Conversation: []byte(`[]`)}}); err != nil {
				t.Fatal(err)
			}
			if prev == "" {
				prev = id
				continue
			}
			// C has seen prev once its member answers it locally.
			for served, _ := reader.LocalReadCounts(); ; time.Sleep(20 * time.Millisecond) {
				if _, err := reader.Get(ctx, prev); err != nil {
					t.Fatal(err)
				}
				if now, _ := reader.LocalReadCounts(); now > served {
					break
				}
			}
			if _, err := l.Renew(ctx); err != nil {
				t.Fatal(err)
			}
			paused.Pause()
			pruned := make(chan error, 1)
			pruneStart := time.Now()
			go func() {
				_, err := writer.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: 1, Writer: l.Writer})
				t.Logf("round %d: prune returned after %v: %v", i, time.Since(pruneStart).Round(time.Millisecond), err)
				pruned <- err
			}()
			var returned bool
			select {
			case err := <-pruned:
				if err != nil {
					paused.Resume()
					r, gerr := cliA.Get(ctx, string(writer.Layout().WriterOwner("t")))
					r2, _ := cliA.Get(ctx, string(writer.Layout().WriterExpiry("t")))
					t.Fatalf("prune in A while C is paused: %v (lease %+v, %v since acquire; owner %v %v; expiry %v)", err, l.Writer, time.Since(acquired), r.Kvs, gerr, r2.Kvs)
				}
				returned = true
			case <-time.After(1500 * time.Millisecond):
			}
			type answer struct {
				c   *cairn.Checkpoint
				err error
			}
			got := make(chan answer, 1)
			go func() {
				c, err := reader.Get(ctx, prev)
				got <- answer{c, err}
			}()
			time.Sleep(100 * time.Millisecond) // the Get waits in C's socket
			paused.Resume()
			a := <-got
			if a.err != nil {
				t.Fatal(a.err)
			}
			if returned {
				early++
				if a.c != nil {
					stale++
				}
			} else if err := <-pruned; err != nil {
				r, gerr := cliA.Get(ctx, string(writer.Layout().WriterOwner("t")))
				r2, _ := cliA.Get(ctx, string(writer.Layout().WriterExpiry("t")))
				t.Fatalf("prune in A after C resumed: %v (lease %+v, %v since acquire; owner %v %v; expiry %v)", err, l.Writer, time.Since(acquired), r.Kvs, gerr, r2.Kvs)
			}
			if c, err := reader.Get(ctx, prev); err != nil || c != nil {
				t.Errorf("Get(%s) from C after its prune returned = %v, %v; want nothing", prev, c, err)
			}
			prev = id
		}
		served, fell := reader.LocalReadCounts()
		t.Logf("%s: %d of %d prunes returned while C was paused; %d Gets from C begun after such a prune showed the pruned checkpoint; C's Gets: %d served locally, %d fell back",
			prefix, early, rounds-1, stale, served, fell)
		return stale, early
	}
	const rounds = 6
	if stale, early := run("local-reads/", store(cliA, "local-reads/", opts), rounds); stale != 0 || early != 0 {
		t.Errorf("%d prunes returned while member C was paused (%d of C's later Gets were stale): they must wait for every member", early, stale)
	}
	if stale, _ := run("local-reads-broken/", store(brokenA, "local-reads-broken/", opts), rounds); stale == 0 {
		t.Errorf("the broken store (no wait for members) was not caught: C never returned a pruned checkpoint in %d rounds", rounds-1)
	}

	// What a Get of a committed checkpoint costs from C: local against
	// linearizable.
	w := store(cliA, "local-reads-cost/", opts)
	l, err := w.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, cairn.AppendInput{Writer: l.Writer, Checkpoint: cairn.Checkpoint{
		ID: "x", ThreadID: "t", CreatedAt: 1, Reason: cairn.ReasonAutomatic, Conversation: []byte(`[]`)}}); err != nil {
		t.Fatal(err)
	}
	localC := store(cliC, "local-reads-cost/", opts)
	linearC := store(cliC, "local-reads-cost/", etcdstore.Options{})
	getX := func(s *etcdstore.Store) func() error {
		return func() error {
			c, err := s.Get(ctx, "x")
			if err == nil && c == nil {
				err = fmt.Errorf("Get(x) = nil")
			}
			return err
		}
	}
	getX(localC)() // C has applied it once this answers
	local, linear := median(t, 9, getX(localC)), median(t, 9, getX(linearC))
	served, fell := localC.LocalReadCounts()
	t.Logf("Get of a committed checkpoint from C: %v local (%d served locally, %d fell back), %v linearizable; C-A round trip %v",
		local, served, fell, linear, harness.RTT(c.RegionOf("C").Region, c.RegionOf("A").Region))
	if fell > 1 {
		t.Errorf("%d of C's Gets of a committed checkpoint fell back", fell)
	}
}
