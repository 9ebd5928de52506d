package bench

import (
	"context"
	"fmt"
	"math"
	"time"
)

// b6 runs B1's and B2's workloads on cairn.MemoryStore, the reference
// implementation in memory: the floor under any store, without I/O.
func (r *runner) b6(ctx context.Context) ([]Row, error) {
	cfg := r.cfg
	store, err := newMemoryStore()
	if err != nil {
		return nil, err
	}
	ch, err := newChain(ctx, store, "b6-thread")
	if err != nil {
		return nil, err
	}
	build := r.b1Builder(ch)
	if _, _, _, err := timedAppends(ctx, ch, build, b1Warmup); err != nil {
		return nil, err
	}
	var lat []time.Duration
	w, err := r.newWriters(ctx, store, "b6")
	if err != nil {
		return nil, err
	}
	if _, _, err := w.run(ctx, w.keys(1)); err != nil {
		return nil, err
	}
	var rates []float64
	n := float64(cfg.B2Writers * cfg.B2Appends)
	err = r.alternate("B6", cfg.Rounds, nil, func(int) error {
		l, _, _, err := timedAppends(ctx, ch, build, cfg.B1Appends)
		if err != nil {
			return err
		}
		lat = append(lat, l...)
		d, _, err := w.run(ctx, w.keys(cfg.B2Appends))
		rates = append(rates, n/d.Seconds())
		return err
	})
	if err != nil {
		return nil, err
	}
	return []Row{{
		ID:       "B6",
		Workload: "B1 and B2 on cairn.MemoryStore",
		Cairn:    fmt.Sprintf("B1: p50 %s, p99 %s; B2: %s appends/s", fmtDur(quantile(lat, .5)), fmtDur(quantile(lat, .99)), fmtRate(median(rates))),
		Ratio:    math.NaN(),
		Target:   "reported, as the floor",
		Result:   "reported",
		Notes: []string{
			"the memory store validates, clones and indexes each checkpoint under one mutex; the gap between it and the bare etcd figures of B1 and B2 is what any store pays for durability.",
		},
	}}, nil
}
