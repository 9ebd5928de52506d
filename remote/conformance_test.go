package remote_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/conformance"
	"github.com/cairnstore/cairn/internal/server/servertest"
	"github.com/cairnstore/cairn/remote"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance runs every suite of package conformance through the
// client against cairnd on an embedded etcd: each case in a test session of
// its own, whose clock is the suite's.
func TestConformance(t *testing.T) {
	env := servertest.Start(t, nil)
	newStore := func(t *testing.T, opts cairn.Options) *remote.Store {
		return openSession(t, env, opts)
	}
	storeFactory := func(t *testing.T, opts cairn.Options) cairn.Store { return newStore(t, opts) }
	conformance.RunStoreTests(t, storeFactory)
	conformance.RunPruneTests(t, storeFactory)
	conformance.RunThreadListerTests(t, storeFactory)
	conformance.RunBlobReferenceWalkerTests(t, storeFactory)
	conformance.RunBlobGCTests(t, storeFactory)
	conformance.RunForkTests(t, func(t *testing.T, opts cairn.Options) conformance.ForkStore { return newStore(t, opts) })
	conformance.RunInstanceStoreTests(t, func(t *testing.T) cairn.InstanceStore {
		return newStore(t, cairn.Options{}).Instances()
	})
}

// openSession opens a test session of tenant A, closed at the test's end.
func openSession(t *testing.T, env *servertest.Env, opts cairn.Options) *remote.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := remote.OpenTestSession(ctx, env.URL, remote.Options{Token: servertest.TokenA}, opts)
	if err != nil {
		t.Fatalf("OpenTestSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("closing the test session: %v", err)
		}
	})
	return s
}
