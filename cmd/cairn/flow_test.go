package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnstore/cairn/internal/treetest"
)

// captureID runs cairn capture and returns the id it printed.
func captureID(t *testing.T, env []string, args ...string) string {
	t.Helper()
	r := runCairn(t, env, append([]string{"capture"}, args...)...)
	if r.code != 0 {
		t.Fatalf("cairn capture %v: %v", args, r)
	}
	id := strings.TrimSpace(r.stdout)
	if id == "" || strings.Contains(id, "\n") {
		t.Fatalf("cairn capture printed %q, want one id", r.stdout)
	}
	if strings.Contains(r.stderr, "\r") {
		t.Errorf("cairn capture drew a progress bar off a terminal:\n%q", r.stderr)
	}
	return id
}

// TestFlow drives the command as a user would against `cairn dev`: capture,
// log, show, restore, diff, fork, threads and verify; then a restart of
// `cairn dev` on the same directory, after which everything is still there.
func TestFlow(t *testing.T) {
	data := t.TempDir()
	d := startDev(t, data)
	env := d.env

	v1 := map[string]string{
		"main.go":         "package main\n\nfunc main() {}\n",
		"pkg/util.go":     "package pkg\n",
		"docs/ünïcode.md": "# ünïcode\n",
		"assets/big.bin":  strings.Repeat("0123456789abcdef", 20_000), // 320 KB
		"empty/":          "",
	}
	ws := filepath.Join(t.TempDir(), "ws")
	treetest.Write(t, ws, v1)
	treetest.Write(t, ws, map[string]string{".git/config": "[core]\n", "node_modules/x/index.js": "x\n", ".env.local": "SECRET=1\n"})

	id1 := captureID(t, env, "--thread", "flow", ws)
	// Flags after the argument work as well as before it.
	treetest.Write(t, ws, map[string]string{"main.go": "package main\n\nfunc main() { println(2) }\n", "new.txt": "new\n"})
	if err := os.RemoveAll(filepath.Join(ws, "pkg")); err != nil {
		t.Fatal(err)
	}
	id2 := captureID(t, env, ws, "--thread", "flow", "--label", "second")
	if id1 == id2 {
		t.Fatalf("two captures printed the same id %s", id1)
	}

	t.Run("log", func(t *testing.T) {
		lines := strings.Split(strings.TrimSpace(ok(t, env, "log", "flow")), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[1], id2+" ") || !strings.HasPrefix(lines[2], id1+" ") {
			t.Fatalf("cairn log flow, want %s then %s:\n%s", id2, id1, strings.Join(lines, "\n"))
		}
		if f := strings.Fields(lines[1]); !slices.Contains(f, "second") || !slices.Contains(f, "named") || !slices.Contains(f, "4") {
			t.Errorf("head line %q lacks the label, the reason or the 4 files", lines[1])
		}
	})
	t.Run("show", func(t *testing.T) {
		out := ok(t, env, "show", id2)
		for _, want := range []string{"checkpoint " + id2, "parent     " + id1, "new.txt", "docs/ünïcode.md", "empty/"} {
			if !strings.Contains(out, want) {
				t.Errorf("cairn show does not say %q:\n%s", want, out)
			}
		}
		for _, never := range []string{".git", "node_modules", ".env", "pkg/util.go"} {
			if strings.Contains(out, never) {
				t.Errorf("cairn show lists %q:\n%s", never, out)
			}
		}
	})
	t.Run("restore", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "restored")
		ok(t, env, "restore", id1, out)
		if got := treetest.Read(t, out); !maps.Equal(got, v1) {
			t.Errorf("restored tree has %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(v1)))
		}
		// Restoring the second checkpoint over the first removes what it lacks.
		ok(t, env, "restore", id2, out)
		got := treetest.Read(t, out)
		if _, stale := got["pkg/util.go"]; stale || got["new.txt"] != "new\n" {
			t.Errorf("restore over the first: %v", slices.Sorted(maps.Keys(got)))
		}
	})
	t.Run("diff", func(t *testing.T) {
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(ok(t, env, "diff", id1, id2)), "\n") {
			f := strings.Fields(l)
			lines = append(lines, f[0]+" "+f[1])
		}
		want := []string{"M main.go", "A new.txt", "D pkg/util.go"}
		if !slices.Equal(lines, want) {
			t.Errorf("cairn diff = %q, want %q", lines, want)
		}
		if out := ok(t, env, "diff", id2, id2); out != "" {
			t.Errorf("cairn diff of a checkpoint with itself printed %q", out)
		}
	})
	var fork string
	t.Run("fork", func(t *testing.T) {
		fork = strings.TrimSpace(ok(t, env, "fork", id1, "--thread", "flow-fork"))
		lines := strings.Split(strings.TrimSpace(ok(t, env, "log", "flow-fork")), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[1], fork+" ") || !strings.Contains(lines[1], "fork-root") {
			t.Errorf("cairn log flow-fork, want the root %s:\n%s", fork, strings.Join(lines, "\n"))
		}
		r := runCairn(t, env, "fork", id1, "--thread", "flow-fork")
		if r.code != exitFailure || !strings.Contains(r.stderr, "flow-fork") {
			t.Errorf("a second fork into the same thread: %v", r)
		}
	})
	t.Run("threads", func(t *testing.T) {
		got := strings.Fields(ok(t, env, "threads"))
		want := []string{"THREAD", "HEAD", "flow", id2, "flow-fork", fork}
		if !slices.Equal(got, want) {
			t.Errorf("cairn threads = %q, want %q", got, want)
		}
	})
	t.Run("verify", func(t *testing.T) {
		if out := ok(t, env, "verify", "--objects"); !strings.HasSuffix(out, "ok\n") {
			t.Errorf("cairn verify:\n%s", out)
		}
	})
	t.Run("stat-cache", func(t *testing.T) {
		dir := t.TempDir()
		treetest.Write(t, dir, map[string]string{"a.txt": "a\n", "b/c.txt": "c\n"})
		// Files older than the cache are trusted; one changed in the second
		// the cache was written would be hashed again.
		old := time.Now().Add(-time.Hour)
		for _, p := range []string{"a.txt", "b/c.txt"} {
			if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(p)), old, old); err != nil {
				t.Fatal(err)
			}
		}
		cached := append([]string{"XDG_CACHE_HOME=" + t.TempDir()}, env...)
		for i, want := range []string{"hashed 2;", "hashed 0;"} {
			r := runCairn(t, cached, "capture", "--thread", "cached", dir)
			if r.code != 0 || !strings.Contains(r.stderr, want) {
				t.Errorf("capture %d: %v, want %q", i+1, r, want)
			}
		}
		if r := runCairn(t, cached, "capture", "--thread", "cached", "--stat-cache", "off", dir); r.code != 0 || !strings.Contains(r.stderr, "hashed 2;") {
			t.Errorf("capture with --stat-cache off: %v, want every file hashed", r)
		}
	})
	t.Run("refused-entry", func(t *testing.T) {
		bad := t.TempDir()
		treetest.Write(t, bad, map[string]string{"a.txt": "a\n"})
		if err := os.Symlink("a.txt", filepath.Join(bad, "link")); err != nil {
			t.Skip("no symlinks here:", err)
		}
		r := runCairn(t, env, "capture", "--thread", "refused", bad)
		if r.code != exitFailure || !strings.Contains(r.stderr, `"link"`) {
			t.Errorf("capture of a tree with a symlink: %v, want exit 1 naming the link", r)
		}
		if out := runCairn(t, env, "log", "refused"); out.code != exitNotFound {
			t.Errorf("a refused capture appended: %v", out)
		}
	})

	// A restart on the same directory keeps every checkpoint and blob.
	if code := d.stop(t, syscall.SIGINT); code != 0 {
		t.Fatalf("cairn dev exited %d on SIGINT:\n%s", code, d.log())
	}
	again := startDev(t, data)
	env = again.env
	if lines := strings.Split(strings.TrimSpace(ok(t, env, "log", "flow")), "\n"); len(lines) != 3 {
		t.Fatalf("after the restart, cairn log flow:\n%s", strings.Join(lines, "\n"))
	}
	out := filepath.Join(t.TempDir(), "after-restart")
	ok(t, env, "restore", id2, out)
	got := treetest.Read(t, out)
	if !bytes.Equal([]byte(got["assets/big.bin"]), []byte(v1["assets/big.bin"])) || got["new.txt"] != "new\n" {
		t.Errorf("after the restart, the restored tree has %v", slices.Sorted(maps.Keys(got)))
	}
}
