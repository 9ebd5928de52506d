package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/sweep"
)

const (
	b5Prefix = "/cairn-bench/b5/"
	// b5PerCheckpoint referenced keys go in one checkpoint.
	b5PerCheckpoint = 500
	// b5Batch is the keys per DeleteObjects request of the baseline, as the
	// sweep's default.
	b5Batch = 1000
)

// blobKeys returns n blob keys made from seeds "<tag>-<i>": one in ten an
// artifact key, the rest file keys.
func blobKeys(tag string, n int) []string {
	out := make([]string, n)
	for i := range out {
		seed := fmt.Sprintf("%s-%d", tag, i)
		if i%10 == 0 {
			out[i] = artifactKey(seed)
		} else {
			out[i] = fileKey(seed)
		}
	}
	return out
}

// b5Load appends checkpoints that reference every key of refs, in
// checkpoints of b5PerCheckpoint keys, two per thread.
func b5Load(ctx context.Context, store cairn.Store, refs []string) error {
	var groups [][]string
	for len(refs) > 0 {
		n := min(b5PerCheckpoint, len(refs))
		groups = append(groups, refs[:n])
		refs = refs[n:]
	}
	conv := conversation(b1ConvBytes)
	var wg sync.WaitGroup
	errs := make([]error, b4Loaders)
	for w := range b4Loaders {
		wg.Go(func() {
			for t := w; 2*t < len(groups); t += b4Loaders {
				ch, err := newChain(ctx, store, fmt.Sprintf("b5-thread-%05d", t))
				if err != nil {
					errs[w] = err
					return
				}
				for _, g := range groups[2*t : min(2*t+2, len(groups))] {
					var files, artifacts []string
					for _, k := range g {
						if strings.HasPrefix(k, cairn.ArtifactBlobPrefix) {
							artifacts = append(artifacts, k)
						} else {
							files = append(files, k)
						}
					}
					if err := ch.append(ctx, ch.next(files, artifacts, conv)); err != nil {
						errs[w] = err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// bareSweep is B5's baseline: list both prefixes with ListObjectsV2, then
// delete the garbage, known in advance, with DeleteObjects of b5Batch keys,
// all with the bare SDK.
func bareSweep(ctx context.Context, cli *s3.Client, garbage []string, objects int) (list, del time.Duration, err error) {
	start := time.Now()
	listed := 0
	for _, prefix := range []string{sweep.ArtifactPrefix, sweep.FilePrefix} {
		in := &s3.ListObjectsV2Input{Bucket: aws.String(gwBucket), Prefix: aws.String(prefix), MaxKeys: aws.Int32(bucket.MaxPageSize)}
		for {
			out, err := cli.ListObjectsV2(ctx, in)
			if err != nil {
				return 0, 0, err
			}
			listed += len(out.Contents)
			if !aws.ToBool(out.IsTruncated) {
				break
			}
			in.ContinuationToken = out.NextContinuationToken
		}
	}
	list = time.Since(start)
	if listed != objects {
		return 0, 0, fmt.Errorf("the bare listing found %d objects, want %d", listed, objects)
	}
	start = time.Now()
	for b := 0; b < len(garbage); b += b5Batch {
		batch := garbage[b:min(b+b5Batch, len(garbage))]
		ids := make([]types.ObjectIdentifier, len(batch))
		for i := range batch {
			ids[i] = types.ObjectIdentifier{Key: aws.String(batch[i])}
		}
		out, err := cli.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(gwBucket), Delete: &types.Delete{Objects: ids}})
		if err != nil {
			return 0, 0, err
		}
		if len(out.Deleted) != len(batch) || len(out.Errors) != 0 {
			return 0, 0, fmt.Errorf("DeleteObjects deleted %d of %d keys (%d errors)", len(out.Deleted), len(batch), len(out.Errors))
		}
	}
	return list, time.Since(start), nil
}

// b5 measures a sweep of B5Objects objects on versitygw, half of them
// referenced by checkpoints in etcd, against a bare listing and batched
// delete of the same garbage.
func (r *runner) b5(ctx context.Context) ([]Row, error) {
	cfg := r.cfg
	bin, err := findVersityGW(cfg.VersityGW)
	if err != nil {
		return nil, err
	}
	gw, err := startGateway(ctx, bin, filepath.Join(r.tmp, "versitygw"))
	if err != nil {
		return nil, err
	}
	defer gw.stop()
	cli, stop, err := r.etcd(ctx, "b5")
	if err != nil {
		return nil, err
	}
	defer stop()
	store, err := newEtcdStore(cli, b5Prefix)
	if err != nil {
		return nil, err
	}
	defer store.Close()

	nRef := cfg.B5Objects / 2
	refs, garbage := blobKeys("b5-referenced", nRef), blobKeys("b5-garbage", cfg.B5Objects-nRef)
	slices.Sort(garbage)
	began := time.Now()
	if err := b5Load(ctx, store, refs); err != nil {
		return nil, err
	}
	r.logf("B5: checkpoints loaded in %v", time.Since(began).Round(time.Millisecond))
	if err := gw.writeObjects(append(slices.Clone(refs), garbage...)); err != nil {
		return nil, err
	}
	r.logf("B5: loaded %d objects and %d referencing checkpoints in %v", cfg.B5Objects, (nRef+b5PerCheckpoint-1)/b5PerCheckpoint, time.Since(began).Round(time.Millisecond))

	b, err := bucket.NewS3(ctx, bucket.Config{Endpoint: gw.Endpoint, Region: gwRegion, Bucket: gwBucket, PathStyle: true, AccessKeyID: gwAccess, SecretAccessKey: gwSecret})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	// The objects are seeded straight into the bucket: record the store's
	// binding and the registry's marker, as sweeper --bind does for a
	// bucket written before bindings.
	if err := bucket.BindStore(ctx, store, b); err != nil {
		return nil, err
	}
	if err := bucket.MarkRegistry(ctx, b); err != nil {
		return nil, err
	}
	s3c, err := gw.client(ctx)
	if err != nil {
		return nil, err
	}
	// Every blob is old enough: the sweep's clock runs an hour ahead.
	opts := sweep.Options{OlderThan: time.Minute, Now: func() time.Time { return time.Now().Add(time.Hour) }}

	cairnT := make([]time.Duration, cfg.B5Rounds)
	bareT := make([]time.Duration, cfg.B5Rounds)
	onlineT := make([]time.Duration, cfg.B5Rounds)
	var reps, onlineReps []sweep.Report
	var bareList, bareDel []time.Duration
	var cairnCPU, bareCPU, onlineCPU time.Duration
	// sweepSide runs one sweep and checks that it did exactly the work.
	sweepSide := func(refs sweep.References, opts sweep.Options, took *time.Duration, cpu *time.Duration, reps *[]sweep.Report) error {
		c0, start := cpuTime(), time.Now()
		rep, err := sweep.Sweep(ctx, refs, b, opts)
		*took = time.Since(start)
		*cpu += cpuTime() - c0
		if err != nil {
			return err
		}
		if rep.Listed != cfg.B5Objects || rep.Referenced != nRef || len(rep.Deleted) != len(garbage) || len(rep.Failed) != 0 {
			return fmt.Errorf("the sweep (online %t) listed %d, kept %d referenced and deleted %d (%d failed); want %d, %d and %d",
				rep.Online, rep.Listed, rep.Referenced, len(rep.Deleted), len(rep.Failed), cfg.B5Objects, nRef, len(garbage))
		}
		*reps = append(*reps, rep)
		return gw.writeObjects(garbage)
	}
	// B5 is the upstream sweep (the store seen without the online
	// protocol); B5P the same sweep under the protocol, with a zero grace so
	// that one run marks, reads again, moves to deleting, deletes and
	// settles every garbage key.
	plain := plainReferences{store}
	online := sweep.Options{OlderThan: 0}
	if _, ok := any(store).(cairn.BlobCollector); !ok {
		return nil, fmt.Errorf("B5P: the etcd store does not implement cairn.BlobCollector")
	}
	err = r.alternate("B5", cfg.B5Rounds, nil, func(round int) error {
		return sweepSide(plain, opts, &cairnT[round], &cairnCPU, &reps)
	}, func(round int) error {
		return sweepSide(store, online, &onlineT[round], &onlineCPU, &onlineReps)
	}, func(round int) error {
		c0, start := cpuTime(), time.Now()
		l, d, err := bareSweep(ctx, s3c, garbage, cfg.B5Objects)
		bareT[round] = time.Since(start)
		bareCPU += cpuTime() - c0
		if err != nil {
			return err
		}
		bareList, bareDel = append(bareList, l), append(bareDel, d)
		return gw.writeObjects(garbage)
	})
	if err != nil {
		return nil, err
	}
	var ratios, onlineRatios []float64
	for i := range cairnT {
		ratios = append(ratios, float64(cairnT[i])/float64(bareT[i]))
		onlineRatios = append(onlineRatios, float64(onlineT[i])/float64(bareT[i]))
	}
	var list, refsT, del []time.Duration
	for _, rep := range reps {
		list, refsT, del = append(list, rep.ListDuration), append(refsT, rep.ReferencesDuration), append(del, rep.DeleteDuration)
	}
	ratio, onlineRatio := median(ratios), median(onlineRatios)
	rounds := time.Duration(cfg.B5Rounds)
	var oList, oRefs, oDel []time.Duration
	for _, rep := range onlineReps {
		oList, oRefs, oDel = append(oList, rep.ListDuration), append(oRefs, rep.ReferencesDuration), append(oDel, rep.DeleteDuration)
	}
	protocolRow := Row{
		ID:       "B5P",
		Workload: fmt.Sprintf("the same sweep under the online protocol (grace 0: mark, re-read, begin, delete, settle %s keys)", fmtInt(int64(len(garbage)))),
		Cairn:    fmt.Sprintf("%s (list %s, read %s, mark+delete %s)", fmtDur(medianDuration(onlineT)), fmtDur(medianDuration(oList)), fmtDur(medianDuration(oRefs)), fmtDur(medianDuration(oDel))),
		Baseline: fmt.Sprintf("%s (the B5 baseline)", fmtDur(medianDuration(bareT))),
		Ratio:    onlineRatio,
		Target:   "ratio ≤ 1.5",
		Result:   verdict(onlineRatio <= 1.5),
		Notes: []string{
			fmt.Sprintf("sweep.Sweep with the etcd store as a cairn.BlobCollector: one read of references, claims and GC records, a mark transaction per 60 keys, a second read (grace 0), then per batch of 1000 a begin transaction per 60 keys, DeleteObjects, and a settle transaction per 60 keys. CPU time of the benchmark process per sweep: %s.",
				fmtDur(onlineCPU/rounds)),
		},
	}
	return []Row{{
		ID:       "B5",
		Workload: fmt.Sprintf("sweep of %s objects, half unreferenced, on versitygw (upstream rule, no protocol)", fmtInt(int64(cfg.B5Objects))),
		Cairn:    fmt.Sprintf("%s (list %s, references %s, delete %s)", fmtDur(medianDuration(cairnT)), fmtDur(medianDuration(list)), fmtDur(medianDuration(refsT)), fmtDur(medianDuration(del))),
		Baseline: fmt.Sprintf("%s (list %s, delete %s)", fmtDur(medianDuration(bareT)), fmtDur(medianDuration(bareList)), fmtDur(medianDuration(bareDel))),
		Ratio:    ratio,
		Target:   "ratio ≤ 1.25",
		Result:   verdict(ratio <= 1.25),
		Notes: []string{
			fmt.Sprintf("sweep.Sweep with the etcd store (%s references in %d checkpoints, streamed by WalkBlobReferences) and bucket.S3, against the bare aws-sdk-go-v2 client: ListObjectsV2 of %s and %s in pages of %d, then DeleteObjects of the same %s garbage keys in batches of %d; the garbage is written again, untimed, after each side; figures are medians over the rounds.",
				fmtInt(int64(nRef)), (nRef+b5PerCheckpoint-1)/b5PerCheckpoint, sweep.ArtifactPrefix, sweep.FilePrefix, bucket.MaxPageSize, fmtInt(int64(len(garbage))), b5Batch),
			fmt.Sprintf("CPU time of the benchmark process (the client side) per sweep: cairn %s, baseline %s.", fmtDur(cairnCPU/rounds), fmtDur(bareCPU/rounds)),
		},
	}, protocolRow}, nil
}

// plainReferences is the store seen without the online protocol: only its
// references, so that the sweep takes the upstream path.
type plainReferences struct{ s cairn.BlobReferenceWalker }

// BucketBinding is the store's: the sweep covers the store it reads, with the
// online protocol or without.
func (p plainReferences) BucketBinding(ctx context.Context) (cairn.Binding, bool, error) {
	if b, ok := p.s.(cairn.Bound); ok {
		return b.BucketBinding(ctx)
	}
	return cairn.Binding{}, false, nil
}

func (p plainReferences) ListBlobReferences(ctx context.Context) ([]cairn.BlobReference, error) {
	var out []cairn.BlobReference
	err := p.s.WalkBlobReferences(ctx, func(r cairn.BlobReference) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

func (p plainReferences) WalkBlobReferences(ctx context.Context, fn func(cairn.BlobReference) error) error {
	return p.s.WalkBlobReferences(ctx, fn)
}
