package sweep_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/sweep"
)

// TestMetaPrefixOnlyOnline checks that the plain sweep never lists or deletes
// sandbox-meta/, and that the online sweep deletes the unreferenced object
// keys there and leaves every other key under it alone.
func TestMetaPrefixOnlyOnline(t *testing.T) {
	obj := "sandbox-meta/sha256/" + strings.Repeat("a", 64)
	other := "sandbox-meta/notes.txt"
	blob := "sandbox-files/sha256/" + strings.Repeat("b", 64)
	objs := []stagedObject{{obj, 2 * time.Hour}, {other, 2 * time.Hour}, {blob, 2 * time.Hour}}
	cases := []struct {
		name    string
		refs    func(t *testing.T) sweep.References
		deleted []string
		left    []string
	}{
		{"Plain", func(t *testing.T) sweep.References { return &fakeRefs{ev: &events{}} }, []string{blob}, []string{obj, other}},
		{"Online", func(t *testing.T) sweep.References {
			s, err := cairn.NewMemoryStore(cairn.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, []string{blob, obj}, []string{other}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := stage(t, objs)
			rep, err := sweep.Sweep(t.Context(), tc.refs(t), mem, sweep.Options{Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Sorted(slices.Values(rep.Deleted)); !slices.Equal(got, slices.Sorted(slices.Values(tc.deleted))) {
				t.Errorf("deleted %q, want %q", got, tc.deleted)
			}
			if got, want := memKeys(t, mem), slices.Sorted(slices.Values(tc.left)); !slices.Equal(got, want) {
				t.Errorf("bucket holds %q, want %q", got, want)
			}
		})
	}
}
