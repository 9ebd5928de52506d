package fence_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn/fence"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// BenchmarkAcquire measures an acquire of a fresh record, which takes the
// manager's spare etcd lease (granted ahead in the background), against a
// bare transaction of the same shape on an etcd lease granted once: the
// per-record lease costs the acquire no round trip of its own. Compare the
// ns/op figures.
func BenchmarkAcquire(b *testing.B) {
	_, cli := embedetcd.ForTest(b)
	ctx := context.Background()
	// Acquire runs acquires back to back, faster than the background grants
	// can replace the spares: each also pays for the grant and keep-alive
	// it starts. AcquireSpaced leaves 5 ms between acquires (not timed), as
	// writers that capture turns do: every acquire finds a spare.
	for _, c := range []struct {
		name string
		gap  time.Duration
	}{{"Acquire", 0}, {"AcquireSpaced", 5 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) {
			m := fence.NewManager(cli, fence.Options{TTL: 10 * time.Second})
			defer m.Close()
			i := 0
			for b.Loop() {
				if c.gap > 0 {
					b.StopTimer()
					time.Sleep(c.gap)
					b.StartTimer()
				}
				k := fence.Keys{Owner: fmt.Sprintf("a%s/w%d", c.name, i), Expiry: fmt.Sprintf("a%s/x%d", c.name, i)}
				if _, _, err := m.Acquire(ctx, k, "t", 0, 1e18); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
	for _, c := range []struct {
		name string
		gap  time.Duration
	}{{"BareTxn", 0}, {"BareTxnSpaced", 5 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) { bareAcquires(ctx, b, cli, c.name, c.gap) })
	}
}

// bareAcquires sends the acquire's transaction, on an etcd lease granted
// once, gap apart (not timed).
func bareAcquires(ctx context.Context, b *testing.B, cli *clientv3.Client, name string, gap time.Duration) {
	g, err := cli.Grant(ctx, 10)
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if gap > 0 {
			b.StopTimer()
			time.Sleep(gap)
			b.StartTimer()
		}
		w, x := fmt.Sprintf("b%s/w%d", name, i), fmt.Sprintf("b%s/x%d", name, i)
		opt := clientv3.WithLease(g.ID)
		take := []clientv3.Op{clientv3.OpPut(w, "t", opt), clientv3.OpPut(x, fence.ExpiryValue(1e18), opt)}
		if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(w), "=", 0)).Then(take...).
			Else(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(x), "<", "0")}, take, nil)).Commit(); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
