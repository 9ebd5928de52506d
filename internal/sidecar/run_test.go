package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/goleak"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/childproc"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/keys"
	"github.com/cairnstore/cairn/sweep"
)

func TestMain(m *testing.M) {
	// The goroutine that starts helper servers lives as long as the process.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(childproc.Spawner))
}

// now is the sweep clock of these tests; blobs are uploaded a day before.
var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// fixture is a store on an embedded etcd and a memory bucket with seeded
// checkpoints and orphans.
type fixture struct {
	client *clientv3.Client
	prefix string
	store  *etcdstore.Store
	mem    *bucket.Memory
	blobs  *recordingBlobs
	log    *syncWriter
	// orphans are blobs no checkpoint references; prunedOnly are the blobs
	// only the checkpoints that --keep 1 removes reference.
	orphans, prunedOnly []string
}

// newFixture returns a fixture under a prefix of its own on the client's
// etcd, seeded when seed is true.
func newFixture(t *testing.T, client *clientv3.Client, seed bool) *fixture {
	t.Helper()
	prefixMu.Lock()
	prefixes++
	prefix := fmt.Sprintf("run-test-%d/", prefixes)
	prefixMu.Unlock()
	f := &fixture{client: client, prefix: prefix, log: &syncWriter{}}
	var err error
	f.store, err = etcdstore.New(client, prefix, etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.store.Close() })
	f.mem = bucket.NewMemory(func() time.Time { return now.Add(-24 * time.Hour) })
	f.blobs = &recordingBlobs{Memory: f.mem}
	// Writers bind the store to the bucket before their first upload
	// (bucket.UploadBlobs does); the fixture uploads with bucket.PutBlobs.
	if err := bucket.BindStore(t.Context(), f.store, f.mem); err != nil {
		t.Fatal(err)
	}
	if seed {
		f.seed(t)
	}
	return f
}

var (
	prefixMu sync.Mutex
	prefixes int
)

// seed appends three checkpoints to thread alpha and one to beta, and
// uploads three orphans.
func (f *fixture) seed(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	for i, c := range []struct{ thread, content string }{
		{"alpha", "alpha 1"}, {"alpha", "alpha 2"}, {"alpha", "alpha 3"}, {"beta", "beta 1"},
	} {
		files := []bucket.Blob{bucket.FileBlob([]byte(c.content)), bucket.FileBlob([]byte("shared"))}
		if _, err := bucket.PutBlobs(ctx, f.mem, files); err != nil {
			t.Fatal(err)
		}
		lease, err := f.store.AcquireWriter(ctx, c.thread)
		if err != nil {
			t.Fatal(err)
		}
		head, err := f.store.GetHead(ctx, c.thread)
		if err != nil {
			t.Fatal(err)
		}
		cp := cairn.Checkpoint{ID: fmt.Sprintf("cp-%d", i), ThreadID: c.thread, ParentCheckpointID: head, CreatedAt: float64(i),
			Reason: cairn.ReasonAutomatic, Conversation: json.RawMessage(`[]`)}
		for j, b := range files {
			cp.Files = append(cp.Files, cairn.Entry{Path: fmt.Sprintf("f%d", j), Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(b.Data))})
		}
		if _, err := f.store.Append(ctx, cairn.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: lease.Writer}); err != nil {
			t.Fatal(err)
		}
		lease.Release(ctx)
	}
	f.prunedOnly = []string{bucket.FileKey([]byte("alpha 1")), bucket.FileKey([]byte("alpha 2"))}
	for i := range 5 {
		b := bucket.FileBlob(fmt.Appendf(nil, "orphan %d", i))
		if _, err := f.mem.PutIfAbsent(ctx, b.Key, b.Data); err != nil {
			t.Fatal(err)
		}
		f.orphans = append(f.orphans, b.Key)
	}
	slices.Sort(f.orphans)
}

// sweeper returns a Sweeper of the fixture with opts (Now defaults to now).
func (f *fixture) sweeper(t *testing.T, opts RunOptions, m *Metrics) *Sweeper {
	t.Helper()
	if opts.Now == nil {
		opts.Now = func() time.Time { return now }
	}
	opts.RequestTimeout = 5 * time.Second
	s := NewSweeper(f.client, f.store, f.blobs, opts, cli.NewLogger(f.log, "json", slog.LevelDebug), m)
	t.Cleanup(s.Close)
	return s
}

// keys returns the bucket's keys, sorted.
// keys returns the bucket's content keys: those under the prefixes a sweep
// lists, not the binding registry's.
func (f *fixture) keys(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, prefix := range sweep.Prefixes {
		for o, err := range bucket.Objects(t.Context(), f.mem, prefix, 0) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, o.Key)
		}
	}
	return out
}

func (f *fixture) checkpoints(t *testing.T, thread string) int {
	t.Helper()
	list, err := f.store.List(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// status reads the sweeper's status record.
func (f *fixture) status(t *testing.T) *Status {
	t.Helper()
	l := newLocker(f.client, keys.NewLayout(f.prefix), time.Minute, 5*time.Second, slog.New(slog.DiscardHandler))
	defer l.close()
	st, err := l.readStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// deleteLockKeys deletes every key of the sweeper lock, as an expired session
// would.
func (f *fixture) deleteLockKeys(t *testing.T) {
	t.Helper()
	key := string(keys.NewLayout(f.prefix).Locks()) + LockName + "/"
	if _, err := f.client.Delete(context.Background(), key, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
}

// syncWriter is a log buffer that the sweeper writes and the test reads.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// recordingBlobs is the memory bucket with hooks on listing and deleting.
type recordingBlobs struct {
	*bucket.Memory
	mu       sync.Mutex
	batches  [][]string
	onList   func()
	onDelete func(batch []string)
	refuse   map[string]bool
}

func (r *recordingBlobs) List(ctx context.Context, prefix, token string, limit int) (bucket.Page, error) {
	if r.onList != nil {
		r.onList()
	}
	return r.Memory.List(ctx, prefix, token, limit)
}

func (r *recordingBlobs) Delete(ctx context.Context, keys []string) (bucket.DeleteResult, error) {
	if len(keys) == 1 && strings.HasPrefix(keys[0], bucket.SweepMarkerPrefix) {
		return r.Memory.Delete(ctx, keys) // the sweep's marker, not a batch
	}
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(keys))
	r.mu.Unlock()
	if r.onDelete != nil {
		r.onDelete(keys)
	}
	var ok []string
	var res bucket.DeleteResult
	for _, k := range keys {
		if r.refuse[k] {
			res.Failed = append(res.Failed, bucket.KeyError{Key: k, Err: bucket.ErrAccessDenied})
			continue
		}
		ok = append(ok, k)
	}
	done, err := r.Memory.Delete(ctx, ok)
	res.Deleted = done.Deleted
	if err == nil && len(res.Failed) > 0 {
		err = bucket.ErrPartialDelete
	}
	return res, err
}

func TestRun(t *testing.T) {
	_, client := embedetcd.ForTest(t)
	t.Run("PrunesThenSweeps", func(t *testing.T) {
		f := newFixture(t, client, true)
		m := NewMetrics(false)
		before := f.keys(t)
		rep, err := f.sweeper(t, RunOptions{Keep: 1, OlderThan: 0, Verify: true}, m).Run(t.Context(), t.Context(), LockMode{})
		if err != nil {
			t.Fatalf("Run: %v\n%s", err, f.log.String())
		}
		want := without(before, f.orphans, f.prunedOnly)
		if got := f.keys(t); !slices.Equal(got, want) {
			t.Errorf("bucket = %v; want %v", got, want)
		}
		equal(t, "pruned", rep.Prune.Removed, 2)
		equal(t, "deleted", len(rep.Sweep.Deleted), 7)
		equal(t, "checkpoints of alpha", f.checkpoints(t, "alpha"), 1)
		if rep.Verify == nil || !rep.Verify.OK() {
			t.Errorf("verify report = %+v; want no problems", rep.Verify)
		}
		if !rep.Locked || rep.LockRevision == 0 {
			t.Errorf("report says locked=%t at revision %d", rep.Locked, rep.LockRevision)
		}
		st := f.status(t)
		if st == nil || st.Phase != "done" || st.Result != "success" || st.Deleted != 7 || st.Pruned != 2 || st.LastSuccessAt == nil || st.RunID != rep.RunID {
			t.Errorf("status = %+v", st)
		}
		if !strings.Contains(f.log.String(), `"msg":"Deleted 7 blobs"`) {
			t.Errorf("no summary line in the log:\n%s", f.log.String())
		}
		for name, want := range map[string]float64{
			`runs_total{result="success"}`: 1, "deleted_blobs_total": 7, "pruned_checkpoints_total": 2,
			"freed_bytes_total": float64(rep.Sweep.BytesFreed), "lock_held": 0, "bucket_blobs": 10,
			"unreferenced_blobs": 7, "referenced_blob_keys": 3, "verify_problems": 0, "dry_run": 0,
			"marked_blobs_total": 7, "aborted_deletes_total": 0, "claimed_blobs": 0, "unsettled_deletes": 0, "waiting_candidates": 0,
		} {
			equal(t, name, gauge(t, m, name), want)
		}
		if gauge(t, m, "last_success_timestamp_seconds") == 0 {
			t.Errorf("last_success_timestamp_seconds is 0")
		}
	})

	t.Run("Mirror", func(t *testing.T) {
		// The incremental sweep, with a full run's comparison at each run:
		// the same deletions as the walk's.
		f := newFixture(t, client, true)
		mirror := f.mirror(t)
		m := NewMetrics(false)
		before := f.keys(t)
		sw := f.sweeper(t, RunOptions{Keep: 1, OlderThan: 0, Verify: true, Mirror: mirror, FullRunEvery: time.Nanosecond}, m)
		rep, err := sw.Run(t.Context(), t.Context(), LockMode{})
		if err != nil {
			t.Fatalf("Run: %v\n%s", err, f.log.String())
		}
		if got, want := f.keys(t), without(before, f.orphans, f.prunedOnly); !slices.Equal(got, want) {
			t.Errorf("bucket = %v; want %v", got, want)
		}
		equal(t, "deleted", len(rep.Sweep.Deleted), 7)
		if !strings.Contains(f.log.String(), "full run: the mirror equals the walk") {
			t.Errorf("no full run in the log:\n%s", f.log.String())
		}
		for name, want := range map[string]float64{
			"mirror_mismatches_total": 0, "mirror_rebuilds": 1, "mirror_watch_restarts": 0,
		} {
			equal(t, name, gauge(t, m, name), want)
		}
		for _, name := range []string{"mirror_revision", "mirror_counts_written"} {
			if gauge(t, m, name) == 0 {
				t.Errorf("%s is 0 after the mirror's build", name)
			}
		}
	})

	t.Run("MirrorIncremental", func(t *testing.T) {
		// Without a full run due, the first run lists (the mirror is new)
		// and records that it did; the next names its candidates from the
		// mirror: nothing changed, so it lists nothing and reads nothing.
		f := newFixture(t, client, true)
		mirror := f.mirror(t)
		m := NewMetrics(false)
		before := f.keys(t)
		sw := f.sweeper(t, RunOptions{Keep: 1, OlderThan: 0, Verify: true, Mirror: mirror}, m)
		rep, err := sw.Run(t.Context(), t.Context(), LockMode{})
		if err != nil {
			t.Fatalf("Run: %v\n%s", err, f.log.String())
		}
		if rep.Sweep.Incremental || rep.Sweep.ListRequests == 0 {
			t.Errorf("first run: incremental %v, %d LIST requests; want a listing", rep.Sweep.Incremental, rep.Sweep.ListRequests)
		}
		if got, want := f.keys(t), without(before, f.orphans, f.prunedOnly); !slices.Equal(got, want) {
			t.Errorf("bucket = %v; want %v", got, want)
		}
		listed := gauge(t, m, "bucket_blobs")
		rep, err = sw.Run(t.Context(), t.Context(), LockMode{})
		if err != nil {
			t.Fatalf("second Run: %v\n%s", err, f.log.String())
		}
		if !rep.Sweep.Incremental || rep.Sweep.ListRequests != 0 || rep.Sweep.HeadRequests != 0 || len(rep.Sweep.Deleted) != 0 {
			t.Errorf("second run: incremental %v, %d LIST, %d HEAD, %d deleted; want none of them",
				rep.Sweep.Incremental, rep.Sweep.ListRequests, rep.Sweep.HeadRequests, len(rep.Sweep.Deleted))
		}
		equal(t, "last_sweep_incremental", gauge(t, m, "last_sweep_incremental"), 1)
		equal(t, "bucket_blobs after a run that listed nothing", gauge(t, m, "bucket_blobs"), listed)
	})

	t.Run("DryRunChangesNothing", func(t *testing.T) {
		f := newFixture(t, client, true)
		m := NewMetrics(true)
		before := f.keys(t)
		rep, err := f.sweeper(t, RunOptions{Keep: 1, OlderThan: 0, DryRun: true}, m).Run(t.Context(), t.Context(), LockMode{})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got := f.keys(t); !slices.Equal(got, before) {
			t.Errorf("a dry run changed the bucket")
		}
		equal(t, "checkpoints of alpha", f.checkpoints(t, "alpha"), 3)
		equal(t, "would prune", rep.Prune.Removed, 2)
		// As many as the real run deletes: the blobs only the pruned
		// checkpoints use count too.
		equal(t, "would delete", len(rep.Sweep.Deleted), 7)
		equal(t, "delete requests", len(f.blobs.batches), 0)
		if st := f.status(t); st == nil || !st.DryRun || st.LastSuccessAt != nil {
			t.Errorf("status after a dry run = %+v; want dryRun and no lastSuccessAt", st)
		}
		equal(t, "dry_run gauge", gauge(t, m, "dry_run"), 1)
		if !strings.Contains(f.log.String(), "Dry run: would delete 7 blobs") {
			t.Errorf("no dry-run summary in the log")
		}
	})

	t.Run("LockHeld", func(t *testing.T) {
		f := newFixture(t, client, true)
		before := f.keys(t)
		holdLock(t, f)
		m := NewMetrics(false)
		for _, mode := range []LockMode{{}, {Timeout: 300 * time.Millisecond}} {
			t.Run(fmt.Sprintf("Timeout=%v", mode.Timeout), func(t *testing.T) {
				began := time.Now()
				rep, err := f.sweeper(t, RunOptions{Keep: 1}, m).Run(t.Context(), t.Context(), mode)
				if !errors.Is(err, ErrLockHeld) || ExitCode(err) != ExitLockHeld {
					t.Fatalf("err = %v; want ErrLockHeld", err)
				}
				if took := time.Since(began); took < mode.Timeout {
					t.Errorf("gave up after %v; want at least %v", took, mode.Timeout)
				}
				if rep.Locked {
					t.Errorf("the report says the lock was taken")
				}
				if got := f.keys(t); !slices.Equal(got, before) {
					t.Errorf("the bucket changed without the lock")
				}
			})
		}
		equal(t, "lock_held runs", gauge(t, m, `runs_total{result="lock_held"}`), 2)
	})

	t.Run("WaitsForTheLock", func(t *testing.T) {
		f := newFixture(t, client, true)
		release := holdLock(t, f)
		done := make(chan error, 1)
		s := f.sweeper(t, RunOptions{OlderThan: 0}, nil)
		go func() {
			_, err := s.Run(t.Context(), t.Context(), LockMode{Wait: true})
			done <- err
		}()
		waitForLog(t, f.log, "another sweeper holds the lock; waiting")
		select {
		case err := <-done:
			t.Fatalf("the run ended while another sweeper held the lock: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		release()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		equal(t, "blobs left", len(f.keys(t)), 10-5)
	})

	t.Run("StopWhileWaitingForTheLock", func(t *testing.T) {
		f := newFixture(t, client, true)
		holdLock(t, f)
		stop, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		s := f.sweeper(t, RunOptions{OlderThan: 0}, nil)
		go func() {
			_, err := s.Run(t.Context(), stop, LockMode{Wait: true})
			done <- err
		}()
		waitForLog(t, f.log, "another sweeper holds the lock; waiting")
		cancel()
		if err := <-done; ExitCode(err) != ExitInterrupted {
			t.Fatalf("err = %v; want ErrInterrupted", err)
		}
	})

	t.Run("LockLostBeforeTheFirstDelete", func(t *testing.T) {
		f := newFixture(t, client, true)
		before := f.keys(t)
		f.blobs.onList = func() { f.deleteLockKeys(t) }
		m := NewMetrics(false)
		_, err := f.sweeper(t, RunOptions{OlderThan: 0}, m).Run(t.Context(), t.Context(), LockMode{})
		if !errors.Is(err, ErrLockLost) || ExitCode(err) != ExitFailure {
			t.Fatalf("err = %v; want ErrLockLost", err)
		}
		if got := f.keys(t); !slices.Equal(got, before) {
			t.Errorf("a sweeper that lost its lock deleted blobs")
		}
		equal(t, "delete requests", len(f.blobs.batches), 0)
		equal(t, "lock_lost runs", gauge(t, m, `runs_total{result="lock_lost"}`), 1)
	})

	t.Run("LockLostBetweenBatches", func(t *testing.T) {
		f := newFixture(t, client, true)
		f.blobs.onDelete = func([]string) { f.deleteLockKeys(t) }
		rep, err := f.sweeper(t, RunOptions{OlderThan: 0, BatchSize: 2}, nil).Run(t.Context(), t.Context(), LockMode{})
		if !errors.Is(err, ErrLockLost) {
			t.Fatalf("err = %v; want ErrLockLost", err)
		}
		equal(t, "delete requests", len(f.blobs.batches), 1)
		equal(t, "deleted", len(rep.Sweep.Deleted), 2)
		equal(t, "pending", len(rep.Sweep.Pending), 3)
	})

	t.Run("PruneGuardedByTheLock", func(t *testing.T) {
		f := newFixture(t, client, true)
		before := f.keys(t)
		s := f.sweeper(t, RunOptions{Keep: 1, OlderThan: 0}, nil)
		s.beforePrune = func(context.Context, *heldLock) { f.deleteLockKeys(t) }
		_, err := s.Run(t.Context(), t.Context(), LockMode{})
		if !errors.Is(err, ErrLockLost) || !errors.Is(err, etcdstore.ErrGuardFailed) {
			t.Fatalf("err = %v; want ErrLockLost from the guarded prune", err)
		}
		equal(t, "checkpoints of alpha", f.checkpoints(t, "alpha"), 3)
		if got := f.keys(t); !slices.Equal(got, before) {
			t.Errorf("the bucket changed")
		}
	})

	t.Run("StopFinishesTheBatchInFlight", func(t *testing.T) {
		f := newFixture(t, client, true)
		stop, cancel := context.WithCancel(t.Context())
		f.blobs.onDelete = func([]string) { cancel() }
		m := NewMetrics(false)
		rep, err := f.sweeper(t, RunOptions{OlderThan: 0, BatchSize: 2}, m).Run(t.Context(), stop, LockMode{})
		if ExitCode(err) != ExitInterrupted {
			t.Fatalf("err = %v; want ErrInterrupted", err)
		}
		equal(t, "delete requests", len(f.blobs.batches), 1)
		if got, want := rep.Sweep.Deleted, f.orphans[:2]; !slices.Equal(got, want) {
			t.Errorf("deleted %v; want the first batch %v", got, want)
		}
		left := f.keys(t)
		for i, k := range f.orphans {
			if gone := !slices.Contains(left, k); gone != (i < 2) {
				t.Errorf("orphan %d gone = %t; want only the first batch gone", i, gone)
			}
		}
		equal(t, "interrupted runs", gauge(t, m, `runs_total{result="interrupted"}`), 1)
		equal(t, "deleted_blobs_total", gauge(t, m, "deleted_blobs_total"), 2)
		equal(t, "list_requests_total of objects", gauge(t, m, `list_requests_total{listing="objects"}`), float64(rep.Sweep.ListRequests))
		equal(t, "list_requests_total of bindings", gauge(t, m, `list_requests_total{listing="bindings"}`), float64(rep.Sweep.BindingListRequests))
		if rep.Sweep.ListRequests == 0 || rep.Sweep.BindingListRequests == 0 {
			t.Errorf("a listing sweep reported %d LIST requests of objects, %d of bindings", rep.Sweep.ListRequests, rep.Sweep.BindingListRequests)
		}
	})

	t.Run("StopBeforeThePrune", func(t *testing.T) {
		f := newFixture(t, client, true)
		before := f.keys(t)
		stop, cancel := context.WithCancel(t.Context())
		s := f.sweeper(t, RunOptions{Keep: 1, OlderThan: 0}, nil)
		s.beforePrune = func(context.Context, *heldLock) { cancel() }
		rep, err := s.Run(t.Context(), stop, LockMode{})
		if ExitCode(err) != ExitInterrupted {
			t.Fatalf("err = %v; want ErrInterrupted", err)
		}
		if rep.Swept {
			t.Errorf("the run swept after the stop")
		}
		equal(t, "checkpoints of alpha", f.checkpoints(t, "alpha"), 3)
		if got := f.keys(t); !slices.Equal(got, before) {
			t.Errorf("the bucket changed")
		}
	})

	t.Run("PartialDelete", func(t *testing.T) {
		f := newFixture(t, client, true)
		f.blobs.refuse = map[string]bool{f.orphans[1]: true}
		m := NewMetrics(false)
		rep, err := f.sweeper(t, RunOptions{OlderThan: 0}, m).Run(t.Context(), t.Context(), LockMode{})
		if ExitCode(err) != ExitPartial {
			t.Fatalf("err = %v; want exit code %d", err, ExitPartial)
		}
		equal(t, "deleted", len(rep.Sweep.Deleted), 4)
		equal(t, "failed", len(rep.Sweep.Failed), 1)
		equal(t, "partial runs", gauge(t, m, `runs_total{result="partial"}`), 1)
		equal(t, "delete_failures_total", gauge(t, m, "delete_failures_total"), 1)
		if st := f.status(t); st.Result != "partial" || st.LastSuccessAt != nil {
			t.Errorf("status = %+v; want result partial and no lastSuccessAt", st)
		}
	})

	t.Run("EmptyStoreRefused", func(t *testing.T) {
		for _, allow := range []bool{false, true} {
			t.Run(fmt.Sprintf("AllowEmptyStore=%t", allow), func(t *testing.T) {
				f := newFixture(t, client, false)
				for i := range 3 {
					b := bucket.FileBlob(fmt.Appendf(nil, "stray %d", i))
					if _, err := f.mem.PutIfAbsent(t.Context(), b.Key, b.Data); err != nil {
						t.Fatal(err)
					}
				}
				_, err := f.sweeper(t, RunOptions{OlderThan: 0, AllowEmptyStore: allow}, nil).Run(t.Context(), t.Context(), LockMode{})
				if allow {
					if left := len(f.keys(t)); err != nil || left != 0 {
						t.Fatalf("err = %v, %d blobs left; want all deleted", err, left)
					}
					return
				}
				if !errors.Is(err, ErrEmptyStore) {
					t.Fatalf("err = %v; want ErrEmptyStore", err)
				}
				equal(t, "blobs left", len(f.keys(t)), 3)
			})
		}
	})

	t.Run("VerifyFindsProblems", func(t *testing.T) {
		f := newFixture(t, client, true)
		// Break the store: drop the index record of beta's checkpoint.
		if _, err := f.client.Delete(t.Context(), string(keys.NewLayout(f.prefix).Index("cp-3"))); err != nil {
			t.Fatal(err)
		}
		m := NewMetrics(false)
		rep, err := f.sweeper(t, RunOptions{OlderThan: 0, Verify: true}, m).Run(t.Context(), t.Context(), LockMode{})
		if !errors.Is(err, ErrVerifyProblems) || ExitCode(err) != ExitVerify {
			t.Fatalf("err = %v; want ErrVerifyProblems", err)
		}
		if rep.Verify == nil || len(rep.Verify.Problems) == 0 {
			t.Fatalf("verify report = %+v", rep.Verify)
		}
		equal(t, "verify_problems", gauge(t, m, "verify_problems"), float64(len(rep.Verify.Problems)))
	})
}

// holdLock takes the sweeper lock of the fixture's store as another sweeper
// would, and returns its release.
func holdLock(t *testing.T, f *fixture) func() {
	t.Helper()
	s, err := concurrency.NewSession(f.client, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	m := concurrency.NewMutex(s, string(keys.NewLayout(f.prefix).Locks())+LockName)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			_ = m.Unlock(context.Background())
			_ = s.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// waitForLog waits until the log holds s.
func waitForLog(t *testing.T, log *syncWriter, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", s, log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gauge returns the value of a metric of m by its name without the prefix,
// with labels as in the exposition ({result="success"}).
func gauge(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	h := &health{}
	h.handler(m).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, MetricPrefix+name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s%s in:\n%s", MetricPrefix, name, rec.Body.String())
	return 0
}

func without(keys []string, drop ...[]string) []string {
	var out []string
	for _, k := range keys {
		gone := false
		for _, d := range drop {
			gone = gone || slices.Contains(d, k)
		}
		if !gone {
			out = append(out, k)
		}
	}
	return out
}

func equal[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v; want %v", what, got, want)
	}
}

// TestRunSharedBucket: a second prefix bound to the fixture's bucket makes a
// run of the fixture's prefix alone refuse to sweep (ExitUncovered, the
// metrics, a log line naming the bucket and the prefix), in a dry run too,
// deleting no blob; a run that has the second prefix among its Others prunes
// both and sweeps the bucket.
func TestRunSharedBucket(t *testing.T) {
	_, client := embedetcd.ForTest(t)
	f := newFixture(t, client, true)
	other := newFixture(t, client, false)
	if err := bucket.BindStore(t.Context(), other.store, f.mem); err != nil {
		t.Fatal(err)
	}
	before := f.keys(t)
	for _, dry := range []bool{true, false} {
		m := NewMetrics(dry)
		rep, err := f.sweeper(t, RunOptions{Keep: 1, OlderThan: 0, DryRun: dry, Bucket: "shared"}, m).Run(t.Context(), t.Context(), LockMode{})
		if !errors.Is(err, sweep.ErrUncovered) || ExitCode(err) != ExitUncovered {
			t.Fatalf("dry run %v: err = %v; want ErrUncovered", dry, err)
		}
		equal(t, "uncovered", sweep.FormatBindings(rep.Sweep.Uncovered), sweep.FormatBindings(rep.Sweep.Bindings[1:]))
		equal(t, "uncovered_bindings", gauge(t, m, "uncovered_bindings"), 1)
		equal(t, "uncovered runs", gauge(t, m, `runs_total{result="uncovered"}`), 1)
		if !strings.Contains(f.log.String(), `"msg":"sweep refused: the bucket is bound to prefixes this sweeper does not serve; nothing deleted"`) ||
			!strings.Contains(f.log.String(), `"bucket":"shared"`) || !strings.Contains(f.log.String(), other.prefix) {
			t.Fatalf("dry run %v: no log line names the bucket and %s:\n%s", dry, other.prefix, f.log.String())
		}
	}
	// The refused run pruned its own prefix, which deletes no bytes; the
	// blobs wait for a run that covers the bucket.
	equal(t, "blobs left", len(f.keys(t)), len(before))
	equal(t, "checkpoints of alpha", f.checkpoints(t, "alpha"), 1)

	m := NewMetrics(false)
	rep, err := f.sweeper(t, RunOptions{Keep: 1, OlderThan: 0, Others: []OtherTarget{{Store: other.store, Policy: sweep.Policy{Keep: 1}, PolicyName: "other"}}}, m).
		Run(t.Context(), t.Context(), LockMode{})
	if err != nil {
		t.Fatalf("Run with the other prefix covered: %v", err)
	}
	equal(t, "deleted", len(rep.Sweep.Deleted), len(f.orphans)+len(f.prunedOnly))
	equal(t, "uncovered_bindings", gauge(t, m, "uncovered_bindings"), 0)
	equal(t, "other policy series", gauge(t, m, `policy_checkpoints_removed_total{policy="other"}`), 0)
}

// mirror opens a mirror of the fixture's store in a file of the test's.
func (f *fixture) mirror(t *testing.T) *etcdstore.Mirror {
	t.Helper()
	m, err := f.store.OpenMirror(t.Context(), filepath.Join(t.TempDir(), "mirror.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
