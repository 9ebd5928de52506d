//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package snapshot_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/treetest"
	"github.com/cairnstore/cairn/snapshot"
)

// heldBlobs is a bucket whose first Get waits until release is closed,
// after closing started: a restore held in the middle of its downloads.
// Behind onlyBlobs, which hides its streaming reads, every download goes
// through Get.
type heldBlobs struct {
	*bucket.Memory
	started, release chan struct{}
	first            chan struct{} // takes one value: the Get that waits
}

func newHeldBlobs(m *bucket.Memory) *heldBlobs {
	h := &heldBlobs{Memory: m, started: make(chan struct{}), release: make(chan struct{}), first: make(chan struct{}, 1)}
	h.first <- struct{}{}
	return h
}

func (h *heldBlobs) Get(ctx context.Context, key string) ([]byte, error) {
	select {
	case <-h.first:
		close(h.started)
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	default:
	}
	return h.Memory.Get(ctx, key)
}

// onlyBlobs hides every method of a bucket but those of snapshot.Blobs.
type onlyBlobs struct{ b snapshot.Blobs }

func (o onlyBlobs) Get(ctx context.Context, key string) ([]byte, error) { return o.b.Get(ctx, key) }
func (o onlyBlobs) Head(ctx context.Context, key string) (bucket.Object, error) {
	return o.b.Head(ctx, key)
}
func (o onlyBlobs) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	return o.b.PutIfAbsent(ctx, key, data)
}

// TestRestoreOneAtATime: while a restore into a directory runs, a second
// restore into it (by its path or through a symlink to it, into an absent or
// a populated target) is refused with ErrWorkspaceBusy before it touches
// anything, the first one's staging directory included; the first one then
// completes as if alone, and a restore after it runs.
func TestRestoreOneAtATime(t *testing.T) {
	first := map[string]string{"a.txt": "alpha", "b/c.txt": "gamma"}
	second := map[string]string{"other.txt": "omega"}
	for _, tc := range []struct {
		name      string
		populated bool
		viaLink   bool
	}{
		{"absent target", false, false},
		{"populated target", true, false},
		{"through a symlink", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			cp1, cp2 := e.capturedOn(t, "first", first), e.capturedOn(t, "second", second)
			parent := t.TempDir()
			dst := filepath.Join(parent, "ws")
			before := map[string]string{"stale.txt": "x"}
			if tc.populated {
				treetest.Write(t, dst, before)
			}
			other := dst
			if tc.viaLink {
				other = filepath.Join(t.TempDir(), "link")
				if err := os.Symlink(dst, other); err != nil {
					t.Fatal(err)
				}
			}
			held := newHeldBlobs(e.blobs)
			done := make(chan error, 1)
			go func() {
				_, err := snapshot.Restore(context.Background(), onlyBlobs{held}, cp1, dst, &snapshot.Options{Concurrency: 1})
				done <- err
			}()
			<-held.started
			staging := stagingDirs(t, parent)
			if len(staging) != 1 {
				t.Fatalf("staging directories beside the target while a restore runs: %v", staging)
			}

			_, err := snapshot.Restore(context.Background(), e.blobs, cp2, other, nil)
			if !errors.Is(err, snapshot.ErrWorkspaceBusy) {
				t.Fatalf("a second restore while one runs: %v, want %v", err, snapshot.ErrWorkspaceBusy)
			}
			if !strings.Contains(err.Error(), "another restore") {
				t.Errorf("the error does not say why: %v", err)
			}
			if got := stagingDirs(t, parent); !slices.Equal(got, staging) {
				t.Errorf("the refused restore changed the staging directories: %v, then %v", staging, got)
			}
			if tc.populated {
				if got := treetest.Read(t, dst); !maps.Equal(got, before) {
					t.Errorf("the refused restore touched the target: %v", got)
				}
			}

			close(held.release)
			if err := <-done; err != nil {
				t.Fatalf("the first restore: %v", err)
			}
			if got := treetest.Read(t, dst); !maps.Equal(got, first) {
				t.Errorf("after the first restore the target holds %v, want %v", got, first)
			}
			if _, err := snapshot.Restore(context.Background(), e.blobs, cp2, other, nil); err != nil {
				t.Fatalf("a restore after the first one ended: %v", err)
			}
			if got := treetest.Read(t, dst); !maps.Equal(got, second) {
				t.Errorf("after the second restore the target holds %v, want %v", got, second)
			}
			if left := hidden(t, parent); len(left) != 0 {
				t.Errorf("left beside the target: %v", left)
			}
		})
	}
}

// TestRestoreLockOfADeadRestore: a lock file that no process holds (its
// restore died: the kernel let go of the lock) does not stop a restore.
func TestRestoreLockOfADeadRestore(t *testing.T) {
	e := newEnv(t)
	tree := map[string]string{"a.txt": "alpha"}
	cp := e.captured(t, tree)
	parent := t.TempDir()
	dst := filepath.Join(parent, "ws")
	lock := filepath.Join(parent, ".ws.cairn-restore.lock")
	if err := os.WriteFile(lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.Restore(context.Background(), e.blobs, cp, dst, nil); err != nil {
		t.Fatal(err)
	}
	if got := treetest.Read(t, dst); !maps.Equal(got, tree) {
		t.Errorf("restored %v, want %v", got, tree)
	}
	if _, err := os.Stat(lock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lock file is still there after the restore: %v", err)
	}
}

// stagingDirs lists the restore staging directories in dir.
func stagingDirs(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, n := range hidden(t, dir) {
		if strings.Contains(n, ".cairn-restore-") {
			out = append(out, n)
		}
	}
	return out
}

// hidden lists the names in dir that start with a dot.
func hidden(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}
