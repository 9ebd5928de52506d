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
	// TTL is the TTL of the etcd lease that each writer record is attached
	// to: how long a record outlives its holder's last Acquire or Renew when
	// nobody renews, releases or takes it over. It is rounded up to whole
	// seconds; etcd raises it to its own minimum (2s with default settings).
	// Zero selects 60s.
	TTL time.Duration
	// Logger receives debug messages; nil discards them.
	Logger *slog.Logger
}

// Manager acquires, renews and releases writer records on one etcd client.
// Each record it acquires is attached to an etcd lease of its own, which the
// record's holder keeps alive by renewing the record (Renew), and which etcd's
// leader ends by its own timer when nobody does: a record that its holder
// abandons, or whose holder died, disappears within TTL, and with it every
// key attached to the same lease (a writer's claims). It is safe for
// concurrent use. Close revokes the leases of the records it still holds.
type Manager struct {
	client *clientv3.Client
	ttl    int64
	log    *slog.Logger

	ctx     context.Context // lives until Close; bounds the spares' keep-alives
	cancel  context.CancelFunc
	wgMu    sync.Mutex // orders goroutine starts before Close's wait
	wg      sync.WaitGroup
	stopped bool // Close is waiting for the goroutines; start no more

	mu      sync.Mutex
	spares  []*spare                      // granted leases kept alive for the next Acquires
	filling int                           // grants of spares under way
	owned   map[clientv3.LeaseID]struct{} // leases of records this manager acquired
	closed  bool
}

// spare is a granted etcd lease that nothing is attached to yet, kept alive
// by clientv3's keep-alive loop until an Acquire takes it, so that an
// acquire costs one request, not a grant and a transaction. A manager keeps
// up to spareLeases of them, so that a burst of acquires finds them too.
type spare struct {
	id   clientv3.LeaseID
	stop context.CancelFunc
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
	return &Manager{client: client, ttl: ttl, log: log, ctx: ctx, cancel: cancel, owned: map[clientv3.LeaseID]struct{}{}}
}

// spareLeases is how many spares a manager keeps ready. Each costs etcd one
// lease and a share of the client's keep-alive stream.
const spareLeases = 4

// take returns a lease for a new writer record: a spare when there is one
// (its keep-alive stopped, a full keep-alive sent in the background), a new
// grant otherwise; either way a grant of the next spare starts in the
// background. fresh reports a lease that was just granted.
func (m *Manager) take(ctx context.Context) (id clientv3.LeaseID, err error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0, ErrClosed
	}
	var sp *spare
	if n := len(m.spares); n > 0 {
		sp, m.spares = m.spares[n-1], m.spares[:n-1]
	}
	m.fillLocked()
	m.mu.Unlock()
	if sp != nil {
		sp.stop()
		// The spare was kept alive every TTL/3, so at least two thirds of
		// its TTL are left; one keep-alive gives its holder the whole TTL.
		m.background(func(ctx context.Context) { _, _ = m.client.KeepAliveOnce(ctx, sp.id) })
		return sp.id, nil
	}
	g, err := m.client.Grant(ctx, m.ttl)
	if err != nil {
		return 0, err
	}
	return g.ID, nil
}

// fillLocked starts grants of spares until spareLeases exist or are under
// way. m.mu is held.
func (m *Manager) fillLocked() {
	for !m.closed && len(m.spares)+m.filling < spareLeases {
		m.filling++
		m.background(func(ctx context.Context) {
			sp, err := m.grantSpare(ctx)
			m.mu.Lock()
			defer m.mu.Unlock()
			m.filling--
			if err != nil {
				m.log.Debug("fence: grant of a spare lease failed; an acquire without a spare grants its own", "err", err)
				return
			}
			if m.closed || len(m.spares) >= spareLeases {
				sp.stop()
				m.revokeLater(sp.id)
				return
			}
			m.spares = append(m.spares, sp)
		})
	}
}

// grantSpare grants a lease and keeps it alive until its stop is called or
// the manager closes.
func (m *Manager) grantSpare(ctx context.Context) (*spare, error) {
	g, err := m.client.Grant(ctx, m.ttl)
	if err != nil {
		return nil, err
	}
	return m.keepSpare(g.ID)
}

// keepSpare starts keeping id alive until the returned spare's stop is
// called or the manager closes.
func (m *Manager) keepSpare(id clientv3.LeaseID) (*spare, error) {
	kctx, stop := context.WithCancel(m.ctx)
	ch, err := m.client.KeepAlive(kctx, id)
	if err != nil {
		stop()
		return nil, err
	}
	m.spawn(func() {
		for range ch { // drained until kctx ends
		}
	})
	return &spare{id: id, stop: stop}, nil
}

// giveBack makes lease, which an Acquire took but attached nothing to, a
// spare again when there is room, and revokes it otherwise.
func (m *Manager) giveBack(lease clientv3.LeaseID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || len(m.spares) >= spareLeases {
		m.revokeLater(lease)
		return
	}
	sp, err := m.keepSpare(lease)
	if err != nil {
		m.revokeLater(lease)
		return
	}
	m.spares = append(m.spares, sp)
}

// spawn runs fn in a goroutine that Close waits for, unless Close has begun
// to wait.
func (m *Manager) spawn(fn func()) {
	m.wgMu.Lock()
	defer m.wgMu.Unlock()
	if !m.stopped {
		m.wg.Go(fn)
	}
}

// background runs fn in a goroutine with a bounded context that Close ends.
func (m *Manager) background(fn func(ctx context.Context)) {
	m.spawn(func() {
		ctx, cancel := context.WithTimeout(m.ctx, time.Duration(m.ttl)*time.Second)
		defer cancel()
		fn(ctx)
	})
}

// revokeLater revokes id in the background; a failure leaves it to expire.
func (m *Manager) revokeLater(id clientv3.LeaseID) {
	m.spawn(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), 5*time.Second)
		defer cancel()
		if _, err := m.client.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			m.log.Debug("fence: revoke failed; the lease will expire", "lease", int64(id), "err", err)
		}
	})
}

// Owns reports whether the manager acquired the record attached to lease and
// has not released it.
func (m *Manager) Owns(lease clientv3.LeaseID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.owned[lease]
	return ok
}

// Close revokes the leases of every record the manager acquired and still
// holds, which deletes those records and every key attached to them, and the
// spare. It is safe to call more than once.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	ids := make([]clientv3.LeaseID, 0, len(m.owned)+1)
	for id := range m.owned {
		ids = append(ids, id)
	}
	for _, sp := range m.spares {
		sp.stop()
		ids = append(ids, sp.id)
	}
	m.spares = nil
	m.owned = map[clientv3.LeaseID]struct{}{}
	m.mu.Unlock()
	m.cancel()
	var errs []error
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := m.client.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			errs = append(errs, err)
		}
		cancel()
	}
	m.wgMu.Lock()
	m.stopped = true
	m.wgMu.Unlock()
	m.wg.Wait()
	return errors.Join(errs...)
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

// IfSuperseded returns a nested transaction that runs ops only when the
// record k no longer belongs to the lease (token, fence): it was replaced by
// a takeover, released, or ended with its etcd lease, or holds another token.
// It reads no clock: a lease whose stored expiry has passed but whose record
// nobody replaced is not superseded, since nothing in etcd has yet stopped
// its holder from writing. Once a lease is superseded it never holds the
// record again, so ops may delete what only that lease needed. It costs two
// levels of one comparison and len(ops) operations each.
func IfSuperseded(k Keys, token string, fence int64, ops ...clientv3.Op) clientv3.Op {
	otherToken := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(k.Owner), "!=", token)}, ops, nil)
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
	// Lease is the etcd lease the record is attached to; Renew keeps it
	// alive and Release revokes it.
	Lease clientv3.LeaseID
	// Reads holds the responses of the caller's extra reads, in order, taken
	// atomically with the acquire.
	Reads []*clientv3.GetResponse
}

// Acquire takes the writer record k for token, to expire at expiresAt, when it
// is absent or its stored expiry is not after now, attached to an etcd lease
// of its own. It returns ErrHeld, with the current record, when an unexpired
// lease holds it. reads are Get operations run in the same transaction when
// the acquire succeeds. An Acquire that fails without an answer may be sent
// again with the same token: the record it may have taken then comes back as
// ErrHeld with the caller's token, and its lease is the one the caller should
// renew (WriterRecord does not name it; Lease of the owner key-value does).
func (m *Manager) Acquire(ctx context.Context, k Keys, token string, now, expiresAt float64, reads ...clientv3.Op) (Acquired, *cairn.WriterRecord, error) {
	for attempt := 0; ; attempt++ {
		lease, err := m.take(ctx)
		if err != nil {
			return Acquired{}, nil, err
		}
		acq, held, err := m.acquireWith(ctx, k, token, lease, now, expiresAt, reads)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			continue // the spare ended before it was taken; take another
		}
		if held != nil {
			m.giveBack(lease) // nothing was attached to it
			return acq, held, err
		}
		if err != nil {
			// The transaction may have attached the record to the lease
			// (an answer lost): it is neither reused nor revoked. A retry
			// that finds the record adopts it (Adopt); otherwise nothing
			// keeps it alive and etcd ends it within its TTL.
			return acq, held, err
		}
		m.mu.Lock()
		closed := m.closed
		if !closed {
			m.owned[lease] = struct{}{}
		}
		m.mu.Unlock()
		if closed {
			m.revokeLater(lease)
			return Acquired{}, nil, ErrClosed
		}
		return acq, nil, nil
	}
}

func (m *Manager) acquireWith(ctx context.Context, k Keys, token string, lease clientv3.LeaseID, now, expiresAt float64, reads []clientv3.Op) (Acquired, *cairn.WriterRecord, error) {
	opt := clientv3.WithLease(lease)
	take := append([]clientv3.Op{
		clientv3.OpPut(k.Owner, token, opt),
		clientv3.OpPut(k.Expiry, ExpiryValue(expiresAt), opt),
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
	acq := Acquired{Fence: resp.Header.Revision, Lease: lease}
	for _, op := range ops[2:] {
		r := op.GetResponseRange()
		if r == nil {
			return Acquired{}, nil, fmt.Errorf("fence: acquire read is not a range response")
		}
		acq.Reads = append(acq.Reads, (*clientv3.GetResponse)(r))
	}
	return acq, nil, nil
}

// Adopt records that the caller holds the record attached to lease (one that
// an Acquire whose answer was lost took), so that Close revokes it.
func (m *Manager) Adopt(lease clientv3.LeaseID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.owned[lease] = struct{}{}
	}
}

// Renew moves the expiry of the lease (token, fence) to newExpiry if the lease
// is current at now, then keeps the etcd lease its record is attached to
// alive for another TTL. It reports false when the lease was released,
// replaced or has expired, or its etcd lease has ended.
//
// The transaction goes first: it is a unary call, which refreshes the
// client's auth token when the cluster says it is stale, so the keep-alive
// stream after it carries a fresh one.
func (m *Manager) Renew(ctx context.Context, k Keys, token string, fence int64, lease clientv3.LeaseID, now, newExpiry float64) (bool, error) {
	resp, err := m.client.Txn(ctx).
		If(Guard(k, token, fence, now)...).
		Then(clientv3.OpPut(k.Expiry, ExpiryValue(newExpiry), clientv3.WithIgnoreLease())).
		Commit()
	if err != nil || !resp.Succeeded || lease == 0 {
		return err == nil && resp.Succeeded, err
	}
	for attempt := 0; ; attempt++ {
		_, err := m.client.KeepAliveOnce(ctx, lease)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return false, nil // the record ended with it
		case errors.Is(err, rpctypes.ErrInvalidAuthToken) && attempt < 2:
			// A stream does not refresh the token; a unary call does.
			if _, err := m.client.Get(ctx, k.Owner, clientv3.WithCountOnly()); err != nil {
				return false, err
			}
		default:
			return false, err
		}
	}
}

// Release ends the lease (token, fence). When the manager acquired it, it
// revokes its etcd lease, which deletes the record if it is still the
// lease's (a takeover attached the record to the new holder's lease) and
// every other key attached to it, in one request. Otherwise it deletes the
// record if it still belongs to the lease, whatever its expiry. Either way it
// does nothing to a record that another lease holds.
func (m *Manager) Release(ctx context.Context, k Keys, token string, fence int64, lease clientv3.LeaseID) error {
	m.mu.Lock()
	_, owned := m.owned[lease]
	delete(m.owned, lease)
	m.mu.Unlock()
	if owned {
		_, err := m.client.Revoke(ctx, lease)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil
		}
		return err
	}
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
