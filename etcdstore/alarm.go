package etcdstore

import (
	"context"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
)

// KeepNewestUnderAlarm keeps the newest keep checkpoints of a thread, as
// cairn.KeepNewest does, with transactions that only delete: it is the way to
// free space while etcd's NOSPACE alarm is raised, when etcd refuses every
// transaction that puts a key, and so the writer lease, the thread record
// and everything KeepNewest writes (see docs/design.md, "Out of space"). It
// returns the removed ids, oldest first.
//
// Each transaction reads the thread record and its checkpoint records at
// one revision, walks the chain from the head, and (for a thread written
// with LocalReads, after withdrawing its read permit and waiting for every
// member to apply that, as every deletion does)
//
//	If   the thread record is unchanged (and the store's guards hold,
//	     and the read permit is still withdrawn)
//	Then delete the oldest removed checkpoints that fit: their checkpoint
//	     and index records, and the bodies and reference records of every
//	     sequence number below the oldest one kept by this transaction
//
// oldest first, until the chain holds keep checkpoints. It takes no writer
// lease: it is guarded by the thread record instead, which every write of
// the thread puts, so a transaction whose read a write has overtaken deletes
// nothing, and reads again. What it deletes is what KeepNewest would delete
// at the revision it read; the chain it leaves ends at a checkpoint whose
// parent is gone, with nothing older left, which reads, the prune, DeleteHead
// and Verify treat as pruned. A transaction whose answer is lost is read
// again and, when it did not land, sent again: deletes are idempotent, and a
// fresh plan never removes a checkpoint the newest keep.
//
// Errors: ErrInvalidID and ErrInvalidEntry (keep < 1) for bad input; etcd's
// and ctx's errors, the removals of the transactions that committed before
// them returned too.
func (s *Store) KeepNewestUnderAlarm(ctx context.Context, threadID string, keep int) ([]string, error) {
	if err := cairn.ValidateID(threadID, "thread id"); err != nil {
		return nil, err
	}
	if keep < 1 {
		return nil, cairn.NewError(cairn.CodeInvalidEntry, "keep must be 1 or more, not %d", keep)
	}
	var removed []string
	unanswered := 0
	for {
		rs, _, err := s.readOnly(ctx, clientv3.OpGet(string(s.layout.Thread(threadID))),
			clientv3.OpGet(string(s.layout.Checkpoints(threadID)), clientv3.WithPrefix()))
		if err != nil {
			return removed, err
		}
		st, err := parseThread(first(rs[0]))
		if err != nil {
			return removed, err
		}
		chain, bySeq, metas, err := liveChain(st, rs[1].Kvs)
		if err != nil {
			return removed, err
		}
		if len(chain) <= keep {
			return removed, nil
		}
		ops, ids, err := s.bottomDeletes(threadID, chain[keep:], bySeq, metas)
		if err != nil {
			return removed, err
		}
		cmps := s.withGuards([]clientv3.Cmp{s.threadCmp(threadID, st)})
		if st.rec.LocalReads {
			// As every deletion of such a thread (see local.go): withdraw
			// the read permit and wait for every member to have applied the
			// withdrawal, then delete while it is still withdrawn. Putting
			// it back is a put: the thread reads linearizably until its
			// next append.
			retry, err := s.withdrawPermitIf(ctx, threadID, cmps)
			if err != nil {
				return removed, err
			}
			if retry {
				continue
			}
			cmps = append(cmps, s.permitCmps(threadID)...)
		}
		resp, err := s.client.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			if !ambiguous(err) || ctx.Err() != nil {
				return removed, err
			}
			if unanswered++; unanswered >= maxAttempts {
				return removed, fmt.Errorf("etcdstore: prune under the alarm of thread %q: %d commits ended without an answer: %w", threadID, unanswered, err)
			}
			continue // read again: what landed is gone from the chain
		}
		if !resp.Succeeded {
			if err := s.guardErr(ctx); err != nil {
				return removed, err
			}
			continue // the thread changed: plan again
		}
		removed = append(removed, ids...)
	}
}

// bottomDeletes returns the deletes of the oldest checkpoints of gone (the
// part of a chain to remove, newest first) that fit in one transaction, and
// their ids, oldest first: each one's checkpoint and index records, and the
// body chunks and reference records of every sequence number below the
// newest of them plus one. Nothing live is below it: the chain's records
// are its live records (Verify checks it), and the kept ones are newer.
func (s *Store) bottomDeletes(thread string, gone []uint64, bySeq map[uint64]*mvccpb.KeyValue, metas map[uint64]ckptMeta) ([]clientv3.Op, []string, error) {
	var mask uint32
	for _, seq := range gone {
		mask |= metas[seq].Shards
	}
	fixed := 1 + len(shardsOf(mask)) // the ranges
	var ops []clientv3.Op
	var ids []string
	var below uint64
	for _, seq := range slices.Backward(gone) {
		if fixed+len(ops)+2 > MaxTxnOps {
			break
		}
		kv := bySeq[seq]
		_, _, id, err := s.layout.DecodeCheckpoint(kv.Key)
		if err != nil {
			return nil, nil, corrupt("checkpoint key", kv.Key, err)
		}
		ops = append(ops, clientv3.OpDelete(string(kv.Key)), clientv3.OpDelete(string(s.layout.Index(id))))
		ids = append(ids, id)
		below = seq + 1
	}
	ops = append(ops, deleteRange(s.layout.Chunks(thread), s.layout.SeqChunks(thread, below)))
	for _, shard := range shardsOf(mask) {
		ops = append(ops, deleteRange(s.layout.RefThread(shard, thread), s.layout.RefSeq(shard, thread, below)))
	}
	return ops, ids, nil
}
