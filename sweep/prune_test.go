package sweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/sweep"
)

// capturer appends checkpoints to a store the way a capture does: it takes
// the thread's writer lease, uploads the blobs under claims (bucket.UploadBlobs),
// then appends a checkpoint that references them.
type capturer struct {
	store *cairn.MemoryStore
	blobs bucket.Bucket
	n     int
}

// capture appends a checkpoint to thread with one file per content and one
// artifact per artifact content, and returns its id.
func (c *capturer) capture(t *testing.T, thread string, files, artifacts []string) string {
	t.Helper()
	ctx := t.Context()
	var blobs []bucket.Blob
	cp := cairn.Checkpoint{ThreadID: thread, Reason: cairn.ReasonAutomatic, Conversation: json.RawMessage(`[]`)}
	for i, f := range files {
		b := bucket.FileBlob([]byte(f))
		blobs = append(blobs, b)
		cp.Files = append(cp.Files, cairn.Entry{Path: fmt.Sprintf("f%d.txt", i), Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(f))})
	}
	for i, a := range artifacts {
		b := bucket.ArtifactBlob([]byte(a))
		blobs = append(blobs, b)
		cp.Artifacts = append(cp.Artifacts, cairn.Artifact{ArtifactID: fmt.Sprint("a", i), Name: "a", MimeType: "text/plain", Size: int64(len(a)), BlobKey: b.Key})
	}
	lease, err := c.store.AcquireWriter(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.WithoutCancel(ctx))
	if _, err := bucket.UploadBlobs(ctx, c.store, lease.Writer, c.blobs, blobs); err != nil {
		t.Fatal(err)
	}
	head, err := c.store.GetHead(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	c.n++
	cp.ID = fmt.Sprintf("%s-%d", thread, c.n)
	cp.ParentCheckpointID = head
	cp.CreatedAt = float64(c.n)
	if _, err := c.store.Append(ctx, cairn.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: lease.Writer}); err != nil {
		t.Fatal(err)
	}
	return cp.ID
}

func newStore(t *testing.T) *cairn.MemoryStore {
	t.Helper()
	s, err := cairn.NewMemoryStore(cairn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// gcRecords returns the store's GC records.
func gcRecords(t *testing.T, c cairn.BlobCollector) []cairn.GCRecord {
	t.Helper()
	view, err := c.ReadBlobGC(t.Context(), func(cairn.BlobReference) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return view.Records
}

// recordKeys returns the keys of records in the given state.
func recordKeys(recs []cairn.GCRecord, state cairn.GCState) []string {
	var out []string
	for _, r := range recs {
		if r.State == state {
			out = append(out, r.Key)
		}
	}
	return out
}

// TestRun checks the user's order on a memory store, which runs the online
// protocol: keep the newest checkpoint of every thread, skip a thread another
// writer holds, then sweep the blobs only the removed checkpoints used, and
// keep the rest. A run marks the blobs it first finds unused and a run at
// least OlderThan later deletes them. A dry run before each real run changes
// nothing and reports what the real run then deletes.
func TestRun(t *testing.T) {
	for _, dry := range []bool{false, true} {
		t.Run(fmt.Sprintf("DryRun=%t", dry), func(t *testing.T) {
			ctx := t.Context()
			clock := now.Add(-48 * time.Hour)
			mem := bucket.NewMemory(func() time.Time { return clock })
			store := newStore(t)
			c := &capturer{store: store, blobs: mem}
			// thread-a: three checkpoints; the first two go.
			c.capture(t, "thread-a", []string{"a1", "shared"}, []string{"art-a1"})
			c.capture(t, "thread-a", []string{"a2", "shared"}, nil)
			c.capture(t, "thread-a", []string{"a3", "shared"}, nil)
			// thread-b: one checkpoint, nothing goes.
			c.capture(t, "thread-b", []string{"b1", "a1"}, nil)
			// thread-c: two checkpoints, but another writer holds it.
			c.capture(t, "thread-c", []string{"c1"}, nil)
			c.capture(t, "thread-c", []string{"c2"}, nil)
			busy, err := store.AcquireWriter(ctx, "thread-c")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Release(context.WithoutCancel(ctx))
			// An orphan: uploaded long ago, never referenced.
			if _, err := mem.PutIfAbsent(ctx, bucket.FileKey([]byte("orphan")), []byte("orphan")); err != nil {
				t.Fatal(err)
			}
			run := func(at time.Time, dry bool) sweep.RunReport {
				t.Helper()
				rep, err := sweep.Run(ctx, store, mem, sweep.RunOptions{Keep: 1, ThreadPageSize: 2,
					Sweep: sweep.Options{OlderThan: time.Hour, Now: func() time.Time { return at }, DryRun: dry}})
				if err != nil {
					t.Fatalf("Run(at %v, dry run %t): %v", at, dry, err)
				}
				if !rep.Sweep.Online || rep.Prune.DryRun != dry || rep.Sweep.DryRun != dry {
					t.Errorf("Run(at %v, dry run %t) report %+v; want the online protocol and the dry-run flags", at, dry, rep)
				}
				return rep
			}
			checkPrune := func(rep sweep.PruneReport, threads int, want []sweep.ThreadPruned, wantBusy []string) {
				t.Helper()
				removed := 0
				for _, p := range want {
					removed += p.Removed
				}
				if !slices.Equal(rep.Pruned, want) || rep.Removed != removed || rep.Threads != threads || !slices.Equal(rep.Busy, wantBusy) {
					t.Errorf("prune report = %+v; want pruned %v, %d removed, %d threads, busy %v", rep, want, removed, threads, wantBusy)
				}
			}
			// unchanged runs a dry run and checks that it changed nothing.
			unchanged := func(at time.Time) sweep.RunReport {
				t.Helper()
				keys, recs := memKeys(t, mem), gcRecords(t, store)
				listA, _ := store.List(ctx, "thread-a")
				rep := run(at, true)
				if got := memKeys(t, mem); !slices.Equal(got, keys) {
					t.Errorf("a dry run changed the bucket: %v, was %v", got, keys)
				}
				if got := gcRecords(t, store); !slices.Equal(got, recs) {
					t.Errorf("a dry run changed the GC records: %v, were %v", got, recs)
				}
				if got, _ := store.List(ctx, "thread-a"); len(got) != len(listA) {
					t.Errorf("a dry run removed checkpoints: thread-a has %d, had %d", len(got), len(listA))
				}
				return rep
			}

			// Run 1: thread-a loses two checkpoints; a2 and art-a1 were used
			// only by those, a1 is still used by thread-b. They and the orphan
			// are marked, and nothing is deleted yet.
			wantMarked := sorted(bucket.FileKey([]byte("a2")), bucket.ArtifactKey([]byte("art-a1")), bucket.FileKey([]byte("orphan")))
			if dry {
				// A dry run takes no lease, so it cannot see that thread-c is
				// busy and counts what a prune would remove there.
				rep := unchanged(now)
				checkPrune(rep.Prune, 3, []sweep.ThreadPruned{{ThreadID: "thread-a", Removed: 2}, {ThreadID: "thread-c", Removed: 1}}, nil)
				if len(rep.Sweep.Deleted) != 0 || rep.Sweep.Marked != len(wantMarked)+1 {
					t.Errorf("dry run 1 would delete %v and mark %d; want nothing before a mark, and %d marked (thread-c's blob too)",
						rep.Sweep.Deleted, rep.Sweep.Marked, len(wantMarked)+1)
				}
			}
			rep1 := run(now, false)
			checkPrune(rep1.Prune, 3, []sweep.ThreadPruned{{ThreadID: "thread-a", Removed: 2}}, []string{"thread-c"})
			if len(rep1.Sweep.Deleted) != 0 || rep1.Sweep.Marked != len(wantMarked) {
				t.Errorf("run 1 deleted %v and marked %d; want nothing deleted and %d marked", rep1.Sweep.Deleted, rep1.Sweep.Marked, len(wantMarked))
			}
			if got := recordKeys(gcRecords(t, store), cairn.GCCandidate); !slices.Equal(got, wantMarked) {
				t.Errorf("candidates after run 1 = %v; want %v", got, wantMarked)
			}

			// thread-d: two checkpoints of recent blobs, just before run 2.
			clock = now.Add(time.Hour - time.Minute)
			c.capture(t, "thread-d", []string{"d1"}, nil)
			c.capture(t, "thread-d", []string{"d2"}, nil)

			// Run 2, OlderThan after run 1: the marked blobs go; thread-d
			// loses d1's checkpoint, but d1 is too young and is only marked.
			wantDeleted := wantMarked
			if dry {
				rep := unchanged(now.Add(time.Hour))
				checkPrune(rep.Prune, 4, []sweep.ThreadPruned{{ThreadID: "thread-c", Removed: 1}, {ThreadID: "thread-d", Removed: 1}}, nil)
				if !slices.Equal(rep.Sweep.Deleted, wantDeleted) {
					t.Errorf("dry run 2 would delete %v; want %v", rep.Sweep.Deleted, wantDeleted)
				}
			}
			rep2 := run(now.Add(time.Hour), false)
			checkPrune(rep2.Prune, 4, []sweep.ThreadPruned{{ThreadID: "thread-d", Removed: 1}}, []string{"thread-c"})
			if !slices.Equal(rep2.Sweep.Deleted, wantDeleted) || rep2.Sweep.Marked != 1 {
				t.Errorf("run 2 deleted %v and marked %d; want %v and d1 marked", rep2.Sweep.Deleted, rep2.Sweep.Marked, wantDeleted)
			}
			left := memKeys(t, mem)
			for _, k := range wantDeleted {
				if slices.Contains(left, k) {
					t.Errorf("%s is still in the bucket", k)
				}
			}
			if !slices.Contains(left, bucket.FileKey([]byte("d1"))) {
				t.Error("the young d1 was deleted")
			}
			// Every blob a remaining checkpoint references is still there.
			refs, err := store.ListBlobReferences(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range refs {
				if _, err := bucket.ReadBlob(ctx, mem, r.Key); err != nil {
					t.Errorf("referenced blob %s: %v", r.Key, err)
				}
			}
		})
	}
}

// noThreads is a store without the ThreadLister capability.
type noThreads struct{ cairn.Store }

func TestPruneErrors(t *testing.T) {
	store := newStore(t)
	mem := bucket.NewMemory(nil)
	tests := []struct {
		name  string
		store cairn.Store
		opts  sweep.RunOptions
		want  error
	}{
		{"KeepZero", store, sweep.RunOptions{Keep: 0, Sweep: sweep.Options{OlderThan: time.Hour}}, sweep.ErrInvalidArgument},
		{"NegativeThreadPage", store, sweep.RunOptions{Keep: 1, ThreadPageSize: -1, Sweep: sweep.Options{OlderThan: time.Hour}}, sweep.ErrInvalidArgument},
		{"NegativeOlderThanBeforePruning", store, sweep.RunOptions{Keep: 1, Sweep: sweep.Options{OlderThan: -time.Second}}, sweep.ErrInvalidArgument},
		{"NoThreadLister", noThreads{store}, sweep.RunOptions{Keep: 1, Sweep: sweep.Options{OlderThan: time.Hour}}, cairn.ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := sweep.Run(t.Context(), tc.store, mem, tc.opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run error = %v; want %v", err, tc.want)
			}
			if rep.Prune.Threads != 0 || rep.Sweep.Listed != 0 {
				t.Fatalf("Run did work before failing: %+v", rep)
			}
		})
	}
}

// failingStore fails ListThreads, so the sweep must not run.
type failingStore struct{ *cairn.MemoryStore }

func (failingStore) ListThreads(context.Context, string, int) ([]string, error) {
	return nil, errInjected
}

func TestRunDoesNotSweepAfterAFailedPrune(t *testing.T) {
	ev := &events{}
	blobs := &fakeBlobs{Memory: stage(t, manyObjects(3, 2*time.Hour)), ev: ev}
	_, err := sweep.Run(t.Context(), failingStore{newStore(t)}, blobs, sweep.RunOptions{Keep: 1, Sweep: sweep.Options{OlderThan: time.Hour}})
	if !errors.Is(err, errInjected) {
		t.Fatalf("Run error = %v; want the ListThreads error", err)
	}
	if n := ev.count("list"); n != 0 {
		t.Fatalf("the bucket was listed %d times after the prune failed", n)
	}
}
