package etcdstore

import (
	"context"
	"crypto/rand"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/fence"
)

// AcquireWriter implements cairn.Store with one transaction (see package
// fence): it creates the thread's writer record when there is none or the
// stored one has expired by the store's clock, attached to an etcd lease of
// its own (granted ahead, so that it costs no extra round trip), and reads
// the thread record in the same transaction. The lease's fence is the
// revision of that transaction.
func (s *Store) AcquireWriter(ctx context.Context, threadID string) (_ *cairn.Lease, err error) {
	defer definite("acquireWriter", &err)
	if err := cairn.ValidateID(threadID, "thread id"); err != nil {
		return nil, err
	}
	wk := s.writerKeys(threadID)
	token := rand.Text()
	var fenceRev int64
	var exp float64
	var lease clientv3.LeaseID
	for attempt := 0; ; attempt++ {
		now := s.now()
		exp = now + cairn.Millis(s.opts.LeaseDuration)
		acq, held, err := s.fences.Acquire(ctx, wk, token, now, exp,
			clientv3.OpGet(string(s.layout.Thread(threadID))))
		if errors.Is(err, fence.ErrHeld) {
			if held != nil && held.OwnerToken == token {
				// An earlier attempt whose answer was lost took the lease.
				fenceRev, exp = held.Fence, held.ExpiresAt
				if lease, err = s.writerLease(ctx, cairn.Writer{ThreadID: threadID, OwnerToken: token, Fence: fenceRev}); err != nil {
					return nil, err
				}
				s.fences.Adopt(lease)
				break
			}
			return nil, cairn.NewError(cairn.CodeWriterConflict, "thread %q already has an active writer", threadID)
		}
		if noSpace(err) {
			// etcd applied or refused the acquire (see noSpace): a read,
			// served under the alarm, tells which.
			rs, _, rerr := s.readOnly(ctx, clientv3.OpGet(wk.Owner), clientv3.OpGet(wk.Expiry))
			if rerr != nil {
				return nil, errors.Join(err, rerr)
			}
			if held := fence.Decode(first(rs[0]), first(rs[1])); held != nil && held.OwnerToken == token {
				fenceRev, exp, lease = held.Fence, held.ExpiresAt, clientv3.LeaseID(first(rs[0]).Lease)
				s.fences.Adopt(lease)
				break
			}
			return nil, storeFull("acquireWriter", err)
		}
		if err != nil {
			if ambiguous(err) && ctx.Err() == nil && attempt < maxAttempts {
				continue
			}
			return nil, err
		}
		fenceRev, lease = acq.Fence, acq.Lease
		if st, err := parseThread(first(acq.Reads[0])); err == nil {
			s.remember(threadID, st)
		}
		break
	}
	w := cairn.Writer{ThreadID: threadID, OwnerToken: token, Fence: fenceRev}
	s.claims.setLease(w, lease)
	s.dropSuperseded(ctx, threadID, fenceRev) // claims of earlier leases are dead now
	return cairn.NewLease(w, exp, s.opts.RenewAfter, &leaseDriver{s: s, w: w, lease: lease}), nil
}

// ResumeWriter returns a lease for w, a writer that AcquireWriter of any
// Store on the same etcd and prefix handed out (another process, or this one
// before it restarted), so that a service with several replicas can renew and
// release a lease through any of them. Renew and Release of the result work
// as on the lease AcquireWriter returned; its ExpiresAt is the stored expiry,
// which may have passed (Renew then fails, Release still ends the record).
//
// It reads the thread's writer record once. Errors: cairn.ErrWriterLost when
// the record is not w's (released, taken over, never w's, or a malformed
// writer); cairn.ErrInvalidID for a bad thread id; ctx's and etcd's errors.
//
// Claims that w made through another Store are known only to that Store: an
// append through this one ends the claims made through this one. The others
// are attached to the etcd lease of w's record, like every claim of w, so they
// protect their keys until w's record ends: released, taken over (the
// sweeper then reaps them), or ended with that etcd lease.
func (s *Store) ResumeWriter(ctx context.Context, w cairn.Writer) (*cairn.Lease, error) {
	if err := cairn.ValidateID(w.ThreadID, "thread id"); err != nil {
		return nil, err
	}
	lost := cairn.NewError(cairn.CodeWriterLost, "writer lease for thread %q is no longer current", w.ThreadID)
	if w.OwnerToken == "" || w.Fence <= 0 {
		return nil, lost
	}
	wk := s.writerKeys(w.ThreadID)
	rs, _, err := s.readOnly(ctx, clientv3.OpGet(wk.Owner), clientv3.OpGet(wk.Expiry))
	if err != nil {
		return nil, err
	}
	rec := fence.Decode(first(rs[0]), first(rs[1]))
	if !rec.Holds(w) {
		return nil, lost
	}
	lease := clientv3.LeaseID(first(rs[0]).Lease)
	s.claims.setLease(w, lease)
	return cairn.NewLease(w, rec.ExpiresAt, s.opts.RenewAfter, &leaseDriver{s: s, w: w, lease: lease}), nil
}

type leaseDriver struct {
	s     *Store
	w     cairn.Writer
	lease clientv3.LeaseID // the etcd lease of w's record
}

// Renew keeps the etcd lease of the record alive for another TTL and moves
// the stored expiry with one compare-and-swap guarded like every fenced
// write.
func (d *leaseDriver) Renew(ctx context.Context) (_ float64, err error) {
	defer definite("renewWriter", &err)
	wk := d.s.writerKeys(d.w.ThreadID)
	for attempt := 0; ; attempt++ {
		now := d.s.now()
		exp := now + cairn.Millis(d.s.opts.LeaseDuration)
		ok, err := d.s.fences.Renew(ctx, wk, d.w.OwnerToken, d.w.Fence, d.lease, now, exp)
		if err != nil {
			// A renew is safe to repeat: a retry checks the lease again.
			if ambiguous(err) && ctx.Err() == nil && attempt < maxAttempts {
				continue
			}
			return 0, err
		}
		if !ok {
			d.s.endLease(ctx, d.w) // the lease can never be current again
			return 0, cairn.NewError(cairn.CodeWriterLost, "writer lease for thread %q is no longer current", d.w.ThreadID)
		}
		return exp, nil
	}
}

// Release ends the record if it is still this lease's. When this store
// acquired it, that is one revoke of the record's etcd lease, which deletes
// the record and every claim of the lease (made through any store) at once;
// otherwise a fenced delete of the record, then the claims this store made.
// Failures are logged, not returned: the record and its claims then end with
// the etcd lease, within its TTL.
func (d *leaseDriver) Release(ctx context.Context) {
	wk := d.s.writerKeys(d.w.ThreadID)
	revokes := d.s.fences.Owns(d.lease)
	if err := d.s.fences.Release(ctx, wk, d.w.OwnerToken, d.w.Fence, d.lease); err != nil {
		// The record may still be the lease's: its claims must stay too.
		d.s.log.Warn("etcdstore: release of writer lease failed; it ends with its etcd lease", "thread", d.w.ThreadID, "fence", d.w.Fence, "err", err)
		return
	}
	if !revokes {
		d.s.deleteClaims(ctx, d.w)
	}
	d.s.claims.forget(d.w)
}

// endLease ends what this store remembers of w after one of its writes found
// it lost. Its claims are deleted only when its record is no longer w's
// (taken over, released or ended): a record that is still w's, expired by
// this store's clock but not replaced, may pass w's guard again by a clock
// that reads earlier (a step back, or another process's), so its claims
// stay until the record ends, at the latest with its etcd lease.
func (s *Store) endLease(ctx context.Context, w cairn.Writer) {
	rs, _, err := s.readOnly(ctx, clientv3.OpGet(s.writerKeys(w.ThreadID).Owner))
	if err != nil {
		return // the claims end with the record
	}
	if kv := first(rs[0]); kv != nil && kv.ModRevision == w.Fence && string(kv.Value) == w.OwnerToken {
		return
	}
	s.deleteClaims(ctx, w)
	s.claims.forget(w)
}
