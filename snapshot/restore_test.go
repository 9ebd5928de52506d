package snapshot_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/treetest"
	"github.com/cairnstore/cairn/snapshot"
)

// captured captures tree on thread "src" and returns the checkpoint it
// would append.
func (e *env) captured(t *testing.T, tree map[string]string) *cairn.Checkpoint {
	t.Helper()
	return e.capturedOn(t, "src", tree)
}

// capturedOn captures tree under a writer lease of thread, held until the
// test ends, and returns the checkpoint it would append.
func (e *env) capturedOn(t *testing.T, thread string, tree map[string]string) *cairn.Checkpoint {
	t.Helper()
	dir := t.TempDir()
	treetest.Write(t, dir, tree)
	m, err := snapshot.CaptureDir(context.Background(), dir, nil, e.uploader(t, thread), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &cairn.Checkpoint{ID: "c", ThreadID: thread, Files: m.Files}
}

// TestRestoreRefuses: every refusal comes before the target is touched, and
// leaves no staging directory behind.
func TestRestoreRefuses(t *testing.T) {
	tree := map[string]string{"a.txt": "alpha", "b/c.txt": "gamma"}
	cases := []struct {
		name   string
		breakF func(t *testing.T, e *env, cp *cairn.Checkpoint)
		code   *snapshot.Error
		path   string
	}{
		{"corrupt blob", func(t *testing.T, e *env, cp *cairn.Checkpoint) {
			if err := e.blobs.Put(context.Background(), bucket.FileKey([]byte("gamma")), []byte("GAMMA")); err != nil {
				t.Fatal(err)
			}
		}, snapshot.ErrInvalidBlob, "b/c.txt"},
		{"blob longer than its size", func(t *testing.T, e *env, cp *cairn.Checkpoint) {
			if err := e.blobs.Put(context.Background(), bucket.FileKey([]byte("gamma")), []byte("gamma!")); err != nil {
				t.Fatal(err)
			}
		}, snapshot.ErrInvalidBlob, "b/c.txt"},
		{"missing blob", func(t *testing.T, e *env, cp *cairn.Checkpoint) {
			if _, err := e.blobs.Delete(context.Background(), []string{bucket.FileKey([]byte("alpha"))}); err != nil {
				t.Fatal(err)
			}
		}, snapshot.ErrMissingBlob, "a.txt"},
		{"size that is not the blob's", func(t *testing.T, e *env, cp *cairn.Checkpoint) {
			cp.Files[0].Size = 4
		}, snapshot.ErrInvalidBlob, "a.txt"},
		{"drive-like path", func(t *testing.T, e *env, cp *cairn.Checkpoint) {
			cp.Files[0].Path = "C:a.txt"
		}, snapshot.ErrInvalidPath, "C:a.txt"},
		{"dot-dot path", func(t *testing.T, e *env, cp *cairn.Checkpoint) {
			cp.Files[0].Path = "../a.txt"
		}, snapshot.ErrInvalidPath, "../a.txt"},
		{"duplicate path", func(t *testing.T, e *env, cp *cairn.Checkpoint) {
			cp.Files[1].Path = "a.txt"
		}, snapshot.ErrInvalidPath, "a.txt"},
		{"file under a file", func(t *testing.T, e *env, cp *cairn.Checkpoint) {
			cp.Files[1].Path = "a.txt/c.txt"
		}, snapshot.ErrInvalidPath, "a.txt/c.txt"},
		{"not a content key", func(t *testing.T, e *env, cp *cairn.Checkpoint) {
			cp.Files[0].BlobKey = "artifacts/run/x"
		}, snapshot.ErrInvalidBlob, "a.txt"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			cp := e.captured(t, tree)
			tc.breakF(t, e, cp)
			parent := t.TempDir()
			dst := filepath.Join(parent, "ws")
			before := map[string]string{"a.txt": "old", "stale.txt": "stale"}
			treetest.Write(t, dst, before)
			_, err := snapshot.Restore(context.Background(), e.blobs, cp, dst, nil)
			var se *snapshot.Error
			if !errors.Is(err, tc.code) || !errors.As(err, &se) || se.Path != tc.path {
				t.Fatalf("error %v, want %s naming %q", err, tc.code.Code, tc.path)
			}
			if got := treetest.Read(t, dst); !mapsEqual(got, before) {
				t.Fatalf("the target changed to %q", sortedKeys(got))
			}
			if ents, _ := os.ReadDir(parent); len(ents) != 1 {
				t.Fatalf("%d entries beside the target, want only the target", len(ents))
			}
		})
	}
}

// TestRestoreOverTree: stale entries go, excluded ones stay, entries in the
// way are replaced, and restoring into an empty or absent target works.
func TestRestoreOverTree(t *testing.T) {
	tree := map[string]string{"a.txt": "alpha", "b/c.txt": "gamma", "d/": "", "same1": "s", "same2": "s"}
	cases := []struct {
		name   string
		before map[string]string
		want   map[string]string
	}{
		{"absent target", nil, tree},
		{"empty target", map[string]string{}, tree},
		{"stale and in the way", map[string]string{
			"stale.txt": "x", "old/deep/f": "y", "a.txt/": "", "b": "a file where a directory goes", "d/inside": "z",
			".git/HEAD": "ref", "sub/node_modules/m.js": "kept",
		}, merge(tree, map[string]string{".git/HEAD": "ref", "sub/node_modules/m.js": "kept"})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			cp := e.captured(t, tree)
			dst := filepath.Join(t.TempDir(), "ws")
			if tc.before != nil {
				if err := os.Mkdir(dst, 0o755); err != nil {
					t.Fatal(err)
				}
				treetest.Write(t, dst, tc.before)
			}
			var phases []snapshot.Phase
			var last snapshot.Progress
			opts := &snapshot.Options{Progress: func(p snapshot.Progress) {
				if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
					phases = append(phases, p.Phase)
				}
				last = p
			}}
			st, err := snapshot.Restore(context.Background(), e.blobs, cp, dst, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := treetest.Read(t, dst); !mapsEqual(got, tc.want) {
				t.Fatalf("restored %q, want %q", sortedKeys(got), sortedKeys(tc.want))
			}
			if st.Files != 4 || st.Dirs != 1 {
				t.Fatalf("stats %+v", st)
			}
			if len(phases) != 2 || phases[0] != snapshot.PhaseDownload || phases[1] != snapshot.PhaseWrite ||
				last.FilesDone != last.FilesTotal || last.BytesDone != last.BytesTotal || last.FilesTotal != 4 {
				t.Fatalf("progress phases %v, last %+v", phases, last)
			}
			ents, _ := os.ReadDir(filepath.Dir(dst))
			for _, en := range ents {
				if strings.Contains(en.Name(), ".cairn-restore-") {
					t.Fatalf("staging directory %s left behind", en.Name())
				}
			}
		})
	}
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestRestoreStatCache: capturing a freshly restored tree with the cache the
// restore wrote reads no file.
func TestRestoreStatCache(t *testing.T) {
	e := newEnv(t)
	cp := e.captured(t, map[string]string{"a": "1", "b/c": "2"})
	dst := filepath.Join(t.TempDir(), "ws")
	cache := filepath.Join(t.TempDir(), "cache")
	if _, err := snapshot.Restore(context.Background(), e.blobs, cp, dst, &snapshot.Options{StatCache: cache}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("restore wrote no stat cache: %v", err)
	}
	// The files were written this second, so a capture now must not trust
	// the cache for them: a write in the same second may not move the mtime.
	m, err := snapshot.CaptureDir(context.Background(), dst, nil, e.uploader(t, "t2"), &snapshot.Options{StatCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	if m.Stats.Hashed != 2 {
		t.Fatalf("hashed %d files, want 2: entries of the same second are racy", m.Stats.Hashed)
	}
}
