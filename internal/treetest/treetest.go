// Package treetest writes and reads small directory trees for tests, as
// maps from slash-separated paths to contents, where a path ending in "/" is
// an empty directory.
package treetest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Write makes the files and empty directories of tree under dir, failing the
// test on an error. Files get mode 0644 and directories 0755.
func Write(t testing.TB, dir string, tree map[string]string) {
	t.Helper()
	for p, data := range tree {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Read returns the files and empty directories under dir in the form Write
// takes, failing the test on an error.
func Read(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			entries, err := os.ReadDir(p)
			if err == nil && len(entries) == 0 {
				out[rel+"/"] = ""
			}
			return err
		}
		data, err := os.ReadFile(p)
		out[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
