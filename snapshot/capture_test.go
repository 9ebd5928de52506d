package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/treetest"
	"github.com/cairnstore/cairn/snapshot"
)

func TestCaptureRestoreRoundTrip(t *testing.T) {
	cases := []struct {
		name  string
		tree  map[string]string
		opts  snapshot.Options
		want  []string          // manifest paths, dirs with a trailing slash
		after map[string]string // the restored tree; nil means tree
	}{
		{
			name: "unicode names",
			tree: map[string]string{"é/ü.txt": "umlaut", "日本.md": "# 日本", "emoji-🙂": "smile"},
			want: []string{"emoji-🙂", "é/ü.txt", "日本.md"},
		},
		{
			name: "invalid UTF-8 name",
			tree: map[string]string{"bad\xffname.txt": "bytes", "ok.txt": "ok"},
			want: []string{"bad\xffname.txt", "ok.txt"},
		},
		{
			name: "empty directories",
			tree: map[string]string{"a/": "", "b/c/": "", "d/x.txt": "x", "d/e/": ""},
			want: []string{"a/", "b/c/", "d/e/", "d/x.txt"},
		},
		{
			name: "sorted by the bytes of the path",
			tree: map[string]string{"a/b": "1", "a.b": "2", "a-b": "3", "A": "4"},
			want: []string{"A", "a-b", "a.b", "a/b"},
		},
		{
			name: "default excludes at any depth",
			tree: map[string]string{
				".git/config": "[core]", "node_modules/x/y.js": "js", "sub/.env.local": "SECRET=1", "sub/.envrc": "x",
				"sub/node_modules/z.js": "js", "sub/main.go": "package main", "only/.git/HEAD": "ref",
			},
			want:  []string{"only/", "sub/main.go"},
			after: map[string]string{"only/": "", "sub/main.go": "package main"},
		},
		{
			name: "no default excludes",
			tree: map[string]string{".git/config": "[core]", ".env": "A=1"},
			opts: snapshot.Options{NoDefaultExcludes: true},
			want: []string{".env", ".git/config"},
		},
		{
			name:  "include and exclude, exclude wins",
			tree:  map[string]string{"a.go": "a", "vendor/b.go": "b", "docs/x.md": "x", "c/d.go": "d", "c/d_test.go": "t"},
			opts:  snapshot.Options{Include: []string{"*.go"}, Exclude: []string{"vendor", "c/*_test.go"}},
			want:  []string{"a.go", "c/d.go", "docs/"},
			after: map[string]string{"a.go": "a", "c/d.go": "d", "docs/": ""},
		},
		{
			name: "repeated contents share a blob",
			tree: map[string]string{"x": "same", "y/z": "same", "empty": ""},
			want: []string{"empty", "x", "y/z"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			src := t.TempDir()
			treetest.Write(t, src, tc.tree)
			m, err := snapshot.CaptureDir(ctx, src, nil, e.uploader(t, "t"), &tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := paths(m.Files); !slices.Equal(got, tc.want) {
				t.Fatalf("manifest %q, want %q", got, tc.want)
			}
			if err := cairn.ValidateEntries(m.Files); err != nil {
				t.Fatalf("the store refuses the manifest: %v", err)
			}
			for _, f := range m.Files {
				if f.Kind == cairn.KindFile && f.BlobKey != bucket.FileKey([]byte(tc.tree[f.Path])) {
					t.Errorf("%s: key %s, want the SHA-256 of its bytes", f.Path, f.BlobKey)
				}
			}
			dst := filepath.Join(t.TempDir(), "out")
			cp := &cairn.Checkpoint{ID: "c", ThreadID: "t", Files: m.Files}
			if _, err := snapshot.Restore(ctx, e.blobs, cp, dst, nil); err != nil {
				t.Fatal(err)
			}
			want := tc.after
			if want == nil {
				want = tc.tree
			}
			if got := treetest.Read(t, dst); !mapsEqual(got, want) {
				t.Fatalf("restored %q, want %q", sortedKeys(got), sortedKeys(want))
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestCaptureRefuses(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		code  *snapshot.Error
		path  string
	}{
		{"symlink", func(t *testing.T, dir string) {
			if err := os.Symlink("target", filepath.Join(dir, "sub", "link")); err != nil {
				t.Fatal(err)
			}
		}, snapshot.ErrUnsupportedEntry, "sub/link"},
		{"executable", func(t *testing.T, dir string) {
			treetest.Write(t, dir, map[string]string{"run.sh": "#!/bin/sh\n"})
			if err := os.Chmod(filepath.Join(dir, "run.sh"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, snapshot.ErrUnsupportedEntry, "run.sh"},
		{"named pipe", func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
				t.Skip("no named pipes here:", err)
			}
		}, snapshot.ErrUnsupportedEntry, "pipe"},
		{"backslash in a name", func(t *testing.T, dir string) {
			treetest.Write(t, dir, map[string]string{`a\b`: "x"})
		}, snapshot.ErrInvalidPath, `a\b`},
		{"drive-like name", func(t *testing.T, dir string) {
			treetest.Write(t, dir, map[string]string{"C:foo": "x"})
		}, snapshot.ErrInvalidPath, "C:foo"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			dir := t.TempDir()
			treetest.Write(t, dir, map[string]string{"sub/ok.txt": "ok"})
			tc.setup(t, dir)
			_, err := snapshot.CaptureDir(context.Background(), dir, nil, e.uploader(t, "t"), nil)
			var se *snapshot.Error
			if !errors.Is(err, tc.code) || !errors.As(err, &se) || se.Path != tc.path {
				t.Fatalf("error %v, want %s naming %q", err, tc.code.Code, tc.path)
			}
			if e.blobs.Len() != 0 {
				t.Fatalf("%d blobs uploaded by a refused capture", e.blobs.Len())
			}
		})
	}
}

// TestCaptureDetectsChange changes a file after it was hashed and before it
// is uploaded: the upload must stop short and store nothing under the key.
func TestCaptureDetectsChange(t *testing.T) {
	cases := []struct {
		name   string
		bucket func(t *testing.T) streamBlobs
	}{
		{"memory bucket", func(t *testing.T) streamBlobs { return bucket.NewMemory(nil) }},
		{"S3 bucket", func(t *testing.T) streamBlobs { return fakeS3(t) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			b := tc.bucket(t)
			dir := t.TempDir()
			treetest.Write(t, dir, map[string]string{"a.txt": "before", "b.txt": "steady"})
			hb := &hookBucket{streamBlobs: b}
			changedKey := bucket.FileKey([]byte("before"))
			hb.onHead = func(key string) {
				if key == changedKey {
					if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("after!"), 0o644); err != nil {
						t.Error(err)
					}
				}
			}
			up := e.uploader(t, "t")
			up.Bucket = hb
			_, err := snapshot.CaptureDir(ctx, dir, nil, up, &snapshot.Options{Concurrency: 1})
			var se *snapshot.Error
			if !errors.Is(err, snapshot.ErrFileChanged) || !errors.As(err, &se) || se.Path != "a.txt" {
				t.Fatalf("error %v, want ErrFileChanged naming a.txt", err)
			}
			if hb.putCount() == 0 {
				t.Fatal("the changed file was never sent: the test did not reach the upload")
			}
			for _, k := range []string{changedKey, bucket.FileKey([]byte("after!"))} {
				if _, err := b.Head(ctx, k); !errors.Is(err, bucket.ErrNotFound) {
					t.Fatalf("the bucket holds %s after the changed upload (err %v)", k, err)
				}
			}
		})
	}
}

// TestS3RoundTrip captures into and restores from a bucket.S3, streaming.
func TestS3RoundTrip(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	b := fakeS3(t)
	tree := map[string]string{"a.txt": strings.Repeat("a", 3<<20), "b/c.txt": "c", "d/": ""}
	src := t.TempDir()
	treetest.Write(t, src, tree)
	up := e.uploader(t, "t")
	up.Bucket = b
	m, err := snapshot.CaptureDir(ctx, src, nil, up, nil)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := snapshot.Restore(ctx, b, &cairn.Checkpoint{Files: m.Files}, dst, nil); err != nil {
		t.Fatal(err)
	}
	if got := treetest.Read(t, dst); !mapsEqual(got, tree) {
		t.Fatalf("restored %q", sortedKeys(got))
	}
}

func TestCaptureUnchangedUploadsNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{"a": "1", "b/c": "2", "d/": ""})
	hb := &hookBucket{streamBlobs: e.blobs}
	up := e.uploader(t, "t")
	up.Bucket = hb
	first, err := snapshot.CaptureDir(ctx, dir, nil, up, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.Stats.Uploaded != 2 || hb.putCount() != 2 {
		t.Fatalf("first capture: %+v, %d puts; want 2 uploads", first.Stats, hb.putCount())
	}
	second, err := snapshot.CaptureDir(ctx, dir, nil, up, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.Stats.Uploaded != 0 || second.Stats.Present != 2 || hb.putCount() != 2 {
		t.Fatalf("re-capture: %+v, %d puts in all; want nothing uploaded", second.Stats, hb.putCount())
	}
	if !slices.Equal(paths(first.Files), paths(second.Files)) {
		t.Fatalf("manifests differ: %q, %q", paths(first.Files), paths(second.Files))
	}
}

// TestStatCache: an unchanged tree is not read again, a changed file is, and
// a corrupt cache is ignored.
func TestStatCache(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dir := t.TempDir()
	tree := map[string]string{"a": "1", "b/c": "2", "b/d": "3", "e": "4"}
	treetest.Write(t, dir, tree)
	old := time.Now().Add(-time.Hour)
	for p := range tree {
		if err := os.Chtimes(filepath.Join(dir, p), old, old); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(t.TempDir(), "stat.cache")
	opts := &snapshot.Options{StatCache: cache}
	up := e.uploader(t, "t")
	capture := func(wantHashed int) *snapshot.Manifest {
		t.Helper()
		m, err := snapshot.CaptureDir(ctx, dir, nil, up, opts)
		if err != nil {
			t.Fatal(err)
		}
		if m.Stats.Hashed != wantHashed {
			t.Fatalf("hashed %d files, want %d", m.Stats.Hashed, wantHashed)
		}
		return m
	}
	capture(4)
	capture(0)
	if err := os.WriteFile(filepath.Join(dir, "b", "c"), []byte("9"), 0o644); err != nil {
		t.Fatal(err)
	}
	newer := old.Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "b", "c"), newer, newer); err != nil {
		t.Fatal(err)
	}
	m := capture(1)
	for _, f := range m.Files {
		if f.Path == "b/c" && f.BlobKey != bucket.FileKey([]byte("9")) {
			t.Fatalf("b/c has key %s, want that of its new bytes", f.BlobKey)
		}
	}
	data, err := os.ReadFile(cache)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-10] ^= 0x20
	if err := os.WriteFile(cache, data, 0o644); err != nil {
		t.Fatal(err)
	}
	capture(4)
}

func TestCaptureFSAndArtifacts(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{"x.txt": "x"})
	arts := []snapshot.ArtifactSource{
		snapshot.ArtifactBytes("r2", "late.txt", "text/plain", 20, []byte("late")),
		snapshot.ArtifactBytes("r1", "early.txt", "text/plain", 10, []byte("early")),
	}
	m, err := snapshot.CaptureFS(ctx, os.DirFS(dir), arts, e.uploader(t, "t"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Artifacts) != 2 || m.Artifacts[0].ArtifactID != "r1" || m.Artifacts[1].BlobKey != bucket.ArtifactKey([]byte("late")) || m.Artifacts[1].Size != 4 {
		t.Fatalf("artifacts %+v", m.Artifacts)
	}
	if err := cairn.ValidateArtifacts(m.Artifacts); err != nil {
		t.Fatal(err)
	}
	if _, err := bucket.ReadBlob(ctx, e.blobs, m.Artifacts[0].BlobKey); err != nil {
		t.Fatal(err)
	}
}

// TestCaptureClaimsFirst: a capture by a writer whose lease is gone fails
// with the store's ErrWriterLost before it uploads anything.
func TestCaptureClaimsFirst(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{"a": "1"})
	lease, err := e.store.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	lease.Release(ctx)
	up := snapshot.Uploader{Bucket: e.blobs, Claimer: e.store, Writer: lease.Writer}
	if _, err := snapshot.CaptureDir(ctx, dir, nil, up, nil); !errors.Is(err, cairn.ErrWriterLost) {
		t.Fatalf("error %v, want ErrWriterLost", err)
	}
	if e.blobs.Len() != 0 {
		t.Fatal("a capture without claims uploaded blobs")
	}
}

// TestCaptureOnParent: keys the parent references are neither claimed nor
// looked up in the bucket; the others are.
func TestCaptureOnParent(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{"a": "1", "b": "2"})
	var heads []string
	hb := &hookBucket{streamBlobs: e.blobs, onHead: func(key string) { heads = append(heads, key) }}
	up := e.uploader(t, "t")
	up.Bucket = hb
	first, err := snapshot.CaptureDir(ctx, dir, nil, up, &snapshot.Options{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	treetest.Write(t, dir, map[string]string{"b": "changed"})
	heads = nil
	up.Parent = &cairn.Checkpoint{Files: first.Files}
	m, err := snapshot.CaptureDir(ctx, dir, nil, up, &snapshot.Options{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if m.Stats.Inherited != 1 || m.Stats.Uploaded != 1 || !slices.Equal(heads, []string{bucket.FileKey([]byte("changed"))}) {
		t.Fatalf("stats %+v, heads %q; want one inherited key and one looked up", m.Stats, heads)
	}
}

// TestCaptureProgress: a capture reports the hash phase, then the upload
// phase, each ending with everything done.
func TestCaptureProgress(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	treetest.Write(t, dir, map[string]string{"a": strings.Repeat("x", 5<<20), "b": "y", "c/d": "z"})
	var events []snapshot.Progress
	opts := &snapshot.Options{Progress: func(p snapshot.Progress) { events = append(events, p) }}
	if _, err := snapshot.CaptureDir(context.Background(), dir, nil, e.uploader(t, "t"), opts); err != nil {
		t.Fatal(err)
	}
	last := map[snapshot.Phase]snapshot.Progress{}
	var order []snapshot.Phase
	for _, p := range events {
		if _, seen := last[p.Phase]; !seen {
			order = append(order, p.Phase)
		}
		if prev, ok := last[p.Phase]; ok && (p.FilesDone < prev.FilesDone || p.BytesDone < prev.BytesDone) {
			t.Fatalf("progress went back: %+v after %+v", p, prev)
		}
		last[p.Phase] = p
	}
	if !slices.Equal(order, []snapshot.Phase{snapshot.PhaseHash, snapshot.PhaseUpload}) {
		t.Fatalf("phases %v", order)
	}
	for ph, p := range last {
		if p.FilesDone != 3 || p.FilesTotal != 3 || p.BytesDone != p.BytesTotal || p.BytesTotal != 5<<20+2 {
			t.Fatalf("%s ended at %+v", ph, p)
		}
	}
}

// TestRestoreThroughSymlink: a target that is a symlink to a directory is
// restored into, and stays a symlink.
func TestRestoreThroughSymlink(t *testing.T) {
	e := newEnv(t)
	cp := e.captured(t, map[string]string{"a": "1"})
	target := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.Restore(context.Background(), e.blobs, cp, link, nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link is gone: %v, %v", fi, err)
	}
	if got := treetest.Read(t, target); !mapsEqual(got, map[string]string{"a": "1"}) {
		t.Fatalf("restored %q", sortedKeys(got))
	}
}

// plainBlobs hides the streaming methods of a bucket.
type plainBlobs struct {
	bucket.Reader
	bucket.Putter
}

// TestRoundTripWithoutStreams: a bucket that does not stream gets whole
// files, and a changed file is still caught before its put.
func TestRoundTripWithoutStreams(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	b := plainBlobs{e.blobs, e.blobs}
	tree := map[string]string{"a": "alpha", "b/c": "gamma", "e/": ""}
	src := t.TempDir()
	treetest.Write(t, src, tree)
	up := e.uploader(t, "t")
	up.Bucket = b
	m, err := snapshot.CaptureDir(ctx, src, nil, up, nil)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := snapshot.Restore(ctx, b, &cairn.Checkpoint{Files: m.Files}, dst, nil); err != nil {
		t.Fatal(err)
	}
	if got := treetest.Read(t, dst); !mapsEqual(got, tree) {
		t.Fatalf("restored %q", sortedKeys(got))
	}
	if err := e.blobs.Put(ctx, bucket.FileKey([]byte("alpha")), []byte("ALPHA")); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.Restore(ctx, b, &cairn.Checkpoint{Files: m.Files}, filepath.Join(t.TempDir(), "x"), nil); !errors.Is(err, snapshot.ErrInvalidBlob) {
		t.Fatalf("restore of a corrupt blob: %v, want ErrInvalidBlob", err)
	}
}

// TestCapturePutsNewContentFirst: on a bucket whose put finds existing keys,
// a cold capture heads only until its lookups find new content, and files
// above PutFirstMax are always headed; an unchanged re-capture heads every
// key and sends no bytes.
func TestCapturePutsNewContentFirst(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dir := t.TempDir()
	tree := map[string]string{"big": strings.Repeat("x", 64)}
	for i := range 20 {
		tree[fmt.Sprintf("f%02d", i)] = fmt.Sprintf("file %d", i)
	}
	treetest.Write(t, dir, tree)
	var mu sync.Mutex
	var heads []string
	hb := &hookBucket{streamBlobs: e.blobs, onHead: func(key string) {
		mu.Lock()
		defer mu.Unlock()
		heads = append(heads, key)
	}}
	up := e.uploader(t, "t")
	up.Bucket = putFirstBucket{hb}
	opts := &snapshot.Options{Concurrency: 1, PutFirstMax: 32}
	cold, err := snapshot.CaptureDir(ctx, dir, nil, up, opts)
	if err != nil {
		t.Fatal(err)
	}
	bigKey := bucket.FileKey([]byte(tree["big"]))
	if cold.Stats.Uploaded != 21 || hb.putCount() != 21 {
		t.Fatalf("cold capture: %+v, %d puts; want 21 uploads", cold.Stats, hb.putCount())
	}
	if len(heads) != 2 || !slices.Contains(heads, bigKey) {
		t.Fatalf("cold capture headed %q; want the first key and the big file's only", heads)
	}
	heads = nil
	warm, err := snapshot.CaptureDir(ctx, dir, nil, up, opts)
	if err != nil {
		t.Fatal(err)
	}
	if warm.Stats.Uploaded != 0 || warm.Stats.Present != 21 || hb.putCount() != 21 || len(heads) != 21 {
		t.Fatalf("re-capture: %+v, %d heads, %d puts in all; want 21 heads and no put", warm.Stats, len(heads), hb.putCount())
	}
}

// TestCaptureDetectsChangeWhenPuttingFirst: a file that changes after it was
// hashed and before a put that no head preceded fails the capture, naming
// it, and the bucket holds neither version.
func TestCaptureDetectsChangeWhenPuttingFirst(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dir := t.TempDir()
	tree := map[string]string{"a.txt": "before"}
	for i := range 10 {
		tree[fmt.Sprintf("f%d", i)] = fmt.Sprintf("f%d", i)
	}
	treetest.Write(t, dir, tree)
	changedKey := bucket.FileKey([]byte("before"))
	var headed bool
	hb := &hookBucket{streamBlobs: e.blobs}
	hb.onHead = func(key string) { headed = headed || key == changedKey }
	hb.onPut = func(key string) {
		if key == changedKey {
			if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("after!"), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	up := e.uploader(t, "t")
	up.Bucket = putFirstBucket{hb}
	_, err := snapshot.CaptureDir(ctx, dir, nil, up, &snapshot.Options{Concurrency: 1})
	var se *snapshot.Error
	if !errors.Is(err, snapshot.ErrFileChanged) || !errors.As(err, &se) || se.Path != "a.txt" {
		t.Fatalf("error %v, want ErrFileChanged naming a.txt", err)
	}
	if headed {
		t.Fatal("the changed file's key was headed: the test did not reach a put made first")
	}
	for _, k := range []string{changedKey, bucket.FileKey([]byte("after!"))} {
		if _, err := e.blobs.Head(ctx, k); !errors.Is(err, bucket.ErrNotFound) {
			t.Fatalf("the bucket holds %s after the changed upload (err %v)", k, err)
		}
	}
}

// TestCaptureClaimsEachKeyBeforeTheBucket: with claims made in batches
// ahead of the uploads, no key is looked up or put before its claim, over
// more keys than one batch holds, on both lookup paths.
func TestCaptureClaimsEachKeyBeforeTheBucket(t *testing.T) {
	for _, putFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("putFirst=%v", putFirst), func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			dir := t.TempDir()
			tree := map[string]string{}
			for i := range 500 {
				tree[fmt.Sprintf("d%d/f%03d", i%7, i)] = fmt.Sprintf("content %d", i)
			}
			treetest.Write(t, dir, tree)
			var mu sync.Mutex
			var unclaimed []string
			check := func(key string) {
				view, err := e.store.ReadBlobGC(ctx, func(cairn.BlobReference) error { return nil })
				mu.Lock()
				defer mu.Unlock()
				if err != nil || !view.IsClaimed(key) {
					unclaimed = append(unclaimed, key)
				}
			}
			hb := &hookBucket{streamBlobs: e.blobs, onHead: check, onPut: check}
			up := e.uploader(t, "t")
			up.Bucket = hb
			if putFirst {
				up.Bucket = putFirstBucket{hb}
			}
			// Slow claims: a key sent to the bucket before its claim has
			// landed is then seen unclaimed.
			up.Claimer = slowClaimer{up.Claimer, 20 * time.Millisecond}
			m, err := snapshot.CaptureDir(ctx, dir, nil, up, &snapshot.Options{Concurrency: 4})
			if err != nil {
				t.Fatal(err)
			}
			if m.Stats.Uploaded != 500 {
				t.Fatalf("stats %+v, want 500 uploads", m.Stats)
			}
			if len(unclaimed) > 0 {
				t.Fatalf("%d keys reached the bucket unclaimed, e.g. %s", len(unclaimed), unclaimed[0])
			}
		})
	}
}

// slowClaimer delays every ClaimBlobs by delay before it claims.
type slowClaimer struct {
	cairn.BlobClaimer
	delay time.Duration
}

func (s slowClaimer) ClaimBlobs(ctx context.Context, w cairn.Writer, keys []string) ([]string, error) {
	time.Sleep(s.delay)
	return s.BlobClaimer.ClaimBlobs(ctx, w, keys)
}
