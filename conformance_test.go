package cairn_test

import (
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/conformance"
)

func newMemoryStore(t *testing.T, opts cairn.Options) cairn.Store {
	s, err := cairn.NewMemoryStore(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newMemoryForkStore(t *testing.T, opts cairn.Options) conformance.ForkStore {
	s, err := cairn.NewMemoryForkStore(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newMemoryPair opens a memory store with options a and a second handle on
// it with b's clock.
func newMemoryPair(t *testing.T, a, b cairn.Options) (cairn.Store, cairn.Store) {
	s, err := cairn.NewMemoryStore(a)
	if err != nil {
		t.Fatal(err)
	}
	return s, s.WithClock(b.Now)
}

func TestMemoryStoreConformance(t *testing.T) {
	conformance.RunClockSkewTests(t, newMemoryPair)
	conformance.RunStoreTests(t, newMemoryStore)
	conformance.RunPruneTests(t, newMemoryStore)
	conformance.RunDeleteThreadTests(t, newMemoryStore)
	conformance.RunThreadListerTests(t, newMemoryStore)
	conformance.RunBlobReferenceWalkerTests(t, newMemoryStore)
	conformance.RunBlobGCTests(t, newMemoryStore)
	conformance.RunBindingTests(t, newMemoryStore)
}

func TestMemoryForkStoreConformance(t *testing.T) {
	asStore := func(t *testing.T, opts cairn.Options) cairn.Store { return newMemoryForkStore(t, opts) }
	conformance.RunStoreTests(t, asStore)
	conformance.RunPruneTests(t, asStore)
	conformance.RunDeleteThreadTests(t, asStore)
	conformance.RunThreadListerTests(t, asStore)
	conformance.RunBlobReferenceWalkerTests(t, asStore)
	conformance.RunBlobGCTests(t, asStore)
	conformance.RunForkTests(t, newMemoryForkStore)
}

func TestMemoryInstanceStoreConformance(t *testing.T) {
	conformance.RunInstanceStoreTests(t, func(*testing.T) cairn.InstanceStore { return cairn.NewMemoryInstanceStore() })
	// The zero value is ready to use.
	conformance.RunInstanceStoreTests(t, func(*testing.T) cairn.InstanceStore { return new(cairn.MemoryInstanceStore) })
}

// FC-02: a plain store has no fork capability.
func TestMemoryStoreHasNoFork(t *testing.T) {
	var s any = newMemoryStore(t, cairn.Options{})
	if _, ok := s.(cairn.Forker); ok {
		t.Errorf("%T implements cairn.Forker; the plain store must not", s)
	}
}
