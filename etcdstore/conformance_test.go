package etcdstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/conformance"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// TestConformance runs every suite of package conformance against the store
// on one embedded etcd member with default limits, each case under a prefix of
// its own.
func TestConformance(t *testing.T) {
	runConformance(t, func(o *etcdstore.Options) {})
}

// TestConformanceObjects runs every suite on stores of the capacity layout
// with an inline limit of one byte, so that every checkpoint is written as
// version 2: its body in objects of a bucket of its own.
func TestConformanceObjects(t *testing.T) {
	runConformance(t, func(o *etcdstore.Options) {
		o.Objects = bucket.NewMemory(nil)
		o.InlineLimit = 1
	})
}

// TestConformanceLocalReads runs every suite on stores that answer Get from
// their member's own state (Options.LocalReads): every thread has a read
// permit, and every deletion withdraws it and waits for the member first.
func TestConformanceLocalReads(t *testing.T) {
	runConformance(t, func(o *etcdstore.Options) { o.LocalReads = true })
}

func runConformance(t *testing.T, configure func(*etcdstore.Options)) {
	_, cli := embedetcd.ForTest(t)
	var n atomic.Int64
	newStoreAt := newStore
	newStore := func(t *testing.T, opts cairn.Options) *etcdstore.Store {
		o := etcdstore.Options{Options: opts}
		configure(&o)
		return newStore(t, cli, fmt.Sprintf("case-%d/", n.Add(1)), o)
	}
	storeFactory := func(t *testing.T, opts cairn.Options) cairn.Store { return newStore(t, opts) }
	conformance.RunClockSkewTests(t, func(t *testing.T, a, b cairn.Options) (cairn.Store, cairn.Store) {
		prefix := fmt.Sprintf("case-%d/", n.Add(1))
		oa, ob := etcdstore.Options{Options: a}, etcdstore.Options{Options: b}
		configure(&oa)
		configure(&ob)
		ob.Objects = oa.Objects // one bucket, as two processes share it
		return newStoreAt(t, cli, prefix, oa), newStoreAt(t, cli, prefix, ob)
	})
	conformance.RunStoreTests(t, storeFactory)
	conformance.RunPruneTests(t, storeFactory)
	conformance.RunDeleteThreadTests(t, storeFactory)
	conformance.RunThreadListerTests(t, storeFactory)
	conformance.RunBlobReferenceWalkerTests(t, storeFactory)
	conformance.RunBlobGCTests(t, storeFactory)
	conformance.RunBindingTests(t, storeFactory)
	conformance.RunForkTests(t, func(t *testing.T, opts cairn.Options) conformance.ForkStore { return newStore(t, opts) })
	conformance.RunInstanceStoreTests(t, func(t *testing.T) cairn.InstanceStore {
		return newStore(t, cairn.Options{}).Instances()
	})
}
