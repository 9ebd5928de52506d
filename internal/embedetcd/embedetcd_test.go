package embedetcd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/cairnstore/cairn/internal/embedetcd"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDefaultLimits shows the member enforces etcd's default limits, so that
// tests against it prove behaviour on a shared cluster with default settings.
func TestDefaultLimits(t *testing.T) {
	_, c := embedetcd.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ops := make([]clientv3.Op, 129)
	for i := range ops {
		ops[i] = clientv3.OpPut(strings.Repeat("k", i+1), "v")
	}
	if _, err := c.Txn(ctx).Then(ops[:128]...).Commit(); err != nil {
		t.Fatalf("128 ops: %v", err)
	}
	if _, err := c.Txn(ctx).Then(ops...).Commit(); !errors.Is(err, rpctypes.ErrTooManyOps) {
		t.Fatalf("129 ops: got %v, want too many ops", err)
	}
	if _, err := c.Put(ctx, "big", strings.Repeat("x", 1536*1024)); !errors.Is(err, rpctypes.ErrRequestTooLarge) {
		t.Fatalf("1.5 MiB put: got %v, want request too large", err)
	}
	if _, err := c.Put(ctx, "fits", strings.Repeat("x", 1024*1024)); err != nil {
		t.Fatalf("1 MiB put: %v", err)
	}
}
