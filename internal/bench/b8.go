package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/snapshot"
)

// b8 measures a warm re-capture with the stat cache after 1% of the files
// changed, against a cold capture of the same workspace.
func (r *runner) b8(ctx context.Context) ([]Row, error) {
	e, err := r.snapEnv(ctx, "b8")
	if err != nil {
		return nil, err
	}
	defer e.close()
	cache := filepath.Join(r.tmp, "b8.statcache")
	changed := max(1, len(e.files)/100)
	rng := newRand(8)
	buf := make([]byte, 1<<20)
	var coldT, warmT []time.Duration
	var hashed, uploaded []int
	for round := range r.snapRounds() {
		if err := e.emptyBucket(ctx, cairn.FileBlobPrefix); err != nil {
			return nil, err
		}
		os.Remove(cache)
		opts := &snapshot.Options{StatCache: cache}
		cold, d, _, err := e.capture(ctx, nil, opts)
		if err != nil {
			return nil, err
		}
		coldT = append(coldT, d)
		// The warm capture is appended on the cold one, as snapshot.Save
		// appends on the head.
		parent := &cairn.Checkpoint{Files: cold.Files}
		// 1% of the files, spread over the tree, get new bytes of the same
		// size.
		for i := range changed {
			f := e.files[(i*100+round)%len(e.files)]
			if err := writeRandom(filepath.Join(e.dir, filepath.FromSlash(f.rel)), f.size, rng, buf); err != nil {
				return nil, err
			}
		}
		var m *snapshot.Manifest
		err = r.cairnSide("B8", round, func() error {
			var err error
			m, d, _, err = e.capture(ctx, parent, opts)
			return err
		})
		if err != nil {
			return nil, err
		}
		warmT = append(warmT, d)
		hashed, uploaded = append(hashed, m.Stats.Hashed), append(uploaded, m.Stats.Uploaded)
		r.logf("B8: round %d of %d done", round+1, r.snapRounds())
	}
	ratio := median(ratiosOf(warmT, coldT))
	return []Row{{
		ID:       "B8",
		Workload: fmt.Sprintf("warm re-capture of B7's workspace with %s of %s files changed, with the stat cache", fmtInt(int64(changed)), fmtInt(int64(len(e.files)))),
		Cairn:    fmt.Sprintf("%s (hashed %d, uploaded %d files)", fmtDur(medianDuration(warmT)), hashed[len(hashed)-1], uploaded[len(uploaded)-1]),
		Baseline: fmt.Sprintf("%s (the cold capture)", fmtDur(medianDuration(coldT))),
		Ratio:    ratio,
		Target:   "ratio ≤ 0.1",
		Result:   verdict(ratio <= 0.1),
		Notes: []string{
			"each round empties the bucket, captures cold (writing the stat cache), rewrites 1% of the files with new bytes of the same size, and captures again with the cache, on the cold capture as the parent (as snapshot.Save does on the head): only files whose stat moved are read, only their keys are claimed in etcd and looked up with HeadObject, and they are uploaded; the keys the parent references cost no request. The ratio is the warm capture over the cold one of the same round.",
		},
	}}, nil
}
