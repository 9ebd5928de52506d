package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
)

const b16Prefix = "/cairn-bench/b16/"

// b16 measures the incremental sweep's mirror (etcdstore.Mirror) on the
// capacity workload of B11: B16Kept kept checkpoints (threads of b11Turns
// turns), then 1% churn (B16Kept/100 new turns appended and as many old
// checkpoints pruned), then the sweep's reference read, from the mirror and
// by the full walk, on the same data in the same run, each on a fresh store
// (object cache empty) over a bucket that counts reads. Rows: B16 the
// steady-state sweep against the full walk, B17 a restart with the file
// intact and after a compaction past its revision, B18 the mirror's memory and
// file per kept checkpoint.
func (r *runner) b16(ctx context.Context) ([]Row, error) {
	n := r.cfg.B16Kept
	threads := max(1, n/b11Turns)
	kept := threads * b11Turns
	cli, stop, err := r.etcd(ctx, "b16")
	if err != nil {
		return nil, err
	}
	defer stop()
	objs := &countingObjects{ObjectStore: bucket.NewMemory(nil)}
	open := func() (*etcdstore.Store, error) {
		return etcdstore.New(cli, b16Prefix, etcdstore.Options{Options: storeOptions, Objects: objs})
	}
	store, err := open()
	if err != nil {
		return nil, err
	}
	defer store.Close()
	chains := make([]*chain, threads)
	turn := func(th int) error {
		ch := chains[th]
		in := ch.next(nil, []string{artifactKey(fmt.Sprintf("b16-%d-%d", th, ch.n))}, b11Conversation(th, min(ch.n, b11Turns)))
		in.Checkpoint.Files = b11Entries(th, ch.n)
		return ch.append(ctx, in)
	}
	for th := range threads {
		if chains[th], err = newChain(ctx, store, fmt.Sprintf("b16-%d", th)); err != nil {
			return nil, err
		}
		for range b11Turns {
			if err := turn(th); err != nil {
				return nil, err
			}
		}
		if (th+1)%max(1, threads/10) == 0 {
			r.logf("B16: %d of %d threads written", th+1, threads)
		}
	}

	// The cold build.
	path := filepath.Join(r.tmp, "b16-mirror.db")
	mstore, err := open()
	if err != nil {
		return nil, err
	}
	mirror, err := mstore.OpenMirror(ctx, path)
	if err != nil {
		return nil, err
	}
	g0 := objs.gets.Load()
	t0 := time.Now()
	if _, err := mirror.Sync(ctx); err != nil {
		return nil, err
	}
	coldTook, coldGets := time.Since(t0), objs.gets.Load()-g0
	mstore.Close()
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}

	// 1% churn: new turns, and as many checkpoints pruned.
	churn := max(1, kept/100)
	p0 := objs.created.Load()
	for i := range churn {
		th := i % threads
		if err := turn(th); err != nil {
			return nil, err
		}
		if _, err := store.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: chains[th].thread, Keep: b11Turns, Writer: chains[th].writer}); err != nil {
			return nil, err
		}
	}
	created := objs.created.Load() - p0

	// The steady-state read from the mirror, then the full walk, same data.
	mstore, err = open()
	if err != nil {
		return nil, err
	}
	defer mstore.Close()
	mirror.Close()
	if mirror, err = mstore.OpenMirror(ctx, path); err != nil {
		return nil, err
	}
	defer func() {
		if mirror != nil {
			mirror.Close()
		}
	}()
	read := func() (time.Duration, int64, int, error) {
		g := objs.gets.Load()
		t := time.Now()
		refs := 0
		_, err := mstore.WithMirror(mirror).ReadBlobGC(ctx, func(cairn.BlobReference) error { refs++; return nil })
		return time.Since(t), objs.gets.Load() - g, refs, err
	}
	steadyTook, steadyGets, steadyRefs, err := read()
	if err != nil {
		return nil, err
	}
	idleTook, idleGets, _, err := read()
	if err != nil {
		return nil, err
	}
	walk, err := measureWalk(ctx, func(o etcdstore.ObjectStore) (*etcdstore.Store, error) {
		return etcdstore.New(cli, b16Prefix, etcdstore.Options{Options: storeOptions, Objects: o})
	}, objs.ObjectStore, kept)
	if err != nil {
		return nil, err
	}
	if walk.refs != steadyRefs {
		return nil, fmt.Errorf("the mirror reported %d references, the walk %d", steadyRefs, walk.refs)
	}

	// B17: a restart with the file intact, then one after a compaction past
	// the file's revision (with one more turn in between).
	// The heap a mirror takes is measured on the restart with the file
	// intact: it reads no object, so the store's object cache stays empty.
	var heap int64
	restart := func() (time.Duration, int64, etcdstore.MirrorStats, error) {
		mirror.Close()
		mirror = nil
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := int64(ms.HeapAlloc)
		defer func() {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			if heap == 0 {
				heap = int64(ms.HeapAlloc) - before
			}
		}()
		s, err := open()
		if err != nil {
			return 0, 0, etcdstore.MirrorStats{}, err
		}
		defer s.Close()
		m, err := s.OpenMirror(ctx, path)
		if err != nil {
			return 0, 0, etcdstore.MirrorStats{}, err
		}
		mirror = m
		g := objs.gets.Load()
		t := time.Now()
		_, err = m.Sync(ctx)
		return time.Since(t), objs.gets.Load() - g, m.Stats(), err
	}
	rTook, rGets, rStats, err := restart()
	if err != nil {
		return nil, err
	}
	if err := turn(0); err != nil {
		return nil, err
	}
	resp, err := cli.Get(ctx, "\x00")
	if err != nil {
		return nil, err
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		return nil, err
	}
	cTook, cGets, cStats, err := restart()
	if err != nil {
		return nil, err
	}

	perKept := heap / int64(kept)
	result := func(ok bool) string {
		if ok {
			return "met"
		}
		return "missed"
	}
	return []Row{{
		ID:       "B16",
		Workload: fmt.Sprintf("sweep read after 1%% churn (%d turns appended, %d pruned) of %s kept B11 checkpoints", churn, churn, fmtInt(int64(kept))),
		Cairn:    fmt.Sprintf("mirror %s, %s object reads", fmtDur(steadyTook), fmtInt(steadyGets)),
		Baseline: fmt.Sprintf("full walk %s, %s object reads", fmtDur(walk.took), fmtInt(walk.gets)),
		Ratio:    float64(steadyTook) / float64(max(1, walk.took)),
		Target:   "reads ≤ 1.2 × objects created; time ≤ 5% of the walk",
		Result:   result(float64(steadyGets) <= 1.2*float64(created) && steadyTook*20 <= walk.took),
		Notes: []string{fmt.Sprintf("%d objects created by the churn; the mirror read %d (%.2f×). Nothing changed since: %s, %d object reads. Cold build: %s, %s object reads (the walk's %s).",
			created, steadyGets, float64(steadyGets)/float64(max(1, created)), fmtDur(idleTook), idleGets, fmtDur(coldTook), fmtInt(coldGets), fmtInt(walk.gets))},
	}, {
		ID:       "B17",
		Workload: fmt.Sprintf("sweeper restart over %s kept checkpoints, file intact; then after a compaction past its revision", fmtInt(int64(kept))),
		Cairn:    fmt.Sprintf("%s, %d object reads, %d range reads; compacted: %s, %d object reads, %d range reads", fmtDur(rTook), rGets, rStats.Relists, fmtDur(cTook), cGets, cStats.Relists),
		Baseline: fmt.Sprintf("cold build %s, %s object reads", fmtDur(coldTook), fmtInt(coldGets)),
		Ratio:    float64(rTook) / float64(max(1, coldTook)),
		Target:   "intact: 0 reads, 0 ranges; compacted: 1 range",
		Result:   result(rGets == 0 && rStats.Relists == 0 && cStats.Relists == 1),
	}, {
		ID:       "B18",
		Workload: fmt.Sprintf("the mirror of %s kept checkpoints", fmtInt(int64(kept))),
		Cairn:    fmt.Sprintf("%s heap a kept checkpoint, %s of file", fmtBytes(perKept), fmtBytes(fi.Size()/int64(kept))),
		Baseline: "-",
		Ratio:    float64(perKept) / float64(max(1, fi.Size()/int64(kept))),
		Target:   "≤ 1 GiB at 10^6 (≤ 1 KiB a checkpoint)",
		Result:   result(perKept*1_000_000 <= 1<<30),
		Notes: []string{fmt.Sprintf("Heap %s for %s kept checkpoints, linear extrapolation to 10^6: %s. File %s.",
			fmtBytes(heap), fmtInt(int64(kept)), fmtBytes(perKept*1_000_000), fmtBytes(fi.Size()))},
	}}, nil
}
