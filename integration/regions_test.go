package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/integration/internal/harness"
)

// startRegions starts the three-region test bed (harness.ThreeRegions).
func startRegions(t *testing.T) *harness.Cluster {
	t.Helper()
	return startClusterWith(t, harness.ClusterConfig{Regions: harness.ThreeRegions})
}

// TestRegions runs the cases of the three-region test bed on one cluster, in
// order: the test bed's fidelity first, then the cut.
func TestRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-region cluster")
	}
	c := startRegions(t)
	t.Run("TestBed", func(t *testing.T) { regionsTestBed(t, c) })
	// Before the faults: etcd's round trips are means since the start.
	t.Run("Topology", func(t *testing.T) { regionTopology(t, c) })
	t.Run("LocalReads", func(t *testing.T) { regionLocalReads(t, c) })
	t.Run("Costs", func(t *testing.T) { regionCosts(t, c) })
	t.Run("Campaign", func(t *testing.T) { regionCampaign(t, c) })
	t.Run("Jitter", func(t *testing.T) { regionJitter(t, c) })
	t.Run("CutOff", func(t *testing.T) { regionCutOff(t, c) })
	t.Run("LeaderCutOff", func(t *testing.T) { regionLeaderCutOff(t, c) })
}

func regionsTestBed(t *testing.T, c *harness.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hb, el := harness.RegionTimers(harness.ThreeRegions)
	t.Logf("etcd tuned for the regions: heartbeat %v, election timeout %v, so the shortest lease TTL is %v", hb, el, harness.MinLeaseTTL(el))

	// A proxy can only add to a delay: a shorter round trip means the
	// delays are not where the harness says, one of twice the configured
	// means they are applied both ways. Between the two, the ratio is
	// printed: within ±10% on a quiet machine, more when the machine is
	// busy (scheduling adds milliseconds to each probe).
	off := func(r harness.PeerRTT) bool { return r.Ratio() < 0.9 || r.Ratio() > 1.8 }
	// etcd probes its peers every few seconds; wait for enough samples, and
	// while a mean is off, for more: a burst of load on a busy machine
	// inflates the first few probes, and later ones dilute it.
	var rtts []harness.PeerRTT
	for deadline := time.Now().Add(90 * time.Second); ; {
		var err error
		if rtts, err = c.PeerRTTs(ctx); err != nil {
			t.Fatal(err)
		}
		enough := len(rtts) == 3 && !slices.ContainsFunc(rtts, func(r harness.PeerRTT) bool { return r.Samples < 2 })
		if enough && !slices.ContainsFunc(rtts, off) || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if len(rtts) != 3 {
		t.Fatalf("etcd measured %d member pairs both ways, want 3: %v", len(rtts), rtts)
	}
	for _, r := range rtts {
		t.Logf("peer round trip %v", r)
		if off(r) {
			t.Errorf("peer round trip %v is not the configured %v", r, r.Configured)
		}
	}

	// A serializable read from a region's own member costs a local round
	// trip; a write pays at least the round trip from the leader to its
	// nearest peer.
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Members {
		cli, err := c.Client(m.RegionURL)
		if err != nil {
			t.Fatal(err)
		}
		read := median(t, 9, func() error { _, err := cli.Get(ctx, "k", clientv3.WithSerializable()); return err })
		write := median(t, 9, func() error { _, err := cli.Put(ctx, "k", "v"); return err })
		cli.Close()
		t.Logf("region %s (leader %s): serializable read p50 %v, write p50 %v", m.Region.Name, leader.Name, read, write)
		if read > 50*time.Millisecond {
			t.Errorf("a serializable read from region %s took %v, not a local round trip", m.Region.Name, read)
		}
		var nearest time.Duration
		for _, o := range c.Members {
			if o != leader && (nearest == 0 || harness.RTT(leader.Region, o.Region) < nearest) {
				nearest = harness.RTT(leader.Region, o.Region)
			}
		}
		if write < nearest*9/10 {
			t.Errorf("a write from region %s took %v, less than the leader's round trip to its nearest peer %v: the delays are not applied", m.Region.Name, write, nearest)
		}
	}
}

// median runs fn n times and returns the median duration.
func median(t *testing.T, n int, fn func() error) time.Duration {
	t.Helper()
	ds := make([]time.Duration, n)
	for i := range ds {
		start := time.Now()
		if err := fn(); err != nil {
			t.Fatal(err)
		}
		ds[i] = time.Since(start)
	}
	return medianOf(ds)
}

// moveLeaderTo makes m the leader (etcdctl move-leader), through a client of
// the current leader.
func moveLeaderTo(t *testing.T, ctx context.Context, c *harness.Cluster, m *harness.Member) {
	t.Helper()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if leader == m {
		return
	}
	var id uint64
	for _, st := range c.Statuses(ctx) {
		if st.Member == m {
			id = st.ID
		}
	}
	cli, err := c.Client(leader.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.MoveLeader(ctx, id); err != nil {
		t.Fatalf("move the leader from %s to %s: %v", leader.Name, m.Name, err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

// regionCutOff blackholes region C's member while writers run in every
// region. C's writes fail within their deadline and never report success,
// while its Gets of checkpoints committed before the cut are still answered
// by its own member; A
// and B keep appending; a writer in A takes over C's thread once its lease
// expired (by A's clock; C's record's etcd lease also ends on the leader's
// timer, since C's keep-alives cannot reach it); after the heal, the old
// holder's fenced writes are refused, nothing acknowledged is lost, and
// Verify is clean.
func regionCutOff(t *testing.T, c *harness.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	moveLeaderTo(t, ctx, c, c.RegionOf("A"))
	_, el := harness.RegionTimers(harness.ThreeRegions)
	lease := 3 * harness.MinLeaseTTL(el) // writers in A and B renew before each append
	stores := map[string]*etcdstore.Store{}
	for _, r := range []string{"A", "B", "C"} {
		cli, err := c.Client(c.RegionOf(r).RegionURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		s, err := etcdstore.New(cli, "regions/", etcdstore.Options{Options: cairn.Options{LeaseDuration: lease, RenewAfter: lease / 3}, LocalReads: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[r] = s
	}
	acked := map[string][]string{} // thread -> acknowledged appends, in order
	appendOn := func(s *etcdstore.Store, l *cairn.Lease, thread, id string, timeout time.Duration) error {
		actx, acancel := context.WithTimeout(ctx, timeout)
		defer acancel()
		head, err := s.GetHead(actx, thread)
		if err != nil {
			return err
		}
		_, err = s.Append(actx, cairn.AppendInput{Writer: l.Writer, ExpectedHeadID: head, Checkpoint: cairn.Checkpoint{
			ID: id, ThreadID: thread, ParentCheckpointID: head, CreatedAt: cairn.SystemClock(),
			Reason: cairn.ReasonAutomatic, Conversation: []byte(`[]`)}})
		if err == nil {
			acked[thread] = append(acked[thread], id)
		}
		return err
	}
	leases := map[string]*cairn.Lease{}
	for _, r := range []string{"A", "B", "C"} {
		l, err := stores[r].AcquireWriter(ctx, "t"+r)
		if err != nil {
			t.Fatal(err)
		}
		leases[r] = l
		if err := appendOn(stores[r], l, "t"+r, r+"-0", 10*time.Second); err != nil {
			t.Fatalf("append in region %s before the cut: %v", r, err)
		}
	}

	cut := c.RegionOf("C")
	cut.Blackhole()
	t.Logf("region C (%s) blackholed", cut.Name)
	start := time.Now()
	err := appendOn(stores["C"], leases["C"], "tC", "C-1", 5*time.Second)
	if err == nil {
		t.Fatal("an append in the cut-off region reported success")
	}
	t.Logf("region C's append failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	// C still serves what was committed before the cut, from its own member.
	servedBefore, _ := stores["C"].LocalReadCounts()
	for _, id := range []string{"A-0", "B-0", "C-0"} {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		cp, err := stores["C"].Get(rctx, id)
		rcancel()
		if err != nil || cp == nil {
			t.Errorf("Get(%s) in the cut-off region = %v, %v", id, cp, err)
		}
	}
	if served, _ := stores["C"].LocalReadCounts(); served-servedBefore != 3 {
		t.Errorf("the cut-off region served %d of 3 Gets of checkpoints committed before the cut locally", served-servedBefore)
	}
	for _, r := range []string{"A", "B"} {
		for i := 1; i <= 3; i++ {
			if _, err := leases[r].Renew(ctx); err != nil {
				t.Fatalf("renew in region %s while C is cut off: %v", r, err)
			}
			if err := appendOn(stores[r], leases[r], "t"+r, fmt.Sprintf("%s-%d", r, i), 10*time.Second); err != nil {
				t.Fatalf("append %d in region %s while C is cut off: %v", i, r, err)
			}
		}
	}
	// A takes C's thread over once the lease expired by A's clock.
	var taken *cairn.Lease
	for deadline := time.Now().Add(lease + 30*time.Second); taken == nil; {
		l, err := stores["A"].AcquireWriter(ctx, "tC")
		switch {
		case err == nil:
			taken = l
		case errors.Is(err, cairn.ErrWriterConflict) && time.Now().Before(deadline):
			time.Sleep(250 * time.Millisecond)
		default:
			t.Fatalf("takeover of C's thread from A: %v", err)
		}
	}
	t.Logf("A took C's thread over %v after the cut (lease %v)", time.Since(start).Round(time.Millisecond), lease)
	if err := appendOn(stores["A"], taken, "tC", "A-on-C", 10*time.Second); err != nil {
		t.Fatalf("append on C's thread by its new holder: %v", err)
	}

	cut.Unblackhole()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("region C healed")
	if err := appendOn(stores["C"], leases["C"], "tC", "C-2", 10*time.Second); !errors.Is(err, cairn.ErrWriterLost) {
		t.Fatalf("the replaced holder's append after the heal = %v; want WRITER_LOST", err)
	}
	// Nothing acknowledged is lost, as every region reads it.
	for _, r := range []string{"A", "B", "C"} {
		for thread, ids := range acked {
			got, err := stores[r].List(ctx, thread)
			if err != nil {
				t.Fatal(err)
			}
			var have []string
			for _, cp := range got {
				have = append(have, cp.ID)
			}
			for _, id := range ids {
				if !slices.Contains(have, id) {
					t.Errorf("region %s: acknowledged checkpoint %s of %s is missing (have %v)", r, id, thread, have)
				}
			}
		}
	}
	rep, err := stores["B"].Verify(ctx, etcdstore.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 0 {
		t.Errorf("Verify after the heal: %+v", rep.Problems)
	}
}
