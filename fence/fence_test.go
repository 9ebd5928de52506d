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
	if ok, err := m.Renew(ctx, k, "A", a.Fence, a.Lease, 150, 400); err != nil || !ok {
		t.Fatalf("renew: %v %v", ok, err)
	}
	if !guarded(t, cli, "A", a.Fence, 300) {
		t.Fatal("renew did not move the expiry")
	}
	if ok, _ := m.Renew(ctx, k, "A", a.Fence, a.Lease, 400, 600); ok {
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
	if err := m.Release(ctx, k, "A", a.Fence, a.Lease); err != nil {
		t.Fatal(err)
	}
	if !guarded(t, cli, "B", b.Fence, 401) {
		t.Fatal("a stale release removed the replacement")
	}
	if err := m.Release(ctx, k, "B", b.Fence, b.Lease); err != nil {
		t.Fatal(err)
	}
	c, _, err := m.Acquire(ctx, k, "C", 401, 500)
	if err != nil || c.Fence <= b.Fence {
		t.Fatalf("acquire after release: %+v %v", c, err)
	}
}

// TestRecordsEndWithClose: Close revokes the leases of the records the
// manager holds (as when its process stops), and the thread is free.
func TestRecordsEndWithClose(t *testing.T) {
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
		t.Fatalf("the closed manager's record still holds the thread: %v", err)
	}
}

// record reads the writer record k, or nil.
func record(t *testing.T, cli *clientv3.Client) *cairn.WriterRecord {
	t.Helper()
	r, err := cli.Get(context.Background(), k.Owner)
	if err != nil {
		t.Fatal(err)
	}
	x, err := cli.Get(context.Background(), k.Expiry)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 || len(x.Kvs) == 0 {
		return nil
	}
	return fence.Decode(r.Kvs[0], x.Kvs[0])
}

// TestLeaseRevokedMidway revokes a record's etcd lease behind the manager's
// back: the record and what was attached to it vanish, its guard fails, its
// renew reports the lease lost, and the next acquire works.
func TestLeaseRevokedMidway(t *testing.T) {
	m, cli, ctx := setup(t)
	a, _, err := m.Acquire(ctx, k, "A", 0, 1e18)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "claim", "A", clientv3.WithLease(a.Lease)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, a.Lease); err != nil {
		t.Fatal(err)
	}
	if guarded(t, cli, "A", a.Fence, 1) {
		t.Fatal("a lease whose records were revoked still guards writes")
	}
	if rec := record(t, cli); rec != nil {
		t.Fatalf("records survived the revoke: %+v", rec)
	}
	if r, _ := cli.Get(ctx, "claim"); len(r.Kvs) != 0 {
		t.Fatal("a key attached to the record's lease survived the revoke")
	}
	if ok, err := m.Renew(ctx, k, "A", a.Fence, a.Lease, 1, 2); ok || err != nil {
		t.Fatalf("renew of a revoked lease: %v, %v; want false, nil", ok, err)
	}
	b, _, err := m.Acquire(ctx, k, "B", 0, 1e18)
	if err != nil {
		t.Fatalf("acquire after the lease was lost: %v", err)
	}
	if got := record(t, cli); got == nil || got.OwnerToken != "B" || got.Fence != b.Fence {
		t.Fatalf("record %+v", got)
	}
	if a.Lease == b.Lease {
		t.Fatal("two records share one etcd lease")
	}
}

// TestAbandonedRecordEnds: a record whose holder stops renewing (but never
// releases, and whose stored expiry is far in the future) is ended by etcd's
// own timer within its TTL, and so are the keys attached to it; a record
// that is renewed outlives its TTL. Neither decision reads a clock of ours.
func TestAbandonedRecordEnds(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := fence.NewManager(cli, fence.Options{TTL: 2 * time.Second})
	t.Cleanup(func() { m.Close() })
	abandoned, _, err := m.Acquire(ctx, k, "A", 0, 1e18)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "claim", "A", clientv3.WithLease(abandoned.Lease)); err != nil {
		t.Fatal(err)
	}
	other := fence.Keys{Owner: "w2", Expiry: "x2"}
	renewed, _, err := m.Acquire(ctx, other, "R", 0, 1e18)
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := cli.TimeToLive(ctx, abandoned.Lease)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	deadline := start.Add(time.Duration(ttl.GrantedTTL+5) * time.Second)
	for record(t, cli) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("an abandoned record outlived its TTL of %d s by 5 s", ttl.GrantedTTL)
		}
		if ok, err := m.Renew(ctx, other, "R", renewed.Fence, renewed.Lease, 1, 1e18); err != nil || !ok {
			t.Fatalf("renew of the live record: %v, %v", ok, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("an abandoned record with a TTL of %d s ended after %v", ttl.GrantedTTL, time.Since(start).Round(10*time.Millisecond))
	if r, _ := cli.Get(ctx, "claim"); len(r.Kvs) != 0 {
		t.Fatal("a key attached to the abandoned record's lease survived it")
	}
	resp, err := cli.Txn(ctx).If(fence.Guard(other, "R", renewed.Fence, 1)...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Succeeded {
		t.Fatal("the renewed record ended with the abandoned one")
	}
}

// TestIfSuperseded runs a delete under IfSuperseded for each way a record can
// stop being the lease's, for the current lease, and for a lease whose stored
// expiry passed by every clock but whose record nobody replaced.
func TestIfSuperseded(t *testing.T) {
	m, cli, ctx := setup(t)
	a, _, err := m.Acquire(ctx, k, "A", 100, 200)
	if err != nil {
		t.Fatal(err)
	}
	deletes := func(token string, fenceRev int64) bool {
		t.Helper()
		if _, err := cli.Put(ctx, "data", "v"); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Txn(ctx).Then(fence.IfSuperseded(k, token, fenceRev, clientv3.OpDelete("data"))).Commit(); err != nil {
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
		want  bool
	}{
		{"Current", "A", a.Fence, false},
		{"WrongToken", "B", a.Fence, true},
		{"WrongFence", "A", a.Fence + 1, true},
	} {
		if got := deletes(c.token, c.fence); got != c.want {
			t.Errorf("%s: deleted = %v, want %v", c.name, got, c.want)
		}
	}
	// Expired by its stored expiry (200) and by any clock, but not taken over.
	if deletes("A", a.Fence) {
		t.Error("ExpiredNotTakenOver: deleted")
	}
	b, _, err := m.Acquire(ctx, k, "B", 300, 400)
	if err != nil {
		t.Fatal(err)
	}
	if !deletes("A", a.Fence) {
		t.Error("TakenOver: not deleted")
	}
	if err := m.Release(ctx, k, "B", b.Fence, b.Lease); err != nil {
		t.Fatal(err)
	}
	if !deletes("B", b.Fence) {
		t.Error("Released: not deleted")
	}
}
