package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/cairnstore/cairn/keys"
)

// The fence check is independent of the client history: it reads what etcd
// itself committed. Every write of the store (append, deleteHead, prune,
// fork) puts its thread's record with a nonce naming the write. A gRPC
// interceptor on the clients notes, for each outgoing transaction, the nonce
// and the writer fence the operation used; after the run, etcd's own history
// (a watch from revision 1, with compaction off) lists every committed put of
// a thread record and every put and delete of the thread's writer-owner key,
// whose mod revision is the lease's fence. The check: each committed write's
// fence is the fence of the lease current at its commit revision, so per
// thread the fences of committed writes never go backwards and no write under
// an older lease commits after a newer lease's acquire. It covers writes
// whose outcome the client never learned, too.

// opTag travels in an operation's context so the interceptor can attribute
// the transactions it sees.
type opTag struct {
	client int
	kind   string
	thread string
	fence  int64
	// failed counts the operation's RPCs that returned an error, so that a
	// Release, which reports nothing, can be told apart from one that
	// failed.
	failed *atomic.Int32
}

type opTagKey struct{}

func withTag(ctx context.Context, tag *opTag) context.Context {
	return context.WithValue(ctx, opTagKey{}, tag)
}

// nonceLog maps each thread-record nonce seen in an outgoing transaction to
// the operation that sent it.
type nonceLog struct {
	layout keys.Layout
	mu     sync.Mutex
	byOp   map[string]opTag
}

func newNonceLog(layout keys.Layout) *nonceLog {
	return &nonceLog{layout: layout, byOp: map[string]opTag{}}
}

func (l *nonceLog) lookup(nonce string) (opTag, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.byOp[nonce]
	return t, ok
}

// threadPuts returns the puts of thread records among ops, nested
// transactions included.
func threadPuts(prefix []byte, ops []*etcdserverpb.RequestOp) []*etcdserverpb.PutRequest {
	var out []*etcdserverpb.PutRequest
	for _, op := range ops {
		if p := op.GetRequestPut(); p != nil && bytes.HasPrefix(p.Key, prefix) {
			out = append(out, p)
		}
		if t := op.GetRequestTxn(); t != nil {
			out = append(out, threadPuts(prefix, t.Success)...)
			out = append(out, threadPuts(prefix, t.Failure)...)
		}
	}
	return out
}

// recordNonce is a unary client interceptor that notes the nonces of the
// thread records a tagged transaction writes.
func (l *nonceLog) recordNonce(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if txn, ok := req.(*etcdserverpb.TxnRequest); ok {
		if tag, ok := ctx.Value(opTagKey{}).(*opTag); ok {
			for _, p := range threadPuts(l.layout.Threads(), txn.Success) {
				var rec struct {
					Op string `json:"op"`
				}
				if json.Unmarshal(p.Value, &rec) == nil && rec.Op != "" {
					l.mu.Lock()
					l.byOp[rec.Op] = *tag
					l.mu.Unlock()
				}
			}
		}
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil {
		if tag, ok := ctx.Value(opTagKey{}).(*opTag); ok && tag.failed != nil {
			tag.failed.Add(1)
		}
	}
	return err
}

// writerGuardStripper is the deliberately broken store of the teeth test: an
// interceptor that removes, from every transaction that writes a thread
// record, the comparisons on the writer-owner and writer-expiry keys (the
// comparisons fence.Guard adds). Append then no longer checks its writer
// inside the transaction, so a stale writer's append can commit.
type writerGuardStripper struct {
	layout  keys.Layout
	mu      sync.Mutex
	guarded map[string]bool // writer owner and expiry keys of known threads
	// Stripped counts the comparisons removed.
	stripped int
}

func newWriterGuardStripper(layout keys.Layout, threads ...string) *writerGuardStripper {
	s := &writerGuardStripper{layout: layout, guarded: map[string]bool{}}
	for _, t := range threads {
		s.add(t)
	}
	return s
}

func (s *writerGuardStripper) add(thread string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.guarded[string(s.layout.WriterOwner(thread))] = true
	s.guarded[string(s.layout.WriterExpiry(thread))] = true
}

func (s *writerGuardStripper) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if txn, ok := req.(*etcdserverpb.TxnRequest); ok && len(threadPuts(s.layout.Threads(), txn.Success)) > 0 {
		s.mu.Lock()
		kept := txn.Compare[:0:0]
		for _, c := range txn.Compare {
			if s.guarded[string(c.Key)] {
				s.stripped++
				continue
			}
			kept = append(kept, c)
		}
		s.mu.Unlock()
		req = &etcdserverpb.TxnRequest{Compare: kept, Success: txn.Success, Failure: txn.Failure}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (s *writerGuardStripper) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stripped
}

// fenceViolation is one committed write that does not match the lease
// current at its commit.
type fenceViolation struct {
	Thread   string
	Revision int64
	Kind     string
	Client   int
	Fence    int64 // the fence the write used
	Current  int64 // the fence current at its commit revision; 0 for none
}

func (v fenceViolation) String() string {
	return fmt.Sprintf("thread %q: %s by client %d under fence %d committed at revision %d, when the current lease had fence %d",
		v.Thread, v.Kind, v.Client, v.Fence, v.Revision, v.Current)
}

// fenceReport is the result of checkFences.
type fenceReport struct {
	Writes     int // committed writes checked
	Acquires   int // lease records created
	Violations []fenceViolation
	Unknown    []string // committed thread-record puts no recorded operation sent
}

// checkFences reads etcd's history of the store's keys from revision 1 and
// checks every committed write of the given threads against the lease that
// was current at its commit revision.
func checkFences(ctx context.Context, cli *clientv3.Client, layout keys.Layout, threads []string, log *nonceLog) (fenceReport, error) {
	var rep fenceReport
	owners := map[string]string{}
	for _, t := range threads {
		owners[string(layout.WriterOwner(t))] = t
	}
	head, err := cli.Get(ctx, "cairn-fence-check-probe")
	if err != nil {
		return rep, err
	}
	last := head.Header.Revision
	root := layout.Root()
	end := string(keys.PrefixEnd(root))
	var events []*clientv3.Event
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(wctx, string(root), clientv3.WithRange(end), clientv3.WithRev(1), clientv3.WithProgressNotify())
	// A progress notification comes only once the watcher has caught up
	// with the history; ask for one until it reaches the last revision.
	go func() {
		for wctx.Err() == nil {
			_ = cli.RequestProgress(wctx)
			select {
			case <-wctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return rep, fmt.Errorf("watch the store's history: %w", err)
		}
		events = append(events, resp.Events...)
		if resp.IsProgressNotify() && resp.Header.Revision >= last {
			break
		}
	}
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].Kv.ModRevision < events[j].Kv.ModRevision })
	current := map[string]int64{} // thread -> fence of the current lease, 0 for none
	lastFence := map[string]int64{}
	for _, ev := range events {
		key := string(ev.Kv.Key)
		if t, ok := owners[key]; ok {
			switch ev.Type {
			case mvccpb.PUT:
				// A renew never puts the owner key; each put is an acquire.
				current[t] = ev.Kv.ModRevision
				rep.Acquires++
			case mvccpb.DELETE:
				current[t] = 0
			}
			continue
		}
		if ev.Type != mvccpb.PUT || !bytes.HasPrefix(ev.Kv.Key, layout.Threads()) {
			continue
		}
		t, err := layout.DecodeThread(ev.Kv.Key)
		if err != nil {
			return rep, err
		}
		var rec struct {
			Op string `json:"op"`
		}
		if err := json.Unmarshal(ev.Kv.Value, &rec); err != nil {
			return rep, fmt.Errorf("thread record of %q at revision %d: %w", t, ev.Kv.ModRevision, err)
		}
		tag, ok := log.lookup(rec.Op)
		if !ok {
			rep.Unknown = append(rep.Unknown, fmt.Sprintf("thread %q revision %d nonce %s", t, ev.Kv.ModRevision, rec.Op))
			continue
		}
		if owners[string(layout.WriterOwner(t))] == "" {
			continue // a thread the check was not asked about
		}
		rep.Writes++
		if tag.fence != current[t] || tag.fence < lastFence[t] {
			rep.Violations = append(rep.Violations, fenceViolation{Thread: t, Revision: ev.Kv.ModRevision, Kind: tag.kind, Client: tag.client, Fence: tag.fence, Current: current[t]})
		}
		lastFence[t] = max(lastFence[t], tag.fence)
	}
	return rep, nil
}
