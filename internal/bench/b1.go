package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cairnstore/cairn"
)

// b1Prefix is where B1 keeps its store; the bare transactions write beside
// it.
const (
	b1Prefix     = "/cairn-bench/b1/"
	b1BarePrefix = "/cairn-bench/b1-bare/"
	// b1ShapePrefix has the length of b1Prefix, so that the shape replay's
	// keys are as long as the store's.
	b1ShapePrefix = "/cairn-bench/b1s/"
	b1Warmup      = 20
	b1ConvBytes   = 1024
)

// b1Builder returns the checkpoints of B1's single thread: B1Entries file
// entries, of which one in twenty changes from one checkpoint to the next,
// and a conversation of about 1 KiB.
func (r *runner) b1Builder(ch *chain) func() cairn.AppendInput {
	changing := max(1, r.cfg.B1Entries/20)
	t := newTree(fileKeys(ch.thread+"-stable", r.cfg.B1Entries-changing), changing, conversation(b1ConvBytes))
	return func() cairn.AppendInput { return t.nextInput(ch) }
}

// b1ClaimingBuilder is b1Builder for a capture beside a sweeper: before it
// returns each append, it claims the keys that are new in it (untimed, as a
// capture's upload is), so that the append also ends those claims, in its one
// transaction.
func (r *runner) b1ClaimingBuilder(ctx context.Context, ch *chain) (func() cairn.AppendInput, error) {
	claimer, ok := ch.store.(cairn.BlobClaimer)
	if !ok {
		return nil, fmt.Errorf("the store does not implement cairn.BlobClaimer")
	}
	build := r.b1Builder(ch)
	fixed := r.cfg.B1Entries - max(1, r.cfg.B1Entries/20)
	var claimErr error
	return func() cairn.AppendInput {
		in := build()
		keys := make([]string, 0, len(in.Checkpoint.Files)-fixed)
		for _, e := range in.Checkpoint.Files[fixed:] {
			keys = append(keys, e.BlobKey)
		}
		if _, err := claimer.ClaimBlobs(ctx, in.Writer, keys); err != nil && claimErr == nil {
			claimErr = err
			// The append then fails too: a capture without its claims
			// must not be measured as one with them.
			in.Writer.OwnerToken = "claim failed: " + err.Error()
		}
		return in
	}, nil
}

// timedAppends makes n appends one after the other and returns the latency
// of each, the write transactions beyond the first that each needed, and the
// CPU time the process spent during the appends.
func timedAppends(ctx context.Context, ch *chain, build func() cairn.AppendInput, n int) ([]time.Duration, int, time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	retries := 0
	var cpu time.Duration
	for range n {
		in := build()
		actx, t := withTally(ctx, false)
		c0, start := cpuTime(), time.Now()
		err := ch.append(actx, in)
		d := time.Since(start)
		cpu += cpuTime() - c0
		if err != nil {
			return nil, 0, 0, err
		}
		retries += max(0, t.writes()-1)
		lat = append(lat, d)
	}
	return lat, retries, cpu, nil
}

// b1 measures the latency of appending one checkpoint of B1Entries entries
// with one writer, against a bare transaction of the same request size with
// one comparison.
func (r *runner) b1(ctx context.Context) ([]Row, error) {
	cfg := r.cfg
	cli, stop, err := r.etcd(ctx, "b1")
	if err != nil {
		return nil, err
	}
	defer stop()
	store, err := newEtcdStore(cli, b1Prefix)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	ch, err := newChain(ctx, store, "b1-thread")
	if err != nil {
		return nil, err
	}
	// Each append first claims the keys that are new in it, as a capture
	// does beside a running sweeper (untimed, like the upload).
	build, err := r.b1ClaimingBuilder(ctx, ch)
	if err != nil {
		return nil, err
	}

	// Warm up, and measure what an append sends.
	wctx, t := withTally(ctx, true)
	t.keep = true
	for range b1Warmup {
		if err := ch.append(wctx, build()); err != nil {
			return nil, err
		}
	}
	t.reset()
	const probe = 10
	for range probe {
		if err := ch.append(wctx, build()); err != nil {
			return nil, err
		}
	}
	calls := t.snapshot()
	size, txns := writeTxnSize(calls)
	bare, err := newBareTxn(ctx, cli, b1BarePrefix, size)
	if err != nil {
		return nil, err
	}
	txn := lastWriteTxn(calls)
	if txn == nil {
		return nil, fmt.Errorf("the append sent no write transaction")
	}
	shape := newShapeTxn(cli, b1ShapePrefix, b1Prefix, txn)
	for range b1Warmup {
		if err := bare.do(ctx); err != nil {
			return nil, err
		}
		if err := shape.do(ctx); err != nil {
			return nil, err
		}
	}

	cairnLat := make([][]time.Duration, cfg.AppendRounds)
	bareLat := make([][]time.Duration, cfg.AppendRounds)
	shapeLat := make([][]time.Duration, cfg.AppendRounds)
	retries := 0
	// The CPU time per operation of each round's appends and bare Txns.
	cairnCPU := make([]time.Duration, cfg.AppendRounds)
	bareCPU := make([]time.Duration, cfg.AppendRounds)
	timed := func(n int, do func(context.Context) error) ([]time.Duration, time.Duration, error) {
		lat := make([]time.Duration, 0, n)
		c0 := cpuTime()
		for range n {
			start := time.Now()
			if err := do(ctx); err != nil {
				return nil, 0, err
			}
			lat = append(lat, time.Since(start))
		}
		return lat, (cpuTime() - c0) / time.Duration(n), nil
	}
	err = r.alternate("B1", cfg.AppendRounds, func() error { return tidy(ctx, cli, []*chain{ch}, b1BarePrefix, b1ShapePrefix) }, func(round int) error {
		lat, n, cpu, err := timedAppends(ctx, ch, build, cfg.B1Appends)
		cairnLat[round], retries, cairnCPU[round] = lat, retries+n, cpu/time.Duration(cfg.B1Appends)
		return err
	}, func(round int) (err error) {
		bareLat[round], bareCPU[round], err = timed(cfg.B1Appends, bare.do)
		return err
	}, func(round int) (err error) {
		shapeLat[round], _, err = timed(cfg.B1Appends, shape.do)
		return err
	})
	if err != nil {
		return nil, err
	}
	p50, p99 := roundRatios(cairnLat, bareLat)
	all := func(rs [][]time.Duration) []time.Duration {
		var out []time.Duration
		for _, r := range rs {
			out = append(out, r...)
		}
		return out
	}
	ca, ba, sa := all(cairnLat), all(bareLat), all(shapeLat)
	s50, _ := roundRatios(shapeLat, bareLat)
	cpu := cpuRow("B1", cairnCPU, bareCPU)
	row := Row{
		ID:       "B1",
		Workload: fmt.Sprintf("append of a %d-entry checkpoint that ends the claims of its %d new keys, one writer (latency)", cfg.B1Entries, max(1, cfg.B1Entries/20)),
		Cairn:    fmt.Sprintf("p50 %s, p99 %s", fmtDur(quantile(ca, .5)), fmtDur(quantile(ca, .99))),
		Baseline: fmt.Sprintf("p50 %s, p99 %s", fmtDur(quantile(ba, .5)), fmtDur(quantile(ba, .99))),
		Ratio:    p50,
		Target:   "p50 ratio ≤ 1.3",
		Result:   verdict(p50 <= 1.3),
		Notes: []string{
			fmt.Sprintf("%d appends per side and round; the append sends %d request(s), %d write Txn of %s (%d bytes; the bare Txn: %d bytes, one compare, one put); %d retries; median p99 ratio %s.",
				cfg.B1Appends, len(calls)/probe, txns/probe, fmtBytes(int64(size)), size, bare.size, retries, fmtRatio(p99)),
			fmt.Sprintf("bare etcd sending the append's own shape (%d compares, %d puts of the same sizes, to new keys): p50 %s, p99 %s, median p50 ratio to the bare Txn %s; the rest of the gap is the store's work on the client.",
				len(shape.cmps), len(shape.puts), fmtDur(quantile(sa, .5)), fmtDur(quantile(sa, .99)), fmtRatio(s50)),
			fmt.Sprintf("CPU time of the benchmark process (the client side) per operation, medians over the rounds: append %s, bare Txn %s.", fmtDur(medianDur(cairnCPU)), fmtDur(medianDur(bareCPU))),
		},
	}
	return []Row{row, cpu}, nil
}

// cpuRow is the client-CPU row of B1 or B2 (id): the CPU time the benchmark
// process spent per append against per bare Txn of the same request size,
// round by round (cairn[i] and bare[i] are round i's, per operation). The
// client shares the machine's cores with etcd, so what it spends is taken
// from etcd; CPU time, unlike latency, does not move with the machine's load.
// As in the other rows, the ratio is the median of the rounds' ratios, so
// that one round disturbed by something else on the machine (a collection
// that happens to fall in it) does not decide it.
func cpuRow(id string, cairn, bare []time.Duration) Row {
	ratios := make([]float64, len(cairn))
	for i := range cairn {
		ratios[i] = float64(cairn[i]) / float64(bare[i])
	}
	ratio := median(ratios)
	return Row{
		ID:       id + "-CPU",
		Workload: fmt.Sprintf("client CPU time of %s's appends (per operation)", id),
		Cairn:    fmtDur(medianDur(cairn)) + " per append",
		Baseline: fmtDur(medianDur(bare)) + " per bare Txn",
		Ratio:    ratio,
		Target:   "ratio ≤ 1.3",
		Result:   verdict(ratio <= 1.3),
		Notes: []string{fmt.Sprintf("getrusage of the benchmark process (user + system) around each round's timed appends and its bare Txns, per operation (B2's windows start after a collection, on both sides); the ratio is the median of the rounds' ratios (each round's: %s); etcd runs in a process of its own.",
			fmtRatios(ratios))},
	}
}

// medianDur is the median of ds.
func medianDur(ds []time.Duration) time.Duration {
	fs := make([]float64, len(ds))
	for i, d := range ds {
		fs[i] = float64(d)
	}
	return time.Duration(median(fs))
}

// fmtRatios lists ratios as the table writes them.
func fmtRatios(rs []float64) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmtRatio(r)
	}
	return strings.Join(out, ", ")
}

// roundRatios returns the median over the rounds of cairn's p50 over the
// baseline's p50, and the same for p99.
func roundRatios(cairnLat, bareLat [][]time.Duration) (p50, p99 float64) {
	var r50, r99 []float64
	for i := range cairnLat {
		r50 = append(r50, float64(quantile(cairnLat[i], .5))/float64(quantile(bareLat[i], .5)))
		r99 = append(r99, float64(quantile(cairnLat[i], .99))/float64(quantile(bareLat[i], .99)))
	}
	return median(r50), median(r99)
}
