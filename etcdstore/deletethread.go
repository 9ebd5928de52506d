package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/fence"
	"github.com/cairnstore/cairn/keys"
)

var _ cairn.ThreadDeleter = (*Store)(nil)

// DeleteThread implements cairn.ThreadDeleter. It reads the thread record, the
// writer record and the thread's checkpoint records at one revision and
// commits one transaction whatever the thread's size:
//
//	If   the writer lease is current, the thread record is unchanged
//	Then put the thread record without a head and with Floor = LastSeq+1,
//	     range-delete the thread's bodies and its reference records in
//	     every shard, and delete the checkpoint and index records that fit
//	     in the transaction
//
// The floor hides every checkpoint record of the thread from that revision
// on, and the reference records are gone in the same revision, so
// ListBlobReferences and the online sweep's reads are exact at once. LastSeq
// is kept, so the thread's next append takes a sequence number above the
// floor. The records that did not fit are deleted right after, in guarded
// batches, as after DeleteCheckpoints.
//
// Contention: an append by the same lease holder that lands between the read
// and the commit changes the thread record, so the transaction fails its
// compare; DeleteThread then reads again, runs the checks again in order and
// removes what the thread holds now, for as long as ctx allows (see the
// package documentation, Contention). Errors: the contract's, in its order
// (ErrInvalidID, then ErrWriterLost); ctx's error; an *UnknownOutcomeError
// when a commit got no answer and ctx ended or the unanswered commits ran
// out before the outcome was known.
func (s *Store) DeleteThread(ctx context.Context, in cairn.DeleteThreadInput) (_ []string, err error) {
	defer definite("deleteThread", &err)
	if err := cairn.CheckDeleteThreadInput(&in); err != nil {
		return nil, err
	}
	if err := cairn.CheckOwnerToken(in.Writer); err != nil { // the first live check, before any request
		return nil, err
	}
	op := &deleteThreadOp{s: s, in: in, nonce: newNonce()}
	return op.run(ctx, nil, 0)
}

type deleteThreadOp struct {
	s     *Store
	in    cairn.DeleteThreadInput
	nonce keys.Nonce
	// removed is the plan of the last attempt, in the order of List.
	removed []removal
}

func (op *deleteThreadOp) run(ctx context.Context, pending error, pendingRev int64) ([]string, error) {
	s, in := op.s, &op.in
	threadKey := string(s.layout.Thread(in.ThreadID))
	a := &attempts{s: s, op: "deleteThread", nonce: op.nonce, thread: in.ThreadID, pending: pending, pendingRev: pendingRev,
		retry: func(ctx context.Context, pending error, rev int64) error {
			again := &deleteThreadOp{s: op.s, in: op.in, nonce: op.nonce}
			_, err := again.run(ctx, pending, rev)
			return err
		}}
	for {
		if err := a.next(ctx); err != nil {
			return nil, err
		}
		r, landed, err := s.readForRemoval(ctx, a, in.ThreadID, in.Writer)
		if err != nil {
			return nil, err
		}
		if landed {
			s.forget(in.ThreadID)
			return op.finish(ctx, 0), nil
		}
		st, now := r.st, r.now
		// The live records: published (no staging lease) and above the floor.
		// The checkpoint keys sort by createdAt, then id: the order of List.
		op.removed = op.removed[:0]
		for _, kv := range r.kvs {
			m, err := parseMeta(kv)
			if err != nil {
				return nil, a.fail(err)
			}
			if kv.Lease != 0 || m.Seq < st.rec.Floor {
				continue
			}
			_, createdAt, id, err := s.layout.DecodeCheckpoint(kv.Key)
			if err != nil {
				return nil, a.fail(corrupt("checkpoint key", kv.Key, err))
			}
			op.removed = append(op.removed, removal{id: id, key: kv.Key, modRev: kv.ModRevision,
				idx: idxRec{Thread: in.ThreadID, CreatedAt: createdAt, Seq: m.Seq, Nonce: m.Nonce}})
		}
		slices.SortFunc(op.removed, func(x, y removal) int {
			return cmp.Or(cmp.Compare(x.idx.CreatedAt, y.idx.CreatedAt), strings.Compare(x.id, y.id))
		})
		if len(op.removed) == 0 && st.rec.Head == "" {
			return []string{}, a.fail(nil)
		}
		rec := st.rec
		rec.Head, rec.HeadSeq, rec.HeadCreatedAt = "", 0, 0
		rec.Floor, rec.Op = rec.LastSeq+1, op.nonce.String()
		tv, _ := json.Marshal(rec)
		ops := []clientv3.Op{
			clientv3.OpPut(threadKey, string(tv)),
			deletePrefix(s.layout.Chunks(in.ThreadID)),
		}
		// Every shard, not only those of the live records: a record whose
		// shards are unknown here must not leave a reference behind.
		for shard := range keys.RootShard + 1 {
			ops = append(ops, deletePrefix(s.layout.RefThread(shard, in.ThreadID)))
		}
		inTxn, ok, err := s.commitRemoval(ctx, a, in.Writer, st, rec, now, ops, op.removed)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		return op.finish(ctx, inTxn), nil
	}
}

// removalRead is what a removal of checkpoints (DeleteCheckpoints,
// DeleteThread) reads at one revision.
type removalRead struct {
	st  threadState
	kvs []*mvccpb.KeyValue // the thread's checkpoint records
	now float64            // the store's clock at the read
}

// readForRemoval reads the thread record, the writer record and the
// thread's checkpoint records at one revision. landed reports that the write
// a retries (after an unknown outcome) landed; otherwise it checks that w is
// current. Its errors are ready to return: a's failures and ErrWriterLost.
func (s *Store) readForRemoval(ctx context.Context, a *attempts, thread string, w cairn.Writer) (removalRead, bool, error) {
	wk := s.writerKeys(thread)
	now := s.now()
	rs, _, err := s.readOnly(ctx, clientv3.OpGet(string(s.layout.Thread(thread))), clientv3.OpGet(wk.Owner), clientv3.OpGet(wk.Expiry),
		clientv3.OpGet(string(s.layout.Checkpoints(thread)), clientv3.WithPrefix()))
	if err != nil {
		return removalRead{}, false, a.fail(err)
	}
	st, err := parseThread(first(rs[0]))
	if err != nil {
		return removalRead{}, false, a.fail(err)
	}
	if ok, err := a.landed(ctx, st); err != nil || ok {
		return removalRead{}, ok, err
	}
	if !fence.Decode(first(rs[1]), first(rs[2])).Current(w, now) {
		return removalRead{}, false, a.fail(cairn.NewError(cairn.CodeWriterLost, "writer lease for thread %q is no longer current", thread))
	}
	return removalRead{st: st, kvs: rs[3].Kvs, now: now}, false, nil
}

// commitRemoval adds to ops the deletes of as many of removed's checkpoint
// and index records as the transaction holds (the thread record is compared,
// so they are exactly as read), and commits ops if the writer lease w is
// current and the thread record is st's. It returns how many of removed the
// transaction deleted and true when it committed; false with a nil error
// when the write should read again and retry; otherwise the error to return.
func (s *Store) commitRemoval(ctx context.Context, a *attempts, w cairn.Writer, st threadState, rec threadRec, now float64,
	ops []clientv3.Op, removed []removal) (int, bool, error) {
	var pcmps []clientv3.Cmp
	if rec.LocalReads {
		retry, err := s.withdrawPermit(ctx, a.thread, w, st, now)
		if err != nil {
			return 0, false, a.fail(err)
		}
		if retry {
			return 0, false, nil
		}
		pcmps, ops = s.permitCmps(a.thread), append(ops, s.permitOps(a.thread)...)
	}
	inTxn := 0
	for _, r := range removed {
		if len(ops)+2 > MaxTxnOps {
			break
		}
		ops = append(ops, clientv3.OpDelete(string(r.key)), clientv3.OpDelete(string(s.layout.Index(r.id))))
		inTxn++
	}
	cmps := s.withGuards(append(append(fence.Guard(s.writerKeys(a.thread), w.OwnerToken, w.Fence, now), s.threadCmp(a.thread, st)), pcmps...))
	resp, err := s.client.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return 0, false, a.committed(ctx, err, st.rev)
	}
	if !resp.Succeeded {
		if err := s.guardErr(ctx); err != nil {
			return 0, false, a.fail(err)
		}
		s.forget(a.thread)
		return 0, false, nil
	}
	s.remember(a.thread, threadState{rec: rec, rev: resp.Header.Revision})
	return inTxn, true, nil
}

// finish returns the removed ids and deletes the records past the first
// inTxn, which the transaction left behind the floor.
func (op *deleteThreadOp) finish(ctx context.Context, inTxn int) []string {
	ids := make([]string, len(op.removed))
	for i, r := range op.removed {
		ids[i] = r.id
	}
	rest := &pruneOp{s: op.s, in: cairn.DeleteCheckpointsInput{ThreadID: op.in.ThreadID}, removed: slices.Clone(op.removed[inTxn:])}
	rest.cleanup(ctx)
	return ids
}
