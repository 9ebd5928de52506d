package sweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/sweep"
)

// The interleavings of a capture with a sweep, one test for each window in
// which they could meet, each driving both sides step by step (the capture
// in the sweep's hooks, or in a goroutine the test hands over to). A capture
// takes the thread's writer lease, uploads its blobs with bucket.UploadBlobs
// (claims, then put-if-absent) and appends; it reuses a blob that an older
// checkpoint of another thread used before it was pruned, which is old and
// unreferenced, and so exactly what a sweep deletes. Each test ends with every
// head's blobs in the bucket, or with the capture failed with a clear error
// and nothing appended.
//
// The unprotected twins run the same interleavings with bucket.PutBlobs and a
// store that hides the protocol, and show the loss the protocol prevents.

// protocolStore is what the interleavings need of a store: the contract,
// pruning, thread listing and both sides of the online sweep protocol.
type protocolStore interface {
	cairn.Store
	cairn.Pruner
	cairn.ThreadLister
	cairn.BlobClaimer
	cairn.BlobCollector
}

// storeFactory returns an empty store whose clock is now, in milliseconds
// since the Unix epoch (cairn.Options.Now): its writer leases, and so its
// claims, expire by that clock, and the tests move it.
type storeFactory func(t *testing.T, now func() float64) protocolStore

func TestInterleavingsMemory(t *testing.T) {
	runInterleavings(t, func(t *testing.T, now func() float64) protocolStore {
		t.Helper()
		s, err := cairn.NewMemoryStore(cairn.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestInterleavingsEtcd(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	var n atomic.Int64
	runInterleavings(t, func(t *testing.T, now func() float64) protocolStore {
		t.Helper()
		s, err := etcdstore.New(cli, fmt.Sprintf("interleave-%d/", n.Add(1)), etcdstore.Options{Options: cairn.Options{Now: now}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// The blobs of the interleavings.
var (
	// reusedBlob was used by a pruned checkpoint; the capture uses it again.
	reusedBlob = bucket.FileBlob([]byte("bytes a pruned checkpoint used, and the capture uses again"))
	// otherOldBlob was used by the same pruned checkpoint only: every sweep
	// that deletes anything deletes it.
	otherOldBlob = bucket.ArtifactBlob([]byte("bytes only the pruned checkpoint used"))
	// keptBlob is used by the head of the old thread.
	keptBlob = bucket.FileBlob([]byte("bytes of the old thread's head"))
	// freshBlob is new in the capture.
	freshBlob = bucket.ArtifactBlob([]byte("bytes new in the capture"))
)

// interleavingOlderThan is the sweeps' OlderThan.
const interleavingOlderThan = time.Hour

// runInterleavings runs the interleaving tests on stores from newStore.
func runInterleavings(t *testing.T, newStore storeFactory) {
	reused, otherOld, fresh := reusedBlob.Key, otherOldBlob.Key, freshBlob.Key
	opts := sweep.Options{OlderThan: interleavingOlderThan}

	// (a) The capture claims the old key before the sweep lists: the sweep
	// sees the claim and leaves the key alone.
	t.Run("ClaimBeforeTheListing", func(t *testing.T) {
		w := newInterleaving(t, newStore, protectedMarked)
		c := w.begin(t, "capture", reusedBlob, freshBlob)
		res, err := c.upload(w.ctx(t))
		if err != nil || !slices.Equal(res.Present, []string{reused}) || !slices.Equal(res.Uploaded, []string{fresh}) {
			t.Fatalf("UploadBlobs = %+v, %v; want the old blob reused and the new one uploaded", res, err)
		}
		if _, ok := w.record(t, reused); ok {
			t.Error("the claim did not end the old blob's candidacy")
		}
		rep, err := w.sweep(t, w.blobs, opts)
		if err != nil || !slices.Equal(rep.Deleted, []string{otherOld}) || rep.Claimed != 2 {
			t.Fatalf("Sweep = %v deleted, %d claimed, %v; want only %s deleted and both claimed keys kept", rep.Deleted, rep.Claimed, err, otherOld)
		}
		if err := c.append(t.Context()); err != nil {
			t.Fatalf("Append: %v", err)
		}
		w.checkHeads(t)
		w.checkNoWait(t)
	})

	// (b) The sweep has listed, read and marked when the capture claims: the
	// claim calls off the key's delete.
	t.Run("ClaimAfterTheMark", func(t *testing.T) {
		// The key is a candidate whose grace has passed: the claim ends the
		// candidacy and the sweep's move to deleting fails.
		t.Run("Candidate", func(t *testing.T) {
			w := newInterleaving(t, newStore, protectedMarked)
			c := w.begin(t, "capture", reusedBlob, freshBlob)
			called := false
			rep, err := w.sweep(t, w.blobs, sweep.WithHooks(opts, sweep.Hooks{AfterMark: func(context.Context, []cairn.GCRecord) {
				called = true
				if _, err := c.upload(w.ctx(t)); err != nil {
					t.Errorf("UploadBlobs: %v", err)
				}
			}}))
			if !called || err != nil || !slices.Equal(rep.Deleted, []string{otherOld}) || !slices.Equal(rep.Aborted, []string{reused}) {
				t.Fatalf("Sweep (hook called %t) = %v deleted, %v aborted, %v; want %s deleted and %s aborted", called, rep.Deleted, rep.Aborted, err, otherOld, reused)
			}
			if err := c.append(t.Context()); err != nil {
				t.Fatalf("Append: %v", err)
			}
			w.checkHeads(t)
			w.checkNoWait(t)
		})
		// With OlderThan 0 the sweep marks the key and deletes it in the same
		// run on the strength of a second read, which sees the claim.
		t.Run("NewMark", func(t *testing.T) {
			w := newInterleaving(t, newStore, protectedUnmarked)
			c := w.begin(t, "capture", reusedBlob, freshBlob)
			called := false
			rep, err := w.sweep(t, w.blobs, sweep.WithHooks(sweep.Options{}, sweep.Hooks{AfterMark: func(_ context.Context, marked []cairn.GCRecord) {
				called = true
				if !slices.ContainsFunc(marked, func(r cairn.GCRecord) bool { return r.Key == reused }) {
					t.Errorf("marked %v; want %s among them", marked, reused)
				}
				if _, err := c.upload(w.ctx(t)); err != nil {
					t.Errorf("UploadBlobs: %v", err)
				}
			}}))
			if !called || err != nil || !slices.Equal(rep.Deleted, []string{otherOld}) || rep.Marked != 2 {
				t.Fatalf("Sweep (hook called %t) = %v deleted, %d marked, %v; want 2 marked and only %s deleted", called, rep.Deleted, rep.Marked, err, otherOld)
			}
			if err := c.append(t.Context()); err != nil {
				t.Fatalf("Append: %v", err)
			}
			w.checkHeads(t)
			w.checkNoWait(t)
		})
	})

	// (c) The sweep has moved the key to deleting and its delete is in flight
	// when the capture claims: the key is busy, the capture waits until the
	// sweep settles the delete, then claims again and uploads the bytes anew.
	t.Run("ClaimWhileTheDeleteIsInFlight", func(t *testing.T) {
		w := newInterleaving(t, newStore, protectedMarked)
		c := w.begin(t, "capture", reusedBlob, freshBlob)
		var done <-chan captureResult
		rep, err := w.sweep(t, w.blobs, sweep.WithHooks(opts, sweep.Hooks{AfterBegin: func(_ context.Context, moved []cairn.GCRecord) {
			if !slices.ContainsFunc(moved, func(r cairn.GCRecord) bool { return r.Key == reused && r.State == cairn.GCDeleting }) {
				t.Errorf("moved %v; want %s in deleting", moved, reused)
			}
			if done != nil {
				return
			}
			done = c.run(t.Context())
			if keys := recv(t, w.claims.waiting, "the capture to wait"); !slices.Equal(keys, []string{reused}) {
				t.Errorf("the capture waited for %v; want %s", keys, reused)
			}
		}}))
		if err != nil || !slices.Equal(rep.Deleted, sorted(otherOld, reused)) {
			t.Fatalf("Sweep = %v deleted, %v; want %v", rep.Deleted, err, sorted(otherOld, reused))
		}
		if done == nil {
			t.Fatal("the sweep moved nothing to deleting")
		}
		r := recv(t, done, "the capture")
		if r.err != nil || !slices.Contains(r.res.Uploaded, reused) || len(r.res.Present) != 0 {
			t.Fatalf("capture = %+v, %v; want the deleted blob uploaded again and appended", r.res, r.err)
		}
		if got := w.claims.busyAnswers(); !slices.EqualFunc(got, [][]string{{reused}}, slices.Equal) {
			t.Errorf("claims found busy %v; want [[%s]]", got, reused)
		}
		w.checkHeads(t)
	})

	// (d) The delete request fails after the bytes went: the outcome is
	// unknown, the key stays deleting and the capture waits until the next
	// sweep settles it, then uploads the bytes anew.
	t.Run("DeleteOutcomeUnknown", func(t *testing.T) {
		w := newInterleaving(t, newStore, protectedMarked)
		lost := &lostAnswer{Memory: w.blobs, fail: true}
		rep, err := w.sweep(t, lost, opts)
		if !errors.Is(err, sweep.ErrStopped) || !errors.Is(err, errLostAnswer) || !slices.Equal(rep.Pending, sorted(otherOld, reused)) {
			t.Fatalf("Sweep = %v pending, %v; want ErrStopped with both old blobs pending", rep.Pending, err)
		}
		if r, _ := w.record(t, reused); r.State != cairn.GCDeleting {
			t.Fatalf("record after the failed request = %+v; want deleting", r)
		}
		if _, err := w.blobs.Head(t.Context(), reused); !errors.Is(err, bucket.ErrNotFound) {
			t.Fatalf("the failed request left the bytes (Head: %v); the test needs them gone", err)
		}
		c := w.begin(t, "capture", reusedBlob, freshBlob)
		done := c.run(t.Context())
		if keys := recv(t, w.claims.waiting, "the capture to wait"); !slices.Equal(keys, []string{reused}) {
			t.Errorf("the capture waited for %v; want %s", keys, reused)
		}
		lost.fail = false
		rep, err = w.sweep(t, lost, opts)
		if err != nil || rep.Unsettled != 2 || !slices.Equal(rep.Deleted, sorted(otherOld, reused)) {
			t.Fatalf("settling Sweep = %v deleted, %d unsettled, %v; want both settled", rep.Deleted, rep.Unsettled, err)
		}
		r := recv(t, done, "the capture")
		if r.err != nil || !slices.Contains(r.res.Uploaded, reused) {
			t.Fatalf("capture = %+v, %v; want the blob uploaded again and appended", r.res, r.err)
		}
		w.checkHeads(t)
	})

	// (e) The writer's lease expires while it holds claims: they end with it,
	// the sweep deletes the key, and the capture's append fails with
	// ErrWriterLost and appends nothing.
	t.Run("LeaseExpiresWhileClaimed", func(t *testing.T) {
		w := newInterleaving(t, newStore, protectedMarked)
		c := w.begin(t, "capture", reusedBlob, freshBlob)
		if _, err := c.upload(w.ctx(t)); err != nil {
			t.Fatalf("UploadBlobs: %v", err)
		}
		w.clock.Set(millisTime(c.lease.ExpiresAt()).Add(time.Millisecond))
		// Expired by the clock, but nobody took the lease over: the claims
		// still protect, since no clock decides a delete.
		rep, err := w.sweep(t, w.blobs, opts)
		if err != nil || rep.Claimed != 2 || rep.Marked != 0 || !slices.Equal(rep.Deleted, []string{otherOld}) {
			t.Fatalf("Sweep = %v deleted, %d claimed, %d marked, %v; want both claims kept, nothing marked, %s deleted", rep.Deleted, rep.Claimed, rep.Marked, err, otherOld)
		}
		// A takeover replaces the record: now the claims are dead.
		next, err := w.store.AcquireWriter(t.Context(), "capture")
		if err != nil {
			t.Fatalf("takeover: %v", err)
		}
		t.Cleanup(func() { next.Release(context.Background()) })
		rep, err = w.sweep(t, w.blobs, opts)
		if err != nil || rep.Claimed != 0 || rep.Marked != 2 || len(rep.Deleted) != 0 {
			t.Fatalf("Sweep = %v deleted, %d claimed, %d marked, %v; want the replaced lease's claims gone and both keys marked", rep.Deleted, rep.Claimed, rep.Marked, err)
		}
		w.clock.Advance(interleavingOlderThan)
		rep, err = w.sweep(t, w.blobs, opts)
		if err != nil || !slices.Equal(rep.Deleted, sorted(reused, fresh)) {
			t.Fatalf("Sweep = %v deleted, %v; want %v", rep.Deleted, err, sorted(reused, fresh))
		}
		if err := c.append(t.Context()); !errors.Is(err, cairn.ErrWriterLost) {
			t.Fatalf("Append after the lease expired = %v; want ErrWriterLost", err)
		}
		w.checkNothingAppended(t, "capture")
		w.checkHeads(t)
	})

	// (f) The capture claims and stops before it appends: its claims end
	// with its lease's record (released, or replaced by a takeover), and a
	// sweep deletes the keys once their grace, which starts after the
	// claim, has passed.
	for _, crash := range []string{"Released", "TakenOver"} {
		t.Run("CrashBeforeTheAppend/"+crash, func(t *testing.T) {
			w := newInterleaving(t, newStore, protectedMarked)
			c := w.begin(t, "capture", reusedBlob, freshBlob)
			if _, err := c.upload(w.ctx(t)); err != nil {
				t.Fatalf("UploadBlobs: %v", err)
			}
			if crash == "Released" {
				c.lease.Release(t.Context())
			} else {
				w.clock.Set(millisTime(c.lease.ExpiresAt()).Add(time.Millisecond))
				next, err := w.store.AcquireWriter(t.Context(), "capture")
				if err != nil {
					t.Fatalf("takeover: %v", err)
				}
				t.Cleanup(func() { next.Release(context.Background()) })
			}
			rep, err := w.sweep(t, w.blobs, opts)
			if err != nil || rep.Marked != 2 || !slices.Equal(rep.Deleted, []string{otherOld}) {
				t.Fatalf("Sweep = %v deleted, %d marked, %v; want both keys marked and only %s deleted", rep.Deleted, rep.Marked, err, otherOld)
			}
			// Past the grace of both, and past OlderThan since the new blob's
			// upload (strictly older).
			w.clock.Advance(interleavingOlderThan + time.Minute)
			rep, err = w.sweep(t, w.blobs, opts)
			if err != nil || !slices.Equal(rep.Deleted, sorted(reused, fresh)) {
				t.Fatalf("Sweep = %v deleted, %v; want %v", rep.Deleted, err, sorted(reused, fresh))
			}
			w.checkNothingAppended(t, "capture")
			w.checkHeads(t)
		})
	}

	// The twins of (a) to (c) without the protocol lose the reused blob: the
	// new head references bytes the sweep deleted.
	t.Run("Unprotected", func(t *testing.T) {
		lost := func(t *testing.T, w *interleaving) {
			t.Helper()
			if missing := w.missingHeadBlobs(t); !slices.Equal(missing, []string{reused}) {
				t.Fatalf("heads miss %v; want the unprotected capture to have lost %s", missing, reused)
			}
		}
		t.Run("ClaimBeforeTheListing", func(t *testing.T) {
			w := newInterleaving(t, newStore, unprotected)
			c := w.begin(t, "capture", reusedBlob, freshBlob)
			if res, err := c.put(t.Context()); err != nil || !slices.Equal(res.Present, []string{reused}) {
				t.Fatalf("PutBlobs = %+v, %v; want the old blob found present", res, err)
			}
			rep, err := w.sweep(t, w.blobs, opts)
			if err != nil || !slices.Contains(rep.Deleted, reused) {
				t.Fatalf("Sweep = %v deleted, %v; want %s among them", rep.Deleted, err, reused)
			}
			if err := c.append(t.Context()); err != nil {
				t.Fatalf("Append: %v", err)
			}
			lost(t, w)
		})
		t.Run("ClaimAfterTheMark", func(t *testing.T) {
			w := newInterleaving(t, newStore, unprotected)
			c := w.begin(t, "capture", reusedBlob, freshBlob)
			o := opts
			o.BeforeDelete = func(context.Context, []string) error {
				if res, err := c.put(t.Context()); err != nil || !slices.Equal(res.Present, []string{reused}) {
					t.Errorf("PutBlobs = %+v, %v; want the old blob found present", res, err)
				}
				return nil
			}
			rep, err := w.sweep(t, w.blobs, o)
			if err != nil || !slices.Contains(rep.Deleted, reused) {
				t.Fatalf("Sweep = %v deleted, %v; want %s among them", rep.Deleted, err, reused)
			}
			if err := c.append(t.Context()); err != nil {
				t.Fatalf("Append: %v", err)
			}
			lost(t, w)
		})
		t.Run("ClaimWhileTheDeleteIsInFlight", func(t *testing.T) {
			w := newInterleaving(t, newStore, unprotected)
			c := w.begin(t, "capture", reusedBlob, freshBlob)
			b := &inFlight{Memory: w.blobs, during: func() {
				if res, err := c.put(t.Context()); err != nil || !slices.Equal(res.Present, []string{reused}) {
					t.Errorf("PutBlobs = %+v, %v; want the old blob found present", res, err)
				}
			}}
			rep, err := w.sweep(t, b, opts)
			if err != nil || !slices.Contains(rep.Deleted, reused) || b.during != nil {
				t.Fatalf("Sweep = %v deleted, %v; want %s among them, deleted while the capture ran", rep.Deleted, err, reused)
			}
			if err := c.append(t.Context()); err != nil {
				t.Fatalf("Append: %v", err)
			}
			lost(t, w)
		})
	})
}

// The starting states of an interleaving.
type interleavingMode int

const (
	// protectedMarked: the store runs the protocol and a sweep has marked
	// the unused old blobs more than OlderThan ago, so that the next sweep
	// deletes them.
	protectedMarked interleavingMode = iota
	// protectedUnmarked: the store runs the protocol; no sweep has run.
	protectedUnmarked
	// unprotected: the sweep sees the store without the protocol and takes
	// the plain path; captures use bucket.PutBlobs.
	unprotected
)

// interleaving is a store and a memory bucket on one clock, with a history:
// thread "old" had a checkpoint using reusedBlob and otherOldBlob, then one
// using keptBlob, and was pruned to its head two days ago.
type interleaving struct {
	clock  *clock
	store  protocolStore
	claims *watchClaimer
	blobs  *bucket.Memory
	// sweepStore is what the sweep reads: the store, or the store without
	// the protocol.
	sweepStore sweep.References
	mode       interleavingMode
	n          int
}

func newInterleaving(t *testing.T, newStore storeFactory, mode interleavingMode) *interleaving {
	t.Helper()
	clk := newClock(now.Add(-50 * time.Hour))
	w := &interleaving{clock: clk, blobs: bucket.NewMemory(clk.Now), mode: mode}
	w.store = newStore(t, clk.Millis)
	w.claims = &watchClaimer{BlobClaimer: w.store, waiting: make(chan []string, 16)}
	w.sweepStore = w.store
	if mode == unprotected {
		plain := plainStore{Store: w.store, Pruner: w.store, ThreadLister: w.store}
		if _, ok := any(plain).(cairn.BlobCollector); ok {
			t.Fatal("the plain store still runs the protocol")
		}
		w.sweepStore = plain
	} else if err := bucket.BindStore(t.Context(), w.store, w.blobs); err != nil {
		// Writers bind before their first upload; these tests seed the
		// bucket themselves.
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, blobs := range [][]bucket.Blob{{reusedBlob, otherOldBlob}, {keptBlob}} {
		c := w.begin(t, "old", blobs...)
		if _, err := c.upload(w.ctx(t)); err != nil {
			t.Fatal(err)
		}
		if err := c.append(ctx); err != nil {
			t.Fatal(err)
		}
		c.lease.Release(ctx)
	}
	if removed, err := cairn.KeepNewest(ctx, w.store, "old", 1); err != nil || len(removed) != 1 {
		t.Fatalf("KeepNewest = %v, %v; want one checkpoint removed", removed, err)
	}
	clk.Advance(48 * time.Hour)
	if mode == protectedMarked {
		rep, err := w.sweep(t, w.blobs, sweep.Options{OlderThan: interleavingOlderThan})
		if err != nil || rep.Marked != 2 || len(rep.Deleted) != 0 {
			t.Fatalf("marking Sweep = %d marked, %v deleted, %v; want the two unused blobs marked", rep.Marked, rep.Deleted, err)
		}
	}
	clk.Advance(2 * time.Hour)
	return w
}

// ctx returns a context for a step the test expects to finish at once: it
// bounds a wait the test did not expect, so that such a bug fails the test
// instead of hanging it.
func (w *interleaving) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sweep sweeps blobs with the world's clock.
func (w *interleaving) sweep(t *testing.T, blobs sweep.Blobs, opts sweep.Options) (sweep.Report, error) {
	t.Helper()
	opts.Now = w.clock.Now
	return sweep.Sweep(t.Context(), w.sweepStore, blobs, opts)
}

// record returns the GC record of key, if any.
func (w *interleaving) record(t *testing.T, key string) (cairn.GCRecord, bool) {
	t.Helper()
	for _, r := range gcRecords(t, w.store) {
		if r.Key == key {
			return r, true
		}
	}
	return cairn.GCRecord{}, false
}

// capture is one capture under way: it holds the thread's writer lease and
// knows the checkpoint it will append.
type capture struct {
	w     *interleaving
	lease *cairn.Lease
	head  string
	cp    cairn.Checkpoint
	blobs []bucket.Blob
}

// begin starts a capture on thread of a checkpoint that references blobs: it
// takes the writer lease (released when the test ends) and reads the head.
func (w *interleaving) begin(t *testing.T, thread string, blobs ...bucket.Blob) *capture {
	t.Helper()
	ctx := t.Context()
	lease, err := w.store.AcquireWriter(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Release(context.Background()) })
	head, err := w.store.GetHead(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	w.n++
	cp := cairn.Checkpoint{ID: fmt.Sprintf("%s-%d", thread, w.n), ThreadID: thread, ParentCheckpointID: head,
		CreatedAt: float64(w.n), Reason: cairn.ReasonAutomatic, Conversation: json.RawMessage(`[]`)}
	for i, b := range blobs {
		if cairn.IsArtifactBlobKey(b.Key) {
			cp.Artifacts = append(cp.Artifacts, cairn.Artifact{ArtifactID: fmt.Sprint("a", i), Name: "a", MimeType: "text/plain",
				Size: int64(len(b.Data)), BlobKey: b.Key})
		} else {
			cp.Files = append(cp.Files, cairn.Entry{Path: fmt.Sprintf("f%d.txt", i), Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(b.Data))})
		}
	}
	return &capture{w: w, lease: lease, head: head, cp: cp, blobs: blobs}
}

// upload claims and stores the capture's blobs: bucket.UploadBlobs through
// the world's watching claimer, or bucket.PutBlobs in an unprotected world.
func (c *capture) upload(ctx context.Context) (bucket.UploadResult, error) {
	if c.w.mode == unprotected {
		return c.put(ctx)
	}
	return bucket.UploadBlobs(ctx, c.w.claims, c.lease.Writer, c.w.blobs, c.blobs)
}

// put stores the capture's blobs without the protocol.
func (c *capture) put(ctx context.Context) (bucket.UploadResult, error) {
	return bucket.PutBlobs(ctx, c.w.blobs, c.blobs)
}

// append appends the capture's checkpoint under its lease.
func (c *capture) append(ctx context.Context) error {
	_, err := c.w.store.Append(ctx, cairn.AppendInput{Checkpoint: c.cp, ExpectedHeadID: c.head, Writer: c.lease.Writer})
	return err
}

type captureResult struct {
	res bucket.UploadResult
	err error
}

// run uploads and appends on a goroutine, and sends the outcome.
func (c *capture) run(ctx context.Context) <-chan captureResult {
	done := make(chan captureResult, 1)
	go func() {
		res, err := c.upload(ctx)
		if err == nil {
			err = c.append(ctx)
		}
		done <- captureResult{res, err}
	}()
	return done
}

// recv receives from ch. The timeout only turns a hang into a failure; no
// step waits for time to pass.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}

// missingHeadBlobs returns the blob keys that the head of some thread
// references and the bucket lacks, sorted.
func (w *interleaving) missingHeadBlobs(t *testing.T) []string {
	t.Helper()
	ctx := t.Context()
	var missing []string
	for after := ""; ; {
		threads, err := w.store.ListThreads(ctx, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(threads) == 0 {
			break
		}
		for _, thread := range threads {
			after = thread
			head, err := w.store.GetHead(ctx, thread)
			if err != nil {
				t.Fatal(err)
			}
			cp, err := w.store.Get(ctx, head)
			if err != nil || cp == nil {
				t.Fatalf("head %q of %q: %v, %v", head, thread, cp, err)
			}
			for _, k := range cp.BlobKeys() {
				_, err := bucket.ReadBlob(ctx, w.blobs, k)
				switch {
				case errors.Is(err, bucket.ErrMissingBlob):
					missing = append(missing, k)
				case err != nil:
					t.Fatalf("blob %s of head %q: %v", k, head, err)
				}
			}
		}
	}
	slices.Sort(missing)
	return missing
}

// checkHeads checks that every head's blobs are in the bucket, with bytes
// that match their keys.
func (w *interleaving) checkHeads(t *testing.T) {
	t.Helper()
	if missing := w.missingHeadBlobs(t); len(missing) > 0 {
		t.Errorf("heads reference blobs the bucket lacks: %v", missing)
	}
}

// checkNothingAppended checks that thread has no checkpoint.
func (w *interleaving) checkNothingAppended(t *testing.T, thread string) {
	t.Helper()
	list, err := w.store.List(t.Context(), thread)
	if err != nil || len(list) != 0 {
		t.Errorf("thread %q has %d checkpoints (%v); want none appended", thread, len(list), err)
	}
}

// checkNoWait checks that no claim found a busy key.
func (w *interleaving) checkNoWait(t *testing.T) {
	t.Helper()
	if got := w.claims.busyAnswers(); len(got) != 0 || len(w.claims.waiting) != 0 {
		t.Errorf("claims found busy %v; want none", got)
	}
}

// watchClaimer passes claims to the store, records the busy keys they found,
// and sends the keys of each WaitBlobs call to waiting before it waits.
type watchClaimer struct {
	cairn.BlobClaimer
	waiting chan []string

	mu   sync.Mutex
	busy [][]string
}

func (c *watchClaimer) ClaimBlobs(ctx context.Context, w cairn.Writer, keys []string) ([]string, error) {
	busy, err := c.BlobClaimer.ClaimBlobs(ctx, w, keys)
	if len(busy) > 0 {
		c.mu.Lock()
		c.busy = append(c.busy, slices.Clone(busy))
		c.mu.Unlock()
	}
	return busy, err
}

func (c *watchClaimer) WaitBlobs(ctx context.Context, keys []string) error {
	select {
	case c.waiting <- slices.Clone(keys):
	case <-ctx.Done():
		return ctx.Err()
	}
	return c.BlobClaimer.WaitBlobs(ctx, keys)
}

func (c *watchClaimer) busyAnswers() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.busy)
}

// plainStore is a store seen without the online sweep protocol: only the
// plain methods, pruning and thread listing are forwarded.
type plainStore struct {
	cairn.Store
	cairn.Pruner
	cairn.ThreadLister
}

var errLostAnswer = errors.New("connection reset after the request was sent")

// lostAnswer is a bucket whose Delete, while fail is set, deletes the keys and
// then fails as a whole, as when the answer of a request that worked is lost.
type lostAnswer struct {
	*bucket.Memory
	fail bool
}

func (b *lostAnswer) Delete(ctx context.Context, keys []string) (bucket.DeleteResult, error) {
	res, err := b.Memory.Delete(ctx, keys)
	if err != nil || !b.fail {
		return res, err
	}
	failed := make([]bucket.KeyError, len(keys))
	for i, k := range keys {
		failed[i] = bucket.KeyError{Key: k, Err: errLostAnswer}
	}
	return bucket.DeleteResult{Failed: failed}, errLostAnswer
}

// inFlight is a bucket whose first Delete calls during before it deletes.
type inFlight struct {
	*bucket.Memory
	during func()
}

func (b *inFlight) Delete(ctx context.Context, keys []string) (bucket.DeleteResult, error) {
	if f := b.during; f != nil {
		b.during = nil
		f()
	}
	return b.Memory.Delete(ctx, keys)
}
