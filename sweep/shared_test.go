package sweep_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/sweep"
)

// sharedStore is a store of a shared-bucket scenario: the protocol, and
// whatever binding it has.
type sharedStore interface {
	protocolStore
}

// unbound hides a store's binding: a broken store that writes to a bucket
// without recording its binding there.
type unbound struct{ protocolStore }

// sharedFactory returns the store of tenant on the shared bucket blobs; a
// store that keeps body objects keeps them in blobs too, unless broken: a
// broken store records no binding (the caller hides its cairn.Bound).
type sharedFactory func(t *testing.T, tenant string, blobs *bucket.Memory, broken bool) sharedStore

func memorySharedFactory(t *testing.T, tenant string, _ *bucket.Memory, _ bool) sharedStore {
	t.Helper()
	s, err := cairn.NewMemoryStore(cairn.Options{Binding: cairn.Binding{Cluster: "memory-shared", Prefix: tenant}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func etcdSharedFactory(t *testing.T) sharedFactory {
	_, cli := embedetcd.ForTest(t)
	return func(t *testing.T, tenant string, blobs *bucket.Memory, broken bool) sharedStore {
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

// sharedTenant is one tenant of the scenario and what it wrote.
type sharedTenant struct {
	name    string
	store   sharedStore
	ckpt    string   // its checkpoint's id
	keys    []string // the blob keys its checkpoint references
	garbage []string // blobs it uploaded and does not reference
}

// sharedWorld writes, for each of tenants, one checkpoint of files files
// (one of them with the same bytes in every tenant) and a 200 KiB
// conversation, each file uploaded with bucket.UploadBlobs, plus one blob it
// uploads and never references; the bucket is shared. A tenant named with a
// leading "!" does not record its binding.
func sharedWorld(t *testing.T, newStore sharedFactory, files int, tenants ...string) (*bucket.Memory, []*sharedTenant) {
	t.Helper()
	ctx := t.Context()
	blobs := bucket.NewMemory(nil)
	var out []*sharedTenant
	for _, name := range tenants {
		broken := strings.HasPrefix(name, "!")
		name = strings.TrimPrefix(name, "!")
		st := newStore(t, name, blobs, broken)
		if broken {
			st = unbound{st}
		}
		tn := &sharedTenant{name: name, store: st, ckpt: name + "-1"}
		var up []bucket.Blob
		cp := cairn.Checkpoint{ID: tn.ckpt, ThreadID: "thread", CreatedAt: 1, Reason: cairn.ReasonAutomatic}
		for i := range files {
			data := []byte(fmt.Sprintf("%s file %d", name, i))
			if i == 0 {
				data = []byte("the same bytes in every tenant")
			}
			b := bucket.FileBlob(data)
			up = append(up, b)
			tn.keys = append(tn.keys, b.Key)
			cp.Files = append(cp.Files, cairn.Entry{Path: fmt.Sprintf("dir/f%04d", i), Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(data))})
		}
		g := bucket.ArtifactBlob([]byte(name + " uploaded and never referenced"))
		up = append(up, g)
		tn.garbage = []string{g.Key}
		conv, _ := json.Marshal([]string{strings.Repeat(name+" says something. ", 200<<10/(len(name)+16))})
		cp.Conversation = conv
		lease, err := st.AcquireWriter(ctx, "thread")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bucket.UploadBlobs(ctx, st, lease.Writer, blobs, up); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Append(ctx, cairn.AppendInput{Checkpoint: cp, Writer: lease.Writer}); err != nil {
			t.Fatal(err)
		}
		lease.Release(ctx)
		slices.Sort(tn.keys)
		out = append(out, tn)
	}
	return blobs, out
}

// readable returns the first reason a tenant's checkpoint cannot be read and
// restored: the store cannot read it, or a blob it references is gone.
func (tn *sharedTenant) readable(t *testing.T, blobs *bucket.Memory) error {
	t.Helper()
	cp, err := tn.store.Get(t.Context(), tn.ckpt)
	if err != nil {
		return fmt.Errorf("%s: %w", tn.name, err)
	}
	for _, k := range cp.BlobKeys() {
		if _, err := bucket.ReadBlob(t.Context(), blobs, k); err != nil {
			return fmt.Errorf("%s: %w", tn.name, err)
		}
	}
	return nil
}

func allReadable(t *testing.T, blobs *bucket.Memory, tenants []*sharedTenant) error {
	t.Helper()
	for _, tn := range tenants {
		if err := tn.readable(t, blobs); err != nil {
			return err
		}
	}
	return nil
}

func contentKeys(t *testing.T, blobs *bucket.Memory) []string {
	t.Helper()
	var out []string
	for _, prefix := range sweep.Prefixes {
		for o, err := range bucket.Objects(t.Context(), blobs, prefix, 0) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, o.Key)
		}
	}
	return out
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
		{"Memory", func(*testing.T) sharedFactory { return memorySharedFactory }, 50},
		{"Etcd", etcdSharedFactory, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("OneTenantRefuses", func(t *testing.T) {
				blobs, tenants := sharedWorld(t, tc.newStore(t), tc.files, "tenant-a/", "tenant-b/", "tenant-c/")
				before := contentKeys(t, blobs)
				for _, dry := range []bool{true, false} {
					rep, err := sweep.Sweep(t.Context(), tenants[0].store, blobs, sweep.Options{DryRun: dry})
					var ue *sweep.UncoveredError
					if !errors.Is(err, sweep.ErrUncovered) || !errors.As(err, &ue) {
						t.Fatalf("dry run %v: Sweep of tenant-a alone = %v; want ErrUncovered", dry, err)
					}
					if got := prefixesOf(rep.Uncovered); !slices.Equal(got, []string{"tenant-b/", "tenant-c/"}) || !slices.Equal(prefixesOf(ue.Uncovered), got) {
						t.Fatalf("dry run %v: uncovered %q, error %v; want tenant-b/ and tenant-c/", dry, got, ue)
					}
					if len(rep.Deleted) > 0 || rep.Marked > 0 {
						t.Fatalf("dry run %v: a refused sweep deleted %d and marked %d", dry, len(rep.Deleted), rep.Marked)
					}
				}
				if after := contentKeys(t, blobs); !slices.Equal(after, before) {
					t.Fatalf("a refused sweep changed the bucket: %d keys, then %d", len(before), len(after))
				}
				if err := allReadable(t, blobs, tenants); err != nil {
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
							others = append(others, sweep.Other{Store: tn.store})
						}
					}
					rep, err := sweep.Sweep(t.Context(), tenants[first].store, blobs, sweep.Options{Others: others})
					if err != nil {
						t.Fatalf("sweep from %s: %v", tenants[first].name, err)
					}
					var want []string
					if first == 0 {
						for _, tn := range tenants {
							want = append(want, tn.garbage...)
						}
						slices.Sort(want)
					}
					if !slices.Equal(rep.Deleted, want) {
						t.Fatalf("sweep from %s deleted %q; want %q", tenants[first].name, rep.Deleted, want)
					}
					if err := allReadable(t, blobs, tenants); err != nil {
						t.Fatalf("after the sweep from %s: %v", tenants[first].name, err)
					}
				}
			})
			// The broken variants: each loses a tenant's checkpoint in the
			// scenario above, so the scenario catches each.
			t.Run("BrokenSweepIgnoringBindingsLoses", func(t *testing.T) {
				blobs, tenants := sharedWorld(t, tc.newStore(t), tc.files, "tenant-a/", "tenant-b/")
				if _, err := sweep.Sweep(t.Context(), tenants[0].store, blobs, sweep.IgnoringBindings(sweep.Options{})); err != nil {
					t.Fatal(err)
				}
				if err := tenants[1].readable(t, blobs); err == nil {
					t.Fatal("a sweep that ignores the bindings lost nothing: the scenario has no teeth")
				} else {
					t.Logf("a sweep that ignores the bindings: %v", err)
				}
			})
			t.Run("BrokenStoreNotRecordingItsBindingLoses", func(t *testing.T) {
				blobs, tenants := sharedWorld(t, tc.newStore(t), tc.files, "tenant-a/", "!tenant-b/")
				if _, err := sweep.Sweep(t.Context(), tenants[0].store, blobs, sweep.Options{}); err != nil {
					t.Fatal(err)
				}
				if err := tenants[1].readable(t, blobs); err == nil {
					t.Fatal("a store that does not record its binding lost nothing: the scenario has no teeth")
				} else {
					t.Logf("a store that does not record its binding: %v", err)
				}
			})
		})
	}
}

func prefixesOf(bs []cairn.Binding) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Prefix)
	}
	return out
}
