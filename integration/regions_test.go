package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn/integration/internal/harness"
)

// startRegions starts the three-region test bed (harness.ThreeRegions).
func startRegions(t *testing.T) *harness.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := harness.StartCluster(ctx, harness.ClusterConfig{Dir: t.TempDir(), Regions: harness.ThreeRegions, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			keepLogs(t, c)
		}
		c.Close()
	})
	return c
}

// TestRegionsTestBed checks the fidelity of the simulated WAN: the round
// trips etcd itself measures between members are the configured ones, within
// ±10% on a quiet machine (each is printed; the check allows 10 ms more for
// the scheduling of a loaded one, and none less: a proxy can only add to a
// delay, so a shorter round trip means the delays are not where the harness
// says), and a region's client reaches its own member at local cost while a
// write pays a round trip to a quorum.
func TestRegionsTestBed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-region cluster")
	}
	c := startRegions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hb, el := harness.RegionTimers(harness.ThreeRegions)
	t.Logf("etcd tuned for the regions: heartbeat %v, election timeout %v, so the shortest lease TTL is %v", hb, el, harness.MinLeaseTTL(el))

	// etcd probes its peers every few seconds; wait for enough samples.
	var rtts []harness.PeerRTT
	for deadline := time.Now().Add(90 * time.Second); ; {
		var err error
		if rtts, err = c.PeerRTTs(ctx); err != nil {
			t.Fatal(err)
		}
		enough := len(rtts) == 3 && !slices.ContainsFunc(rtts, func(r harness.PeerRTT) bool { return r.Samples < 3 })
		if enough || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if len(rtts) != 3 {
		t.Fatalf("etcd measured %d member pairs both ways, want 3: %v", len(rtts), rtts)
	}
	for _, r := range rtts {
		t.Logf("peer round trip %v", r)
		if r.Ratio() < 0.9 || r.Measured > r.Configured*11/10+10*time.Millisecond {
			t.Errorf("peer round trip %v is not within ±10%% (+10 ms of scheduling) of the configured %v", r, r.Configured)
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
	slices.Sort(ds)
	return ds[n/2]
}
