package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
)

const (
	b3Prefix        = "/cairn-bench/b3/"
	b3BarePrefix    = "/cairn-bench/b3-bare/"
	b3FixturePrefix = "/cairn-bench/b3-read/"
	b3ConvBytes     = 64 << 10
)

// replayOp is one request of the baseline of B3: a put whose request has the
// size of one the store sent, or a read of a fixture whose response has the
// size of one the store received.
type replayOp struct {
	put   bool
	value string // put: the value
	key   string // read: the fixture's prefix
	want  int    // the size copied from the store's request or response
	got   int    // the size the baseline's request or response has
}

// replay is B3's baseline: the store's requests of one append and one get,
// replaced one for one by raw puts and raw prefix reads of the same sizes.
type replay struct {
	cli    *clientv3.Client
	writes []replayOp
	reads  []replayOp
	n      int
}

// newReplay plans and prepares the baseline of the calls of one append and
// one get.
func newReplay(ctx context.Context, cli *clientv3.Client, appendCalls, getCalls []call) (*replay, error) {
	rp := &replay{cli: cli}
	fixture := 0
	plan := func(calls []call) ([]replayOp, error) {
		var ops []replayOp
		for _, c := range calls {
			if c.write {
				ops = append(ops, replayOp{put: true, want: c.req, value: strings.Repeat("c", putValueLen(rp.key(0, len(ops)), c.req))})
				continue
			}
			fixture++
			op := replayOp{key: fmt.Sprintf("%s%04d/", b3FixturePrefix, fixture), want: c.resp}
			if err := writeFixture(ctx, cli, op.key, c.resp); err != nil {
				return nil, err
			}
			ops = append(ops, op)
		}
		return ops, nil
	}
	var err error
	if rp.writes, err = plan(appendCalls); err != nil {
		return nil, err
	}
	if rp.reads, err = plan(getCalls); err != nil {
		return nil, err
	}
	// Measure what the baseline sends and receives.
	tctx, t := withTally(ctx, true)
	if _, _, err := rp.iteration(tctx); err != nil {
		return nil, err
	}
	calls := t.snapshot()
	for i := range rp.writes {
		rp.writes[i].got = calls[i].req
	}
	for i := range rp.reads {
		rp.reads[i].got = calls[len(rp.writes)+i].resp
	}
	return rp, nil
}

func (rp *replay) key(iteration, i int) string {
	return fmt.Sprintf("%s%08d/%04d", b3BarePrefix, iteration, i)
}

// putValueLen returns the value length that makes a plain put of key a
// request of size bytes (or one byte more, where a length prefix grows).
func putValueLen(key string, size int) int {
	n := size
	for range 8 {
		got := proto.Size(&etcdserverpb.PutRequest{Key: []byte(key), Value: make([]byte, n)})
		if got == size || got == size+1 && n > 0 {
			break
		}
		n = max(0, n+size-got)
	}
	return n
}

// writeFixture stores raw chunks under prefix whose prefix read answers with
// about size bytes.
func writeFixture(ctx context.Context, cli *clientv3.Client, prefix string, size int) error {
	const perKey = 30 // key and revision fields of one returned pair, roughly
	chunks := max(1, (size+etcdstore.ChunkSize-1)/etcdstore.ChunkSize)
	total := max(0, size-32-chunks*(len(prefix)+4+perKey))
	for i := range chunks {
		n := total / chunks
		if i == chunks-1 {
			n = total - n*(chunks-1)
		}
		if _, err := cli.Put(ctx, fmt.Sprintf("%s%04d", prefix, i), strings.Repeat("r", n)); err != nil {
			return err
		}
	}
	return nil
}

// iteration sends the baseline of one append and one get and times each.
func (rp *replay) iteration(ctx context.Context) (put, get time.Duration, err error) {
	rp.n++
	start := time.Now()
	for i, op := range rp.writes {
		if _, err := rp.cli.Put(ctx, rp.key(rp.n, i), op.value); err != nil {
			return 0, 0, err
		}
	}
	put = time.Since(start)
	start = time.Now()
	for _, op := range rp.reads {
		if _, err := rp.cli.Get(ctx, op.key, clientv3.WithPrefix()); err != nil {
			return 0, 0, err
		}
	}
	return put, time.Since(start), nil
}

func sizes(ops []replayOp) (want, got int) {
	for _, o := range ops {
		want += o.want
		got += o.got
	}
	return want, got
}

// b3 measures an append and a get of a checkpoint of B3Entries entries on
// default limits against raw puts and reads of the same bytes in the same
// number of requests.
func (r *runner) b3(ctx context.Context) ([]Row, error) {
	cfg := r.cfg
	cli, stop, err := r.etcd(ctx, "b3")
	if err != nil {
		return nil, err
	}
	defer stop()
	store, err := newEtcdStore(cli, b3Prefix)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	ch, err := newChain(ctx, store, "b3-thread")
	if err != nil {
		return nil, err
	}
	changing := max(1, cfg.B3Entries/20)
	t := newTree(fileKeys(ch.thread+"-stable", cfg.B3Entries-changing), changing, conversation(b3ConvBytes))
	build := func() cairn.AppendInput { return t.nextInput(ch) }
	pair := func(actx, gctx context.Context, in cairn.AppendInput) (time.Duration, time.Duration, error) {
		start := time.Now()
		if err := ch.append(actx, in); err != nil {
			return 0, 0, err
		}
		a := time.Since(start)
		start = time.Now()
		got, err := store.Get(gctx, in.Checkpoint.ID)
		g := time.Since(start)
		if err != nil {
			return 0, 0, err
		}
		if got == nil || len(got.Files) != cfg.B3Entries {
			return 0, 0, fmt.Errorf("get %q did not return the checkpoint just appended", in.Checkpoint.ID)
		}
		return a, g, nil
	}
	if _, _, err := pair(ctx, ctx, build()); err != nil {
		return nil, err
	}
	actx, at := withTally(ctx, true)
	gctx, gt := withTally(ctx, true)
	if _, _, err := pair(actx, gctx, build()); err != nil {
		return nil, err
	}
	appendCalls, getCalls := at.snapshot(), gt.snapshot()
	rp, err := newReplay(ctx, cli, appendCalls, getCalls)
	if err != nil {
		return nil, err
	}

	type sample struct{ append, get time.Duration }
	var cairnCPU, bareCPU time.Duration
	cairnS := make([][]sample, cfg.Rounds)
	bareS := make([][]sample, cfg.Rounds)
	err = r.alternate("B3", cfg.Rounds, func() error { return tidy(ctx, cli, []*chain{ch}, b3BarePrefix) }, func(round int) error {
		for range cfg.B3Iterations {
			in := build()
			c0 := cpuTime()
			a, g, err := pair(ctx, ctx, in)
			cairnCPU += cpuTime() - c0
			if err != nil {
				return err
			}
			cairnS[round] = append(cairnS[round], sample{a, g})
		}
		return nil
	}, func(round int) error {
		for range cfg.B3Iterations {
			c0 := cpuTime()
			a, g, err := rp.iteration(ctx)
			bareCPU += cpuTime() - c0
			if err != nil {
				return err
			}
			bareS[round] = append(bareS[round], sample{a, g})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var ratios []float64
	var ca, cg, ba, bg, ct, bt []time.Duration
	for round := range cfg.Rounds {
		var c, b []time.Duration
		for _, s := range cairnS[round] {
			c = append(c, s.append+s.get)
			ca, cg = append(ca, s.append), append(cg, s.get)
		}
		for _, s := range bareS[round] {
			b = append(b, s.append+s.get)
			ba, bg = append(ba, s.append), append(bg, s.get)
		}
		ct, bt = append(ct, c...), append(bt, b...)
		ratios = append(ratios, float64(medianDuration(c))/float64(medianDuration(b)))
	}
	ratio := median(ratios)
	wWant, wGot := sizes(rp.writes)
	rWant, rGot := sizes(rp.reads)
	return []Row{{
		ID:       "B3",
		Workload: fmt.Sprintf("append + get of a %s-entry checkpoint, default limits", fmtInt(int64(cfg.B3Entries))),
		Cairn:    fmt.Sprintf("%s (append %s + get %s)", fmtDur(medianDuration(ct)), fmtDur(medianDuration(ca)), fmtDur(medianDuration(cg))),
		Baseline: fmt.Sprintf("%s (put %s + read %s)", fmtDur(medianDuration(bt)), fmtDur(medianDuration(ba)), fmtDur(medianDuration(bg))),
		Ratio:    ratio,
		Target:   "ratio ≤ 2.0",
		Result:   verdict(ratio <= 2.0),
		Notes: []string{
			fmt.Sprintf("the append sends %d requests (%s) carrying %s, the get %d requests (%s) receiving %s; the baseline sends as many raw puts carrying %s and as many raw prefix reads receiving %s; %d pairs per side and round; conversation %s; figures are medians.",
				len(appendCalls), methods(appendCalls), fmtBytes(int64(wWant)), len(getCalls), methods(getCalls), fmtBytes(int64(rWant)),
				fmtBytes(int64(wGot)), fmtBytes(int64(rGot)), cfg.B3Iterations, fmtBytes(b3ConvBytes)),
			fmt.Sprintf("CPU time of the benchmark process (the client side) per append + get: cairn %s, baseline %s.",
				fmtDur(cairnCPU/time.Duration(cfg.Rounds*cfg.B3Iterations)), fmtDur(bareCPU/time.Duration(cfg.Rounds*cfg.B3Iterations))),
		},
	}}, nil
}

// methods summarises calls as "LeaseGrant, 3 Txn, Range".
func methods(calls []call) string {
	var order []string
	count := map[string]int{}
	for _, c := range calls {
		if count[c.method] == 0 {
			order = append(order, c.method)
		}
		count[c.method]++
	}
	var parts []string
	for _, m := range order {
		if count[m] == 1 {
			parts = append(parts, m)
		} else {
			parts = append(parts, fmt.Sprintf("%d %s", count[m], m))
		}
	}
	return strings.Join(parts, ", ")
}
