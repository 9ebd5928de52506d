package etcdstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/fence"
)

// Local reads (Options.LocalReads).
//
// A checkpoint record, its body and its references never change once
// committed: the only way a Get of it can change its answer is a deletion
// (DeleteHead, DeleteCheckpoints, DeleteThread), which hides the record
// behind the thread record's floor or deletes it. A member that lags the
// leader can therefore answer a Get wrongly in one way only: with a
// checkpoint that a deletion already removed. The read permit closes that
// gap without a clock:
//
//   - a thread written by a store with LocalReads has a read permit (a key
//     of its own, put with the thread record) and the flag LocalReads in its
//     thread record, which no write clears;
//   - a deletion of checkpoints of such a thread first deletes the permit
//     (a transaction guarded like the deletion itself), then waits until
//     every member of the cluster has applied that revision, then commits
//     the deletion, comparing the thread record as read and the permit
//     absent, and puts the permit back in the same transaction;
//   - a local Get reads, in one serializable snapshot of its member, the
//     permit, the checkpoint record and the thread record, and answers only
//     when the permit is there and the checkpoint is live in that snapshot.
//     Anything else (a miss, no permit, a compacted or future revision, an
//     error) falls back to the linearizable Get.
//
// Why a local answer is linearizable: it reflects the member's state at
// revision r, read at a time t within the call. If a deletion of the
// checkpoint committed (at R2) before t, its permit withdrawal committed at
// R1 < R2 and every member, this one included, had applied R1 before R2
// was proposed; members apply in order, so r >= R1 at t, and at r the
// permit is absent (or put back at R2 <= r, where the deletion is already
// visible): the read falls back. So at t no deletion of the checkpoint had
// committed, and the checkpoint was live in the committed state: t is the
// read's linearization point.

// permitValue is the value of a read permit; only its presence counts.
var permitValue = []byte{1}

// readCounts counts how the store's Gets were answered.
type readCounts struct {
	local, fallback atomic.Int64
}

// LocalReadCounts returns how many Gets the store answered from its
// member's own state (served) and how many fell back to a linearizable read
// (fellBack) since it was created. Both stay 0 without Options.LocalReads.
func (s *Store) LocalReadCounts() (served, fellBack int64) {
	return s.reads.local.Load(), s.reads.fallback.Load()
}

// getLocal answers Get from the connected member's state when that state
// has the thread's read permit and the checkpoint live; ok is false when it
// cannot, and the caller reads linearizably. It never returns an error: a
// failure of the local path is a fallback.
func (s *Store) getLocal(ctx context.Context, id string) (c cairn.Checkpoint, ok bool) {
	c, ok, err := s.getAt(ctx, id, true)
	return c, ok && err == nil
}

// withdrawPermit is the first step of a deletion of checkpoints of a thread
// with read permits (st.rec.LocalReads): it deletes the permit, guarded by
// the writer lease w and the thread record as read, and waits until every
// member has applied that. The deletion then compares the thread record
// with st and the permit absent (permitCmps) and puts the permit back
// (permitOps). retry is true when the thread changed since st was read: the
// caller reads again. Errors: ErrGuardFailed; ctx's error, or the
// transport's, while a member has not caught up (nothing is deleted, and
// reads of the thread only stop being local).
func (s *Store) withdrawPermit(ctx context.Context, thread string, w cairn.Writer, st threadState, now float64) (retry bool, err error) {
	return s.withdrawPermitIf(ctx, thread, s.withGuards(append(fence.Guard(s.writerKeys(thread), w.OwnerToken, w.Fence, now), s.threadCmp(thread, st))))
}

// withdrawPermitIf is withdrawPermit guarded by cmps (the prune under the
// alarm has no writer, and compares the thread record alone).
func (s *Store) withdrawPermitIf(ctx context.Context, thread string, cmps []clientv3.Cmp) (retry bool, err error) {
	resp, err := s.client.Txn(ctx).If(cmps...).Then(clientv3.OpDelete(string(s.layout.ReadPermit(thread)))).Commit()
	if err != nil {
		return false, err
	}
	if !resp.Succeeded {
		if err := s.guardErr(ctx); err != nil {
			return false, err
		}
		s.forget(thread)
		return true, nil
	}
	return false, s.awaitMembers(ctx, resp.Header.Revision)
}

// permitCmps are the comparisons a deletion adds after withdrawPermit: the
// permit is still withdrawn.
func (s *Store) permitCmps(thread string) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.Version(string(s.layout.ReadPermit(thread))), "=", 0)}
}

// permitOps are the operations a deletion adds after withdrawPermit: the
// permit back, so that the thread's reads are local again.
func (s *Store) permitOps(thread string) []clientv3.Op {
	return []clientv3.Op{clientv3.OpPut(string(s.layout.ReadPermit(thread)), string(permitValue))}
}

// awaitMembers returns once every member of the cluster has applied
// revision rev, asking each member for its status until it has. The member
// list is read linearizably after rev committed, so a member added since
// joins from a state at or after rev and serves nothing before it has
// published itself through the log. Errors: ctx's error, with the member
// that has not caught up and the revision it was at, or the transport's
// error for the member list.
func (s *Store) awaitMembers(ctx context.Context, rev int64) error {
	ml, err := s.client.MemberList(ctx)
	if err != nil {
		return err
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, m := range ml.Members {
		if len(m.ClientURLs) == 0 {
			continue // not started yet: it serves nothing before it catches up
		}
		wg.Go(func() {
			if err := s.awaitMember(ctx, m.Name, m.ClientURLs, rev); err != nil {
				mu.Lock()
				first = cmpErr(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

func cmpErr(have, err error) error {
	if have != nil {
		return have
	}
	return err
}

// awaitMember polls one member's status until its revision reaches rev,
// trying its client URLs in turn.
func (s *Store) awaitMember(ctx context.Context, name string, urls []string, rev int64) error {
	var at int64
	var last error
	for i, wait := 0, 5*time.Millisecond; ; i++ {
		st, err := s.client.Maintenance.Status(ctx, urls[i%len(urls)])
		if err == nil && st.Header != nil {
			if at = st.Header.Revision; at >= rev {
				return nil
			}
		} else if err != nil {
			last = err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			if last != nil {
				return fmt.Errorf("etcdstore: member %q has not applied revision %d (last seen at %d; %v): %w", name, rev, at, last, ctx.Err())
			}
			return fmt.Errorf("etcdstore: member %q has not applied revision %d (it is at %d): %w", name, rev, at, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 250*time.Millisecond)
		if i > 0 && i%20 == 0 {
			s.log.Warn("etcdstore: a deletion waits for a member to apply its permit withdrawal", "member", name, "revision", rev, "at", at, "err", last)
		}
	}
}
