package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
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
//
// The capacity layout adds writes that put no thread record: a writer claims
// the keys of its body objects (P q B T f, the claim key names the thread and
// the fence) in transactions of their own, which may also end a GC record's
// candidacy (delete P g B). Each committed claim put is checked the same way,
// by the fence its key names. And every other record a writer puts (checkpoint,
// index, reference and transcript records, the shard-4 records that name a
// root) must commit in a transaction, that is at a revision, that also holds
// a checked write: a thread-record put or a claim put. Puts that no checked
// write accounts for are reported as unattributed. Deletes are cleanup (the
// records a prune left behind its floor, claims after an append or with their
// session) and need no fence, except deletes of GC records, which only a
// claim makes while no sweeper runs.

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

// nonceLog maps each thread-record nonce, and each claim key, seen in an
// outgoing transaction to the operation that sent it.
type nonceLog struct {
	layout  keys.Layout
	mu      sync.Mutex
	byOp    map[string]opTag
	byClaim map[string]opTag
}

func newNonceLog(layout keys.Layout) *nonceLog {
	return &nonceLog{layout: layout, byOp: map[string]opTag{}, byClaim: map[string]opTag{}}
}

func (l *nonceLog) claimer(key []byte) (opTag, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.byClaim[string(key)]
	return t, ok
}

func (l *nonceLog) lookup(nonce string) (opTag, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.byOp[nonce]
	return t, ok
}

// threadPuts returns the puts of keys under prefix (thread records, claims)
// among ops, nested transactions included.
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
			for _, p := range threadPuts(l.layout.Claims(), txn.Success) {
				l.mu.Lock()
				l.byClaim[string(p.Key)] = *tag
				l.mu.Unlock()
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
// record or a claim, the comparisons on the writer-owner and writer-expiry
// keys (the comparisons fence.Guard adds). Append then no longer checks its
// writer inside the transaction, so a stale writer's append can commit; and
// on the capacity layout a stale writer's claims of its body objects commit.
// With claimsOnly set it strips only claim transactions: the appends stay
// fenced, and only the claims skip the fence compare.
type writerGuardStripper struct {
	layout     keys.Layout
	claimsOnly bool
	mu         sync.Mutex
	guarded    map[string]bool // writer owner and expiry keys of known threads
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
	if txn, ok := req.(*etcdserverpb.TxnRequest); ok && s.strips(txn) {
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

// strips reports whether the stripper removes the guard of txn.
func (s *writerGuardStripper) strips(txn *etcdserverpb.TxnRequest) bool {
	if len(threadPuts(s.layout.Claims(), txn.Success)) > 0 {
		return true
	}
	return !s.claimsOnly && len(threadPuts(s.layout.Threads(), txn.Success)) > 0
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
	Writes     int // committed thread-record writes checked
	Claims     int // committed claim puts checked
	Acquires   int // lease records created
	Violations []fenceViolation
	Unknown    []string // committed thread-record puts no recorded operation sent
	// Unattributed lists the revisions at which records were written that
	// neither a thread-record put nor a claim put accounts for.
	Unattributed []string
}

// keyClass says what kind of record of the store's layout a key is.
type keyClass int

const (
	classOther  keyClass = iota // locks, instance records: not a writer's
	classThread                 // P n T: the thread record
	classOwner                  // P t T w: the writer lease's owner
	classExpiry                 // P t T x: the writer lease's expiry
	classStaged                 // P t T k / P t T M: staged chunks
	classRecord                 // other per-thread, index and reference records
	classClaim                  // P q B T f
	classGC                     // P g B
)

// classify returns the class of a key of the layout and, for per-thread keys
// and claims, the thread it belongs to.
func classifyKey(layout keys.Layout, key []byte) (keyClass, string) {
	root := layout.Root()
	if len(key) <= len(root) || !bytes.HasPrefix(key, root) {
		return classOther, ""
	}
	switch key[len(root)] {
	case 'n':
		t, err := layout.DecodeThread(key)
		if err != nil {
			return classRecord, ""
		}
		return classThread, t
	case 'q':
		ck, err := layout.DecodeClaim(key)
		if err != nil {
			return classRecord, ""
		}
		return classClaim, ck.Thread
	case 'g':
		return classGC, ""
	case 'r', 'i':
		return classRecord, ""
	case 't':
		t, rest, err := keys.DecodeString(key[len(root)+1:])
		if err != nil || len(rest) == 0 {
			return classRecord, ""
		}
		switch rest[0] {
		case 'w':
			return classOwner, t
		case 'x':
			return classExpiry, t
		case 'k', 'M':
			return classStaged, t
		}
		return classRecord, t
	}
	return classOther, ""
}

// checkFences reads etcd's history of the store's keys from revision 1 and
// checks every committed write of the given threads against the lease that
// was current at its commit revision.
func checkFences(ctx context.Context, cli *clientv3.Client, layout keys.Layout, threads []string, log *nonceLog) (fenceReport, error) {
	var rep fenceReport
	events, err := storeHistory(ctx, cli, layout)
	if err != nil {
		return rep, err
	}
	checked := map[string]bool{}
	for _, t := range threads {
		checked[t] = true
	}
	fc := fenceChecker{layout: layout, checked: checked, log: log, rep: &rep,
		current: map[string]int64{}, lastFence: map[string]int64{}}
	for i := 0; i < len(events); {
		j := i + 1
		for j < len(events) && events[j].Kv.ModRevision == events[i].Kv.ModRevision {
			j++
		}
		if err := fc.transaction(events[i:j]); err != nil {
			return rep, err
		}
		i = j
	}
	return rep, nil
}

// storeHistory returns every event on the store's keys from revision 1 to
// the current revision, ordered by revision.
func storeHistory(ctx context.Context, cli *clientv3.Client, layout keys.Layout) ([]*clientv3.Event, error) {
	head, err := cli.Get(ctx, "cairn-fence-check-probe")
	if err != nil {
		return nil, err
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
			return nil, fmt.Errorf("watch the store's history: %w", err)
		}
		events = append(events, resp.Events...)
		if resp.IsProgressNotify() && resp.Header.Revision >= last {
			break
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].Kv.ModRevision < events[j].Kv.ModRevision })
	return events, nil
}

// fenceChecker walks the history one transaction (one revision) at a time.
type fenceChecker struct {
	layout    keys.Layout
	checked   map[string]bool // the threads the check was asked about
	log       *nonceLog
	rep       *fenceReport
	current   map[string]int64 // thread -> fence of the current lease, 0 for none
	lastFence map[string]int64
}

// transaction checks the events of one revision.
func (fc *fenceChecker) transaction(evs []*clientv3.Event) error {
	rev := evs[0].Kv.ModRevision
	attributed := false
	var needs []string // records that a checked write must account for
	for _, ev := range evs {
		class, t := classifyKey(fc.layout, ev.Kv.Key)
		put := ev.Type == mvccpb.PUT
		switch class {
		case classOwner:
			if !fc.checked[t] {
				continue
			}
			if put {
				// A renew never puts the owner key; each put is an acquire.
				fc.current[t] = ev.Kv.ModRevision
				fc.rep.Acquires++
			} else {
				fc.current[t] = 0
			}
		case classThread:
			if !put {
				needs = append(needs, "delete of the thread record of "+t)
				continue
			}
			var rec struct {
				Op string `json:"op"`
			}
			if err := json.Unmarshal(ev.Kv.Value, &rec); err != nil {
				return fmt.Errorf("thread record of %q at revision %d: %w", t, rev, err)
			}
			tag, ok := fc.log.lookup(rec.Op)
			if !ok {
				fc.rep.Unknown = append(fc.rep.Unknown, fmt.Sprintf("thread %q revision %d nonce %s", t, rev, rec.Op))
				continue
			}
			attributed = true
			if !fc.checked[t] {
				continue // a thread the check was not asked about
			}
			fc.rep.Writes++
			fc.check(t, rev, tag.kind, tag.client, tag.fence)
		case classClaim:
			if !put {
				continue // cleanup: after an append, a release, or with the session
			}
			attributed = true
			if !fc.checked[t] {
				continue
			}
			ck, err := fc.layout.DecodeClaim(ev.Kv.Key)
			if err != nil {
				return fmt.Errorf("claim key at revision %d: %w", rev, err)
			}
			fc.rep.Claims++
			kind, client := "claim", -1
			if tag, ok := fc.log.claimer(ev.Kv.Key); ok {
				kind, client = "claim of "+tag.kind, tag.client
				if tag.fence != int64(ck.Fence) {
					fc.rep.Violations = append(fc.rep.Violations, fenceViolation{Thread: t, Revision: rev,
						Kind: fmt.Sprintf("claim whose key names fence %d, sent by an operation", ck.Fence), Client: client, Fence: tag.fence, Current: fc.current[t]})
				}
			}
			fc.check(t, rev, kind, client, int64(ck.Fence))
		case classGC:
			needs = append(needs, fmt.Sprintf("%s of a GC record", ev.Type))
		case classRecord:
			if put {
				needs = append(needs, fmt.Sprintf("put of %q", ev.Kv.Key))
			}
		case classStaged:
			if put && ev.Kv.Lease == 0 {
				// A staged chunk is put with its staging lease; the publish
				// that makes it permanent puts a thread record.
				needs = append(needs, fmt.Sprintf("put of the chunk %q without a staging lease", ev.Kv.Key))
			}
		}
	}
	if !attributed && len(needs) > 0 {
		fc.rep.Unattributed = append(fc.rep.Unattributed, fmt.Sprintf("revision %d: %s", rev, strings.Join(needs, "; ")))
	}
	return nil
}

// check records a violation unless fence is the fence of the lease current
// on thread t and not older than an earlier write's.
func (fc *fenceChecker) check(t string, rev int64, kind string, client int, fence int64) {
	if fence != fc.current[t] || fence < fc.lastFence[t] {
		fc.rep.Violations = append(fc.rep.Violations, fenceViolation{Thread: t, Revision: rev, Kind: kind, Client: client, Fence: fence, Current: fc.current[t]})
	}
	fc.lastFence[t] = max(fc.lastFence[t], fence)
}
