package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/integration/internal/lincheck"
	"github.com/cairnstore/cairn/keys"
)

// TestChecksCatchABrokenStore shows that the linearizability and fence
// checks have teeth. The broken store is etcdstore seen through a gRPC
// interceptor that strips the writer-guard comparisons (on the writer owner
// and expiry keys) from every transaction that writes a thread record, so
// "append drops the writer compare". The same scenario on the real store
// passes both checks. On the object layout a second broken store strips the
// guard from claim transactions only, so that a stale writer's claims of its
// body objects commit while its append is still refused: the history stays
// linearizable, and only the fence check's claim rule can catch it.
func TestChecksCatchABrokenStore(t *testing.T) {
	cluster := startCluster(t)
	bkt, _ := newS3(t)
	blobs := blobPool(t, bkt)

	type mode struct {
		broken, claimsOnly, objects bool
	}
	// A writer's lease expires on the store clock, a second writer takes
	// the thread over, and the first writer, which has not noticed, appends.
	scenario := func(t *testing.T, m mode) (checkResult, *writerGuardStripper) {
		prefix := fmt.Sprintf("cairn-teeth-%v-%v-%v/", m.broken, m.claimsOnly, m.objects)
		var extra []grpc.UnaryClientInterceptor
		var strip *writerGuardStripper
		if m.broken {
			strip = newWriterGuardStripper(keys.NewLayout(prefix), "victim")
			strip.claimsOnly = m.claimsOnly
			extra = append(extra, strip.intercept)
		}
		c := newCampaign(t, cluster.Endpoints(), prefix, blobs, extra...)
		c.artifacts = t.TempDir() // the violation is expected: keep nothing
		defer c.closeStores()
		if m.objects {
			c.useObjects(bkt)
		}
		c.addThread("victim")
		a, b := c.newClient(0, 1), c.newClient(1, 2)
		la, out := a.acquire("victim")
		if la == nil {
			t.Fatalf("acquire: %+v", out)
		}
		c1 := c.newID("victim")
		if out := a.append(la.Writer, c.checkpointOf(a.r, c1, "victim", "", true, m.objects), ""); out.Err != "" || out.Unknown {
			t.Fatalf("first append: %+v", out)
		}
		c.clock.advance(cairn.Millis(leaseDuration) + 1000)
		lb, out := b.acquire("victim")
		if lb == nil {
			t.Fatalf("takeover: %+v", out)
		}
		c2 := c.newID("victim")
		stale := a.append(la.Writer, c.checkpointOf(a.r, c2, "victim", c1, true, m.objects), c1)
		t.Logf("the stale writer's append: %+v", stale)
		commits := m.broken && !m.claimsOnly
		if commits != (stale.Err == "" && !stale.Unknown) {
			t.Fatalf("%+v, but the stale append returned %+v", m, stale)
		}
		b.getHead("victim")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := c.checkAll(ctx, "stale-append")
		if err != nil {
			t.Fatal(err)
		}
		if m.objects && res.fences.Claims == 0 {
			t.Errorf("the fence check saw no claim on the object layout")
		}
		return res, strip
	}

	for _, objects := range []bool{false, true} {
		name := "real store passes"
		if objects {
			name += " on the object layout"
		}
		t.Run(name, func(t *testing.T) {
			res, _ := scenario(t, mode{objects: objects})
			if res.lin.Verdict != porcupine.Ok || len(res.fences.Violations) > 0 || len(res.fences.Unattributed) > 0 || len(res.findings) > 0 {
				t.Fatalf("the real store failed the checks: %s, fences %v, unattributed %v, findings %v", res.lin.Verdict, res.fences.Violations, res.fences.Unattributed, res.findings)
			}
		})
	}
	t.Run("broken store is caught", func(t *testing.T) {
		res, strip := scenario(t, mode{broken: true})
		if strip.count() == 0 {
			t.Fatal("the interceptor stripped no comparison")
		}
		if res.lin.Verdict != porcupine.Illegal {
			t.Errorf("the linearizability check judged the broken store %s, want Illegal", res.lin.Verdict)
		}
		requireVisualization(t, res.lin)
		if len(res.fences.Violations) == 0 {
			t.Errorf("the fence check found no violation")
		}
		for _, v := range res.fences.Violations {
			t.Logf("fence check caught: %s", v)
		}
	})
	t.Run("unfenced claims are caught on the object layout", func(t *testing.T) {
		res, strip := scenario(t, mode{broken: true, claimsOnly: true, objects: true})
		if strip.count() == 0 {
			t.Fatal("the interceptor stripped no comparison")
		}
		t.Logf("linearizability: %s (the stale append was refused)", res.lin.Verdict)
		claims := 0
		for _, v := range res.fences.Violations {
			t.Logf("fence check caught: %s", v)
			if strings.HasPrefix(v.Kind, "claim") {
				claims++
			}
		}
		if claims == 0 {
			t.Errorf("the fence check found no unfenced claim among %d violations", len(res.fences.Violations))
		}
	})
	t.Run("broken store is caught by the campaign", func(t *testing.T) {
		// The random workload, without faults, on the broken store, with
		// every lease left to expire while its holder keeps writing.
		prefix := "cairn-teeth-campaign/"
		strip := newWriterGuardStripper(keys.NewLayout(prefix), "t0", "t1")
		c := newCampaign(t, cluster.Endpoints(), prefix, blobs, strip.intercept)
		c.artifacts = t.TempDir()
		defer c.closeStores()
		c.setupSource()
		if err := c.runWorkload(8*time.Second, workloadConfig{threads: 2, writersPerThread: 3, staleOneIn: 1}, nil, nil); err != nil {
			t.Fatal(err)
		}
		ops := c.hist.Operations()
		t.Logf("history: %d operations:%s", len(ops), lincheck.Summary(ops))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		res, err := c.checkAll(ctx, "broken-campaign")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("linearizability: %s; fence violations: %d of %d writes; comparisons stripped: %d", res.lin.Verdict, len(res.fences.Violations), res.fences.Writes, strip.count())
		if res.lin.Verdict == porcupine.Ok && len(res.fences.Violations) == 0 {
			t.Fatal("neither check caught the broken store")
		}
		if res.lin.Verdict != porcupine.Ok {
			requireVisualization(t, res.lin)
		}
	})
}

// requireVisualization checks that a failed check left its visualization.
func requireVisualization(t *testing.T, r lincheck.Result) {
	t.Helper()
	if r.VisualizationErr != nil {
		t.Errorf("visualization: %v", r.VisualizationErr)
		return
	}
	if fi, err := os.Stat(r.Visualization); err != nil || fi.Size() == 0 {
		t.Errorf("no visualization at %q: %v", r.Visualization, err)
		return
	}
	t.Logf("porcupine visualization of the violation: %s", r.Visualization)
}
