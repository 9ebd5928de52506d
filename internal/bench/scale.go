package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/sweep"
)

const scalePrefix = "/cairn-bench/scale/"

// scaleRun is one run of the scale harness (rows B16 to B18): kept
// checkpoints of the capacity workload, then 1% churn, then sweeps, on one
// etcd member and one counting bucket.
type scaleRun struct {
	cli     *clientv3.Client
	tmp     string
	latency time.Duration
	logf    func(format string, args ...any)
}

// sweepFig is what one sweep cost.
type sweepFig struct {
	took, refsTook time.Duration
	req            reqCounts
	etcdRead       int64 // bytes etcd answered (unary responses and watch messages)
	deleted        []string
	// incremental says the sweep named its candidates without a listing;
	// lists and heads are its LIST (swept prefixes) and HEAD requests.
	incremental  bool
	lists, heads int
}

// mirrorFig is what a restart's Sync cost.
type mirrorFig struct {
	took  time.Duration
	req   reqCounts
	stats etcdstore.MirrorStats
}

// scaleResult holds every figure of one run.
type scaleResult struct {
	kept, threads int
	writeTook     time.Duration
	// The churn: turns appended (each with a prune of the thread's oldest
	// checkpoint), forks, threads deleted; the objects it created (blobs and
	// the store's objects), and the bytes of its etcd write requests.
	appended, forks, deletedThreads, removedKept int
	created                                      int64
	written                                      int64
	cold, walk, steady, idle, plan               sweepFig
	restart, compacted                           mirrorFig
	heap                                         int64   // heap the mirror takes, loaded from its file
	buildHeap                                    int64   // the heap's peak above its level before, during the cold build
	rss, hwm                                     int64   // the process's, at the end
	anon                                         int64   // of rss, the anonymous memory (not the files mapped, such as the mirror's)
	proc                                         procFig // the sweeper process's (SweeperMain)
	file                                         int64   // the mirror file's size
	bucketObjects                                int
	bucketBytes                                  int64 // bytes of the objects ever created
}

// scaleTurn is one turn of thread th on ch: its new blobs (the files the turn
// changed and one artifact) uploaded, then the append of the B11 checkpoint.
func scaleTurn(ctx context.Context, b *countingBucket, ch *chain, th int) error {
	files := b11Entries(th, ch.n)
	art := fmt.Sprintf("scale-%d-%d", th, ch.n)
	for i := range files {
		if last := b11LastChange(i, ch.n); last == ch.n {
			seed := fmt.Sprintf("thread%d-%d-turn%d", th, i, last)
			if _, err := b.PutIfAbsent(ctx, files[i].BlobKey, []byte(seed)); err != nil {
				return err
			}
		}
	}
	if _, err := b.PutIfAbsent(ctx, artifactKey(art), []byte(art)); err != nil {
		return err
	}
	in := ch.next(nil, []string{artifactKey(art)}, b11Conversation(th, min(ch.n, b11Turns)))
	in.Checkpoint.Files = files
	return ch.append(ctx, in)
}

// scaleRepos uploads the repositories' files every thread starts from.
func scaleRepos(ctx context.Context, b *countingBucket) error {
	for repo := range b11Repos {
		for i := range b11Files {
			seed := fmt.Sprintf("repo%d-%d", repo, i)
			if _, err := b.PutIfAbsent(ctx, fileKey(seed), []byte(seed)); err != nil {
				return err
			}
		}
	}
	return nil
}

// run writes n kept checkpoints and measures the sweeps over them.
func (sr *scaleRun) run(ctx context.Context, n int) (*scaleResult, error) {
	res := &scaleResult{threads: max(1, n/b11Turns)}
	res.kept = res.threads * b11Turns
	dir := filepath.Join(sr.tmp, fmt.Sprintf("scale-%d-objects", n))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	b := newCountingBucket(sr.latency, dir)
	// A new bucket: the registry's marker first, as a deployment's first
	// store or the sweeper's -bind writes it, so that the sweep finds the
	// store's binding covered.
	if err := bucket.MarkRegistry(ctx, b); err != nil {
		return nil, err
	}
	open := func() (*etcdstore.Store, error) {
		return etcdstore.New(sr.cli, scalePrefix, etcdstore.Options{Options: storeOptions, Objects: b})
	}
	store, err := open()
	if err != nil {
		return nil, err
	}
	defer store.Close()

	// The kept checkpoints.
	t0 := time.Now()
	if err := scaleRepos(ctx, b); err != nil {
		return nil, err
	}
	chains := make([]*chain, res.threads)
	for th := range chains {
		if chains[th], err = newChain(ctx, store, fmt.Sprintf("scale-%d", th)); err != nil {
			return nil, err
		}
		for range b11Turns {
			if err := scaleTurn(ctx, b, chains[th], th); err != nil {
				return nil, err
			}
		}
		if (th+1)%max(1, res.threads/10) == 0 {
			sr.logf("scale %d: %d of %d threads written", n, th+1, res.threads)
		}
	}
	res.writeTook = time.Since(t0)

	// The first sweep with the mirror: its cold build.
	path := filepath.Join(sr.tmp, fmt.Sprintf("scale-%d-mirror.db", n))
	mstore, err := open()
	if err != nil {
		return nil, err
	}
	mirror, err := mstore.OpenMirror(ctx, path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if mirror != nil {
			mirror.Close()
		}
	}()
	// sweepWith sweeps refs; with the mirror (a Mirrored), the mirror
	// names the candidates whenever it can (sweep.Options.Incremental).
	sweepWith := func(refs sweep.References, dry bool) (sweepFig, error) {
		tctx, tl := withTally(ctx, true)
		r0 := b.counts()
		opts := sweep.Options{OlderThan: 0, DryRun: dry}
		if x, ok := refs.(*etcdstore.Mirrored); ok {
			opts.Incremental = x
		}
		rep, err := sweep.Sweep(tctx, refs, b, opts)
		fig := sweepFig{took: rep.Duration, refsTook: rep.ReferencesDuration, req: b.counts().sub(r0), etcdRead: tl.received(), deleted: rep.Deleted,
			incremental: rep.Incremental, lists: rep.ListRequests, heads: rep.HeadRequests}
		if err != nil {
			return fig, fmt.Errorf("sweep: %w", err)
		}
		sr.logf("scale %d: sweep (dry run %v, incremental %v): %s; references %s, deletes %s; requests %s",
			n, dry, rep.Incremental, fmtDur(rep.Duration), fmtDur(rep.ReferencesDuration), fmtDur(rep.DeleteDuration), fig.req)
		return fig, nil
	}
	sr.logf("scale %d: first sweep (the mirror's cold build)", n)
	stopPeak := heapPeak()
	res.cold, err = sweepWith(mstore.WithMirror(mirror), false)
	res.buildHeap = stopPeak()
	if err != nil {
		return nil, err
	}

	// 1% churn: turns appended with a prune each, forks, deleted threads.
	sr.logf("scale %d: churn", n)
	wctx, wt := withTally(ctx, true)
	created0 := b.created.Load()
	ops := max(1, res.kept/100)
	live := res.threads // threads from the end are deleted; the others get turns
	for i := range ops {
		switch {
		case i%20 == 10 && live > 2:
			live--
			if _, err := store.DeleteThread(wctx, cairn.DeleteThreadInput{ThreadID: chains[live].thread, Writer: chains[live].writer}); err != nil {
				return nil, fmt.Errorf("delete thread %s: %w", chains[live].thread, err)
			}
			res.deletedThreads++
			res.removedKept += b11Turns
		case i%20 == 5:
			src := chains[i%live]
			dst := fmt.Sprintf("scale-fork-%d", i)
			l, err := store.AcquireWriter(wctx, dst)
			if err != nil {
				return nil, err
			}
			if _, err := store.ForkFromCheckpoint(wctx, cairn.ForkInput{SourceThreadID: src.thread, SourceCheckpointID: src.head,
				DestinationThreadID: dst, DestinationCheckpointID: dst + "-root", CreatedAt: 1_800_000_000_000, Writer: l.Writer}); err != nil {
				return nil, fmt.Errorf("fork %s: %w", dst, err)
			}
			l.Release(wctx) // the writer records are not the fork's
			res.forks++
		default:
			th := i % live
			if err := scaleTurn(wctx, b, chains[th], th); err != nil {
				return nil, err
			}
			if _, err := store.DeleteCheckpoints(wctx, cairn.DeleteCheckpointsInput{ThreadID: chains[th].thread, Keep: b11Turns, Writer: chains[th].writer}); err != nil {
				return nil, err
			}
			res.appended++
			res.removedKept++
		}
	}
	res.created = b.created.Load() - created0
	res.written = wt.sentWrites()

	// A sweeper process of its own syncs a copy of the mirror, as the cold
	// build left it, through the churn: its memory is a sweeper's alone.
	procPath := path + ".proc"
	if err := copyCold(path, procPath); err != nil {
		return nil, err
	}
	sr.logf("scale %d: a sweeper process of its own", n)
	res.proc, err = runSweeperProcess(ctx, sweeperJob{Endpoints: sr.cli.Endpoints(), Prefix: scalePrefix, Mirror: procPath, Objects: dir})
	os.Remove(procPath)
	if err != nil {
		return nil, err
	}

	// The full walk's verdict on the same data (a dry run on a fresh store:
	// it changes nothing), then the steady-state sweep with the mirror.
	sr.logf("scale %d: sweeps", n)
	wstore, err := open()
	if err != nil {
		return nil, err
	}
	res.walk, err = sweepWith(wstore, true)
	wstore.Close()
	if err != nil {
		return nil, fmt.Errorf("the full walk's dry run: %w", err)
	}
	// The steady sweep's dry run, on a copy of the mirror's file, is the
	// like-for-like comparison with the walk's dry run (neither writes);
	// the real sweep then also marks, moves and deletes what both found.
	mirror.Close()
	mirror = nil
	planPath := path + ".plan"
	if err := copyFile(path, planPath); err != nil {
		return nil, err
	}
	defer os.Remove(planPath)
	if mirror, err = mstore.OpenMirror(ctx, path); err != nil {
		return nil, err
	}
	pstore, err := open()
	if err != nil {
		return nil, err
	}
	pmirror, err := pstore.OpenMirror(ctx, planPath)
	if err != nil {
		pstore.Close()
		return nil, err
	}
	res.plan, err = sweepWith(pstore.WithMirror(pmirror), true)
	pmirror.Close()
	pstore.Close()
	if err != nil {
		return nil, fmt.Errorf("the steady sweep's dry run: %w", err)
	}
	if !slices.Equal(res.plan.deleted, res.walk.deleted) {
		return res, fmt.Errorf("the dry run with the mirror plans %d deletes, the full walk %d (first differing: %s)",
			len(res.plan.deleted), len(res.walk.deleted), firstDiff(res.plan.deleted, res.walk.deleted))
	}
	if res.steady, err = sweepWith(mstore.WithMirror(mirror), false); err != nil {
		return nil, err
	}
	if !slices.Equal(res.steady.deleted, res.walk.deleted) {
		return res, fmt.Errorf("the sweep with the mirror deleted %d keys, the full walk finds %d garbage (first differing: %s)",
			len(res.steady.deleted), len(res.walk.deleted), firstDiff(res.steady.deleted, res.walk.deleted))
	}
	if res.idle, err = sweepWith(mstore.WithMirror(mirror), false); err != nil {
		return nil, err
	}
	if len(res.idle.deleted) != 0 {
		return res, fmt.Errorf("a sweep with nothing changed deleted %d keys", len(res.idle.deleted))
	}
	mstore.Close()

	// Restarts: with the file intact, then after a compaction past its
	// revision (one more turn in between). The heap the mirror takes is
	// measured on the first: it reads no object, so no cache grows.
	restart := func(measure bool) (mirrorFig, error) {
		mirror.Close()
		mirror = nil
		var ms runtime.MemStats
		s, err := open()
		if err != nil {
			return mirrorFig{}, err
		}
		defer s.Close()
		m, err := s.OpenMirror(ctx, path)
		if err != nil {
			return mirrorFig{}, err
		}
		mirror = m
		r0 := b.counts()
		t := time.Now()
		_, err = m.Sync(ctx)
		fig := mirrorFig{took: time.Since(t), req: b.counts().sub(r0), stats: m.Stats()}
		if measure && err == nil {
			// The mirror's heap: what the open, synced mirror holds, against
			// the heap once it is closed and dropped (other heap, such as
			// the store's caches or the etcd client's buffers, can shrink
			// between the first reading and the open, and is not the
			// mirror's). Two collections each: bbolt keeps page buffers in
			// a sync.Pool, which the first only moves to its victim cache.
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&ms)
			with := int64(ms.HeapAlloc)
			runtime.KeepAlive(m)
			if err := m.Close(); err != nil {
				return fig, err
			}
			m, mirror = nil, nil
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&ms)
			res.heap = with - int64(ms.HeapAlloc)
			if mirror, err = s.OpenMirror(ctx, path); err != nil {
				return fig, err
			}
		}
		return fig, err
	}
	sr.logf("scale %d: restarts", n)
	if res.restart, err = restart(true); err != nil {
		return nil, err
	}
	if err := scaleTurn(ctx, b, chains[0], 0); err != nil {
		return nil, err
	}
	resp, err := sr.cli.Get(ctx, "\x00")
	if err != nil {
		return nil, err
	}
	if _, err := sr.cli.Compact(ctx, resp.Header.Revision); err != nil {
		return nil, err
	}
	if res.compacted, err = restart(false); err != nil {
		return nil, err
	}
	// The mirror after all this equals a full walk at its revision.
	cstore, err := open()
	if err != nil {
		return nil, err
	}
	defer cstore.Close()
	if err := cstore.WithMirror(mirror).Check(ctx); err != nil {
		return res, fmt.Errorf("the full run's comparison: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	res.file = fi.Size()
	res.rss, res.hwm, res.anon = procMemory()
	res.bucketObjects = b.mem.Len()
	res.bucketBytes = b.createdBytes.Load()
	res.bucketBytes = b.createdBytes.Load()
	return res, nil
}

// firstDiff returns the first key in one sorted list and not the other.
func firstDiff(a, b []string) string {
	for i := 0; i < len(a) || i < len(b); i++ {
		switch {
		case i >= len(a):
			return b[i]
		case i >= len(b) || a[i] != b[i]:
			return a[i]
		}
	}
	return "(none)"
}

// heapPeak starts sampling the heap's objects, live and not yet collected
// (runtime/metrics, which stops nothing), every 10 ms from a level taken
// after a collection; the function it returns stops and returns the peak
// above that level.
func heapPeak() func() int64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() int64 {
		metrics.Read(sample)
		return int64(sample[0].Value.Uint64())
	}
	base := read()
	var peak atomic.Int64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if v := read() - base; v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		<-stopped
		return peak.Load()
	}
}

// procMemory returns the process's resident set, its peak and the resident
// set's anonymous part (VmRSS, VmHWM and RssAnon of /proc/self/status: the
// rest is files mapped, such as the mirror's bbolt file, which the kernel
// can drop and read again), or zeros where that file does not exist.
func procMemory() (rss, hwm, anon int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss = v << 10
		case "VmHWM:":
			hwm = v << 10
		case "RssAnon:":
			anon = v << 10
		}
	}
	return rss, hwm, anon
}

// lost is the denominator of the read target: the objects created since the
// last sweep and those that lost their last reference (the full walk's
// garbage).
func (r *scaleResult) lost() int64 { return int64(len(r.walk.deleted)) }

// readRatio is the steady sweep's object reads over created + lost.
func (r *scaleResult) readRatio() float64 {
	return float64(r.steady.req.reads()) / float64(max(1, r.created+r.lost()))
}

// etcdRatio is the steady sweep's etcd bytes read over the bytes written.
func (r *scaleResult) etcdRatio() float64 {
	return float64(r.steady.etcdRead) / float64(max(1, r.written))
}

// timeRatio is the steady sweep's time over the full walk's, dry run
// against dry run: neither writes, so both do only the work that tells
// garbage from live keys (the writes that follow are the same for both).
func (r *scaleResult) timeRatio() float64 {
	return float64(r.plan.took) / float64(max(1, r.walk.took))
}

// copyFile copies the file at from to to.
func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// copyCold copies the file at from to to, writes the copy to disk and drops
// it from the kernel's page cache, so that a process that maps the copy
// starts as a sweeper starting in a new pod does: with none of its file's
// pages cached. Copied hot, the copy's pages would be cached in the large
// folios that one large write (or a sequential read) makes, and Linux maps
// a whole folio (up to 2 MiB) at a fault on any of its pages: at 10^5 kept
// checkpoints that alone raised the sweeper process's peak resident memory
// from 167 to 553 MiB, all of it clean, shared page cache, while a file
// that bbolt writes a page at a time is mapped 64 KiB a fault.
func copyCold(from, to string) error {
	if err := copyFile(from, to); err != nil {
		return err
	}
	f, err := os.Open(to)
	if err != nil {
		return err
	}
	err = f.Sync()
	if err == nil {
		err = dropPageCache(f)
	}
	return errors.Join(err, f.Close())
}

// table prints the figures of each run, one line each.
func scaleTable(rs []*scaleResult) string {
	var b strings.Builder
	fmt.Fprintln(&b, "| kept | write | first sweep (cold build): time, reads | churn (turns+prunes, forks, threads deleted) | created + lost | steady sweep: time, reads, LIST, etcd read / written | its dry run: time (÷ walk's) | full walk (dry run): time, reads, LIST | nothing changed: time, requests | restart: time, reads, ranges | compacted: reads, ranges | mirror heap / ckpt | cold build's heap peak | file / ckpt | RSS (peak), of which anonymous | sweeper process: sync, RSS (peak), anonymous, heap |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s | %s, %s | %d, %d, %d | %s + %s | %s, %s (%.2f×), %s, %s / %s (%.2f×) | %s (%.1f%%) | %s, %s, %s | %s, %s | %s, %s, %d | %s, %d | %s | %s | %s | %s (%s), %s | %s, %s (%s), %s, %s |\n",
			fmtInt(int64(r.kept)), fmtDur(r.writeTook), fmtDur(r.cold.took), fmtInt(r.cold.req.reads()), r.appended, r.forks, r.deletedThreads,
			fmtInt(r.created), fmtInt(r.lost()),
			fmtDur(r.steady.took), fmtInt(r.steady.req.reads()), r.readRatio(), fmtInt(int64(r.steady.lists)), fmtBytes(r.steady.etcdRead), fmtBytes(r.written), r.etcdRatio(),
			fmtDur(r.plan.took), 100*r.timeRatio(),
			fmtDur(r.walk.took), fmtInt(r.walk.req.reads()), fmtInt(int64(r.walk.lists)),
			fmtDur(r.idle.took), fmtInt(r.idle.req.total()),
			fmtDur(r.restart.took), fmtInt(r.restart.req.reads()), r.restart.stats.Relists,
			fmtInt(r.compacted.req.reads()), r.compacted.stats.Relists,
			fmtBytes(r.heap/int64(r.kept)), fmtLarge(r.buildHeap), fmtBytes(r.file/int64(r.kept)), fmtBytes(r.rss), fmtBytes(r.hwm), fmtBytes(r.anon),
			fmtDur(r.proc.Took), fmtBytes(r.proc.RSS), fmtBytes(r.proc.HWM), fmtBytes(r.proc.Anon), fmtBytes(r.proc.Heap))
	}
	return b.String()
}

// fitLine fits y = a + b·x by least squares; with one point it returns the
// line through the origin.
func fitLine(xs, ys []float64) (a, b float64) {
	if len(xs) == 1 {
		return 0, ys[0] / xs[0]
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	n := float64(len(xs))
	b = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	return (sy - b*sx) / n, b
}

// scaleFit is the extrapolation to 10^6 kept checkpoints of the fits over the
// runs.
type scaleFit struct {
	heap, file, steady, walk float64 // at 10^6: bytes, bytes, seconds, seconds
	over                     string  // the sizes fitted
}

func fitScale(rs []*scaleResult) scaleFit {
	var xs, heap, file, steady, walk []float64 // steady: its dry run, as the walk
	var over []string
	for _, r := range rs {
		xs = append(xs, float64(r.kept))
		heap = append(heap, float64(r.heap))
		file = append(file, float64(r.file))
		steady = append(steady, r.plan.took.Seconds())
		walk = append(walk, r.walk.took.Seconds())
		over = append(over, fmtInt(int64(r.kept)))
	}
	at := func(ys []float64) float64 {
		a, b := fitLine(xs, ys)
		return a + b*1e6
	}
	return scaleFit{heap: at(heap), file: at(file), steady: at(steady), walk: at(walk), over: strings.Join(over, ", ")}
}
