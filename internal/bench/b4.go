package bench

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

const (
	b4Prefix = "/cairn-bench/b4/"
	// b4PerThread checkpoints make one thread.
	b4PerThread = 10
	// b4Loaders threads are loaded at once.
	b4Loaders = 16
	// b4RawPage is the page size of the raw read of the reference records.
	b4RawPage = 2048
)

// heapSampler records the peak of the heap in use, as runtime.MemStats
// HeapInuse counts it, read from runtime/metrics every millisecond.
type heapSampler struct {
	stop chan struct{}
	done chan struct{}
	peak uint64
}

var heapMetrics = []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}

func heapInUse(s []metrics.Sample) uint64 {
	metrics.Read(s)
	var n uint64
	for _, m := range s {
		n += m.Value.Uint64()
	}
	return n
}

func newSamples() []metrics.Sample {
	s := make([]metrics.Sample, len(heapMetrics))
	for i, n := range heapMetrics {
		s[i].Name = n
	}
	return s
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	s := newSamples()
	h.peak = heapInUse(s)
	go func() {
		defer close(h.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			h.peak = max(h.peak, heapInUse(s))
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

// end stops sampling and returns the peak.
func (h *heapSampler) end() uint64 {
	close(h.stop)
	<-h.done
	return max(h.peak, heapInUse(newSamples()))
}

// b4Load fills the store with B4Checkpoints checkpoints of B4Keys keys in
// threads of b4PerThread: a fifth of each checkpoint's keys are shared by
// every checkpoint, a tenth change from one checkpoint of a thread to the
// next, and the rest are the thread's own. It returns the number of
// references, the sum over the keys of their counts.
func (r *runner) b4Load(ctx context.Context, store cairn.Store, threads, perThread int) (int, error) {
	cfg := r.cfg
	common := fileKeys("b4-common", cfg.B4Keys/5)
	changing := cfg.B4Keys / 10
	own := cfg.B4Keys - len(common) - changing
	conv := conversation(b1ConvBytes)
	next := make(chan int)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range b4Loaders {
		wg.Go(func() {
			for t := range next {
				thread := fmt.Sprintf("b4-thread-%05d", t)
				ch, err := newChain(ctx, store, thread)
				if err == nil {
					t := newTree(append(slices.Clone(common), fileKeys(thread+"-own", own)...), changing, conv)
					for range perThread {
						if err = ch.append(ctx, t.nextInput(ch)); err != nil {
							break
						}
					}
				}
				if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
				}
			}
		})
	}
	for t := range threads {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			break
		}
		next <- t
	}
	close(next)
	wg.Wait()
	return threads * perThread * cfg.B4Keys, firstErr
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// rawRefRead reads every reference record of the store at one revision with
// bare paged range reads, and counts the digests in them: the bytes the walk
// reads, without the walk's work.
func rawRefRead(ctx context.Context, cli *clientv3.Client, layout keys.Layout) (int, error) {
	prefix := layout.Refs()
	start, end := string(prefix), string(keys.PrefixEnd(prefix))
	var rev int64
	refs := 0
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(b4RawPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, start, opts...)
		if err != nil {
			return 0, err
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			if kv.Lease == 0 {
				refs += len(kv.Value) / keys.DigestLen
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return refs, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// b4 measures WalkBlobReferences over about a million references: its rate
// and the peak heap while it runs.
func (r *runner) b4(ctx context.Context) ([]Row, error) {
	cfg := r.cfg
	cli, stop, err := r.etcd(ctx, "b4")
	if err != nil {
		return nil, err
	}
	defer stop()
	store, err := newEtcdStore(cli, b4Prefix)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	threads := cfg.B4Checkpoints / b4PerThread
	began := time.Now()
	want, err := r.b4Load(ctx, store, threads, b4PerThread)
	if err != nil {
		return nil, err
	}
	load := time.Since(began)
	r.logf("B4: loaded %d checkpoints (%d references) in %v", threads*b4PerThread, want, load.Round(time.Millisecond))

	type walkResult struct {
		refs, keys int
		took       time.Duration
		peak, base uint64
	}
	walk := func(list bool) (walkResult, error) {
		var w walkResult
		runtime.GC()
		w.base = heapInUse(newSamples())
		h := startHeapSampler()
		start := time.Now()
		if list {
			all, err := store.ListBlobReferences(ctx)
			if err != nil {
				return w, err
			}
			for _, b := range all {
				w.refs += b.References
				w.keys++
			}
		} else {
			err := store.WalkBlobReferences(ctx, func(b cairn.BlobReference) error {
				w.refs += b.References
				w.keys++
				return nil
			})
			if err != nil {
				return w, err
			}
		}
		w.took = time.Since(start)
		w.peak = h.end()
		if w.refs != want {
			return w, fmt.Errorf("the walk counted %d references, want %d", w.refs, want)
		}
		return w, nil
	}
	var walks []walkResult
	cairnRate := make([]float64, cfg.Rounds)
	rawRate := make([]float64, cfg.Rounds)
	err = r.alternate("B4", cfg.Rounds, nil, func(round int) error {
		w, err := walk(false)
		walks = append(walks, w)
		cairnRate[round] = float64(w.refs) / w.took.Seconds()
		return err
	}, func(round int) error {
		start := time.Now()
		n, err := rawRefRead(ctx, cli, store.Layout())
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("the raw read counted %d references, want %d", n, want)
		}
		rawRate[round] = float64(n) / time.Since(start).Seconds()
		return nil
	})
	if err != nil {
		return nil, err
	}
	list, err := walk(true)
	if err != nil {
		return nil, err
	}
	var peak, base uint64
	for _, w := range walks {
		peak, base = max(peak, w.peak), max(base, w.base)
	}
	rate := median(cairnRate)
	const heapLimit = 256 << 20
	return []Row{{
		ID:       "B4",
		Workload: fmt.Sprintf("WalkBlobReferences over %s references (%s checkpoints × %d keys, shared)", fmtInt(int64(want)), fmtInt(int64(threads*b4PerThread)), cfg.B4Keys),
		Cairn:    fmt.Sprintf("%s refs/s; peak heap %s", fmtRate(rate), fmtBytes(int64(peak))),
		Baseline: fmt.Sprintf("raw paged read of the reference records: %s refs/s", fmtRate(median(rawRate))),
		Ratio:    median(divide(cairnRate, rawRate)),
		Target:   "≥ 1M refs/s, peak heap ≤ 256 MiB",
		Result:   verdict(rate >= 1e6 && peak <= heapLimit),
		Notes: []string{
			fmt.Sprintf("%s distinct keys; %d threads of %d checkpoints, loaded by %d writers at once in %v; a fifth of each checkpoint's keys are shared by all checkpoints, a tenth change from one checkpoint to the next.",
				fmtInt(int64(walks[0].keys)), threads, b4PerThread, b4Loaders, load.Round(100*time.Millisecond)),
			fmt.Sprintf("peak heap: the largest HeapInuse (runtime/metrics /memory/classes/heap/objects + unused) sampled every millisecond during each walk, the benchmark process holding nothing else (etcd runs in its own process; %s in use after the GC before the walk); GOGC at its default.",
				fmtBytes(int64(base))),
			fmt.Sprintf("for comparison, ListBlobReferences (the whole list in memory): %s refs/s, peak heap %s.",
				fmtRate(float64(list.refs)/list.took.Seconds()), fmtBytes(int64(list.peak))),
		},
	}}, nil
}
