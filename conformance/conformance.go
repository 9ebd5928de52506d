package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
)

// StoreFactory returns a new, empty store that uses opts for its clock and
// writer leases. The suites call it once per subtest, with the subtest's t,
// and the factory registers any teardown with t.Cleanup. It reports its own
// failures with t.Fatal.
type StoreFactory func(t *testing.T, opts cairn.Options) cairn.Store

// ForkStore is a store with the fork capability.
type ForkStore interface {
	cairn.Store
	cairn.Forker
}

// ForkStoreFactory is a StoreFactory for stores with the fork capability.
type ForkStoreFactory func(t *testing.T, opts cairn.Options) ForkStore

// InstanceStoreFactory returns a new, empty instance store. It is called once
// per subtest and registers any teardown with t.Cleanup.
type InstanceStoreFactory func(t *testing.T) cairn.InstanceStore

// The options every factory receives. The clock starts at startTime and moves
// only when a case moves it.
const (
	startTime     = 1_000_000.0 // milliseconds
	leaseDuration = 30 * time.Second
	renewAfter    = 10 * time.Second
	leaseMillis   = 30_000.0
)

// caseTimeout bounds each subtest. When it passes, the context of the case is
// cancelled and the case fails; if the store still does not return within
// hangGrace, the test binary panics with the name of the case, so that a hung
// store fails instead of blocking until the go test timeout.
var (
	caseTimeout = 60 * time.Second
	hangGrace   = 15 * time.Second
)

// RunStoreTests runs the checkpoint-store suite: the cases CC-01 to CC-16 of
// the upstream catalogue and one case per rule of the contract for reads,
// Append, DeleteHead, writer leases, validation, copies, reference counts,
// context errors and concurrent writers. Every case gets a fresh store.
func RunStoreTests(t *testing.T, newStore StoreFactory) {
	t.Helper()
	t.Run("Store", func(t *testing.T) {
		for _, c := range storeCases() {
			runCase(t, c.name, func(t *testing.T, ctx context.Context) {
				c.run(newEnv(t, ctx, newStore))
			})
		}
	})
}

// RunPruneTests runs the suite of the Pruner capability and of
// cairn.KeepNewest. It skips, with a message saying so, when the store does not
// implement cairn.Pruner.
func RunPruneTests(t *testing.T, newStore StoreFactory) {
	t.Helper()
	t.Run("Prune", func(t *testing.T) {
		for _, c := range pruneCases() {
			runCase(t, c.name, func(t *testing.T, ctx context.Context) {
				e := newEnv(t, ctx, newStore)
				if _, ok := e.s.(cairn.Pruner); !ok {
					t.Skipf("%T does not implement cairn.Pruner", e.s)
				}
				c.run(e)
			})
		}
	})
}

// RunDeleteThreadTests runs the suite of the ThreadDeleter capability and of
// cairn.DeleteThread. It skips, with a message saying so, when the store does
// not implement cairn.ThreadDeleter.
func RunDeleteThreadTests(t *testing.T, newStore StoreFactory) {
	t.Helper()
	t.Run("DeleteThread", func(t *testing.T) {
		for _, c := range deleteThreadCases() {
			runCase(t, c.name, func(t *testing.T, ctx context.Context) {
				e := newEnv(t, ctx, newStore)
				if _, ok := e.s.(cairn.ThreadDeleter); !ok {
					t.Skipf("%T does not implement cairn.ThreadDeleter", e.s)
				}
				c.run(e)
			})
		}
	})
}

// RunForkTests runs the suite of the Forker capability: the cases FC-01 and
// FC-03 to FC-10 of the upstream catalogue, the check order of
// ForkFromCheckpoint, destination emptiness, reference counts, copies, the
// transcript store and concurrent forks. (FC-02, "a plain store has no fork",
// is a property of a type, not of a fork-capable store; check it with a type
// assertion in the implementation's own tests.)
func RunForkTests(t *testing.T, newStore ForkStoreFactory) {
	t.Helper()
	t.Run("Fork", func(t *testing.T) {
		for _, c := range forkCases() {
			runCase(t, c.name, func(t *testing.T, ctx context.Context) {
				c.run(newForkEnv(t, ctx, newStore))
			})
		}
	})
}

// RunThreadListerTests runs the suite of the ThreadLister capability. It
// skips when the store does not implement cairn.ThreadLister.
func RunThreadListerTests(t *testing.T, newStore StoreFactory) {
	t.Helper()
	t.Run("ThreadLister", func(t *testing.T) {
		for _, c := range threadListerCases() {
			runCase(t, c.name, func(t *testing.T, ctx context.Context) {
				e := newEnv(t, ctx, newStore)
				if _, ok := e.s.(cairn.ThreadLister); !ok {
					t.Skipf("%T does not implement cairn.ThreadLister", e.s)
				}
				c.run(e)
			})
		}
	})
}

// RunBlobReferenceWalkerTests runs the suite of the BlobReferenceWalker
// capability. It skips when the store does not implement
// cairn.BlobReferenceWalker.
func RunBlobReferenceWalkerTests(t *testing.T, newStore StoreFactory) {
	t.Helper()
	t.Run("BlobReferenceWalker", func(t *testing.T) {
		for _, c := range walkerCases() {
			runCase(t, c.name, func(t *testing.T, ctx context.Context) {
				e := newEnv(t, ctx, newStore)
				if _, ok := e.s.(cairn.BlobReferenceWalker); !ok {
					t.Skipf("%T does not implement cairn.BlobReferenceWalker", e.s)
				}
				c.run(e)
			})
		}
	})
}

// RunBlobGCTests runs the suite of the online sweep protocol: the writer's
// side, cairn.BlobClaimer (the check order of ClaimBlobs, claims tied to the
// writer lease and ended by its next Append, keys in GCDeleting reported busy,
// WaitBlobs), and the sweeper's, cairn.BlobCollector (GC records moved by
// version compare-and-swap, versions never reused, ReadBlobGC as of one point
// in time), together with key validation, context errors and a claim racing
// a delete. The cases drive claims and leases through the store's own
// AcquireWriter and Append, and the callback of ReadBlobGC calls the store.
// It skips, with a message saying so, when the store does not implement both
// cairn.BlobClaimer and cairn.BlobCollector.
func RunBlobGCTests(t *testing.T, newStore StoreFactory) {
	t.Helper()
	t.Run("BlobGC", func(t *testing.T) {
		for _, c := range blobGCCases() {
			runCase(t, c.name, func(t *testing.T, ctx context.Context) {
				e := newEnv(t, ctx, newStore)
				_, claimer := e.s.(cairn.BlobClaimer)
				_, collector := e.s.(cairn.BlobCollector)
				switch {
				case !claimer && !collector:
					t.Skipf("%T implements neither cairn.BlobClaimer nor cairn.BlobCollector", e.s)
				case !claimer:
					t.Skipf("%T implements cairn.BlobCollector but not cairn.BlobClaimer", e.s)
				case !collector:
					t.Skipf("%T implements cairn.BlobClaimer but not cairn.BlobCollector", e.s)
				}
				c.run(e)
			})
		}
	})
}

// RunInstanceStoreTests runs the instance-store suite: the cases IC-01 to IC-07
// of the upstream catalogue, copies, the absence of validation and concurrent
// upserts.
func RunInstanceStoreTests(t *testing.T, newStore InstanceStoreFactory) {
	t.Helper()
	t.Run("InstanceStore", func(t *testing.T) {
		for _, c := range append(instanceCases(), instanceBoundCases()...) {
			runCase(t, c.name, func(t *testing.T, ctx context.Context) {
				s := newStore(t)
				if s == nil {
					t.Fatal("the factory returned a nil InstanceStore")
				}
				c.run(&instanceEnv{t: t, ctx: ctx, s: s})
			})
		}
	})
}

// storeCase is one named case of a suite over checkpoint stores.
type storeCase struct {
	name string
	run  func(e *env)
}

// runCase runs body as the subtest name under a watchdog.
func runCase(t *testing.T, name string, body func(t *testing.T, ctx context.Context)) {
	t.Run(name, func(t *testing.T) {
		ctx, stop := watchdog(t, caseTimeout)
		defer stop()
		body(t, ctx)
	})
}

// watchdog returns a context that ends after d and a function that disarms
// it. When d passes first, the case fails; when the case is still running
// hangGrace later, the process panics with the case's name.
func watchdog(t *testing.T, d time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	var (
		mu   sync.Mutex
		done bool
	)
	name := t.Name()
	soft := time.AfterFunc(d, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Errorf("watchdog: the case was still running after %v; its context is now cancelled", d)
		}
	})
	hard := time.AfterFunc(d+hangGrace, func() {
		mu.Lock()
		finished := done
		mu.Unlock()
		if !finished {
			panic(fmt.Sprintf("conformance: %s hung for %v and ignored the cancellation of its context", name, d+hangGrace))
		}
	})
	return ctx, func() {
		mu.Lock()
		done = true
		mu.Unlock()
		soft.Stop()
		hard.Stop()
		cancel()
	}
}

// clock is the suite's clock: milliseconds that move only when a case moves
// them. It is safe for concurrent use.
type clock struct {
	mu  sync.Mutex
	now float64
}

func (c *clock) Now() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(ms float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = ms
}

func (c *clock) advance(ms float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now += ms
}

func suiteOptions(c *clock) cairn.Options {
	return cairn.Options{Now: c.Now, LeaseDuration: leaseDuration, RenewAfter: renewAfter}
}

func newEnv(t *testing.T, ctx context.Context, newStore StoreFactory) *env {
	t.Helper()
	clk := &clock{now: startTime}
	s := newStore(t, suiteOptions(clk))
	if s == nil {
		t.Fatal("the factory returned a nil Store")
	}
	return &env{t: t, ctx: ctx, clock: clk, s: s, leases: map[string]*cairn.Lease{}, known: &known{threads: map[string]bool{}, ids: map[string]bool{}}}
}

func newForkEnv(t *testing.T, ctx context.Context, newStore ForkStoreFactory) *env {
	t.Helper()
	clk := &clock{now: startTime}
	s := newStore(t, suiteOptions(clk))
	if s == nil {
		t.Fatal("the factory returned a nil ForkStore")
	}
	return &env{t: t, ctx: ctx, clock: clk, s: s, fork: s, leases: map[string]*cairn.Lease{}, known: &known{threads: map[string]bool{}, ids: map[string]bool{}}}
}
