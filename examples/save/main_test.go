package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnstore/cairn/internal/devstack"
	"github.com/cairnstore/cairn/internal/treetest"
)

// TestRunAgainstDevStack runs the example, unchanged, on the variables that
// `cairn dev` prints, twice: the second save appends on the first.
func TestRunAgainstDevStack(t *testing.T) {
	stack, err := devstack.Start(t.Context(), devstack.Options{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stack.Close() })
	env := map[string]string{}
	for _, kv := range stack.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	getenv := func(k string) string { return env[k] }

	src := t.TempDir()
	tree := map[string]string{"main.go": "package main\n", "docs/readme.md": "# hi\n", "empty/": ""}
	treetest.Write(t, src, tree)
	for round := range 2 {
		dst := filepath.Join(t.TempDir(), "restored")
		var out bytes.Buffer
		if err := run(t.Context(), getenv, []string{src, dst}, &out); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !strings.Contains(out.String(), "saved ") || !strings.Contains(out.String(), "restored ") {
			t.Errorf("round %d: output %q", round, out.String())
		}
		if got := treetest.Read(t, dst); !maps.Equal(got, tree) {
			t.Errorf("round %d: restored %v; want %v", round, got, tree)
		}
		if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main // changed\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		tree["main.go"] = "package main // changed\n"
	}
}

func TestRunNeedsTheVariables(t *testing.T) {
	err := run(t.Context(), func(string) string { return "" }, []string{"a", "b"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "cairn dev") {
		t.Fatalf("err = %v; want one that says to start cairn dev", err)
	}
}
