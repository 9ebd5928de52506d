package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/snapshot"
)

// b7 measures a cold capture of a generated workspace into versitygw
// (snapshot.CaptureDir: hash, claim every key in etcd, streamed conditional
// PutObject, headed first only where a head pays) against the bare SDK putting the same files at the same
// concurrency.
func (r *runner) b7(ctx context.Context) ([]Row, error) {
	e, err := r.snapEnv(ctx, "b7")
	if err != nil {
		return nil, err
	}
	defer e.close()
	var cairnT, bareT []time.Duration
	var peaks []float64
	tidy := func() error {
		return errors.Join(e.emptyBucket(ctx, cairn.FileBlobPrefix), e.emptyBucket(ctx, "bare/"))
	}
	err = r.alternate("B7", r.snapRounds(), tidy, func(int) error {
		m, d, peak, err := e.capture(ctx, nil, nil)
		if err != nil {
			return err
		}
		if m.Stats.Uploaded != len(e.files) {
			return fmt.Errorf("the cold capture uploaded %d blobs, want %d", m.Stats.Uploaded, len(e.files))
		}
		cairnT = append(cairnT, d)
		peaks = append(peaks, float64(peak))
		return nil
	}, func(int) error {
		start := time.Now()
		if err := e.barePut(ctx); err != nil {
			return err
		}
		bareT = append(bareT, time.Since(start))
		return nil
	})
	if err != nil {
		return nil, err
	}
	ratio := median(ratiosOf(cairnT, bareT))
	return []Row{{
		ID:       "B7",
		Workload: fmt.Sprintf("cold capture of %s files, %s (%d binaries hold half) into versitygw", fmtInt(int64(len(e.files))), fmtBytes(e.bytes), wsLarge),
		Cairn:    fmt.Sprintf("%s (%s/s), peak heap %s", fmtDur(medianDuration(cairnT)), fmtBytes(int64(float64(e.bytes)/medianDuration(cairnT).Seconds())), fmtBytes(int64(maxOf(peaks)))),
		Baseline: fmt.Sprintf("%s (%s/s)", fmtDur(medianDuration(bareT)), fmtBytes(int64(float64(e.bytes)/medianDuration(bareT).Seconds()))),
		Ratio:    ratio,
		Target:   "ratio ≤ 1.15",
		Result:   verdict(ratio <= 1.15),
		Notes: []string{
			fmt.Sprintf("snapshot.CaptureDir with the etcd store as the claimer and bucket.S3: every file hashed, every key claimed in etcd, then per file a streamed conditional PutObject (signed with the known SHA-256, so the SDK does not read the file again to sign it), preceded by a HeadObject for the files above snapshot.DefaultPutFirstMax and while the recent lookups found their keys present (the first ones), %d at a time; the baseline is the bare aws-sdk-go-v2 client doing PutObject of each file from disk, %d at a time. The bucket is emptied, untimed, after each round; the peak heap is the highest heap above the start during a capture.",
				snapshot.DefaultConcurrency, snapshot.DefaultConcurrency),
		},
	}}, nil
}

func ratiosOf(a, b []time.Duration) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		out[i] = float64(a[i]) / float64(b[i])
	}
	return out
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
