package etcdstore_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// appendChain appends n small checkpoints c1..cn to thread t under w.
func appendChain(t *testing.T, s *etcdstore.Store, w cairn.Writer, n int) {
	t.Helper()
	parent := ""
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("c%d", i)
		if _, err := s.Append(testContext(t), cairn.AppendInput{Checkpoint: smallCheckpoint(id, "t", parent, "k"+id), ExpectedHeadID: parent, Writer: w}); err != nil {
			t.Fatal(err)
		}
		parent = id
	}
}

func listIDs(t *testing.T, s *etcdstore.Store) []string {
	t.Helper()
	return readState(t, s, "t").Lists["t"]
}

func mustVerify(t *testing.T, s *etcdstore.Store) {
	t.Helper()
	rep, err := s.Verify(testContext(t), etcdstore.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("Verify: %+v", rep.Problems)
	}
}

// TestKeepNewestUnderAlarm prunes with deletes only, in one transaction and
// in several (more checkpoints than one holds), then deletes heads down to
// an empty thread: the parent the prune removed must not become the head,
// and every state must verify.
func TestKeepNewestUnderAlarm(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	for _, c := range []struct {
		name    string
		n, keep int
	}{
		{"OneTransaction", 5, 2},
		{"SeveralTransactions", 150, 1},
		{"NothingToRemove", 3, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t, cli, "alarm-"+c.name+"/", etcdstore.Options{})
			l, err := s.AcquireWriter(testContext(t), "t")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(testContext(t))
			appendChain(t, s, l.Writer, c.n)
			ids, err := s.KeepNewestUnderAlarm(testContext(t), "t", c.keep)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := 1; i <= c.n-c.keep; i++ {
				want = append(want, fmt.Sprintf("c%d", i))
			}
			if len(ids) != len(want) || len(want) > 0 && !reflect.DeepEqual(ids, want) {
				t.Fatalf("removed %v, want %v", ids, want)
			}
			var kept []string
			for i := c.n - c.keep + 1; i <= c.n; i++ {
				kept = append(kept, fmt.Sprintf("c%d", i))
			}
			if got := listIDs(t, s); !reflect.DeepEqual(got, kept) {
				t.Fatalf("list %v, want %v", got, kept)
			}
			mustVerify(t, s)
			for i := c.n; i > c.n-c.keep; i-- {
				if err := s.DeleteHead(testContext(t), cairn.DeleteHeadInput{ThreadID: "t", CheckpointID: fmt.Sprintf("c%d", i), Writer: l.Writer}); err != nil {
					t.Fatal(err)
				}
				mustVerify(t, s)
			}
			if h, err := s.GetHead(testContext(t), "t"); err != nil || h != "" {
				t.Fatalf("head %q, %v after deleting every kept checkpoint", h, err)
			}
			// Appends start again on the empty thread.
			if _, err := s.Append(testContext(t), cairn.AppendInput{Checkpoint: smallCheckpoint("again", "t", "", "k"), Writer: l.Writer}); err != nil {
				t.Fatal(err)
			}
			mustVerify(t, s)
		})
	}
}

// TestKeepNewestUnderAlarmRace moves the head back (DeleteHead by the lease
// holder) between the prune's read and its transaction: the transaction must
// delete nothing of its stale plan, and the prune must keep the newest two
// of the new chain.
func TestKeepNewestUnderAlarmRace(t *testing.T) {
	srv, cli := embedetcd.ForTest(t)
	other := newStore(t, cli, "race/", etcdstore.Options{})
	l, err := other.AcquireWriter(testContext(t), "t")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(testContext(t))
	appendChain(t, other, l.Writer, 5)
	var once sync.Once
	hook := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.Contains(method, "KV/Txn") && !readOnly(req) {
			once.Do(func() {
				if err := other.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "t", CheckpointID: "c5", Writer: l.Writer}); err != nil {
					t.Errorf("DeleteHead: %v", err)
				}
			})
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	hc, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(hook)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Close() })
	s := newStore(t, hc, "race/", etcdstore.Options{})
	ids, err := s.KeepNewestUnderAlarm(testContext(t), "t", 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"c1", "c2"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("removed %v, want %v", ids, want)
	}
	if got, want := listIDs(t, s), []string{"c3", "c4"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("list %v, want %v", got, want)
	}
	mustVerify(t, s)
}

// TestKeepNewestUnderAlarmLocalReads: on a thread written with LocalReads,
// the prune under the alarm withdraws the read permit before it deletes (as
// every deletion does), and cannot put it back: the permit stays withdrawn,
// and a Get of a pruned checkpoint finds nothing.
func TestKeepNewestUnderAlarmLocalReads(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	s := newStore(t, cli, "alarm-local/", etcdstore.Options{LocalReads: true})
	l, err := s.AcquireWriter(testContext(t), "t")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(testContext(t))
	appendChain(t, s, l.Writer, 5)
	permit := func() bool {
		t.Helper()
		r, err := cli.Get(testContext(t), string(s.Layout().ReadPermit("t")))
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Kvs) > 0
	}
	if !permit() {
		t.Fatal("no read permit after the appends of a LocalReads store")
	}
	if _, err := s.KeepNewestUnderAlarm(testContext(t), "t", 2); err != nil {
		t.Fatal(err)
	}
	if permit() {
		t.Fatal("the read permit is still there after the prune under the alarm")
	}
	if c, err := s.Get(testContext(t), "c1"); err != nil || c != nil {
		t.Fatalf("Get of a pruned checkpoint: %v, %v", c, err)
	}
	if got, want := listIDs(t, s), []string{"c4", "c5"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("list %v, want %v", got, want)
	}
	mustVerify(t, s)
}
