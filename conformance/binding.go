package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/sweep"
)

// RunBindingTests runs the bucket-binding suite against a store that
// implements cairn.Bound (docs/design.md, "A bucket shared by several
// stores"); it skips a store that does not. The factory is given
// cairn.Options.Binding, which a memory store reports and an etcd store
// replaces with its own cluster and prefix. Each case makes its stores with
// the factory; two stores it makes must be distinct stores.
func RunBindingTests(t *testing.T, newStore StoreFactory) {
	t.Helper()
	t.Run("Binding", func(t *testing.T) {
		for _, c := range bindingCases() {
			runCase(t, c.name, func(t *testing.T, ctx context.Context) {
				mk := func(prefix string) (cairn.Store, cairn.Binding) {
					t.Helper()
					opts := suiteOptions(&clock{now: startTime})
					opts.Binding = cairn.Binding{Cluster: "conformance", Prefix: t.Name() + "/" + prefix}
					s := newStore(t, opts)
					bs, ok := s.(cairn.Bound)
					if !ok {
						t.Skipf("%T does not implement cairn.Bound", s)
					}
					b, has, err := bs.BucketBinding(ctx)
					if err != nil {
						t.Fatalf("BucketBinding: %v", err)
					}
					if !has {
						t.Fatalf("%T given Options.Binding %+v reports no binding", s, opts.Binding)
					}
					return s, b
				}
				c.run(t, ctx, mk)
			})
		}
	})
}

type bindingCase struct {
	name string
	run  func(t *testing.T, ctx context.Context, mk func(prefix string) (cairn.Store, cairn.Binding))
}

func bindingCases() []bindingCase {
	return []bindingCase{
		{"Reported", func(t *testing.T, ctx context.Context, mk func(string) (cairn.Store, cairn.Binding)) {
			s, b := mk("a")
			if _, err := bucket.BindingKey(b); err != nil {
				t.Fatalf("the binding %+v has no key: %v", b, err)
			}
			again, _, err := s.(cairn.Bound).BucketBinding(ctx)
			if err != nil || again != b {
				t.Fatalf("BucketBinding again = %+v, %v; want %+v", again, err, b)
			}
		}},
		{"DistinctStores", func(t *testing.T, ctx context.Context, mk func(string) (cairn.Store, cairn.Binding)) {
			_, a := mk("a")
			_, b := mk("b")
			if a == b {
				t.Fatalf("two stores report the same binding %+v: a sweep of one would cover the other's keys without seeing its references", a)
			}
		}},
		{"UploadRecordsIt", func(t *testing.T, ctx context.Context, mk func(string) (cairn.Store, cairn.Binding)) {
			s, b := mk("a")
			mem := uploadOne(t, ctx, s, bucket.FileBlob([]byte("bound")))
			got, err := bucket.Bindings(ctx, mem)
			if err != nil || !slices.Equal(got, []cairn.Binding{b}) {
				t.Fatalf("after an upload the bucket's bindings are %+v, %v; want [%+v]", got, err, b)
			}
			if ok, err := bucket.HasRegistry(ctx, mem); err != nil || !ok {
				t.Fatalf("the first binding of a new bucket wrote no registry marker: %v, %v", ok, err)
			}
		}},
		{"SweepOfAnotherStoreRefuses", func(t *testing.T, ctx context.Context, mk func(string) (cairn.Store, cairn.Binding)) {
			s, b := mk("a")
			other, _ := mk("b")
			blob := bucket.FileBlob([]byte("claimed by the first store only"))
			mem := uploadOne(t, ctx, s, blob)
			rep, err := sweep.Sweep(ctx, other, mem, sweep.Options{})
			if !errors.Is(err, sweep.ErrUncovered) || !slices.Equal(rep.Uncovered, []cairn.Binding{b}) {
				t.Fatalf("a sweep of another store = %v, uncovered %+v; want ErrUncovered naming %+v", err, rep.Uncovered, b)
			}
			if _, err := mem.Head(ctx, blob.Key); err != nil {
				t.Fatalf("the refused sweep deleted the first store's blob: %v", err)
			}
		}},
	}
}

// uploadOne uploads blob through s's claim (bucket.UploadBlobs) into a new
// memory bucket, under a lease of threadA, and returns the bucket. It skips a
// store that does not claim.
func uploadOne(t *testing.T, ctx context.Context, s cairn.Store, blob bucket.Blob) *bucket.Memory {
	t.Helper()
	claimer, ok := s.(cairn.BlobClaimer)
	if !ok {
		t.Skipf("%T does not implement cairn.BlobClaimer", s)
	}
	mem := bucket.NewMemory(nil)
	lease, err := s.AcquireWriter(ctx, threadA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bucket.UploadBlobs(ctx, claimer, lease.Writer, mem, []bucket.Blob{blob}); err != nil {
		t.Fatal(err)
	}
	return mem
}
