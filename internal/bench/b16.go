package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// b16 runs the scale harness (scale.go) of the incremental sweep at each size
// of B16Fit and at B16Kept, each on an etcd member of its own: B11's capacity
// workload kept, then 1% churn (turns appended with a prune each, forks,
// threads deleted), then sweeps, with the mirror and by the full walk, over a
// bucket that counts requests by kind. Rows, from the largest run: B16 the
// steady-state sweep against the full walk, B17 a restart with the file
// intact and after a compaction past its revision, B18 memory and file per
// kept checkpoint; the notes give every run's figures and the extrapolation
// to 10^6 kept checkpoints of the fit over the runs.
func (r *runner) b16(ctx context.Context) ([]Row, error) {
	sizes := append(slices.Clone(r.cfg.B16Fit), r.cfg.B16Kept)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	var rs []*scaleResult
	for _, n := range sizes {
		res, err := r.scaleOnce(ctx, n)
		if err != nil {
			err = fmt.Errorf("%d kept: %w", n, err)
			if len(rs) == 0 {
				return nil, err
			}
			// The rows of the sizes that ended, and the error: a run of
			// 10^5 stopped by its deadline keeps those of 10^4 and 3·10^4.
			rows := scaleRows(rs, r.cfg.B16Latency)
			rows[0].Notes = append(rows[0].Notes, fmt.Sprintf("The run of %s kept checkpoints did not end: %v.", fmtInt(int64(n)), err))
			return rows, err
		}
		rs = append(rs, res)
		r.logf("B16: %d kept done:\n%s", n, scaleTable([]*scaleResult{res}))
	}
	return scaleRows(rs, r.cfg.B16Latency), nil
}

func (r *runner) scaleOnce(ctx context.Context, n int) (*scaleResult, error) {
	cli, stop, err := r.etcd(ctx, fmt.Sprintf("scale-%d", n))
	if err != nil {
		return nil, err
	}
	defer stop()
	sr := &scaleRun{cli: cli, tmp: r.tmp, latency: r.cfg.B16Latency, logf: r.logf}
	return sr.run(ctx, n)
}

// scaleRows makes rows B16 to B18 of the runs rs (in increasing size).
func scaleRows(rs []*scaleResult, latency time.Duration) []Row {
	r := rs[len(rs)-1]
	fit := fitScale(rs)
	kept := fmtInt(int64(r.kept))
	lat := "no added latency"
	if latency > 0 {
		lat = fmt.Sprintf("%s added to each bucket request", fmtDur(latency))
	}
	churn := fmt.Sprintf("%d turns appended and as many checkpoints pruned, %d forks, %d threads deleted", r.appended, r.forks, r.deletedThreads)
	runs := "Runs (kept checkpoints of B11's workload, 1% churn; " + lat + "):\n\n" + scaleTable(rs)
	fitNote := fmt.Sprintf("Fit (least squares, a + b·N) over %s kept, extrapolated to 10^6: mirror heap %s (%s a checkpoint), mirror file %s (%s a checkpoint), steady-state sweep (dry run) %.1f s, full walk (dry run) %.1f s.",
		fit.over, fmtLarge(int64(fit.heap)), fmtBytes(int64(fit.heap/1e6)), fmtLarge(int64(fit.file)), fmtBytes(int64(fit.file/1e6)), fit.steady, fit.walk)
	return []Row{{
		ID:       "B16",
		Workload: fmt.Sprintf("sweep after 1%% churn (%s) of %s kept B11 checkpoints", churn, kept),
		Cairn: fmt.Sprintf("mirror: dry run %s (%.1f%% of the walk's), real run %s, %s object reads (%.2f× created + lost; %s HEAD), %s LIST, etcd %s read (%.2f× written); nothing changed %s, %s requests",
			fmtDur(r.plan.took), 100*r.timeRatio(), fmtDur(r.steady.took), fmtInt(r.steady.req.reads()), r.readRatio(), fmtInt(int64(r.steady.heads)), fmtInt(int64(r.steady.lists)), fmtBytes(r.steady.etcdRead), r.etcdRatio(), fmtDur(r.idle.took), fmtInt(r.idle.req.total())),
		Baseline: fmt.Sprintf("full walk (dry run) %s, %s object reads, %s LIST", fmtDur(r.walk.took), fmtInt(r.walk.req.reads()), fmtInt(int64(r.walk.lists))),
		Ratio:    r.timeRatio(),
		Target:   "reads ≤ 1.2 × (created + lost); 0 LIST; etcd read ≤ 2 × written; time ≤ 5% of the walk (dry runs); nothing changed: 0 reads, < 1 s",
		Result: verdict(r.readRatio() <= 1.2 && r.steady.lists == 0 && r.etcdRatio() <= 2 && r.timeRatio() <= 0.05 &&
			r.idle.req.reads() == 0 && r.idle.took < time.Second),
		Notes: []string{
			fmt.Sprintf("LIST counts the requests for the swept prefixes; a run that writes also lists the one page of the bucket's bindings (the shared-bucket rule), counted in the requests below. The steady sweep named its candidates without a listing: %v. ", r.steady.incremental) +
				fmt.Sprintf("%s objects created by the churn (blobs and the store's objects), %s lost their last reference (the full walk's garbage, which the sweep with the mirror deleted, key for key). Steady sweep with the mirror: %s (references %s), requests %s; the full walk (a dry run on a fresh store): %s (references %s), requests %s. etcd: %s answered to the steady sweep (unary responses and watch messages), %s of write requests under the prefix during the churn. First sweep (the mirror's cold build): %s, %s object reads.",
					fmtInt(r.created), fmtInt(r.lost()), fmtDur(r.steady.took), fmtDur(r.steady.refsTook), r.steady.req, fmtDur(r.walk.took), fmtDur(r.walk.refsTook), r.walk.req,
					fmtBytes(r.steady.etcdRead), fmtBytes(r.written), fmtDur(r.cold.took), fmtInt(r.cold.req.reads())),
			runs,
			fitNote,
		},
	}, {
		ID:       "B17",
		Workload: fmt.Sprintf("sweeper restart over %s kept checkpoints, file intact; then after a compaction past its revision", kept),
		Cairn: fmt.Sprintf("%s, %d object reads, %d range reads; compacted: %s, %d object reads, %d range reads",
			fmtDur(r.restart.took), r.restart.req.reads(), r.restart.stats.Relists, fmtDur(r.compacted.took), r.compacted.req.reads(), r.compacted.stats.Relists),
		Baseline: fmt.Sprintf("cold build (first sweep) %s, %s object reads", fmtDur(r.cold.took), fmtInt(r.cold.req.reads())),
		Ratio:    float64(r.restart.took) / float64(max(1, r.cold.took)),
		Target:   "intact: 0 reads, 0 ranges; compacted: 1 range",
		Result:   verdict(r.restart.req.reads() == 0 && r.restart.stats.Relists == 0 && r.compacted.stats.Relists == 1),
	}, {
		ID:       "B18",
		Workload: fmt.Sprintf("the mirror of %s kept checkpoints", kept),
		Cairn: fmt.Sprintf("%s heap a kept checkpoint (%s in all), %s of file a kept checkpoint; the cold build's heap peak %s; a sweeper process of its own: RSS %s (peak %s), %s of it anonymous; the harness's RSS %s",
			fmtBytes(r.heap/int64(r.kept)), fmtLarge(r.heap), fmtBytes(r.file/int64(r.kept)), fmtLarge(r.buildHeap), fmtLarge(r.proc.RSS), fmtLarge(r.proc.HWM), fmtLarge(r.proc.Anon), fmtLarge(r.rss)),
		Baseline: "-",
		Ratio:    fit.heap / float64(1<<30),
		Target:   b18Target(r),
		Result:   verdict(fit.heap <= 1<<30 && (r.kept < 100_000 || r.proc.HWM <= 200<<20)),
		Notes: []string{
			fmt.Sprintf("The sweeper process (SweeperMain) opens a copy of the mirror file as the cold build left it (written to disk and dropped from the page cache, as a sweeper in a new pod finds it: copied hot, the copy's pages are cached in large folios, which Linux maps up to 2 MiB a fault; copyCold), syncs it through the churn (%s, %s object reads, %s events) and takes the candidates (%s), with nothing else in the process: its RSS at the end is %s, its peak %s (the target is judged on the peak), %s anonymous (the rest is the mirror's file mapped, which the open's check reads whole and the kernel can drop), and its heap after two collections %s (the peak includes the pages of the file that a step of the sync maps before its release). ",
				fmtDur(r.proc.Took), fmtInt(r.proc.Reads), fmtInt(r.proc.Events), fmtInt(int64(r.proc.Candidates)), fmtLarge(r.proc.RSS), fmtLarge(r.proc.HWM), fmtLarge(r.proc.Anon), fmtLarge(r.proc.Heap)) +
				fmt.Sprintf("The heap is the mirror's alone: HeapAlloc after a collection with the mirror opened and synced on restart, less HeapAlloc after a collection once it is closed and dropped. The process's RSS (%s, peak %s; %s of it anonymous, the rest files mapped such as the mirror's, which the kernel can drop and read again) also holds the in-process bucket's keys (%s objects; %s written in all, the store's objects on disk), the writing store and the etcd client: it bounds the sweeper's from above. The cold build's heap peak is the highest level of the heap's objects, live and not yet collected (runtime/metrics, sampled every 10 ms), during the first sweep, which builds the mirror, above their level after a collection before it; it includes the sweep's own work and the reading store's object cache (32 MiB at most). The ratio column is the fitted heap at 10^6 in GiB. %s",
					fmtLarge(r.rss), fmtLarge(r.hwm), fmtLarge(r.anon), fmtInt(int64(r.bucketObjects)), fmtLarge(r.bucketBytes), fitNote),
		},
	}}
}

// b18Target is B18's target; the RSS at 10^5 is judged only when the largest
// run reached 10^5, and the target says when it was not.
func b18Target(largest *scaleResult) string {
	t := "heap ≤ 1 GiB at 10^6 (fit); a sweeper's RSS (peak) ≤ 200 MiB at 10^5"
	if largest.kept < 100_000 {
		t += fmt.Sprintf(" (not judged: the largest run is %s)", fmtInt(int64(largest.kept)))
	}
	return t
}
