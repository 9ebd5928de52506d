package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/cairnstore/cairn"
)

const bcPrefix = "/cairn-bench/bc/"

// bc measures the claims of a capture of B3Entries new files under the
// online sweep protocol: ClaimBlobs of that many distinct keys, then the
// append that ends them, against nothing (the cost is reported, with the
// requests it sends).
func (r *runner) bc(ctx context.Context) ([]Row, error) {
	cfg := r.cfg
	cli, stop, err := r.etcd(ctx, "bc")
	if err != nil {
		return nil, err
	}
	defer stop()
	store, err := newEtcdStore(cli, bcPrefix)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	claimer, ok := any(store).(cairn.BlobClaimer)
	if !ok {
		return nil, fmt.Errorf("the etcd store does not implement cairn.BlobClaimer")
	}
	n := cfg.B3Entries
	var claimT, endT []time.Duration
	var claimCalls, endCalls []call
	var claimCPU time.Duration
	for round := range cfg.Rounds {
		ch, err := newChain(ctx, store, fmt.Sprintf("bc-thread-%d", round))
		if err != nil {
			return nil, err
		}
		keys := fileKeys(fmt.Sprintf("bc-%d", round), n)
		tctx, t := withTally(ctx, true)
		c0, start := cpuTime(), time.Now()
		busy, err := claimer.ClaimBlobs(tctx, ch.writer, keys)
		claimT = append(claimT, time.Since(start))
		claimCPU += cpuTime() - c0
		if err != nil {
			return nil, err
		}
		if len(busy) != 0 {
			return nil, fmt.Errorf("%d keys were busy in an empty store", len(busy))
		}
		claimCalls = t.snapshot()
		// The append that references them all ends the claims.
		in := ch.next(keys, nil, conversation(b1ConvBytes))
		ectx, et := withTally(ctx, true)
		start = time.Now()
		if err := ch.append(ectx, in); err != nil {
			return nil, err
		}
		endT = append(endT, time.Since(start))
		endCalls = et.snapshot()
		r.logf("BC: round %d of %d done", round+1, cfg.Rounds)
	}
	size, txns := 0, 0
	for _, c := range claimCalls {
		if c.write && c.method == "Txn" {
			size += c.req
			txns++
		}
	}
	_, endTxns := writeTxnSize(endCalls)
	rounds := time.Duration(cfg.Rounds)
	return []Row{{
		ID:       "BC",
		Workload: fmt.Sprintf("claims of a %s-file capture (online sweep protocol), default limits", fmtInt(int64(n))),
		Cairn:    fmt.Sprintf("claim %s; append that ends them %s", fmtDur(medianDuration(claimT)), fmtDur(medianDuration(endT))),
		Baseline: "—",
		Ratio:    math.NaN(),
		Target:   "reported",
		Result:   "reported",
		Notes: []string{
			fmt.Sprintf("ClaimBlobs of %s new keys sends %d write Txns (%s in all, at most 60 keys and 128 operations each, up to 4 at once); the append that references them, a staged 20,000-entry append, sends %d write Txns in all, the claims' deletes included; CPU time of the benchmark process per claim: %s; medians over %d rounds.",
				fmtInt(int64(n)), txns, fmtBytes(int64(size)), endTxns, fmtDur(claimCPU/rounds), cfg.Rounds),
		},
	}}, nil
}
