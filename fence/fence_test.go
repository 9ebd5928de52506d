package fence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/fence"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var k = fence.Keys{Owner: "w", Expiry: "x"}

func setup(t *testing.T) (*fence.Manager, *clientv3.Client, context.Context) {
	t.Helper()
	_, cli := embedetcd.ForTest(t)
	m := fence.NewManager(cli, fence.Options{TTL: 2 * time.Second})
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return m, cli, ctx
}

// guarded runs a put under the guard of a lease and reports whether it
// happened.
func guarded(t *testing.T, cli *clientv3.Client, token string, fenceRev int64, now float64) bool {
	t.Helper()
	resp, err := cli.Txn(context.Background()).If(fence.Guard(k, token, fenceRev, now)...).Then(clientv3.OpPut("data", token)).Commit()
	if err != nil {
		t.Fatal(err)
	}
	return resp.Succeeded
}

func TestAcquireGuardRenewRelease(t *testing.T) {
	m, cli, ctx := setup(t)
	a, held, err := m.Acquire(ctx, k, "A", 100, 200, clientv3.OpGet("other"))
	if err != nil || held != nil || len(a.Reads) != 1 {
		t.Fatalf("first acquire: %+v %v %v", a, held, err)
	}
	// Held until expiry: at now = 199 a second acquire fails and names the holder.
	if _, held, err := m.Acquire(ctx, k, "B", 199, 299); !errors.Is(err, fence.ErrHeld) || held.OwnerToken != "A" || held.Fence != a.Fence || held.ExpiresAt != 200 {
		t.Fatalf("second acquire: %+v %v", held, err)
	}
	if !guarded(t, cli, "A", a.Fence, 199) {
		t.Fatal("the holder's guard failed before expiry")
	}
	for _, c := range []struct {
		name  string
		token string
		fence int64
		now   float64
	}{{"WrongToken", "B", a.Fence, 100}, {"WrongFence", "A", a.Fence + 1, 100}, {"AtExpiry", "A", a.Fence, 200}} {
		if guarded(t, cli, c.token, c.fence, c.now) {
			t.Errorf("%s: the guard held", c.name)
		}
	}
	if ok, err := m.Renew(ctx, k, "A", a.Fence, 150, 400); err != nil || !ok {
		t.Fatalf("renew: %v %v", ok, err)
	}
	if !guarded(t, cli, "A", a.Fence, 300) {
		t.Fatal("renew did not move the expiry")
	}
	if ok, _ := m.Renew(ctx, k, "A", a.Fence, 400, 600); ok {
		t.Fatal("renewed an expired lease")
	}
	// Takeover at the stored expiry: a new fence, the old guard fails.
	b, _, err := m.Acquire(ctx, k, "B", 400, 500)
	if err != nil || b.Fence <= a.Fence {
		t.Fatalf("takeover: %+v %v", b, err)
	}
	if guarded(t, cli, "A", a.Fence, 401) {
		t.Fatal("the old lease's guard held after takeover")
	}
	// The old lease cannot release the new one; the new one can.
	if err := m.Release(ctx, k, "A", a.Fence); err != nil {
		t.Fatal(err)
	}
	if !guarded(t, cli, "B", b.Fence, 401) {
		t.Fatal("a stale release removed the replacement")
	}
	if err := m.Release(ctx, k, "B", b.Fence); err != nil {
		t.Fatal(err)
	}
	c, _, err := m.Acquire(ctx, k, "C", 401, 500)
	if err != nil || c.Fence <= b.Fence {
		t.Fatalf("acquire after release: %+v %v", c, err)
	}
}

// TestRecordsEndWithTheSession shows the etcd lease's role: when the session
// ends (as when its process dies), the records go, and the thread is free.
func TestRecordsEndWithTheSession(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := context.Background()
	m := fence.NewManager(cli, fence.Options{TTL: 2 * time.Second})
	if _, _, err := m.Acquire(ctx, k, "A", 0, 1e18); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Acquire(ctx, k, "A", 0, 1); !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
	m2 := fence.NewManager(cli, fence.Options{TTL: 2 * time.Second})
	defer m2.Close()
	if _, _, err := m2.Acquire(ctx, k, "B", 0, 1); err != nil {
		t.Fatalf("the closed session's record still holds the thread: %v", err)
	}
}

// TestSessionLostMidway revokes the session's lease behind the manager's back:
// the holder's records vanish, its guard fails, and the next acquire grants a
// new session by itself.
func TestSessionLostMidway(t *testing.T) {
	m, cli, ctx := setup(t)
	a, _, err := m.Acquire(ctx, k, "A", 0, 1e18)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	if guarded(t, cli, "A", a.Fence, 1) {
		t.Fatal("a lease whose records were revoked still guards writes")
	}
	rec := func() *cairn.WriterRecord {
		r, _ := cli.Get(ctx, k.Owner)
		x, _ := cli.Get(ctx, k.Expiry)
		if len(r.Kvs) == 0 || len(x.Kvs) == 0 {
			return nil
		}
		return fence.Decode(r.Kvs[0], x.Kvs[0])
	}
	if rec() != nil {
		t.Fatal("records survived the revoke")
	}
	b, _, err := m.Acquire(ctx, k, "B", 0, 1e18)
	if err != nil {
		t.Fatalf("acquire after the session was lost: %v", err)
	}
	if got := rec(); got == nil || got.OwnerToken != "B" || got.Fence != b.Fence {
		t.Fatalf("record %+v", got)
	}
}

// TestIfNotCurrent runs a delete under IfNotCurrent for each way a lease can
// stop being current, and for the current lease.
func TestIfNotCurrent(t *testing.T) {
	m, cli, ctx := setup(t)
	a, _, err := m.Acquire(ctx, k, "A", 100, 200)
	if err != nil {
		t.Fatal(err)
	}
	deletes := func(token string, fenceRev int64, now float64) bool {
		t.Helper()
		if _, err := cli.Put(ctx, "data", "v"); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Txn(ctx).Then(fence.IfNotCurrent(k, token, fenceRev, now, clientv3.OpDelete("data"))).Commit(); err != nil {
			t.Fatal(err)
		}
		r, err := cli.Get(ctx, "data")
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Kvs) == 0
	}
	for _, c := range []struct {
		name  string
		token string
		fence int64
		now   float64
		want  bool
	}{
		{"Current", "A", a.Fence, 199, false},
		{"WrongToken", "B", a.Fence, 100, true},
		{"WrongFence", "A", a.Fence + 1, 100, true},
		{"AtExpiry", "A", a.Fence, 200, true},
		{"AfterExpiry", "A", a.Fence, 201, true},
	} {
		if got := deletes(c.token, c.fence, c.now); got != c.want {
			t.Errorf("%s: deleted = %v, want %v", c.name, got, c.want)
		}
	}
	if err := m.Release(ctx, k, "A", a.Fence); err != nil {
		t.Fatal(err)
	}
	if !deletes("A", a.Fence, 100) {
		t.Error("Released: not deleted")
	}
}

// TestLeaseLost: once the session's lease is reported lost, the manager
// grants a new one.
func TestLeaseLost(t *testing.T) {
	m, _, ctx := setup(t)
	id, err := m.Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.LeaseLost(id + 1) // not the session's: ignored
	if again, _ := m.Lease(ctx); again != id {
		t.Fatalf("lease %x after reporting another lease lost, want %x", again, id)
	}
	m.LeaseLost(id)
	next, err := m.Lease(ctx)
	if err != nil || next == id {
		t.Fatalf("lease after loss: %x, %v", next, err)
	}
}
