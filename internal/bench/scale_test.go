//go:build !race

// The scale harness at 10^4 kept checkpoints takes minutes under the race
// detector on two cores, so it is built without it only: `make bench-scale`
// runs it (go test without -race), as CI should.

package bench

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"testing"
	"time"
)

var scaleKept = flag.Int("scale.kept", 10_000, "kept checkpoints of TestScale's run")

// TestScale runs the incremental sweep's scale harness at -scale.kept kept
// checkpoints (10^4 by default) and prints its figures. It asserts only
// correctness: the sweep with the mirror deleted exactly the full walk's
// garbage, and the churn made some; a sweep with nothing changed read no
// object and deleted nothing; a restart with the file intact read no object
// and no range; one after a compaction past the mirror's revision read the
// records exactly once; the mirror equals a full walk at the end (run checks
// all of these and fails otherwise). It never asserts a time.
func TestScale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var log bytes.Buffer
	r := &runner{cfg: Config{B16Kept: *scaleKept}, log: &log, tmp: t.TempDir()}
	cli, stop, err := r.etcd(ctx, "scale")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	sr := &scaleRun{cli: cli, tmp: r.tmp, logf: func(format string, args ...any) { t.Logf(format, args...) }}
	res, err := sr.run(ctx, *scaleKept)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Logf("\n%s", scaleTable([]*scaleResult{res}))
	for _, row := range scaleRows([]*scaleResult{res}, 0) {
		t.Logf("%s: %s | %s | %s | %s", row.ID, row.Cairn, row.Baseline, row.Target, row.Result)
	}
	checks := []struct {
		name string
		ok   bool
		got  string
	}{
		{"the churn made garbage", len(res.walk.deleted) > 0, fmt.Sprint(len(res.walk.deleted))},
		{"the steady sweep read the new objects", res.steady.req[reqGet]+res.steady.req[reqRange] > 0, res.steady.req.String()},
		{"the steady sweep listed nothing", res.steady.incremental && res.steady.lists == 0, fmt.Sprintf("incremental %v, %d LIST", res.steady.incremental, res.steady.lists)},
		{"nothing changed: no bucket request at all", res.idle.incremental && res.idle.req.total() == 0, res.idle.req.String()},
		{"restart, file intact: no bucket read", res.restart.req.reads() == 0, res.restart.req.String()},
		{"restart, file intact: no range read", res.restart.stats.Relists == 0 && res.restart.stats.Rebuilds == 0, fmt.Sprintf("%+v", res.restart.stats)},
		{"the sweeper process followed the churn", res.proc.Events > 0 && res.proc.Candidates > 0, fmt.Sprintf("%+v", res.proc)},
		{"the sweeper process read what the dry run's fresh store read", res.proc.Reads == res.plan.req[reqGet]+res.plan.req[reqRange], fmt.Sprintf("%d against %s", res.proc.Reads, res.plan.req)},
		{"compacted: exactly one range read", res.compacted.stats.Relists == 1 && res.compacted.stats.Rebuilds == 0, fmt.Sprintf("%+v", res.compacted.stats)},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: got %s", c.name, c.got)
		}
	}
}
