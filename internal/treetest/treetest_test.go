package treetest

import (
	"maps"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		tree map[string]string
	}{
		{name: "empty", tree: map[string]string{}},
		{name: "files-and-dirs", tree: map[string]string{"a.txt": "a", "b/c/d.txt": "", "e/": "", "ü/ñ.md": "x\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			Write(t, dir, tt.tree)
			if got := Read(t, dir); !maps.Equal(got, tt.tree) {
				t.Errorf("Read = %q, want %q", got, tt.tree)
			}
		})
	}
}
