package snapshot

import (
	"slices"
	"strings"

	"github.com/cairnstore/cairn"
)

// ChangeKind says how a path differs between two manifests.
type ChangeKind string

// The kinds of change.
const (
	Added    ChangeKind = "added"    // only in b
	Removed  ChangeKind = "removed"  // only in a
	Modified ChangeKind = "modified" // in both, with another kind, key or size
)

// Change is one path that differs. Old is the entry of a (zero when Added),
// New the entry of b (zero when Removed).
type Change struct {
	Path string
	Kind ChangeKind
	Old  cairn.Entry
	New  cairn.Entry
}

// Diff returns the file and directory entries that differ between the
// manifests of a and b, sorted by the bytes of the path. Artifacts are not
// compared. A manifest that names a path twice is compared by its last entry.
func Diff(a, b cairn.Checkpoint) []Change {
	index := func(files []cairn.Entry) map[string]cairn.Entry {
		m := make(map[string]cairn.Entry, len(files))
		for _, e := range files {
			m[e.Path] = e
		}
		return m
	}
	ea, eb := index(a.Files), index(b.Files)
	var out []Change
	for p, old := range ea {
		nw, ok := eb[p]
		switch {
		case !ok:
			out = append(out, Change{Path: p, Kind: Removed, Old: old})
		case old.Kind != nw.Kind || old.BlobKey != nw.BlobKey || old.Size != nw.Size:
			out = append(out, Change{Path: p, Kind: Modified, Old: old, New: nw})
		}
	}
	for p, nw := range eb {
		if _, ok := ea[p]; !ok {
			out = append(out, Change{Path: p, Kind: Added, New: nw})
		}
	}
	slices.SortFunc(out, func(x, y Change) int { return strings.Compare(x.Path, y.Path) })
	return out
}
