package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cairnstore/cairn"
)

const (
	b2Prefix     = "/cairn-bench/b2/"
	b2BarePrefix = "/cairn-bench/b2-bare/"
	// b2ShapePrefix has the length of b2Prefix.
	b2ShapePrefix = "/cairn-bench/b2s/"
)

// writers are B2's writers: one thread each, with checkpoints whose blob
// keys are B2Shared shared by every checkpoint of every writer and the rest
// new to each checkpoint.
type writers struct {
	chains []*chain
	trees  []*tree
}

func (r *runner) newWriters(ctx context.Context, store cairn.Store, tag string) (*writers, error) {
	cfg := r.cfg
	nShared := int(float64(cfg.B1Entries)*cfg.B2Shared + 0.5)
	shared := fileKeys(tag+"-shared", nShared)
	conv := conversation(b1ConvBytes)
	w := &writers{}
	for i := range cfg.B2Writers {
		ch, err := newChain(ctx, store, fmt.Sprintf("%s-thread-%02d", tag, i))
		if err != nil {
			return nil, err
		}
		w.chains = append(w.chains, ch)
		w.trees = append(w.trees, newTree(shared, cfg.B1Entries-nShared, conv))
	}
	return w, nil
}

// keys computes, before a round, the changing keys of the next n appends of
// every writer, so that the round itself only appends.
func (w *writers) keys(n int) [][][]string {
	out := make([][][]string, len(w.chains))
	for i, ch := range w.chains {
		for a := range n {
			out[i] = append(out[i], w.trees[i].changingKeys(ch.thread, ch.n+a))
		}
	}
	return out
}

// concurrently runs fn(i) for every i < n, each in a goroutine of its own,
// all released at once, and returns the time until the last one ended and
// the first error.
func concurrently(n int, fn func(i int) error) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, n)
	ready, start := sync.WaitGroup{}, make(chan struct{})
	ready.Add(n)
	for i := range n {
		wg.Go(func() {
			ready.Done()
			<-start
			errs[i] = fn(i)
		})
	}
	ready.Wait()
	began := time.Now()
	close(start)
	wg.Wait()
	return time.Since(began), errors.Join(errs...)
}

// run makes the appends whose keys are given, each writer in its own
// goroutine, and returns the elapsed time and the write transactions beyond
// one per append.
func (w *writers) run(ctx context.Context, keys [][][]string) (time.Duration, int, error) {
	retries := make([]int, len(w.chains))
	d, err := concurrently(len(w.chains), func(i int) error {
		ch, t := w.chains[i], w.trees[i]
		for _, k := range keys[i] {
			actx, tl := withTally(ctx, false)
			if err := ch.append(actx, t.input(ch, k)); err != nil {
				return err
			}
			retries[i] += max(0, tl.writes()-1)
		}
		return nil
	})
	total := 0
	for _, n := range retries {
		total += n
	}
	return d, total, err
}

// b2 measures the throughput of B2Writers concurrent writers against as
// many goroutines sending bare transactions of the same request size.
func (r *runner) b2(ctx context.Context) ([]Row, error) {
	cfg := r.cfg
	cli, stop, err := r.etcd(ctx, "b2")
	if err != nil {
		return nil, err
	}
	defer stop()
	store, err := newEtcdStore(cli, b2Prefix)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	w, err := r.newWriters(ctx, store, "b2")
	if err != nil {
		return nil, err
	}
	// Warm up: the first append of a thread also reads its record.
	if _, _, err := w.run(ctx, w.keys(1)); err != nil {
		return nil, err
	}
	wctx, t := withTally(ctx, true)
	t.keep = true
	if _, _, err := w.run(wctx, w.keys(1)); err != nil {
		return nil, err
	}
	calls := t.snapshot()
	size, _ := writeTxnSize(calls)
	bare, err := newBareTxn(ctx, cli, b2BarePrefix, size)
	if err != nil {
		return nil, err
	}
	txn := lastWriteTxn(calls)
	if txn == nil {
		return nil, fmt.Errorf("the append sent no write transaction")
	}
	shape := newShapeTxn(cli, b2ShapePrefix, b2Prefix, txn)
	bareRun := func(do func(context.Context) error) (time.Duration, error) {
		return concurrently(cfg.B2Writers, func(int) error {
			for range cfg.B2Appends {
				if err := do(ctx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for _, do := range []func(context.Context) error{bare.do, shape.do} {
		if _, err := bareRun(do); err != nil {
			return nil, err
		}
	}

	n := float64(cfg.B2Writers * cfg.B2Appends)
	cairnRate := make([]float64, cfg.AppendRounds)
	bareRate := make([]float64, cfg.AppendRounds)
	shapeRate := make([]float64, cfg.AppendRounds)
	retries := 0
	cairnCPU := make([]time.Duration, cfg.AppendRounds)
	bareCPU := make([]time.Duration, cfg.AppendRounds)
	perOp := func(d time.Duration) time.Duration { return d / time.Duration(n) }
	err = r.alternate("B2", cfg.AppendRounds, func() error { return tidy(ctx, cli, w.chains, b2BarePrefix, b2ShapePrefix) }, func(round int) error {
		keys := w.keys(cfg.B2Appends)
		c0 := settledCPUTime()
		d, k, err := w.run(ctx, keys)
		cairnCPU[round] = perOp(cpuTime() - c0)
		cairnRate[round], retries = n/d.Seconds(), retries+k
		return err
	}, func(round int) error {
		c0 := settledCPUTime()
		d, err := bareRun(bare.do)
		bareCPU[round] = perOp(cpuTime() - c0)
		bareRate[round] = n / d.Seconds()
		return err
	}, func(round int) error {
		d, err := bareRun(shape.do)
		shapeRate[round] = n / d.Seconds()
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := range cairnRate {
		r.logf("B2: round %d: cairn %.0f appends/s, bare %.0f Txn/s, shape %.0f Txn/s; CPU per operation: cairn %s, bare %s",
			i+1, cairnRate[i], bareRate[i], shapeRate[i], fmtDur(cairnCPU[i]), fmtDur(bareCPU[i]))
	}
	ratio := median(divide(cairnRate, bareRate))
	return []Row{{
		ID:       "B2",
		Workload: fmt.Sprintf("%d writers on %d threads, checkpoints sharing %.0f%% of their blob keys (throughput)", cfg.B2Writers, cfg.B2Writers, cfg.B2Shared*100),
		Cairn:    fmt.Sprintf("%s appends/s; %d retries", fmtRate(median(cairnRate)), retries),
		Baseline: fmt.Sprintf("%s Txn/s", fmtRate(median(bareRate))),
		Ratio:    ratio,
		Target:   "ratio ≥ 0.75, 0 retries",
		Result:   verdict(ratio >= 0.75 && retries == 0),
		Notes: []string{
			fmt.Sprintf("each writer makes %d appends of %d entries per round in a goroutine of its own; the append's write Txn is %d bytes (bare Txn %d bytes, one compare, one put, at the same concurrency); a retry is a second write Txn within one append, counted from outside the store by a gRPC interceptor; figures are medians over the rounds.",
				cfg.B2Appends, cfg.B1Entries, size, bare.size),
			fmt.Sprintf("bare etcd sending the append's own shape (%d compares, %d puts of the same sizes) at the same concurrency: %s Txn/s, median ratio to the bare Txn %s; the rest of the gap is the store's work on the client, which shares the 2 cores with etcd.",
				len(shape.cmps), len(shape.puts), fmtRate(median(shapeRate)), fmtRatio(median(divide(shapeRate, bareRate)))),
			fmt.Sprintf("CPU time of the benchmark process (the client side) per operation, medians over the rounds: append %s, bare Txn %s.", fmtDur(medianDur(cairnCPU)), fmtDur(medianDur(bareCPU))),
		},
	}, cpuRow("B2", cairnCPU, bareCPU)}, nil
}

// divide returns a[i]/b[i] for each i.
func divide(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}
