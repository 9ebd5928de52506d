package fence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// ErrHeld is returned by Acquire when an unexpired lease holds the record.
var ErrHeld = errors.New("fence: the writer record is held by an unexpired lease")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("fence: manager closed")

// Keys names the two keys of one writer record.
type Keys struct {
	Owner  string
	Expiry string
}

// Options configure a Manager.
type Options struct {
	// TTL is the TTL of the etcd lease that writer records are attached to.
	// It is rounded up to whole seconds; etcd raises it to its own minimum
	// (2s with default settings). Zero selects 60s.
	TTL time.Duration
	// Logger receives debug messages; nil discards them.
	Logger *slog.Logger
}

// Manager acquires, renews and releases writer records on one etcd client,
// attaching them to an etcd lease it keeps alive. It is safe for concurrent
// use. Close revokes the lease, which removes every record still attached.
type Manager struct {
	client *clientv3.Client
	ttl    int64
	log    *slog.Logger

	ctx    context.Context // lives until Close; keeps the session alive
	cancel context.CancelFunc

	mu      sync.Mutex
	session *concurrency.Session
	closed  bool
}

// NewManager returns a Manager that uses client, which the caller keeps
// owning. No I/O happens until the first Acquire.
func NewManager(client *clientv3.Client, opts Options) *Manager {
	ttl := int64(math.Ceil(opts.TTL.Seconds()))
	if opts.TTL == 0 {
		ttl = 60
	}
	if ttl < 1 {
		ttl = 1
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{client: client, ttl: ttl, log: log, ctx: ctx, cancel: cancel}
}

// Session returns the live etcd lease that new records are attached to,
// granting a new one when there is none or the last one was lost.
func (m *Manager) Session(ctx context.Context) (*concurrency.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if m.session != nil {
		select {
		case <-m.session.Done():
			m.log.Debug("fence: session lease lost; granting a new one", "lease", int64(m.session.Lease()))
			m.session = nil
		default:
			return m.session, nil
		}
	}
	g, err := m.client.Grant(ctx, m.ttl)
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(m.client, concurrency.WithLease(g.ID), concurrency.WithContext(m.ctx))
	if err != nil {
		return nil, err
	}
	m.session = s
	return s, nil
}

// Lease returns the ID of the session lease that new records are attached to
// (see Session). Other keys that must end with the process, such as a
// writer's claims, may be attached to it too.
func (m *Manager) Lease(ctx context.Context) (clientv3.LeaseID, error) {
	s, err := m.Session(ctx)
	if err != nil {
		return 0, err
	}
	return s.Lease(), nil
}

// LeaseLost tells the manager that etcd reported the lease id as not found,
// so that the next Session grants a new one. It does nothing when id is not
// the current session's lease.
func (m *Manager) LeaseLost(id clientv3.LeaseID) {
	m.mu.Lock()
	s := m.session
	m.mu.Unlock()
	if s != nil && s.Lease() == id {
		m.forget(s)
	}
}

// forget drops the session s after etcd said its lease no longer exists.
func (m *Manager) forget(s *concurrency.Session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.session == s {
		s.Orphan()
		m.session = nil
	}
}

// Close stops keeping the session alive and revokes its lease, which deletes
// every record still attached to it. It is safe to call more than once.
func (m *Manager) Close() error {
	m.mu.Lock()
	s := m.session
	m.session, m.closed = nil, true
	m.mu.Unlock()
	var err error
	if s != nil {
		err = s.Close()
	}
	m.cancel()
	return err
}

// ExpiryValue encodes an expiry for the Expiry key.
func ExpiryValue(ms float64) string { return string(keys.Float64(ms)) }

// Guard returns the comparisons that hold while the lease with the given token
// and fence is current at now.
func Guard(k Keys, token string, fence int64, now float64) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(k.Owner), "=", fence),
		clientv3.Compare(clientv3.Value(k.Owner), "=", token),
		clientv3.Compare(clientv3.Value(k.Expiry), ">", ExpiryValue(now)),
	}
}

// GuardCompares returns Guard's comparisons as etcd's own messages, for a
// caller that builds its request directly: clientv3.Compare copies every
// comparison it makes by reflection, these are built as they are. The
// comparisons and the slice are one allocation, and the slice has room for
// five more comparisons of the caller's.
func GuardCompares(k Keys, token string, fence int64, now float64) []*etcdserverpb.Compare {
	g := new(struct {
		cmps          [3]etcdserverpb.Compare
		mod           etcdserverpb.Compare_ModRevision
		token, expiry etcdserverpb.Compare_Value
		slice         [8]*etcdserverpb.Compare
	})
	owner := []byte(k.Owner)
	g.mod.ModRevision = fence
	g.token.Value = []byte(token)
	g.expiry.Value = keys.Float64(now)
	c := &g.cmps
	c[0].Result, c[0].Target, c[0].Key, c[0].TargetUnion = etcdserverpb.Compare_EQUAL, etcdserverpb.Compare_MOD, owner, &g.mod
	c[1].Result, c[1].Target, c[1].Key, c[1].TargetUnion = etcdserverpb.Compare_EQUAL, etcdserverpb.Compare_VALUE, owner, &g.token
	c[2].Result, c[2].Target, c[2].Key, c[2].TargetUnion = etcdserverpb.Compare_GREATER, etcdserverpb.Compare_VALUE, []byte(k.Expiry), &g.expiry
	return append(g.slice[:0], &c[0], &c[1], &c[2])
}

// IfNotCurrent returns a nested transaction that runs ops only when the lease
// (token, fence) is not current at now: its record was replaced or deleted,
// or it holds another token, or its stored expiry is not after now. Once a
// lease is not current it never is again, so ops may delete what only that
// lease needed. It costs at most three levels of one comparison and
// len(ops) operations.
func IfNotCurrent(k Keys, token string, fence int64, now float64, ops ...clientv3.Op) clientv3.Op {
	expired := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(k.Expiry), "<", ExpiryValue(now)+"\x00")}, ops, nil)
	otherToken := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(k.Owner), "!=", token)}, ops, []clientv3.Op{expired})
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k.Owner), "!=", fence)}, ops, []clientv3.Op{otherToken})
}

// Decode returns the writer record held by the owner and expiry key-values, or
// nil when there is none.
func Decode(owner, expiry *mvccpb.KeyValue) *cairn.WriterRecord {
	if owner == nil || expiry == nil {
		return nil
	}
	exp, _, err := keys.DecodeFloat64(expiry.Value)
	if err != nil {
		return nil
	}
	return &cairn.WriterRecord{OwnerToken: string(owner.Value), Fence: owner.ModRevision, ExpiresAt: exp}
}

// Acquired is the result of a successful Acquire.
type Acquired struct {
	Fence int64
	// Reads holds the responses of the caller's extra reads, in order, taken
	// atomically with the acquire.
	Reads []*clientv3.GetResponse
}

// Acquire takes the writer record k for token, to expire at expiresAt, when it
// is absent or its stored expiry is not after now. It returns ErrHeld, with the
// current record, when an unexpired lease holds it. reads are Get operations
// run in the same transaction when the acquire succeeds.
func (m *Manager) Acquire(ctx context.Context, k Keys, token string, now, expiresAt float64, reads ...clientv3.Op) (Acquired, *cairn.WriterRecord, error) {
	for attempt := 0; ; attempt++ {
		s, err := m.Session(ctx)
		if err != nil {
			return Acquired{}, nil, err
		}
		lease := clientv3.WithLease(s.Lease())
		take := append([]clientv3.Op{
			clientv3.OpPut(k.Owner, token, lease),
			clientv3.OpPut(k.Expiry, ExpiryValue(expiresAt), lease),
		}, reads...)
		takeover := clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(k.Expiry), "<", ExpiryValue(now)+"\x00")},
			take,
			[]clientv3.Op{clientv3.OpGet(k.Owner), clientv3.OpGet(k.Expiry)},
		)
		resp, err := m.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(k.Owner), "=", 0)).
			Then(take...).
			Else(takeover).
			Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			m.forget(s) // the session expired before we noticed; grant a new one
			continue
		}
		if err != nil {
			return Acquired{}, nil, err
		}
		ops := resp.Responses
		if !resp.Succeeded {
			nested := ops[0].GetResponseTxn()
			if !nested.Succeeded {
				owner, expiry := FirstKV(nested.Responses[0]), FirstKV(nested.Responses[1])
				return Acquired{}, Decode(owner, expiry), ErrHeld
			}
			ops = nested.Responses
		}
		acq := Acquired{Fence: resp.Header.Revision}
		for _, op := range ops[2:] {
			r := op.GetResponseRange()
			if r == nil {
				return Acquired{}, nil, fmt.Errorf("fence: acquire read is not a range response")
			}
			acq.Reads = append(acq.Reads, (*clientv3.GetResponse)(r))
		}
		return acq, nil, nil
	}
}

// Renew moves the expiry of the lease (token, fence) to newExpiry if the lease
// is current at now. It reports false when the lease was released, replaced
// or has expired.
func (m *Manager) Renew(ctx context.Context, k Keys, token string, fence int64, now, newExpiry float64) (bool, error) {
	resp, err := m.client.Txn(ctx).
		If(Guard(k, token, fence, now)...).
		Then(clientv3.OpPut(k.Expiry, ExpiryValue(newExpiry), clientv3.WithIgnoreLease())).
		Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// Release deletes the record if it still belongs to the lease (token, fence),
// whatever its expiry, and does nothing otherwise.
func (m *Manager) Release(ctx context.Context, k Keys, token string, fence int64) error {
	_, err := m.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k.Owner), "=", fence),
			clientv3.Compare(clientv3.Value(k.Owner), "=", token)).
		Then(clientv3.OpDelete(k.Owner), clientv3.OpDelete(k.Expiry)).
		Commit()
	return err
}

// FirstKV returns the first key-value of a range response op, or nil.
func FirstKV(op *etcdserverpb.ResponseOp) *mvccpb.KeyValue {
	r := op.GetResponseRange()
	if r == nil || len(r.Kvs) == 0 {
		return nil
	}
	return r.Kvs[0]
}
