package etcdstore

import (
	"context"
	"encoding/json"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/fence"
	"github.com/cairnstore/cairn/keys"
)

// DeleteHead implements cairn.Store. It reads the thread record, the writer
// record and the head's checkpoint record at one revision, and the parent's
// record at that revision, checks them in the contract's order, then commits
// one transaction:
//
//	If   the writer lease is current, the thread record and the parent's
//	     record are unchanged
//	Then put the thread record (head = the parent, or none when the parent is
//	     null or pruned: below the floor, or gone), delete the checkpoint record, its index record, its
//	     body and its reference records
//
// and starts again if the thread changed in between: the checks run again on
// the new state, and the write retries for as long as ctx allows (see the
// package documentation, Contention). Errors: the contract's, in its order;
// ctx's error; *UnknownOutcomeError.
func (s *Store) DeleteHead(ctx context.Context, in cairn.DeleteHeadInput) (err error) {
	defer definite("deleteHead", &err)
	if err := cairn.CheckDeleteHeadInput(&in); err != nil {
		return err
	}
	if err := cairn.CheckOwnerToken(in.Writer); err != nil { // the first live check, before any request
		return err
	}
	op := &deleteHeadOp{s: s, in: in, nonce: newNonce()}
	return op.run(ctx, nil, 0)
}

type deleteHeadOp struct {
	s     *Store
	in    cairn.DeleteHeadInput
	nonce keys.Nonce
}

func (op *deleteHeadOp) run(ctx context.Context, pending error, pendingRev int64) error {
	s, in := op.s, &op.in
	a := &attempts{s: s, op: "deleteHead", nonce: op.nonce, thread: in.ThreadID, pending: pending, pendingRev: pendingRev,
		retry: func(ctx context.Context, pending error, rev int64) error {
			again := &deleteHeadOp{s: op.s, in: op.in, nonce: op.nonce}
			return again.run(ctx, pending, rev)
		}}
	wk := s.writerKeys(in.ThreadID)
	threadKey := string(s.layout.Thread(in.ThreadID))
	for {
		if err := a.next(ctx); err != nil {
			return err
		}
		now := s.now()
		gets := []clientv3.Op{clientv3.OpGet(threadKey), clientv3.OpGet(wk.Owner), clientv3.OpGet(wk.Expiry)}
		if st, ok := s.cached(in.ThreadID); ok && st.rec.Head != "" {
			gets = append(gets, clientv3.OpGet(string(s.layout.Checkpoint(in.ThreadID, st.rec.HeadCreatedAt, st.rec.Head))))
		}
		rs, rev, err := s.readOnly(ctx, gets...)
		if err != nil {
			return a.fail(err)
		}
		st, err := parseThread(first(rs[0]))
		if err != nil {
			return a.fail(err)
		}
		if ok, err := a.landed(ctx, st); ok || err != nil {
			s.forget(in.ThreadID)
			return err
		}
		v := cairn.DeleteHeadView{Writer: fence.Decode(first(rs[1]), first(rs[2])), Head: st.rec.Head, HeadExists: st.rec.Head != ""}
		if err := v.Check(in, now); err != nil {
			s.remember(in.ThreadID, st)
			return a.fail(err)
		}
		headKey := s.layout.Checkpoint(in.ThreadID, st.rec.HeadCreatedAt, st.rec.Head)
		var mkv *mvccpb.KeyValue
		if len(rs) > 3 && first(rs[3]) != nil && string(first(rs[3]).Key) == string(headKey) {
			mkv = first(rs[3])
		} else {
			r, err := s.client.Get(ctx, string(headKey), clientv3.WithRev(rev))
			if err != nil {
				return a.fail(err)
			}
			mkv = first(r)
		}
		if mkv == nil {
			return a.fail(cairn.NewError(cairn.CodeNotHead, "checkpoint %q does not exist", in.CheckpointID))
		}
		m, err := parseMeta(mkv)
		if err != nil {
			return a.fail(err)
		}
		nonce, err := parseNonce(m.Nonce)
		if err != nil {
			return a.fail(err)
		}
		rec := st.rec
		rec.Op = op.nonce.String()
		// The parent becomes the head when it is live: not below the floor,
		// and not gone (pruned under the alarm, which deletes without moving
		// the floor). Its record is compared, since that prune does not
		// write the thread record.
		var parentCmp []clientv3.Cmp
		if m.ParentID != "" && m.ParentSeq >= rec.Floor {
			pkey := string(s.layout.Checkpoint(in.ThreadID, m.ParentCreatedAt, m.ParentID))
			r, err := s.client.Get(ctx, pkey, clientv3.WithRev(rev), clientv3.WithKeysOnly())
			if err != nil {
				return a.fail(err)
			}
			var prev int64
			if p := first(r); p != nil {
				prev = p.ModRevision
			}
			parentCmp = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(pkey), "=", prev)}
			if prev == 0 {
				m.ParentID = ""
			}
		}
		if m.ParentID != "" && m.ParentSeq >= rec.Floor {
			rec.Head, rec.HeadSeq, rec.HeadCreatedAt = m.ParentID, m.ParentSeq, m.ParentCreatedAt
		} else {
			rec.Head, rec.HeadSeq, rec.HeadCreatedAt = "", 0, 0
		}
		tv, _ := json.Marshal(rec)
		ops := []clientv3.Op{
			clientv3.OpPut(threadKey, string(tv)),
			clientv3.OpDelete(string(headKey)),
			clientv3.OpDelete(string(s.layout.Index(in.CheckpointID))),
			deletePrefix(s.layout.CheckpointChunks(in.ThreadID, m.Seq, nonce)),
		}
		for _, shard := range shardsOf(m.Shards) {
			ops = append(ops, deletePrefix(s.layout.RefSeq(shard, in.ThreadID, m.Seq)))
		}
		cmps := s.withGuards(append(append(fence.Guard(wk, in.Writer.OwnerToken, in.Writer.Fence, now), s.threadCmp(in.ThreadID, st)), parentCmp...))
		if rec.LocalReads {
			retry, err := s.withdrawPermit(ctx, in.ThreadID, in.Writer, st, now)
			if err != nil {
				return a.fail(err)
			}
			if retry {
				continue
			}
			cmps, ops = append(cmps, s.permitCmps(in.ThreadID)...), append(ops, s.permitOps(in.ThreadID)...)
		}
		resp, err := s.client.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			if err := a.committed(ctx, err, st.rev); err != nil {
				return err
			}
			continue
		}
		if resp.Succeeded {
			s.remember(in.ThreadID, threadState{rec: rec, rev: resp.Header.Revision})
			return nil
		}
		if err := s.guardErr(ctx); err != nil {
			return a.fail(err)
		}
		s.forget(in.ThreadID) // something changed since the read; check again
	}
}

func deletePrefix(prefix []byte) clientv3.Op {
	return clientv3.OpDelete(string(prefix), clientv3.WithRange(string(keys.PrefixEnd(prefix))))
}

func deleteRange(start, end []byte) clientv3.Op {
	return clientv3.OpDelete(string(start), clientv3.WithRange(string(end)))
}

// DeleteCheckpoints implements cairn.Pruner. It reads the thread record, the
// writer record and the thread's checkpoint records at one revision, walks the
// chain from the head, and commits one transaction whatever the number of
// checkpoints removed:
//
//	If   the writer lease is current, the thread record is unchanged
//	Then put the thread record with Floor = the oldest kept sequence number,
//	     range-delete the bodies and the reference records below it, and
//	     delete the checkpoint and index records of the removed checkpoints
//	     that fit in the transaction
//
// Records below the floor are invisible to every read from that revision on;
// those that did not fit are deleted right after, in guarded batches.
//
// Contention: appends by the same lease holder racing the prune move the
// thread record; the prune then reads again, walks the new chain, and
// retries, for as long as ctx allows (see the package documentation,
// Contention). Errors: the contract's, in its order; ctx's error;
// *UnknownOutcomeError.
func (s *Store) DeleteCheckpoints(ctx context.Context, in cairn.DeleteCheckpointsInput) (_ []string, err error) {
	defer definite("deleteCheckpoints", &err)
	if err := cairn.CheckDeleteCheckpointsInput(&in); err != nil {
		return nil, err
	}
	if err := cairn.CheckOwnerToken(in.Writer); err != nil { // the first live check, before any request
		return nil, err
	}
	op := &pruneOp{s: s, in: in, nonce: newNonce()}
	return op.run(ctx, nil, 0)
}

type pruneOp struct {
	s     *Store
	in    cairn.DeleteCheckpointsInput
	nonce keys.Nonce
	// removed is the plan of the last attempt: what it removes, oldest first.
	removed []removal
}

type removal struct {
	id     string
	key    []byte
	modRev int64
	idx    idxRec
}

func (op *pruneOp) run(ctx context.Context, pending error, pendingRev int64) ([]string, error) {
	s, in := op.s, &op.in
	threadKey := string(s.layout.Thread(in.ThreadID))
	a := &attempts{s: s, op: "deleteCheckpoints", nonce: op.nonce, thread: in.ThreadID, pending: pending, pendingRev: pendingRev,
		retry: func(ctx context.Context, pending error, rev int64) error {
			again := &pruneOp{s: op.s, in: op.in, nonce: op.nonce}
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
			ids := op.ids()
			op.cleanup(ctx)
			return ids, nil
		}
		st, now := r.st, r.now
		chain, bySeq, metas, err := liveChain(st, r.kvs)
		if err != nil {
			return nil, a.fail(err)
		}
		keep := int(in.Keep)
		if len(chain) <= keep {
			return []string{}, a.fail(nil)
		}
		cut := chain[keep-1]
		op.removed = op.removed[:0]
		var mask uint32
		for i := len(chain) - 1; i >= keep; i-- {
			kv, m := bySeq[chain[i]], metas[chain[i]]
			_, createdAt, id, err := s.layout.DecodeCheckpoint(kv.Key)
			if err != nil {
				return nil, a.fail(corrupt("checkpoint key", kv.Key, err))
			}
			op.removed = append(op.removed, removal{id: id, key: kv.Key, modRev: kv.ModRevision,
				idx: idxRec{Thread: in.ThreadID, CreatedAt: createdAt, Seq: m.Seq, Nonce: m.Nonce}})
			mask |= m.Shards
		}
		rec := st.rec
		rec.Floor, rec.Op = cut, op.nonce.String()
		tv, _ := json.Marshal(rec)
		ops := []clientv3.Op{
			clientv3.OpPut(threadKey, string(tv)),
			deleteRange(s.layout.Chunks(in.ThreadID), s.layout.SeqChunks(in.ThreadID, cut)),
		}
		for _, shard := range shardsOf(mask) {
			ops = append(ops, deleteRange(s.layout.RefThread(shard, in.ThreadID), s.layout.RefSeq(shard, in.ThreadID, cut)))
		}
		inTxn, ok, err := s.commitRemoval(ctx, a, in.Writer, st, rec, now, ops, op.removed)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		ids := op.ids()
		op.removed = op.removed[inTxn:]
		op.cleanup(ctx)
		return ids, nil
	}
}

// liveChain walks the chain of a thread from its head st through its
// checkpoint records kvs (read at st's revision): the live ones, those
// attached to no etcd lease (staged) and at or above the floor. It returns
// their sequence numbers, head first, with each record and its decoded
// metadata. The walk ends at a checkpoint without a parent, or whose parent
// is below the floor or gone (pruned under the alarm, see
// KeepNewestUnderAlarm).
func liveChain(st threadState, kvs []*mvccpb.KeyValue) (chain []uint64, bySeq map[uint64]*mvccpb.KeyValue, metas map[uint64]ckptMeta, err error) {
	bySeq, metas = map[uint64]*mvccpb.KeyValue{}, map[uint64]ckptMeta{}
	for _, kv := range kvs {
		m, err := parseMeta(kv)
		if err != nil {
			return nil, nil, nil, err
		}
		if kv.Lease == 0 && m.Seq >= st.rec.Floor {
			bySeq[m.Seq], metas[m.Seq] = kv, m
		}
	}
	for seq, ok := st.rec.HeadSeq, st.rec.Head != ""; ok; {
		m, found := metas[seq]
		if !found {
			break
		}
		chain = append(chain, seq)
		seq, ok = m.ParentSeq, m.ParentID != ""
	}
	return chain, bySeq, metas, nil
}

func (op *pruneOp) ids() []string {
	out := make([]string, len(op.removed))
	for i, r := range op.removed {
		out[i] = r.id
	}
	return out
}

// cleanup deletes the records of removed checkpoints that the prune
// transaction left behind its floor. Each delete is guarded, in a nested
// transaction, so that a record re-created since (an id reused after the
// prune) is never touched. It is best effort: what it leaves stays invisible,
// and a later prune or Verify removes it.
func (op *pruneOp) cleanup(ctx context.Context) {
	s := op.s
	const perTxn = MaxTxnOps / 4 // 2 nested transactions per removal, each 1 compare + 1 op
	for len(op.removed) > 0 {
		n := min(len(op.removed), perTxn)
		var ops []clientv3.Op
		for _, r := range op.removed[:n] {
			ops = append(ops,
				clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(r.key)), "=", r.modRev)},
					[]clientv3.Op{clientv3.OpDelete(string(r.key))}, nil),
				clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(string(s.layout.Index(r.id))), "=", idxValue(r.idx))},
					[]clientv3.Op{clientv3.OpDelete(string(s.layout.Index(r.id)))}, nil))
		}
		if _, err := s.client.Txn(ctx).Then(ops...).Commit(); err != nil {
			s.log.Warn("etcdstore: cleanup after prune failed; records stay hidden behind the floor", "thread", op.in.ThreadID, "left", len(op.removed), "err", err)
			return
		}
		op.removed = op.removed[n:]
	}
}
