package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/cairnstore/cairn/keys"
)

// LockName follows keys.Layout.Locks() in the key of the sweeper's lock; the
// status record's key is LockName + "-status", outside the lock's range.
const LockName = "sweeper"

// Status is the record a sweeper keeps in etcd, beside its lock, about the
// run in progress or the last one. Every write of it is fenced by the lock,
// so only the holder can change it.
type Status struct {
	RunID  string `json:"runId"`
	Holder string `json:"holder"`
	// Phase is starting, pruning, listing, deleting, verifying or done.
	Phase     string    `json:"phase"`
	DryRun    bool      `json:"dryRun"`
	StartedAt time.Time `json:"startedAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	// Batches and KeysSent count the delete batches begun so far.
	Batches  int `json:"batches"`
	KeysSent int `json:"keysSent"`
	// Set when the run is done.
	Result     string `json:"result,omitempty"`
	Error      string `json:"error,omitempty"`
	Pruned     int    `json:"pruned"`
	Deleted    int    `json:"deleted"`
	BytesFreed int64  `json:"bytesFreed"`
	// LastSuccessAt is when the last successful run that was not a dry run
	// ended, carried from run to run.
	LastSuccessAt *time.Time `json:"lastSuccessAt,omitempty"`
}

// locker takes the sweeper's lock: an etcd mutex (client/v3/concurrency) on
// a session whose lease the process keeps alive. The session outlives runs
// and is replaced when it expires.
type locker struct {
	client    *clientv3.Client
	key       string // the mutex prefix
	statusKey string
	ttl       time.Duration
	timeout   time.Duration // of each request
	log       *slog.Logger

	mu      sync.Mutex
	session *concurrency.Session
	// ctx keeps the sessions' keepalives running until close.
	ctx    context.Context
	cancel context.CancelFunc
}

func newLocker(client *clientv3.Client, layout keys.Layout, ttl, timeout time.Duration, log *slog.Logger) *locker {
	ctx, cancel := context.WithCancel(context.Background())
	locks := string(layout.Locks())
	return &locker{
		client:    client,
		key:       locks + LockName,
		statusKey: locks + LockName + "-status",
		ttl:       ttl,
		timeout:   timeout,
		log:       log,
		ctx:       ctx,
		cancel:    cancel,
	}
}

// currentSession returns the live session, or a new one when there is none
// or it expired.
func (l *locker) currentSession(ctx context.Context) (*concurrency.Session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.session != nil {
		select {
		case <-l.session.Done():
			l.log.Warn("the etcd session behind the lock expired; starting a new one")
			l.session = nil
		default:
			return l.session, nil
		}
	}
	// Grant the lease with a deadline; the session's keepalive then runs on
	// the locker's own context.
	gctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	ttl := int64(math.Ceil(l.ttl.Seconds()))
	lease, err := l.client.Grant(gctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("create the etcd session for the lock: %w", err)
	}
	s, err := concurrency.NewSession(l.client, concurrency.WithLease(lease.ID), concurrency.WithContext(l.ctx), concurrency.WithTTL(int(ttl)))
	if err != nil {
		return nil, fmt.Errorf("create the etcd session for the lock: %w", err)
	}
	l.session = s
	return s, nil
}

// heldLock is the lock while a run holds it.
type heldLock struct {
	l       *locker
	mutex   *concurrency.Mutex
	session *concurrency.Session
}

// Guard is the comparison that holds while this lock is held: the lock key's
// create revision is the one this holder got. Every write of a run carries it.
func (h *heldLock) Guard() clientv3.Cmp { return h.mutex.IsOwner() }

// Revision is the etcd revision at which the lock was taken: the run's fencing
// token.
func (h *heldLock) Revision() int64 {
	if hdr := h.mutex.Header(); hdr != nil {
		return hdr.Revision
	}
	return 0
}

// acquire takes the lock. Without wait it gives up at once, and with a
// positive timeout after that long, with an error matching ErrLockHeld. With
// wait it waits until ctx ends, and returns ctx's error then.
func (l *locker) acquire(ctx context.Context, wait bool, timeout time.Duration) (*heldLock, error) {
	for attempt := 0; ; attempt++ {
		s, err := l.currentSession(ctx)
		if err != nil {
			return nil, err
		}
		m := concurrency.NewMutex(s, l.key)
		tctx, cancel := context.WithTimeout(ctx, l.timeout)
		err = m.TryLock(tctx)
		cancel()
		if err == nil {
			return &heldLock{l: l, mutex: m, session: s}, nil
		}
		if !errors.Is(err, concurrency.ErrLocked) {
			return nil, fmt.Errorf("take the sweeper lock: %w", err)
		}
		if !wait && timeout <= 0 {
			return nil, l.heldError(ctx)
		}
		l.log.Info("another sweeper holds the lock; waiting", "phase", "lock", "holder", l.holderAttr(ctx))
		wctx, wcancel := ctx, context.CancelFunc(func() {})
		if !wait {
			wctx, wcancel = context.WithTimeout(ctx, timeout)
		}
		err = m.Lock(wctx)
		wcancel()
		switch {
		case err == nil:
			return &heldLock{l: l, mutex: m, session: s}, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			return nil, fmt.Errorf("%w after waiting %v", l.heldError(ctx), timeout)
		case errors.Is(err, concurrency.ErrSessionExpired) && attempt < 3:
			continue
		}
		return nil, fmt.Errorf("wait for the sweeper lock: %w", err)
	}
}

// heldError describes who holds the lock, from the status record.
func (l *locker) heldError(ctx context.Context) error {
	return fmt.Errorf("%w (%s)", ErrLockHeld, l.holderAttr(ctx))
}

func (l *locker) holderAttr(ctx context.Context) string {
	st, err := l.readStatus(ctx)
	switch {
	case err != nil:
		return "its status cannot be read: " + err.Error()
	case st == nil:
		return "it has written no status"
	case st.Phase == "done":
		return fmt.Sprintf("its last status: run %s by %s ended %s", st.RunID, st.Holder, st.UpdatedAt.Format(time.RFC3339))
	}
	return fmt.Sprintf("run %s by %s, started %s, phase %s", st.RunID, st.Holder, st.StartedAt.Format(time.RFC3339), st.Phase)
}

// release unlocks, also after ctx ended. A lost lock needs no release.
func (h *heldLock) release(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.l.timeout)
	defer cancel()
	if err := h.mutex.Unlock(rctx); err != nil && !errors.Is(err, concurrency.ErrLockReleased) {
		h.l.log.Warn("could not release the sweeper lock; it frees itself when the session ends", "phase", "lock", "error", err)
	}
}

// readStatus returns the status record, or nil when there is none.
func (l *locker) readStatus(ctx context.Context) (*Status, error) {
	rctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	return readStatusAt(rctx, l.client, l.statusKey)
}

// ReadStatus returns the status record of the sweeper whose lock lives in
// layout, or nil when there is none. It only reads. Errors are etcd's, or
// one saying the record does not decode.
func ReadStatus(ctx context.Context, client *clientv3.Client, layout keys.Layout) (*Status, error) {
	return readStatusAt(ctx, client, string(layout.Locks())+LockName+"-status")
}

func readStatusAt(ctx context.Context, client *clientv3.Client, key string) (*Status, error) {
	resp, err := client.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var st Status
	if err := json.Unmarshal(resp.Kvs[0].Value, &st); err != nil {
		return nil, fmt.Errorf("decode the sweeper status: %w", err)
	}
	return &st, nil
}

// writeStatus puts the status record in one transaction fenced by the lock:
// If the lock is still ours Then put. It returns an error matching ErrLockLost
// when the lock is no longer ours, and writes nothing then.
func (h *heldLock) writeStatus(ctx context.Context, st *Status) error {
	st.UpdatedAt = time.Now().UTC()
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, h.l.timeout)
	defer cancel()
	resp, err := h.l.client.Txn(wctx).If(h.Guard()).Then(clientv3.OpPut(h.l.statusKey, string(data))).Commit()
	if err != nil {
		return fmt.Errorf("record the sweeper's progress: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: its lock key is gone (session expired or deleted), so it stops before the next write", ErrLockLost)
	}
	return nil
}

// close ends the session, which frees the lock at once rather than after the
// TTL.
func (l *locker) close() {
	l.mu.Lock()
	s := l.session
	l.session = nil
	l.mu.Unlock()
	if s != nil {
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		defer cancel()
		s.Orphan()
		if _, err := l.client.Revoke(ctx, s.Lease()); err != nil {
			l.log.Debug("could not revoke the lock's session lease; it expires by itself", "error", err)
		}
	}
	l.cancel()
}
