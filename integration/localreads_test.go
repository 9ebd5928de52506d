package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/conformance"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/integration/internal/harness"
	"github.com/cairnstore/cairn/integration/internal/lincheck"
	"github.com/cairnstore/cairn/internal/topology"
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

// regionCampaign runs the random workload of the fault campaign on the
// test bed, every store with local reads and one client per region, while
// region C's member is paused (a member that applies nothing for a while)
// and blackholed in turn, then checks the history, which includes the
// local Gets, for linearizability, and the fences.
func regionCampaign(t *testing.T, c *harness.Cluster) {
	bkt, _ := newS3(t)
	blobs := blobPool(t, bkt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	moveLeaderTo(t, ctx, c, c.RegionOf("A"))
	var eps []string
	for _, r := range []string{"A", "B", "C"} {
		eps = append(eps, c.RegionOf(r).RegionURL)
	}
	camp := newCampaign(t, eps, "regions-campaign/", blobs)
	defer camp.closeStores()
	camp.opTimeout = 4 * time.Second // a write from C is ~300 ms; a deletion waits for a paused C
	camp.useLocalReads()
	camp.setupSource()
	member := c.RegionOf("C")
	var pauses, cuts int
	faults := func(ctx context.Context) error {
		for {
			for _, step := range []struct {
				do, undo func()
				n        *int
				hold     time.Duration
			}{
				{member.Pause, member.Resume, &pauses, 1200 * time.Millisecond},
				{member.Blackhole, member.Unblackhole, &cuts, 2 * time.Second},
			} {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(1500 * time.Millisecond):
				}
				step.do()
				*step.n++
				select {
				case <-ctx.Done():
				case <-time.After(step.hold):
				}
				step.undo()
			}
		}
	}
	if err := camp.runWorkload(campaignRegionsDuration, workloadConfig{threads: 3, writersPerThread: 2, readers: 3, forkers: 1, staleOneIn: 4}, faults, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	camp.finalReads(0)
	served, fell := camp.localReadCounts()
	ops := camp.hist.Operations()
	t.Logf("history: %d operations:%s; C paused %d times and blackholed %d times; Gets: %d answered locally, %d fell back", len(ops), lincheck.Summary(ops), pauses, cuts, served, fell)
	if served == 0 {
		t.Error("no Get of the campaign was answered locally")
	}
	res, err := camp.checkAll(ctx, "regions-campaign")
	if err != nil {
		t.Fatal(err)
	}
	res.report(t)
}

// campaignRegionsDuration is how long regionCampaign's workload runs.
const campaignRegionsDuration = 40 * time.Second

// regionsSoak is how long regionJitter runs: 2 minutes in the unit tests,
// longer behind the flag (-regions.soak=10m).
var regionsSoak = flag.Duration("regions.soak", 2*time.Minute, "how long TestRegions/Jitter runs writers while region C's links jitter")

// regionJitter runs a writer in each region, renewing its lease every
// RenewAfter and appending in between, while everything region C's member
// sends varies by ±50 ms around its delay (round trips to C of 140 and
// 100 ms ± 50 ms). No lease may expire under its holder: every renewal and
// append succeeds.
func regionJitter(t *testing.T, c *harness.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), *regionsSoak+2*time.Minute)
	defer cancel()
	_, el := harness.RegionTimers(harness.ThreeRegions)
	lease := 3 * harness.MinLeaseTTL(el)
	cut := c.RegionOf("C")
	cut.Jitter(50 * time.Millisecond)
	defer cut.Jitter(0)
	end := time.Now().Add(*regionsSoak)
	type result struct {
		region            string
		appends, renewals int
		err               error
	}
	results := make(chan result, 3)
	for _, r := range []string{"A", "B", "C"} {
		go func() {
			res := result{region: r}
			defer func() { results <- res }()
			cli, err := c.Client(c.RegionOf(r).RegionURL)
			if err != nil {
				res.err = err
				return
			}
			defer cli.Close()
			s, err := etcdstore.New(cli, "regions-jitter/", etcdstore.Options{Options: cairn.Options{LeaseDuration: lease, RenewAfter: lease / 3}, LocalReads: true})
			if err != nil {
				res.err = err
				return
			}
			defer s.Close()
			l, err := s.AcquireWriter(ctx, "t"+r)
			if err != nil {
				res.err = err
				return
			}
			renewed, prev := time.Now(), ""
			for i := 0; time.Now().Before(end); i++ {
				if time.Since(renewed) >= l.RenewAfter {
					if _, err := l.Renew(ctx); err != nil {
						res.err = fmt.Errorf("renewal %d: %w", res.renewals+1, err)
						return
					}
					renewed = time.Now()
					res.renewals++
				}
				id := fmt.Sprintf("%s-%d", r, i)
				if _, err := s.Append(ctx, cairn.AppendInput{Writer: l.Writer, ExpectedHeadID: prev, Checkpoint: cairn.Checkpoint{
					ID: id, ThreadID: "t" + r, ParentCheckpointID: prev, CreatedAt: float64(i + 1), Reason: cairn.ReasonAutomatic,
					Conversation: []byte(`[]`)}}); err != nil {
					res.err = fmt.Errorf("append %d: %w", i, err)
					return
				}
				prev = id
				res.appends++
			}
			l.Release(ctx)
		}()
	}
	for range 3 {
		res := <-results
		t.Logf("region %s: %d appends, %d renewals over %v with C's links jittering ±50 ms", res.region, res.appends, res.renewals, *regionsSoak)
		if res.err != nil {
			t.Errorf("region %s: %v", res.region, res.err)
		}
	}
}

// regionsConformance turns TestRegionsConformance on.
var regionsConformance = flag.Bool("regions.conformance", false, "run TestRegionsConformance (the contract's suites on a test bed with local reads; several minutes)")

// TestRegionsConformance runs the contract's suites that read what
// deletions change (store, prune, deleteThread, fork) on stores with local
// reads in region C of a test bed of the same shape as ThreeRegions at a
// tenth of its delays (round trips of 7, 14 and 10 ms): C, the farthest
// from the leader, applies every commit last. At the full delays every
// write pays 300 ms and the suites take hours. It runs with
// -regions.conformance (make bench-regions CONFORMANCE=1).
func TestRegionsConformance(t *testing.T) {
	if !*regionsConformance {
		t.Skip("the suites on a test bed take several minutes; -regions.conformance runs them (make bench-regions CONFORMANCE=1)")
	}
	var tenth []harness.Region
	for _, r := range harness.ThreeRegions {
		tenth = append(tenth, harness.Region{Name: r.Name, PeerDelay: r.PeerDelay / 10})
	}
	regionConformance(t, startClusterWith(t, harness.ClusterConfig{Regions: tenth}))
}

// regionConformance runs the suites on stores with local reads in region C
// of c, with the leader in A.
func regionConformance(t *testing.T, c *harness.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moveLeaderTo(t, ctx, c, c.RegionOf("A"))
	cli, err := c.Client(c.RegionOf("C").RegionURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	var (
		n      atomic.Int64
		served atomic.Int64
		fell   atomic.Int64
	)
	newStore := func(t *testing.T, opts cairn.Options) *etcdstore.Store {
		s, err := etcdstore.New(cli, fmt.Sprintf("regions-conformance-%d/", n.Add(1)), etcdstore.Options{Options: opts, LocalReads: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			a, b := s.LocalReadCounts()
			served.Add(a)
			fell.Add(b)
			s.Close()
		})
		return s
	}
	storeFactory := func(t *testing.T, opts cairn.Options) cairn.Store { return newStore(t, opts) }
	conformance.RunStoreTests(t, storeFactory)
	conformance.RunPruneTests(t, storeFactory)
	conformance.RunDeleteThreadTests(t, storeFactory)
	conformance.RunForkTests(t, func(t *testing.T, opts cairn.Options) conformance.ForkStore { return newStore(t, opts) })
	t.Cleanup(func() {
		t.Logf("%d stores; their Gets: %d answered by C's member, %d fell back", n.Load(), served.Load(), fell.Load())
	})
}

// regionLeaderCutOff blackholes region C's member while it leads, and
// measures how long appends from A take to succeed again: a new leader is
// elected once A and B miss C's heartbeats for an election timeout. The
// target is two election timeouts; the figure is printed, not asserted.
func regionLeaderCutOff(t *testing.T, c *harness.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cut := c.RegionOf("C")
	moveLeaderTo(t, ctx, c, cut)
	_, el := harness.RegionTimers(harness.ThreeRegions)
	lease := 3 * harness.MinLeaseTTL(el)
	cli, err := c.Client(c.RegionOf("A").RegionURL)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s, err := etcdstore.New(cli, "regions-leader-cut/", etcdstore.Options{Options: cairn.Options{LeaseDuration: lease, RenewAfter: lease / 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	// appendOne reads the head and appends on it, within timeout.
	appendOne := func(id string, timeout time.Duration) error {
		actx, acancel := context.WithTimeout(ctx, timeout)
		defer acancel()
		head, err := s.GetHead(actx, "t")
		if err != nil {
			return err
		}
		_, err = s.Append(actx, cairn.AppendInput{Writer: l.Writer, ExpectedHeadID: head, Checkpoint: cairn.Checkpoint{
			ID: id, ThreadID: "t", ParentCheckpointID: head, CreatedAt: cairn.SystemClock(), Reason: cairn.ReasonAutomatic, Conversation: []byte(`[]`)}})
		return err
	}
	if err := appendOne("before", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	cut.Blackhole()
	defer func() {
		cut.Unblackhole()
		if err := c.WaitHealthy(ctx); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	var tries int
	for i := 0; ; i++ {
		tries++
		err := appendOne(fmt.Sprintf("during-%d", i), 600*time.Millisecond)
		if err == nil {
			break
		}
		if errors.Is(err, cairn.ErrWriterLost) {
			t.Fatalf("the writer in A lost its lease while the leader was cut off: %v", err)
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("no append from A succeeded within a minute of cutting off the leader in C: %v", err)
		}
	}
	took := time.Since(start)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader in C cut off: appends from A resumed after %v (%d tries), new leader %s; election timeout %v, target <= %v: %s",
		took.Round(time.Millisecond), tries, leader.Name, el, 2*el, met(took <= 2*el))
}

// regionTopology reads the test bed as cairn doctor does
// (topology.Inspect): three members, each in its region, one leader, and
// the round trips etcd measured within the bounds TestBed checks.
func regionTopology(t *testing.T, c *harness.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	moveLeaderTo(t, ctx, c, c.RegionOf("C"))
	cli, err := c.Client(c.RegionOf("A").RegionURL)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// Region A writes most: 30 more writes than any other region.
	for i := range 30 {
		if _, err := cli.Put(ctx, "regions-topology", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	regionOf := func(name string) string {
		for _, m := range c.Members {
			if m.Name == name {
				return m.Region.Name
			}
		}
		return ""
	}
	r, err := topology.Inspect(ctx, cli, c.HTTPClient(), regionOf)
	if err != nil {
		t.Fatal(err)
	}
	leaders := 0
	for _, m := range r.Members {
		t.Logf("member %s region %s leader %v revision %d writes handled %.0f %s", m.Name, m.Region, m.Leader, m.Revision, m.Writes, m.Err)
		if m.Leader {
			leaders++
			if m.Region != "C" {
				t.Errorf("the leader is %s in region %s, want the member of C", m.Name, m.Region)
			}
		}
	}
	if len(r.Members) != 3 || leaders != 1 {
		t.Fatalf("%d members, %d leaders; want 3 and 1", len(r.Members), leaders)
	}
	if len(r.RTTs) != 3 {
		t.Fatalf("round trips %+v, want 3 pairs", r.RTTs)
	}
	for _, rtt := range r.RTTs {
		want := harness.RTT(c.RegionOf(regionOf(rtt.A)).Region, c.RegionOf(regionOf(rtt.B)).Region)
		ratio := float64(rtt.Mean) / float64(want)
		t.Logf("round trip %s %v (configured %v, %.2fx, %d samples)", rtt.Pair, rtt.Mean.Round(100*time.Microsecond), want, ratio, rtt.Samples)
		if ratio < 0.9 || ratio > 1.8 {
			t.Errorf("round trip %s measured %v, configured %v", rtt.Pair, rtt.Mean, want)
		}
	}
	for _, w := range r.Warnings {
		t.Logf("warning: %s", w)
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "region A handles the most writes") {
		t.Errorf("warnings %q; want one, that region A writes most and the leader is in C", r.Warnings)
	}
}
