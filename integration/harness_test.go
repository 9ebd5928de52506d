package integration

import (
	"context"
	"testing"
	"time"

	"github.com/cairnstore/cairn/integration/internal/harness"
)

// TestBlackholeCutsOffAMember checks the partition fault the campaign uses:
// once the leader's peer proxy is blackholed, the other two members elect a
// new leader, and a write through the cut-off member cannot commit; once the
// proxy lets traffic through again, the member rejoins and serves.
func TestBlackholeCutsOffAMember(t *testing.T) {
	cluster := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old, err := cluster.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := cluster.Client(old.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	old.Blackhole()
	// The others elect a leader among themselves.
	var others []*harness.Member
	for _, m := range cluster.Members {
		if m != old {
			others = append(others, m)
		}
	}
	start := time.Now()
	for {
		sts := cluster.Statuses(ctx)
		var leaders []uint64
		for _, st := range sts {
			if st.Member != old && st.Err == nil {
				leaders = append(leaders, st.Leader)
			}
		}
		newLeader := len(leaders) == 2 && leaders[0] == leaders[1] && leaders[0] != 0
		for _, st := range sts {
			if newLeader && st.Member == old && st.ID == leaders[0] {
				newLeader = false
			}
		}
		if newLeader {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the members cut off from the leader %s elected no new leader: %+v", old.Name, sts)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s and %s elected a new leader %v after the blackhole", others[0].Name, others[1].Name, time.Since(start).Round(time.Millisecond))
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = cli.Put(wctx, "cut-off", "x")
	wcancel()
	if err == nil {
		t.Fatalf("a write through the cut-off member %s committed", old.Name)
	}
	t.Logf("a write through the cut-off member: %v", err)
	old.Unblackhole()
	if err := cluster.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "rejoined", "x"); err != nil {
		t.Fatalf("write through %s after the partition healed: %v", old.Name, err)
	}
}
