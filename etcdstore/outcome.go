package etcdstore

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn/keys"
)

// attempts tracks the attempts of one write. Every write of a thread puts the
// thread record, with the write's nonce in its Op field, and compares the
// record's mod revision (or its absence). So once an attempt's answer is lost,
// the first write of the thread record after the revision that attempt
// compared decides its fate: if that write carries the nonce, the attempt
// landed; if it carries another, the attempt can never apply, since its
// comparison now fails. Until one of the two is known, every error the write
// returns is an *UnknownOutcomeError.
type attempts struct {
	s      *Store
	op     string
	nonce  keys.Nonce
	thread string
	// pending is the error of an attempt whose outcome is unknown, and
	// pendingRev the thread record revision it compared (0: absent).
	pending    error
	pendingRev int64
	// retry runs the write again with the same nonce, knowing what is pending.
	retry func(ctx context.Context, pending error, pendingRev int64) error

	// n counts the attempts begun, unanswered the commits that ended
	// without an answer.
	n, unanswered int
	// full is set when pending is etcd's NOSPACE answer (see noSpace): the
	// attempt was applied or refused, and the next read settles which.
	full bool
}

// maxAttempts bounds the commits of one write that end without an answer (etcd unreachable, the connection failing): after that many the
// write returns what it met rather than wait for etcd indefinitely. Losing a
// compare-and-swap is not bounded by it: see next.
const maxAttempts = 6

// next begins an attempt of the write. Every write loops on one attempt per
// state: it reads the state, runs the contract's checks on it in order, and
// commits a transaction comparing what it read. An attempt that loses its
// comparison to a concurrent change that leaves the checks passing (an append
// racing a prune by the same lease holder, a stale cached thread record) is
// followed by another on the new state, with the checks run again, for as
// long as ctx allows: the write never gives up on contention alone. From the
// third attempt on, next waits first with a jittered backoff (see backoff).
// When ctx ends first, next returns ctx's error, as an *UnknownOutcomeError
// when an earlier attempt's outcome is unknown.
func (a *attempts) next(ctx context.Context) error {
	err := backoff(ctx, a.n)
	a.n++
	if err != nil {
		return a.fail(err)
	}
	return nil
}

// committed handles the error of a commit that compared the thread record at
// rev. It returns nil when the write should be tried again, and the error to
// return otherwise.
func (a *attempts) committed(ctx context.Context, err error, rev int64) error {
	a.s.forget(a.thread)
	if noSpace(err) && a.pending == nil {
		// etcd answered after applying or refusing the attempt: the next
		// read, which etcd serves under its alarm, tells which (landed).
		a.pending, a.pendingRev, a.full = err, rev, true
		return nil
	}
	if !ambiguous(err) {
		return a.fail(err)
	}
	a.pending, a.pendingRev = err, rev
	a.unanswered++
	if ctx.Err() != nil {
		return a.fail(ctx.Err())
	}
	if a.unanswered >= maxAttempts {
		return a.fail(fmt.Errorf("etcdstore: %s on thread %q: %d commits ended without an answer", a.op, a.thread, a.unanswered))
	}
	return nil
}

// fail returns err, or an *UnknownOutcomeError joining err when an earlier
// attempt may still have landed or may still land.
func (a *attempts) fail(err error) error {
	if a.pending == nil {
		return err
	}
	pending, rev := a.pending, a.pendingRev
	return &UnknownOutcomeError{Op: a.op, Err: errors.Join(err, pending), retry: func(ctx context.Context) error {
		return a.retry(ctx, pending, rev)
	}}
}

// landed settles a pending attempt against a fresh thread record st. It
// reports true when the attempt landed. When st shows the attempt can never
// apply any more, it forgets it, so that later errors are definite.
func (a *attempts) landed(ctx context.Context, st threadState) (bool, error) {
	if a.pending == nil {
		return false, nil
	}
	if st.rec.Op == a.nonce.String() {
		return true, nil
	}
	if st.rev == a.pendingRev {
		if a.full {
			return false, a.refused()
		}
		return false, nil // nothing happened since: the attempt may still land
	}
	kv, err := a.s.firstWriteAfter(ctx, a.thread, a.pendingRev)
	if err != nil {
		return false, a.fail(fmt.Errorf("etcdstore: cannot tell whether an earlier attempt of %s landed: %w", a.op, err))
	}
	first, err := parseThread(kv)
	if err != nil {
		return false, err
	}
	if first.rec.Op == a.nonce.String() {
		return true, nil
	}
	if a.full {
		return false, a.refused()
	}
	a.pending = nil // another write came first: the attempt's comparison fails forever
	return false, nil
}

// refused settles an attempt etcd answered NOSPACE and did not apply: the
// write ends with ErrStoreFull, a definite answer, without another attempt
// (it would meet the same refusal until an operator frees space).
func (a *attempts) refused() error {
	err := storeFull(a.op, a.pending)
	a.pending, a.full = nil, false
	return err
}

// firstWriteAfter returns the first version of a thread record written after
// revision rev (rev 0: the record's first version). The caller knows there is
// one.
func (s *Store) firstWriteAfter(ctx context.Context, thread string, rev int64) (*mvccpb.KeyValue, error) {
	key := string(s.layout.Thread(thread))
	if rev == 0 {
		cur, err := s.client.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		if len(cur.Kvs) == 0 {
			return nil, errors.New("the thread record vanished")
		}
		r, err := s.client.Get(ctx, key, clientv3.WithRev(cur.Kvs[0].CreateRevision))
		if err != nil {
			return nil, err
		}
		return first(r), nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range s.client.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return nil, err
		}
		for _, ev := range resp.Events {
			return ev.Kv, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("the watch ended without an event")
}

// UnknownOutcomeError reports a write that etcd may or may not have applied:
// the call's context ended, or the connection failed, before etcd answered,
// and nothing the store could read since settles it. It wraps the errors met,
// so errors.Is(err, context.DeadlineExceeded) works, and so does errors.Is
// with a contract sentinel when the last attempt met one.
//
// Retry resolves the outcome: it re-issues the same write, with the same
// identity, under the same checks. If an earlier attempt landed, Retry finds it
// and returns nil; otherwise the write is applied at most once, or fails with
// the contract error the checks give now (for example cairn.ErrWriterLost when
// the lease has expired meanwhile). While an earlier attempt could still be
// applied by etcd (it is in etcd's log but not yet applied, and nothing else
// has written the thread since), Retry too returns an *UnknownOutcomeError.
type UnknownOutcomeError struct {
	Op  string
	Err error

	retry func(ctx context.Context) error
}

// Error describes the write and what ended its last attempt.
func (e *UnknownOutcomeError) Error() string {
	return fmt.Sprintf("etcdstore: outcome of %s unknown: %v", e.Op, e.Err)
}

// Unwrap returns the errors met, joined.
func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// Retry resolves the write; see the type's documentation.
func (e *UnknownOutcomeError) Retry(ctx context.Context) error { return e.retry(ctx) }
