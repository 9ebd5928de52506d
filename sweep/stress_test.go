package sweep_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/s3test"
	"github.com/cairnstore/cairn/sweep"
)

var stressDuration = flag.Duration("cairn.stress", 20*time.Second,
	"how long TestOnlineSweepStress captures beside the sweeper (each variant)")

// stressStore is what the stress test needs of a store.
type stressStore interface {
	cairn.Store
	cairn.Pruner
	cairn.ThreadLister
}

// stressPlainStore hides the online protocol of a store: its sweep takes the
// upstream path and nothing claims.
type stressPlainStore struct {
	cairn.Store
	cairn.Pruner
	cairn.ThreadLister
}

// stressWorld is a store and a bucket the stress test runs on; with
// others, several stores on the one bucket, whose writers take turns by
// thread and whose sweeper prunes each and sweeps them together.
type stressWorld struct {
	store  stressStore
	others []stressStore
	blobs  sweep.Blobs
	read   bucket.Reader
	put    bucket.Putter
	// brokenSweep sweeps the first store alone, ignoring the bindings: the
	// variant the two-prefix run must be able to tell from a correct one.
	brokenSweep bool
	// incremental, when set, names the sweep's candidates (the store is
	// then the etcdstore.Mirrored it belongs to); trusting makes that sweep
	// the broken one that deletes them without the protocol.
	incremental sweep.Incremental
	trusting    bool
	// incrementalRuns counts the runs that listed nothing.
	incrementalRuns int
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// storeOf returns the store of writer i.
func (w *stressWorld) storeOf(i int) stressStore {
	if n := 1 + len(w.others); i%n > 0 {
		return w.others[i%n-1]
	}
	return w.store
}

// sweepOnce is one run of the sweeper: prune every store to its newest
// checkpoint, then sweep.
func (w *stressWorld) sweepOnce(ctx context.Context) (sweep.Report, error) {
	if len(w.others) == 0 {
		opts := sweep.Options{OlderThan: 0, Incremental: w.incremental}
		if w.trusting {
			opts = sweep.TrustingCandidates(opts)
		}
		rep, err := sweep.Run(ctx, w.store, w.blobs, sweep.RunOptions{Keep: 1, Sweep: opts})
		w.incrementalRuns += boolInt(rep.Sweep.Incremental)
		return rep.Sweep, err
	}
	var others []sweep.Other
	for _, st := range append([]stressStore{w.store}, w.others...) {
		if _, err := sweep.Prune(ctx, st, sweep.PruneOptions{Keep: 1}); err != nil {
			return sweep.Report{}, err
		}
		if st != w.store {
			others = append(others, sweep.Other{Store: st})
		}
	}
	if w.brokenSweep {
		return sweep.Sweep(ctx, w.store, w.blobs, sweep.IgnoringBindings(sweep.Options{OlderThan: 0}))
	}
	return sweep.Sweep(ctx, w.store, w.blobs, sweep.Options{OlderThan: 0, Others: others})
}

// TestOnlineSweepStress runs 8 writers, each capturing into its own thread,
// whose workspaces keep drawing files from one small pool of contents, so
// that captures keep reusing blobs that pruning has just left unreferenced,
// while a sweeper loops with --keep 1 and a zero grace. With the protocol,
// every appended checkpoint's blobs exist when its writer checks them and
// every head restores byte for byte at the end. Without it (the same
// workload through PutBlobs and a store that hides the protocol), the test
// shows that blobs are lost, so that the first half is known to have teeth.
// TwoPrefixesOneBucket runs the writers on two stores that share one bucket,
// with one sweeper of both (sweep.Options.Others): nothing may be lost; a
// sweep of the first store alone that ignores the bindings loses the second
// store's blobs.
//
// It runs on embedded etcd and versitygw. -cairn.stress sets how long each
// half captures.
func TestOnlineSweepStress(t *testing.T) {
	if testing.Short() {
		t.Skip("the stress test needs etcd and versitygw; -short skips it")
	}
	srv := s3test.StartVersityGW(t)
	bkt := s3Bucket(t, srv, 0)
	_, cli := embedetcd.ForTest(t)

	newWorld := func(t *testing.T, prefix string, protocol bool) *stressWorld {
		st, err := etcdstore.New(cli, prefix, etcdstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		w := &stressWorld{store: st, blobs: bkt, read: bkt, put: bkt}
		if !protocol {
			// A bucket of its own: a sweep of a store without bindings
			// refuses in a bucket that another store is bound to.
			own := s3Bucket(t, s3test.StartVersityGW(t), 0)
			w = &stressWorld{store: stressPlainStore{st, st, st}, blobs: own, read: own, put: own}
		}
		return w
	}
	t.Run("Protocol", func(t *testing.T) {
		res := runStress(t, newWorld(t, "stress-on/", true), *stressDuration, false)
		if res.lost > 0 {
			t.Fatalf("%d appended checkpoints referenced missing blobs under the protocol; first: %v", res.lost, res.firstLoss)
		}
		if res.appends < 8 || res.sweeps < 2 || res.deleted == 0 {
			t.Fatalf("the workload did too little to prove anything: %d appends, %d sweeps, %d blobs deleted", res.appends, res.sweeps, res.deleted)
		}
		t.Logf("protocol: %d appends, %d blobs reused, %d sweeps, %d blobs deleted, %d deletes called off by a claim; no loss",
			res.appends, res.reused, res.sweeps, res.deleted, res.aborted)
	})
	sharedWorld := func(t *testing.T, name string) *stressWorld {
		a, b := newWorld(t, name+"-a/", true), newWorld(t, name+"-b/", true)
		own := s3Bucket(t, s3test.StartVersityGW(t), 0)
		return &stressWorld{store: a.store, others: []stressStore{b.store}, blobs: own, read: own, put: own}
	}
	t.Run("TwoPrefixesOneBucket", func(t *testing.T) {
		// Two stores on one bucket, as two of cairnd's tenants, and one
		// sweeper of both (docs/shared-buckets.md).
		res := runStress(t, sharedWorld(t, "stress-shared"), *stressDuration, false)
		if res.lost > 0 {
			t.Fatalf("%d appended checkpoints referenced missing blobs with two prefixes on one bucket; first: %v", res.lost, res.firstLoss)
		}
		if res.appends < 8 || res.sweeps < 2 || res.deleted == 0 {
			t.Fatalf("the workload did too little to prove anything: %d appends, %d sweeps, %d blobs deleted", res.appends, res.sweeps, res.deleted)
		}
		t.Logf("two prefixes, one bucket: %d appends, %d blobs reused, %d sweeps, %d blobs deleted, %d deletes called off by a claim; no loss",
			res.appends, res.reused, res.sweeps, res.deleted, res.aborted)
	})
	t.Run("TwoPrefixesSweptAsOneLosesBlobs", func(t *testing.T) {
		// The broken sweep of the first store alone, ignoring the
		// bindings, loses the second store's blobs.
		w := sharedWorld(t, "stress-broken")
		w.brokenSweep = true
		res := runStress(t, w, *stressDuration, true)
		if res.lost == 0 {
			t.Fatalf("a sweep of one prefix ignoring the bindings lost no blob in %d appends and %d sweeps: the two-prefix run has no teeth", res.appends, res.sweeps)
		}
		t.Logf("one prefix swept, bindings ignored: %d appends, %d sweeps, %d checkpoints lost blobs (first: %v)", res.appends, res.sweeps, res.lost, res.firstLoss)
	})
	incrementalWorld := func(t *testing.T, prefix string, trusting bool) *stressWorld {
		w := newWorld(t, prefix, true)
		// A bucket of its own: the sweep covers one store.
		own := s3Bucket(t, s3test.StartVersityGW(t), 0)
		w.blobs, w.read, w.put = own, own, own
		st := w.store.(*etcdstore.Store)
		m, err := st.OpenMirror(t.Context(), filepath.Join(t.TempDir(), "mirror.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		mirrored := st.WithMirror(m)
		w.store, w.incremental, w.trusting = mirrored, mirrored, trusting
		return w
	}
	t.Run("Incremental", func(t *testing.T) {
		// The sweeps name their candidates from the mirror (after the
		// first, which lists): nothing may be lost.
		w := incrementalWorld(t, "stress-inc/", false)
		res := runStress(t, w, *stressDuration, false)
		if res.lost > 0 {
			t.Fatalf("%d appended checkpoints referenced missing blobs with the incremental sweep; first: %v", res.lost, res.firstLoss)
		}
		if res.appends < 8 || w.incrementalRuns < 2 || res.deleted == 0 {
			t.Fatalf("the workload did too little to prove anything: %d appends, %d incremental sweeps of %d, %d blobs deleted", res.appends, w.incrementalRuns, res.sweeps, res.deleted)
		}
		t.Logf("incremental: %d appends, %d blobs reused, %d sweeps (%d without a listing), %d blobs deleted, %d deletes called off by a claim; no loss",
			res.appends, res.reused, res.sweeps, w.incrementalRuns, res.deleted, res.aborted)
	})
	t.Run("IncrementalTrustingCandidatesLosesBlobs", func(t *testing.T) {
		// The broken incremental sweep deletes the mirror's candidates
		// without the protocol: a writer's claim on a pruned blob it
		// reuses does not save it.
		w := incrementalWorld(t, "stress-inc-broken/", true)
		res := runStress(t, w, *stressDuration, true)
		if res.lost == 0 {
			t.Fatalf("an incremental sweep without the protocol lost no blob in %d appends and %d sweeps: the incremental run has no teeth", res.appends, res.sweeps)
		}
		t.Logf("incremental without the protocol: %d appends, %d sweeps, %d checkpoints lost blobs (first: %v)", res.appends, res.sweeps, res.lost, res.firstLoss)
	})
	t.Run("WithoutProtocolLosesBlobs", func(t *testing.T) {
		res := runStress(t, newWorld(t, "stress-off/", false), *stressDuration, true)
		if res.lost == 0 {
			t.Fatalf("without the protocol no blob was lost in %d appends and %d sweeps: the stress test has no teeth", res.appends, res.sweeps)
		}
		t.Logf("without the protocol: %d appends, %d sweeps, %d checkpoints lost blobs (first: %v)", res.appends, res.sweeps, res.lost, res.firstLoss)
	})
}

type stressResult struct {
	appends, reused, sweeps, deleted, aborted, lost int
	firstLoss                                       error
}

// runStress runs the writers and the sweeper for d (or, with stopOnLoss, until
// the first loss), then checks every head.
func runStress(t *testing.T, w *stressWorld, d time.Duration, stopOnLoss bool) stressResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	var (
		mu  sync.Mutex
		res stressResult
	)
	lose := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		res.lost++
		if res.firstLoss == nil {
			res.firstLoss = err
		}
		if stopOnLoss {
			cancel()
		}
	}
	pool := make([][]byte, 160)
	for i := range pool {
		pool[i] = fmt.Appendf(nil, "content %d of the shared pool\n", i)
	}
	const writers, files = 8, 6
	var appends, reused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	for i := range writers {
		wg.Go(func() {
			thread := fmt.Sprintf("thread-%d", i)
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for turn := 0; ctx.Err() == nil; turn++ {
				r, err := stressCapture(ctx, w, w.storeOf(i), thread, fmt.Sprintf("%s-%d", thread, turn), pool, files, rng)
				switch {
				case ctx.Err() != nil:
					return
				case errors.Is(err, cairn.ErrWriterConflict), errors.Is(err, cairn.ErrStaleHead):
					// The sweeper holds the lease to prune, or pruned
					// meanwhile.
					time.Sleep(time.Millisecond)
					continue
				case err != nil:
					errs <- fmt.Errorf("%s turn %d: %w", thread, turn, err)
					cancel()
					return
				}
				appends.Add(1)
				reused.Add(int64(r.reused))
				if r.loss != nil {
					lose(r.loss)
				}
				// Between turns the thread is free, so that the sweeper's
				// prune can take its lease.
				time.Sleep(time.Duration(20+rng.IntN(40)) * time.Millisecond)
			}
		})
	}
	var sweeps, deleted, aborted atomic.Int64
	wg.Go(func() {
		for ctx.Err() == nil {
			rep, err := w.sweepOnce(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil && !errors.Is(err, sweep.ErrIncomplete) {
				errs <- fmt.Errorf("sweep: %w", err)
				cancel()
				return
			}
			sweeps.Add(1)
			deleted.Add(int64(len(rep.Deleted)))
			aborted.Add(int64(len(rep.Aborted)))
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	res.appends, res.reused = int(appends.Load()), int(reused.Load())
	res.sweeps, res.deleted, res.aborted = int(sweeps.Load()), int(deleted.Load()), int(aborted.Load())
	if t.Failed() {
		return res
	}
	// Every head restores byte for byte.
	vctx := context.WithoutCancel(t.Context())
	for i := range writers {
		thread := fmt.Sprintf("thread-%d", i)
		head, err := w.storeOf(i).GetHead(vctx, thread)
		if err != nil {
			t.Fatalf("%s: head: %v", thread, err)
		}
		if head == "" {
			if !stopOnLoss {
				t.Fatalf("%s has no head after the run", thread)
			}
			continue // stopped at the first loss, before this writer appended
		}
		cp, err := w.storeOf(i).Get(vctx, head)
		if err != nil || cp == nil {
			t.Fatalf("%s: get head %s: %v", thread, head, err)
		}
		if err := stressCheck(vctx, w.read, cp); err != nil {
			lose(fmt.Errorf("%s: head %s at the end: %w", thread, head, err))
		}
	}
	return res
}

type stressCaptureResult struct {
	reused int
	loss   error
}

// stressCapture is one capture: take the lease, draw the workspace, upload
// what the parent lacks (claimed when the store has the protocol), append,
// and check that the new head's blobs are all there.
func stressCapture(ctx context.Context, w *stressWorld, st stressStore, thread, id string, pool [][]byte, files int, rng *rand.Rand) (stressCaptureResult, error) {
	var res stressCaptureResult
	lease, err := st.AcquireWriter(ctx, thread)
	if err != nil {
		return res, err
	}
	defer lease.Release(context.WithoutCancel(ctx))
	head, err := st.GetHead(ctx, thread)
	if err != nil {
		return res, err
	}
	inherited := map[string]bool{}
	if head != "" {
		parent, err := st.Get(ctx, head)
		if err != nil {
			return res, err
		}
		if parent != nil {
			for _, k := range parent.BlobKeys() {
				inherited[k] = true
			}
		}
	}
	cp := cairn.Checkpoint{ID: id, ThreadID: thread, ParentCheckpointID: head, CreatedAt: float64(time.Now().UnixMilli()),
		Reason: cairn.ReasonAutomatic, Conversation: []byte(`[]`)}
	var upload []bucket.Blob
	for f := range files {
		data := pool[rng.IntN(len(pool))]
		b := bucket.FileBlob(data)
		cp.Files = append(cp.Files, cairn.Entry{Path: fmt.Sprintf("f%d.txt", f), Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(data))})
		if !inherited[b.Key] {
			upload = append(upload, b)
		}
	}
	var up bucket.UploadResult
	if claimer, ok := st.(cairn.BlobClaimer); ok {
		up, err = bucket.UploadBlobs(ctx, claimer, lease.Writer, w.put, upload)
	} else {
		up, err = bucket.PutBlobs(ctx, w.put, upload)
	}
	if err != nil {
		return res, err
	}
	res.reused = len(up.Present)
	// A capture does other work between its upload and its append; this
	// is the window in which an unprotected reuse loses its bytes.
	time.Sleep(2 * time.Millisecond)
	if _, err := st.Append(ctx, cairn.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: lease.Writer}); err != nil {
		return res, err
	}
	if err := stressCheck(context.WithoutCancel(ctx), w.read, &cp); err != nil {
		res.loss = fmt.Errorf("checkpoint %s right after its append: %w", id, err)
	}
	return res, nil
}

// stressCheck reads every blob of cp and checks its bytes.
func stressCheck(ctx context.Context, r bucket.Reader, cp *cairn.Checkpoint) error {
	for _, e := range cp.Files {
		data, err := bucket.ReadBlob(ctx, r, e.BlobKey)
		if err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
		if int64(len(data)) != e.Size {
			return fmt.Errorf("%s: %d bytes, want %d", e.Path, len(data), e.Size)
		}
	}
	return nil
}
