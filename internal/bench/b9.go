package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/snapshot"
)

// b9 measures the restore of B7's workspace from versitygw
// (snapshot.Restore: download and verify every blob into a staging
// directory, then move the tree into place) against the bare SDK getting
// the same files and writing them, at the same concurrency.
func (r *runner) b9(ctx context.Context) ([]Row, error) {
	e, err := r.snapEnv(ctx, "b9")
	if err != nil {
		return nil, err
	}
	defer e.close()
	m, _, _, err := e.capture(ctx, nil, nil)
	if err != nil {
		return nil, err
	}
	if err := e.barePut(ctx); err != nil {
		return nil, err
	}
	cp := &cairn.Checkpoint{Files: m.Files}
	cairnDir, bareDir := filepath.Join(r.tmp, "b9-restore"), filepath.Join(r.tmp, "b9-bare")
	var cairnT, bareT []time.Duration
	tidy := func() error { return errors.Join(os.RemoveAll(cairnDir), os.RemoveAll(bareDir)) }
	err = r.alternate("B9", r.snapRounds(), tidy, func(int) error {
		start := time.Now()
		st, err := snapshot.Restore(ctx, e.blobs, cp, cairnDir, nil)
		if err != nil {
			return err
		}
		cairnT = append(cairnT, time.Since(start))
		if st.Files != len(e.files) || st.Bytes != e.bytes {
			return fmt.Errorf("restored %d files, %d bytes; want %d, %d", st.Files, st.Bytes, len(e.files), e.bytes)
		}
		return nil
	}, func(int) error {
		start := time.Now()
		if err := e.bareGet(ctx, bareDir); err != nil {
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
		ID:       "B9",
		Workload: fmt.Sprintf("restore of B7's workspace (%s files, %s) from versitygw", fmtInt(int64(len(e.files))), fmtBytes(e.bytes)),
		Cairn:    fmt.Sprintf("%s (%s/s)", fmtDur(medianDuration(cairnT)), fmtBytes(int64(float64(e.bytes)/medianDuration(cairnT).Seconds()))),
		Baseline: fmt.Sprintf("%s (%s/s)", fmtDur(medianDuration(bareT)), fmtBytes(int64(float64(e.bytes)/medianDuration(bareT).Seconds()))),
		Ratio:    ratio,
		Target:   "ratio ≤ 1.15",
		Result:   verdict(ratio <= 1.15),
		Notes: []string{
			fmt.Sprintf("snapshot.Restore into an absent directory: manifest checks, %d streamed GetObject at a time, each blob hashed and length-checked into a staging directory beside the target, then the files moved into a staged tree that one rename makes the target; the baseline is the bare aws-sdk-go-v2 client doing GetObject of each file and writing it in place, %d at a time, with no check. Both targets are removed, untimed, after each round.",
				snapshot.DefaultConcurrency, snapshot.DefaultConcurrency),
		},
	}}, nil
}

// bareGet is the baseline of B9: GetObject of every bare/<path> copy and a
// write of its body to dir/<path>.
func (e *snapEnv) bareGet(ctx context.Context, dir string) error {
	return parallel(ctx, e.files, func(ctx context.Context, f wsFile) error {
		out, err := e.bare.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(gwBucket), Key: aws.String("bare/" + f.rel)})
		if err != nil {
			return err
		}
		defer out.Body.Close()
		p := filepath.Join(dir, filepath.FromSlash(f.rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		fh, err := os.Create(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(fh, out.Body)
		return errors.Join(err, fh.Close())
	})
}
