package snapshot_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/treetest"
	"github.com/cairnstore/cairn/snapshot"
)

func TestSaveChainsAndReusesBlobs(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{"a.txt": "1", "b/c.txt": "2"})
	first, err := snapshot.Save(ctx, e.store, e.blobs, snapshot.SaveInput{ThreadID: "t", Dir: dir, Label: "one"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Checkpoint.ParentCheckpointID != "" || first.Checkpoint.Reason != cairn.ReasonNamed || first.Stats.Uploaded != 2 {
		t.Fatalf("first save %+v", first)
	}
	treetest.Write(t, dir, map[string]string{"a.txt": "changed"})
	second, err := snapshot.Save(ctx, e.store, e.blobs, snapshot.SaveInput{ThreadID: "t", Dir: dir, ID: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if second.Checkpoint.ParentCheckpointID != first.Checkpoint.ID || second.Stats.Uploaded != 1 || second.Stats.Inherited != 1 || second.Stats.Present != 0 {
		t.Fatalf("second save: parent %q, stats %+v", second.Checkpoint.ParentCheckpointID, second.Stats)
	}
	head, err := e.store.GetHead(ctx, "t")
	if err != nil || head != "second" {
		t.Fatalf("head %q, %v", head, err)
	}
	// The lease was released: another writer may take it at once.
	lease, err := e.store.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatalf("the lease is still held after Save: %v", err)
	}
	lease.Release(ctx)
}

func TestSaveFS(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	fsys := fstest.MapFS{"x/y.txt": {Data: []byte("y"), Mode: 0o644}, "empty": {Mode: os.ModeDir | 0o755}}
	res, err := snapshot.Save(ctx, e.store, e.blobs, snapshot.SaveInput{ThreadID: "t", FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(res.Checkpoint.Files); !slices.Equal(got, []string{"empty/", "x/y.txt"}) {
		t.Fatalf("files %q", got)
	}
}

func TestSaveConflict(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	lease, err := e.store.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	_, err = snapshot.Save(ctx, e.store, e.blobs, snapshot.SaveInput{ThreadID: "t", Dir: t.TempDir()})
	if !errors.Is(err, cairn.ErrWriterConflict) {
		t.Fatalf("error %v, want ErrWriterConflict", err)
	}
}

// staleOnce fails the first n appends with a stale head, as if another
// process had appended in between.
type staleOnce struct {
	*cairn.MemoryForkStore
	mu sync.Mutex
	n  int
}

func (s *staleOnce) Append(ctx context.Context, in cairn.AppendInput) (cairn.AppendResult, error) {
	s.mu.Lock()
	fail := s.n > 0
	s.n--
	s.mu.Unlock()
	if fail {
		return cairn.AppendResult{}, cairn.NewError(cairn.CodeStaleHead, "the head moved")
	}
	return s.MemoryForkStore.Append(ctx, in)
}

func TestSaveRetriesStaleHead(t *testing.T) {
	cases := []struct {
		name     string
		stale    int
		retries  int
		attempts int // 0: ErrStaleHead expected
	}{
		{"once", 1, 0, 2},
		{"up to the bound", 3, 0, 4},
		{"beyond the bound", 4, 0, 0},
		{"no retries", 1, -1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			st := &staleOnce{MemoryForkStore: e.store, n: tc.stale}
			res, err := snapshot.Save(context.Background(), st, e.blobs, snapshot.SaveInput{ThreadID: "t", Dir: t.TempDir(), StaleHeadRetries: tc.retries})
			if tc.attempts == 0 {
				if !errors.Is(err, cairn.ErrStaleHead) {
					t.Fatalf("error %v, want ErrStaleHead", err)
				}
				return
			}
			if err != nil || res.Attempts != tc.attempts {
				t.Fatalf("result %+v, %v; want %d attempts", res, err, tc.attempts)
			}
		})
	}
}

type plainStore struct{ cairn.Store }

func TestSaveNeedsClaims(t *testing.T) {
	e := newEnv(t)
	_, err := snapshot.Save(context.Background(), plainStore{e.store}, e.blobs, snapshot.SaveInput{ThreadID: "t", Dir: t.TempDir()})
	if !errors.Is(err, snapshot.ErrClaimsRequired) {
		t.Fatalf("error %v, want ErrClaimsRequired", err)
	}
}

func TestFork(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{"a.txt": "1"})
	src, err := snapshot.Save(ctx, e.store, e.blobs, snapshot.SaveInput{ThreadID: "t", Dir: dir, Conversation: []byte(`[{"role":"user"}]`)})
	if err != nil {
		t.Fatal(err)
	}
	root, err := snapshot.Fork(ctx, e.store, snapshot.ForkInput{SourceCheckpointID: src.Checkpoint.ID, DestinationThreadID: "fork"})
	if err != nil {
		t.Fatal(err)
	}
	if root.ThreadID != "fork" || root.Reason != cairn.ReasonForkRoot || len(snapshot.Diff(src.Checkpoint, *root)) != 0 {
		t.Fatalf("root %v", root)
	}
	if head, _ := e.store.GetHead(ctx, "fork"); head != root.ID {
		t.Fatalf("fork head %q, want %q", head, root.ID)
	}
	cases := []struct {
		name  string
		store cairn.Store
		in    snapshot.ForkInput
		want  error
	}{
		{"missing source", e.store, snapshot.ForkInput{SourceCheckpointID: "nope", DestinationThreadID: "f2"}, snapshot.ErrMissingCheckpoint},
		{"destination not empty", e.store, snapshot.ForkInput{SourceCheckpointID: src.Checkpoint.ID, DestinationThreadID: "fork"}, cairn.ErrForkDestinationNotEmpty},
		{"store without fork", plainStore{e.store}, snapshot.ForkInput{SourceCheckpointID: src.Checkpoint.ID, DestinationThreadID: "f3"}, snapshot.ErrForkUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := snapshot.Fork(ctx, tc.store, tc.in); !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	f := func(p, key string, size int64) cairn.Entry {
		return cairn.Entry{Path: p, Kind: cairn.KindFile, BlobKey: key, Size: size}
	}
	d := func(p string) cairn.Entry { return cairn.Entry{Path: p, Kind: cairn.KindDir} }
	a := cairn.Checkpoint{Files: []cairn.Entry{f("same", "k1", 1), f("gone", "k2", 2), f("edited", "k3", 3), d("dir"), f("kind", "k4", 4)}}
	b := cairn.Checkpoint{Files: []cairn.Entry{f("same", "k1", 1), f("edited", "k5", 3), d("dir"), d("kind"), f("new", "k6", 6)}}
	got := snapshot.Diff(a, b)
	want := []struct {
		path string
		kind snapshot.ChangeKind
	}{{"edited", snapshot.Modified}, {"gone", snapshot.Removed}, {"kind", snapshot.Modified}, {"new", snapshot.Added}}
	if len(got) != len(want) {
		t.Fatalf("diff %+v", got)
	}
	for i, w := range want {
		if got[i].Path != w.path || got[i].Kind != w.kind {
			t.Errorf("change %d: %s %s, want %s %s", i, got[i].Kind, got[i].Path, w.kind, w.path)
		}
	}
	if len(snapshot.Diff(a, a)) != 0 {
		t.Error("a manifest differs from itself")
	}
}

// ctxBucket runs onHead with the request's context before each Head.
type ctxBucket struct {
	*bucket.Memory
	onHead func(ctx context.Context)
}

func (c ctxBucket) Head(ctx context.Context, key string) (bucket.Object, error) {
	c.onHead(ctx)
	return c.Memory.Head(ctx, key)
}

// TestSaveRenewalFailureWins: when the lease cannot be renewed mid-capture,
// the capture stops and Save reports the lost lease, not the cancellation
// it caused.
func TestSaveRenewalFailureWins(t *testing.T) {
	var now atomic.Int64
	now.Store(1_000_000)
	st, err := cairn.NewMemoryForkStore(cairn.Options{
		Now:           func() float64 { return float64(now.Load()) },
		LeaseDuration: time.Minute, RenewAfter: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	b := ctxBucket{Memory: bucket.NewMemory(nil), onHead: func(ctx context.Context) {
		now.Add(int64(time.Hour / time.Millisecond)) // the lease has expired
		select {
		case <-ctx.Done(): // the next renewal failed and ended the capture
		case <-time.After(30 * time.Second):
		}
	}}
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{"a": "1"})
	_, err = snapshot.Save(context.Background(), st, b, snapshot.SaveInput{ThreadID: "t", Dir: dir})
	if !errors.Is(err, cairn.ErrWriterLost) {
		t.Fatalf("error %v, want ErrWriterLost from the renewal", err)
	}
	if head, _ := st.GetHead(context.Background(), "t"); head != "" {
		t.Fatalf("head %q after a lost lease", head)
	}
}
