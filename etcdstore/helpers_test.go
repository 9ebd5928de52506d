package etcdstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

func TestMain(m *testing.M) {
	if eps := os.Getenv(crashEnv); eps != "" {
		crashWriterProcess(eps)
		return
	}
	goleak.VerifyTestMain(m)
}

// clock is a settable clock in milliseconds.
type clock struct {
	mu sync.Mutex
	ms float64
}

func (c *clock) Now() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ms
}

func (c *clock) Add(ms float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ms += ms
}

func newStore(t *testing.T, cli *clientv3.Client, prefix string, opts etcdstore.Options) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.New(cli, prefix, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func fileKey(s string) string {
	return fmt.Sprintf("sandbox-files/sha256/%x", sha256.Sum256([]byte(s)))
}

func artifactKey(s string) string {
	return fmt.Sprintf("sandbox-artifacts/sha256/%x", sha256.Sum256([]byte(s)))
}

// largeCheckpoint returns a checkpoint with n file entries, each with its own
// blob key, and a conversation of about convBytes bytes.
func largeCheckpoint(id, thread, parent string, n, convBytes int) cairn.Checkpoint {
	files := make([]cairn.Entry, n)
	for i := range files {
		files[i] = cairn.Entry{Path: fmt.Sprintf("src/pkg%03d/file%05d.go", i/100, i), Kind: cairn.KindFile, BlobKey: fileKey(id + fmt.Sprint(i)), Size: int64(i)}
	}
	var msgs []map[string]string
	line := strings.Repeat("the quick brown fox jumps over the lazy dog ", 20)
	for size := 0; size < convBytes; size += len(line) + 40 {
		msgs = append(msgs, map[string]string{"role": "assistant", "content": line})
	}
	conv, _ := json.Marshal(msgs)
	return cairn.Checkpoint{
		ID: id, ThreadID: thread, ParentCheckpointID: parent, CreatedAt: 1, Reason: cairn.ReasonAutomatic,
		Files: files, Conversation: conv,
		Artifacts: []cairn.Artifact{{ArtifactID: "a1", Name: "report.txt", MimeType: "text/plain", Size: 3, BlobKey: artifactKey(id), CreatedAt: 1}},
	}
}

// faults counts the client's unary calls and can fail a chosen one.
type faults struct {
	calls atomic.Int64
	// failAt is the number of the call (from 1) to fail; 0 fails none.
	failAt atomic.Int64
	// after, when set, lets the failing call reach the server and then
	// reports an error, as when the answer is lost.
	after atomic.Bool
	// sticky fails every call from failAt on, not only that one.
	sticky atomic.Bool
	// onFail runs when a call is failed.
	onFail func()
	// method restricts counting to calls whose method contains it.
	method string
	// writesOnly restricts counting to requests that may write.
	writesOnly bool
	// failWith, when set, is the error a failed call returns instead of
	// errInjected (etcd's NOSPACE answer, for one).
	failWith error
}

// readOnly reports whether req is a transaction that only reads.
func readOnly(req any) bool {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	if !ok {
		_, isRange := req.(*etcdserverpb.RangeRequest)
		return isRange
	}
	for _, ops := range [][]*etcdserverpb.RequestOp{txn.Success, txn.Failure} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

// reset stops failing calls and restarts the count.
func (f *faults) reset() {
	f.failAt.Store(0)
	f.sticky.Store(false)
	f.after.Store(false)
	f.calls.Store(0)
	f.failWith = nil
}

var errInjected = fmt.Errorf("injected transport failure")

func (f *faults) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if f.method != "" && !strings.Contains(method, f.method) || f.writesOnly && readOnly(req) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	n, at := f.calls.Add(1), f.failAt.Load()
	if at == 0 || n < at || n > at && !f.sticky.Load() {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if f.onFail != nil {
		defer f.onFail()
	}
	if f.after.Load() {
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
	}
	if f.failWith != nil {
		return f.failWith
	}
	return errInjected
}

// faultyClient returns a client of srv whose calls go through f.
func faultyClient(t *testing.T, srv *embedetcd.Server, f *faults) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   srv.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(f.intercept)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// state is what every read of a store shows for some threads.
type state struct {
	Heads map[string]string
	Lists map[string][]string
	Refs  []cairn.BlobReference
}

func readState(t *testing.T, s *etcdstore.Store, threads ...string) state {
	t.Helper()
	ctx := testContext(t)
	st := state{Heads: map[string]string{}, Lists: map[string][]string{}}
	for _, th := range threads {
		h, err := s.GetHead(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		st.Heads[th] = h
		l, err := s.List(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{}
		for _, c := range l {
			ids = append(ids, c.ID)
		}
		st.Lists[th] = ids
	}
	refs, err := s.ListBlobReferences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Refs = refs
	return st
}

// visibleKeys returns the store's keys that no lease holds, with their mod
// revisions: everything a reader could ever be shown.
func visibleKeys(t *testing.T, cli *clientv3.Client, s *etcdstore.Store) map[string]int64 {
	t.Helper()
	resp, err := cli.Get(testContext(t), string(s.Layout().Root()), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		if kv.Lease == 0 {
			out[string(kv.Key)] = kv.ModRevision
		}
	}
	return out
}

// leasedKeys counts the store's keys held by a lease (staged or writer keys).
func leasedKeys(t *testing.T, cli *clientv3.Client, s *etcdstore.Store) int {
	t.Helper()
	// Not WithKeysOnly: a keys-only read does not report leases.
	resp, err := cli.Get(testContext(t), string(s.Layout().Root()), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		if kv.Lease != 0 {
			n++
		}
	}
	return n
}
