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

// capturer appends checkpoints to a store the way a capture does: it uploads
// the blobs first, then appends a checkpoint that references them.
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
	if _, err := bucket.PutBlobs(ctx, c.blobs, blobs); err != nil {
		t.Fatal(err)
	}
	lease, err := c.store.AcquireWriter(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.WithoutCancel(ctx))
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

// TestRun checks the user's order on a memory store: keep the newest
// checkpoint of every thread, skip a thread another writer holds, then sweep
// the blobs only the removed checkpoints used, and keep the rest.
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
			// thread-d: two checkpoints whose blobs are recent.
			clock = now.Add(-time.Minute)
			c.capture(t, "thread-d", []string{"d1"}, nil)
			c.capture(t, "thread-d", []string{"d2"}, nil)
			// An orphan: uploaded long ago, never referenced.
			clock = now.Add(-48 * time.Hour)
			if _, err := mem.PutIfAbsent(ctx, bucket.FileKey([]byte("orphan")), []byte("orphan")); err != nil {
				t.Fatal(err)
			}
			before := memKeys(t, mem)

			rep, err := sweep.Run(ctx, store, mem, sweep.RunOptions{Keep: 1, ThreadPageSize: 2,
				Sweep: sweep.Options{OlderThan: time.Hour, Now: func() time.Time { return now }, DryRun: dry}})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			wantPruned := []sweep.ThreadPruned{{ThreadID: "thread-a", Removed: 2}, {ThreadID: "thread-d", Removed: 1}}
			wantBusy := []string{"thread-c"}
			if dry {
				// A dry run takes no lease, so it cannot see that thread-c is
				// busy and counts what a prune would remove there.
				wantPruned = slices.Insert(wantPruned, 1, sweep.ThreadPruned{ThreadID: "thread-c", Removed: 1})
				wantBusy = nil
			}
			removed := 0
			for _, p := range wantPruned {
				removed += p.Removed
			}
			if !slices.Equal(rep.Prune.Pruned, wantPruned) || rep.Prune.Removed != removed || rep.Prune.Threads != 4 ||
				!slices.Equal(rep.Prune.Busy, wantBusy) || rep.Prune.DryRun != dry {
				t.Errorf("prune report = %+v; want pruned %v, %d removed, 4 threads, busy %v", rep.Prune, wantPruned, removed, wantBusy)
			}
			// a2 and art-a1 were used only by pruned checkpoints of thread-a;
			// a1 is still used by thread-b; d1 is too young.
			var wantDeleted []string
			if !dry {
				wantDeleted = sorted(bucket.FileKey([]byte("a2")), bucket.ArtifactKey([]byte("art-a1")), bucket.FileKey([]byte("orphan")))
			} else {
				// A dry run removes no checkpoint, so only the orphan is unreferenced.
				wantDeleted = []string{bucket.FileKey([]byte("orphan"))}
			}
			if !slices.Equal(rep.Sweep.Deleted, wantDeleted) {
				t.Errorf("swept %v; want %v", rep.Sweep.Deleted, wantDeleted)
			}
			left := memKeys(t, mem)
			if dry {
				if !slices.Equal(left, before) {
					t.Errorf("a dry run changed the bucket: %v, was %v", left, before)
				}
				if got, _ := store.List(ctx, "thread-a"); len(got) != 3 {
					t.Errorf("a dry run removed checkpoints: thread-a has %d", len(got))
				}
				return
			}
			for _, k := range wantDeleted {
				if slices.Contains(left, k) {
					t.Errorf("%s is still in the bucket", k)
				}
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
