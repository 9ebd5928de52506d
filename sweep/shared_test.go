package sweep_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/sharedtest"
	"github.com/cairnstore/cairn/sweep"
)

// unbound hides a store's binding: a broken store that writes to a bucket
// without recording its binding there.
type unbound struct{ protocolStore }

// sharedFactory returns the store of tenant on the shared bucket blobs; a
// store that keeps body objects keeps them in blobs too, unless broken: a
// broken store records no binding (the caller hides its cairn.Bound).
type sharedFactory func(t *testing.T, tenant string, blobs *bucket.Memory, broken bool) protocolStore

func memorySharedFactory(*testing.T) sharedFactory {
	return func(t *testing.T, tenant string, _ *bucket.Memory, _ bool) protocolStore {
		t.Helper()
		s, err := cairn.NewMemoryStore(cairn.Options{Binding: cairn.Binding{Cluster: "memory-shared", Prefix: tenant}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func etcdSharedFactory(t *testing.T) sharedFactory {
	_, cli := embedetcd.ForTest(t)
	return func(t *testing.T, tenant string, blobs *bucket.Memory, broken bool) protocolStore {
		t.Helper()
		opts := etcdstore.Options{Objects: blobs}
		if broken {
			// The store's body objects would bind it.
			opts.Objects = nil
		}
		s, err := etcdstore.New(cli, tenant, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// sharedWorld writes sharedtest's scenario for each of tenants on one new
// bucket. A tenant named with a leading "!" does not record its binding.
func sharedWorld(t *testing.T, newStore sharedFactory, files int, tenants ...string) (*bucket.Memory, []*sharedtest.Tenant) {
	t.Helper()
	blobs := bucket.NewMemory(nil)
	var out []*sharedtest.Tenant
	for _, name := range tenants {
		broken := strings.HasPrefix(name, "!")
		name = strings.TrimPrefix(name, "!")
		st := newStore(t, name, blobs, broken)
		if broken {
			st = unbound{st}
		}
		out = append(out, sharedtest.Write(t, st, name, blobs, files))
	}
	return blobs, out
}

// TestSharedBucket is issue #25's scenario: several stores (cairnd's tenants,
// each under its own prefix) on one bucket. A sweep of one of them refuses and
// deletes nothing; a sweep that covers every store deletes exactly the
// garbage of all of them; every checkpoint stays readable.
func TestSharedBucket(t *testing.T) {
	for _, tc := range []struct {
		name     string
		newStore func(t *testing.T) sharedFactory
		files    int
	}{
		{"Memory", memorySharedFactory, 50},
		{"Etcd", etcdSharedFactory, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("OneTenantRefuses", func(t *testing.T) {
				blobs, tenants := sharedWorld(t, tc.newStore(t), tc.files, "tenant-a/", "tenant-b/", "tenant-c/")
				before := sharedtest.ContentKeys(t, blobs)
				for _, dry := range []bool{true, false} {
					rep, err := sweep.Sweep(t.Context(), tenants[0].Store, blobs, sweep.Options{DryRun: dry})
					var ue *sweep.UncoveredError
					if !errors.Is(err, sweep.ErrUncovered) || !errors.As(err, &ue) {
						t.Fatalf("dry run %v: Sweep of tenant-a alone = %v; want ErrUncovered", dry, err)
					}
					if got := sharedtest.Prefixes(rep.Uncovered); !slices.Equal(got, []string{"tenant-b/", "tenant-c/"}) || !slices.Equal(sharedtest.Prefixes(ue.Uncovered), got) {
						t.Fatalf("dry run %v: uncovered %q, error %v; want tenant-b/ and tenant-c/", dry, got, ue)
					}
					if len(rep.Deleted) > 0 || rep.Marked > 0 {
						t.Fatalf("dry run %v: a refused sweep deleted %d and marked %d", dry, len(rep.Deleted), rep.Marked)
					}
				}
				if after := sharedtest.ContentKeys(t, blobs); !slices.Equal(after, before) {
					t.Fatalf("a refused sweep changed the bucket: %d keys, then %d", len(before), len(after))
				}
				if err := sharedtest.AllReadable(t.Context(), blobs, tenants); err != nil {
					t.Fatal(err)
				}
			})
			t.Run("CoveredDeletesExactlyTheGarbage", func(t *testing.T) {
				blobs, tenants := sharedWorld(t, tc.newStore(t), tc.files, "tenant-a/", "tenant-b/", "tenant-c/")
				for first := range tenants {
					// Any tenant's sweep, given the others.
					var others []sweep.Other
					for i, tn := range tenants {
						if i != first {
							others = append(others, sweep.Other{Store: tn.Store})
						}
					}
					for _, dry := range []bool{true, false} {
						rep, err := sweep.Sweep(t.Context(), tenants[first].Store, blobs, sweep.Options{Others: others, DryRun: dry})
						if err != nil {
							t.Fatalf("sweep from %s (dry run %v): %v", tenants[first].Name, dry, err)
						}
						var want []string
						if first == 0 {
							want = sharedtest.Garbage(tenants)
						}
						if !slices.Equal(rep.Deleted, want) {
							t.Fatalf("sweep from %s (dry run %v) deleted %q; want %q", tenants[first].Name, dry, rep.Deleted, want)
						}
						if err := sharedtest.AllReadable(t.Context(), blobs, tenants); err != nil {
							t.Fatalf("after the sweep from %s: %v", tenants[first].Name, err)
						}
					}
				}
			})
			// The broken variants: each loses a tenant's checkpoint in the
			// scenario above, so the scenario catches each.
			t.Run("BrokenSweepIgnoringBindingsLoses", func(t *testing.T) {
				blobs, tenants := sharedWorld(t, tc.newStore(t), tc.files, "tenant-a/", "tenant-b/")
				if _, err := sweep.Sweep(t.Context(), tenants[0].Store, blobs, sweep.IgnoringBindings(sweep.Options{})); err != nil {
					t.Fatal(err)
				}
				if err := tenants[1].Readable(t.Context(), blobs); err == nil {
					t.Fatal("a sweep that ignores the bindings lost nothing: the scenario has no teeth")
				} else {
					t.Logf("a sweep that ignores the bindings: %v", err)
				}
			})
			t.Run("BrokenStoreNotRecordingItsBindingLoses", func(t *testing.T) {
				blobs, tenants := sharedWorld(t, tc.newStore(t), tc.files, "tenant-a/", "!tenant-b/")
				if _, err := sweep.Sweep(t.Context(), tenants[0].Store, blobs, sweep.Options{}); err != nil {
					t.Fatal(err)
				}
				if err := tenants[1].Readable(t.Context(), blobs); err == nil {
					t.Fatal("a store that does not record its binding lost nothing: the scenario has no teeth")
				} else {
					t.Logf("a store that does not record its binding: %v", err)
				}
			})
		})
	}
}

// TestSharedBucketTwoClusters: the same prefix on two etcd clusters, one
// bucket. A sweep of either store alone refuses, naming the other cluster's
// binding; a sweep given both deletes exactly their garbage.
func TestSharedBucketTwoClusters(t *testing.T) {
	blobs := bucket.NewMemory(nil)
	var tenants []*sharedtest.Tenant
	for range 2 {
		_, cli := embedetcd.ForTest(t)
		s, err := etcdstore.New(cli, "tenant/", etcdstore.Options{Objects: blobs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		tenants = append(tenants, sharedtest.Write(t, s, "tenant/", blobs, 300))
	}
	for i, tn := range tenants {
		rep, err := sweep.Sweep(t.Context(), tn.Store, blobs, sweep.Options{})
		other, _, _ := tenants[1-i].Store.(cairn.Bound).BucketBinding(t.Context())
		if !errors.Is(err, sweep.ErrUncovered) || !slices.Equal(rep.Uncovered, []cairn.Binding{other}) {
			t.Fatalf("sweep of cluster %d alone: %v, uncovered %v; want ErrUncovered naming %v", i, err, rep.Uncovered, other)
		}
	}
	rep, err := sweep.Sweep(t.Context(), tenants[0].Store, blobs, sweep.Options{Others: []sweep.Other{{Store: tenants[1].Store}}})
	if err != nil {
		t.Fatal(err)
	}
	// Both tenants wrote the same garbage bytes: one key.
	if want := slices.Compact(sharedtest.Garbage(tenants)); !slices.Equal(rep.Deleted, want) {
		t.Fatalf("deleted %q; want %q", rep.Deleted, want)
	}
	if err := sharedtest.AllReadable(t.Context(), blobs, tenants); err != nil {
		t.Fatal(err)
	}
}
