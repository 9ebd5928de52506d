package etcdstore

import (
	"context"
	"encoding/hex"
	"errors"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/fence"
	"github.com/cairnstore/cairn/keys"
)

// Append implements cairn.Store.
//
// After the checks that need no state, the common path is one transaction:
//
//	If   the writer lease is current (fence.Guard)
//	     the id's index record is absent
//	     the thread record is at the revision last seen (so its head is the expected head)
//	Then put the thread record, the checkpoint record, its body, its index
//	     record and its reference records
//	Else get the writer record, the index record and the thread record
//
// When the transaction fails, the reads of its Else branch, taken at the same
// revision as the failed comparisons, give the contract's error in order; only
// an index record that names another thread needs one more read. A checkpoint
// whose publish would exceed one request is staged first (see stage).
//
// The store keeps no reference to the caller's checkpoint: it is encoded
// before any request is sent, so it needs no copy.
//
// Contention: a transaction that fails only because the thread changed in a
// way the checks allow (a prune by the same lease holder, a stale cached
// thread record) is retried on the new state, with the checks run again, for
// as long as ctx allows (see the package documentation, Contention). Errors:
// the contract's, in its order; ctx's error; *UnknownOutcomeError.
func (s *Store) Append(ctx context.Context, in cairn.AppendInput) (_ cairn.AppendResult, err error) {
	defer definite("append", &err)
	bufs := bufPool.Get().(*encodeBufs)
	if err := cairn.CheckAppendInputDigests(&in, &bufs.digests); err != nil {
		bufs.release()
		return cairn.AppendResult{}, err
	}
	w := newCheckpointWith(&in.Checkpoint, bufs)
	defer func() {
		// An error may carry a retry of the append (*UnknownOutcomeError),
		// which needs w: only a successful append gives its arrays back.
		if err == nil {
			w.release()
		}
	}()
	if err := w.checkSize(); err != nil {
		return cairn.AppendResult{}, err
	}
	op := &appendOp{s: s, in: in, w: w, nonce: newNonce()}
	objects := s.useObjects(len(w.body))
	if objects {
		if err := w.toObjects(&s.heads.memos, s.packs); err != nil {
			return cairn.AppendResult{}, cairn.NewError(cairn.CodeInvalidEntry, "checkpoint %q: %v", in.Checkpoint.ID, err)
		}
	}
	// The lease is the first live check: a token no lease has fails it
	// here, before etcd is sent a comparison it cannot hold.
	if err := cairn.CheckOwnerToken(in.Writer); err != nil {
		return cairn.AppendResult{}, err
	}
	if objects {
		// The capacity layout: the objects go to the bucket, claimed for
		// the lease first; the append names their root. Objects of the
		// parent, when this store appended it and the thread has not
		// changed since, are inherited: the append compares the thread
		// record, so they are referenced without a gap (see inherited).
		var fresh []object
		if w.split != nil {
			// The packed form: the parts the parent has stay in its
			// packs, which the parent references until this append
			// commits on the same thread record (packRev).
			locs, rev := s.heads.locs(in.Checkpoint.ThreadID, in.ExpectedHeadID)
			if w.usePacked(w.split.pack(locs)) {
				op.packRev = rev
			}
		}
		fresh, op.inherited, op.inheritedRev = s.heads.split(in.Checkpoint.ThreadID, in.ExpectedHeadID, w.objects)
		if err := s.putObjects(ctx, in.Writer, fresh); err != nil {
			return cairn.AppendResult{}, err
		}
	}
	if err := op.run(ctx, nil, 0); err != nil {
		return cairn.AppendResult{}, err
	}
	return cairn.AppendResult{HeadID: in.Checkpoint.ID}, nil
}

// newCheckpoint is a checkpoint on its way into a thread, by append or fork.
type newCheckpoint struct {
	c *cairn.Checkpoint
	// body is the stored form of c, the end of buf: buf has metaRoom bytes
	// before it, where recordValue writes the checkpoint record's header.
	body []byte
	buf  []byte
	refs [keys.NumShards][][]byte
	mask uint32
	// bufs holds buf and the arrays of refs.
	bufs *encodeBufs

	// root, for a checkpoint of the capacity layout, is the digest of its
	// root object, and objects are the objects to put before the append
	// (none for a fork, which names its source's root).
	root    *keys.Digest
	objects []object
	// split is the version-2 split an append of the packed form packs
	// (nil otherwise), and locs where the parts of its packed root are.
	split *packSplit
	locs  map[keys.Digest]partLoc
	// packs are the packs the packed root names, for the record's hint.
	packs []keys.Digest
}

// metaRoom is the room before a body for the checkpoint record's header:
// its JSON holds two ids, a nonce, a root digest and a few numbers.
const metaRoom = 512

// newCheckpointOf encodes c and its reference records.
func newCheckpointOf(c *cairn.Checkpoint) *newCheckpoint {
	w := &newCheckpoint{c: c, bufs: &encodeBufs{}}
	w.bufs.body = encodeCheckpointInto(nil, c, metaRoom)
	w.setBody(w.bufs.body)
	w.refs, w.mask = refParts(c)
	return w
}

// newCheckpointWith is newCheckpointOf in the arrays of bufs (see release),
// from the digests of c's blob keys in bufs.digests (see
// cairn.CheckAppendInputDigests).
func newCheckpointWith(c *cairn.Checkpoint, bufs *encodeBufs) *newCheckpoint {
	w := &newCheckpoint{c: c, bufs: bufs}
	bufs.body = encodeCheckpointInto(bufs.body, c, metaRoom)
	w.setBody(bufs.body)
	w.refs, w.mask = refPartsFrom(c, &bufs.digests, bufs)
	return w
}

// release gives the arrays of a version-1 checkpoint back to bufPool once
// nothing refers to them: after the append succeeded, its last request
// returned (gRPC encodes a request into buffers of its own before it sends
// it, and keeps no reference to it after the call) and no retry of it can
// follow. w is not usable afterwards.
func (w *newCheckpoint) release() {
	if w.root != nil || w.bufs == nil {
		return
	}
	w.bufs.release()
	w.bufs, w.buf, w.body, w.refs = nil, nil, nil, [keys.NumShards][][]byte{}
}

// setBody sets buf, metaRoom bytes and a body, and body.
func (w *newCheckpoint) setBody(buf []byte) { w.buf, w.body = buf, buf[metaRoom:] }

// recordValue returns the value of the checkpoint record m of w. With the
// body inline, the header is written in the room before the body, so the
// body is not copied; the value is then valid until the next call.
func (w *newCheckpoint) recordValue(m ckptMeta) []byte {
	h := metaHeader(m)
	if m.Body == nil {
		return h
	}
	if len(h) > metaRoom {
		return append(h, w.body...)
	}
	start := metaRoom - len(h)
	copy(w.buf[start:], h)
	return w.buf[start:]
}

func (w *newCheckpoint) refCount() int {
	n := 0
	for _, ps := range w.refs {
		n += len(ps)
	}
	return n
}

// inlineBytes is what the checkpoint record carries of the body: all of it
// when the body is kept inline, else nothing.
func (w *newCheckpoint) inlineBytes() int {
	if w.chunks() == 0 {
		return len(w.body)
	}
	return 0
}

// chunks is the number of chunks that hold the body: 0 when it is kept
// inline in the checkpoint record.
func (w *newCheckpoint) chunks() int {
	if len(w.body) <= bodyInline {
		return 0
	}
	return (len(w.body) + ChunkSize - 1) / ChunkSize
}

// checkSize rejects a checkpoint the store cannot publish within its limits,
// with cairn.ErrInvalidEntry and before any I/O.
func (w *newCheckpoint) checkSize() error {
	if len(w.body) > MaxCheckpointBytes || publishFixedOps+w.chunks()+w.refCount() > MaxTxnOps-transcriptOps {
		return cairn.NewError(cairn.CodeInvalidEntry, "checkpoint %q encodes to %d bytes with %d blob keys, more than this store accepts (%d bytes)",
			w.c.ID, len(w.body), len(w.c.BlobKeys()), MaxCheckpointBytes)
	}
	return nil
}

// publishFixedOps counts the publish operations other than chunks and
// reference records: the thread record, the checkpoint record and the index
// record, and the read permit. transcriptOps reserves room for a fork's
// transcript.
const (
	publishFixedOps = 4
	transcriptOps   = 8
)

// blobs returns the body chunks (if the body is not inline) and the reference
// records of w at a position.
func (s *Store) blobs(w *newCheckpoint, thread string, seq uint64, n keys.Nonce) []blob {
	var out []blob
	if w.chunks() > 0 {
		out = chunks(w.body, func(i int) []byte { return s.layout.Chunk(thread, seq, n, i) })
	}
	for _, shard := range shardsOf(w.mask) {
		if shard == keys.RootShard {
			out = append(out, blob{key: s.layout.Ref(shard, thread, seq, n, 0), value: w.root[:]})
			continue
		}
		for part, v := range w.refs[shard] {
			out = append(out, blob{key: s.layout.Ref(shard, thread, seq, n, part), value: v})
		}
	}
	return out
}

// records returns the puts of the thread, checkpoint and index records that
// publish w as the new head of its thread, on top of st. The checkpoint
// record's value shares w's body (see recordValue).
func (s *Store) records(w *newCheckpoint, st threadState, seq uint64, n keys.Nonce) []*etcdserverpb.RequestOp {
	c := w.c
	rec := st.nextRecord(w, seq, n, s.localReads)
	meta := ckptMeta{
		Seq: seq, Nonce: rec.Op, Shards: w.mask, Chunks: w.chunks(), Size: len(w.body),
	}
	if meta.Chunks == 0 {
		meta.Body = w.body
	}
	if w.root != nil {
		meta.Layout, meta.Root = layoutObjects, hex.EncodeToString(w.root[:])
		for _, d := range w.packs {
			meta.Packs += hex.EncodeToString(d[:])
		}
	}
	if c.ParentCheckpointID != "" {
		meta.ParentID, meta.ParentSeq, meta.ParentCreatedAt = c.ParentCheckpointID, st.rec.HeadSeq, st.rec.HeadCreatedAt
	}
	value := w.recordValue(meta)
	tv := rec.appendJSON(make([]byte, 0, 160+len(rec.Head)))
	idx := idxRec{Thread: c.ThreadID, CreatedAt: keyFloat(c.CreatedAt), Seq: seq, Nonce: rec.Op}
	iv := idx.appendJSON(make([]byte, 0, 100+len(idx.Thread)))
	ops := []*etcdserverpb.RequestOp{
		putReqBytes(s.layout.Thread(c.ThreadID), tv),
		putReqBytes(s.layout.Checkpoint(c.ThreadID, c.CreatedAt, c.ID), value),
		putReqBytes(s.layout.Index(c.ID), iv),
	}
	if rec.LocalReads {
		// The permit goes with the thread record: a deletion between its
		// withdrawal and its commit compares the thread record, so a write
		// that puts the permit back makes it start over.
		ops = append(ops, putReqBytes(s.layout.ReadPermit(c.ThreadID), permitValue))
	}
	return ops
}

// nextRecord is the thread record that publishes w at seq; local is
// Options.LocalReads, which marks the thread as one with read permits.
func (st threadState) nextRecord(w *newCheckpoint, seq uint64, n keys.Nonce, local bool) threadRec {
	rec := st.rec
	rec.Head, rec.HeadSeq, rec.HeadCreatedAt, rec.LastSeq, rec.Op = w.c.ID, seq, keyFloat(w.c.CreatedAt), seq, n.String()
	rec.LocalReads = rec.LocalReads || local
	return rec
}

// keyFloat returns createdAt as the key encoding sees it: -0 as +0. Records
// that locate a checkpoint record (its index record, the thread's head) hold
// this form, so that they equal what is rebuilt from the key; the body keeps
// the createdAt that was appended.
func keyFloat(f float64) float64 {
	if f == 0 {
		return 0
	}
	return f
}

// threadCmp compares the thread record with a known state.
func (s *Store) threadCmp(thread string, st threadState) clientv3.Cmp {
	return clientv3.FromCompare(s.threadCompare(thread, st))
}

// threadCompare is threadCmp as etcd's message, for a built request.
func (s *Store) threadCompare(thread string, st threadState) *etcdserverpb.Compare {
	return cmpState(s.layout.Thread(thread), st.rev)
}

// idxCompare compares the index record of id: absent, or (when a pruned
// checkpoint left a stale one) unchanged since it was read.
func (s *Store) idxCompare(id string, staleRev int64) *etcdserverpb.Compare {
	return cmpState(s.layout.Index(id), staleRev)
}

type appendOp struct {
	s     *Store
	in    cairn.AppendInput
	w     *newCheckpoint
	nonce keys.Nonce

	staging  *stager
	stageSeq uint64

	// inherited are objects of w left unclaimed and unput because the
	// parent has them; that holds only on the thread record of revision
	// inheritedRev, so a transaction on any other state claims and puts
	// them first.
	inherited    []object
	inheritedRev int64
	// packRev, when not 0, is the thread record revision on which the
	// packed root of w names packs of the parent's: a transaction on any
	// other state packs every part anew, and claims and puts that first.
	packRev int64

	// claims are the claim keys of the writer lease when the append began;
	// a successful append ends them. claimsInTxn says the transaction that
	// succeeded deleted them; lost says the lease was found not current.
	claims      []string
	claimsInTxn bool
	lost        bool
}

// endClaims ends the claims of the lease after the append succeeded or
// failed because the lease is lost: they are deleted, unless the successful
// transaction already did. Deletes after the transaction are best effort.
func (op *appendOp) endClaims(ctx context.Context, err error) {
	s, w := op.s, op.in.Writer
	switch {
	case err == nil && op.claimsInTxn:
		s.claims.remove(w, op.claims)
	case err == nil:
		s.deleteClaimKeys(ctx, w, op.claims)
	case op.lost:
		s.endLease(ctx, w)
	}
}

// idState is what an index record says about a checkpoint id.
type idState struct {
	taken    bool  // the id names a live checkpoint
	staleRev int64 // mod revision of a stale index record, else 0
	ours     bool  // the record was written by this operation
}

// idStateOf interprets the index record of an id. thread and st are a thread
// and its record as of rev; when the record names another thread, that
// thread's record is read at rev.
func (s *Store) idStateOf(ctx context.Context, kv *mvccpb.KeyValue, nonce keys.Nonce, thread string, st threadState, rev int64) (idState, error) {
	if kv == nil {
		return idState{}, nil
	}
	idx, err := parseIdx(kv)
	if err != nil {
		return idState{}, err
	}
	if idx.Nonce == nonce.String() {
		return idState{taken: true, ours: true}, nil
	}
	if idx.Thread != thread {
		r, err := s.client.Get(ctx, string(s.layout.Thread(idx.Thread)), clientv3.WithRev(rev))
		if err != nil {
			return idState{}, err
		}
		if st, err = parseThread(first(r)); err != nil {
			return idState{}, err
		}
	}
	if st.rev != 0 && idx.Seq >= st.rec.Floor && idx.Seq <= st.rec.LastSeq {
		return idState{taken: true}, nil
	}
	return idState{staleRev: kv.ModRevision}, nil
}

// view reads, at one revision, the state the live checks of the append need.
func (op *appendOp) view(ctx context.Context) (threadState, *cairn.WriterRecord, idState, error) {
	s, c := op.s, op.in.Checkpoint
	wk := s.writerKeys(c.ThreadID)
	rs, rev, err := s.readOnly(ctx, clientv3.OpGet(wk.Owner), clientv3.OpGet(wk.Expiry),
		clientv3.OpGet(string(s.layout.Index(c.ID))), clientv3.OpGet(string(s.layout.Thread(c.ThreadID))))
	if err != nil {
		return threadState{}, nil, idState{}, err
	}
	return op.interpret(ctx, first(rs[0]), first(rs[1]), first(rs[2]), first(rs[3]), rev)
}

func (op *appendOp) interpret(ctx context.Context, owner, expiry, idx, thread *mvccpb.KeyValue, rev int64) (threadState, *cairn.WriterRecord, idState, error) {
	st, err := parseThread(thread)
	if err != nil {
		return st, nil, idState{}, err
	}
	ids, err := op.s.idStateOf(ctx, idx, op.nonce, op.in.Checkpoint.ThreadID, st, rev)
	return st, fence.Decode(owner, expiry), ids, err
}

func (op *appendOp) run(ctx context.Context, pending error, pendingRev int64) (err error) {
	s, in, c := op.s, &op.in, &op.in.Checkpoint
	op.claims, op.claimsInTxn, op.lost = s.claims.of(in.Writer), false, false
	defer func() { op.endClaims(ctx, err) }()
	a := &attempts{s: s, op: "append", nonce: op.nonce, thread: c.ThreadID, pending: pending, pendingRev: pendingRev,
		retry: func(ctx context.Context, pending error, rev int64) error {
			again := &appendOp{s: op.s, in: op.in, w: op.w, nonce: op.nonce, inherited: op.inherited, inheritedRev: op.inheritedRev, packRev: op.packRev}
			return again.run(ctx, pending, rev)
		}}
	defer func() {
		if op.staging != nil { // the append did not publish what it staged
			op.staging.abort(ctx)
			op.staging = nil
		}
	}()
	// check settles what a fresh read shows: the append landed (done), or
	// it cannot succeed (the contract's error), or it can (retry on st).
	check := func(st threadState, wr *cairn.WriterRecord, ids idState, now float64) (done bool, err error) {
		if ids.ours {
			s.forget(c.ThreadID)
			return true, nil
		}
		if ok, err := a.landed(ctx, st); ok || err != nil {
			s.forget(c.ThreadID)
			return ok, err
		}
		v := cairn.AppendView{Writer: wr, IDTaken: ids.taken, Head: st.rec.Head}
		op.lost = !wr.Current(in.Writer, now)
		if err := v.Check(in, now); err != nil {
			return false, a.fail(err)
		}
		s.remember(c.ThreadID, st)
		return false, nil
	}
	var staleIdx int64
	for {
		if err := a.next(ctx); err != nil {
			return err
		}
		st, ok := s.cached(c.ThreadID)
		if !ok || a.pending != nil {
			var err error
			if st, err = s.readThread(ctx, c.ThreadID); err != nil {
				return a.fail(err)
			}
		}
		now := s.now()
		if st.rec.Head != in.ExpectedHeadID || c.ParentCheckpointID != in.ExpectedHeadID || a.pending != nil {
			// The append cannot succeed on this state, or an earlier attempt
			// may have landed: read the live state at one revision.
			fresh, wr, ids, err := op.view(ctx)
			if err != nil {
				return a.fail(err)
			}
			if done, err := check(fresh, wr, ids, now); done || err != nil {
				return err
			}
			staleIdx = ids.staleRev
			if a.pending == nil || fresh.rev != a.pendingRev {
				continue
			}
			st = fresh // the same comparison as the lost attempt: at most one applies
		}
		if op.packRev != 0 && st.rev != op.packRev {
			// Not on the state whose packs the root names.
			op.w.usePacked(op.w.split.pack(nil))
			if err := s.putObjects(ctx, in.Writer, op.w.objects); err != nil {
				return a.fail(err)
			}
			op.packRev, op.inherited = 0, nil
			op.claims = s.claims.of(in.Writer)
		}
		seq := st.rec.LastSeq + 1
		vals := s.blobs(op.w, c.ThreadID, seq, op.nonce)
		var writes []*etcdserverpb.RequestOp
		if mustStage(vals, op.w.inlineBytes()) {
			if op.staging == nil || op.stageSeq != seq {
				op.staging.abort(ctx)
				op.staging = nil
				stg, err := s.stage(ctx, vals)
				if err != nil {
					return a.fail(err)
				}
				op.staging, op.stageSeq = stg, seq
			}
			writes = detachReqs(vals)
		} else {
			writes = putReqs(vals)
		}
		if len(op.inherited) > 0 && st.rev != op.inheritedRev {
			// Not on the state the objects were inherited from.
			if err := s.putObjects(ctx, in.Writer, op.inherited); err != nil {
				return a.fail(err)
			}
			op.inherited = nil
			op.claims = s.claims.of(in.Writer)
		}
		cmps, then, els, inTxn := op.publishTxn(st, seq, writes, staleIdx, now)
		resp, err := s.raw.txn(ctx, cmps, then, els)
		if err != nil {
			if errors.Is(err, rpctypes.ErrKeyNotFound) && op.staging != nil {
				// The staged chunks expired before the publish; stage again.
				op.staging.abort(ctx)
				op.staging = nil
				continue
			}
			if err := a.committed(ctx, err, st.rev); err != nil {
				return err
			}
			continue
		}
		if resp.Succeeded {
			s.remember(c.ThreadID, threadState{rec: st.nextRecord(op.w, seq, op.nonce, s.localReads), rev: resp.Header.Revision})
			s.heads.remember(c.ThreadID, c.ID, resp.Header.Revision, op.w.objects, op.w.locs)
			op.staging.close()
			op.staging = nil
			op.claimsInTxn = inTxn
			return nil
		}
		if err := s.guardErr(ctx); err != nil {
			return a.fail(err)
		}
		r := resp.Responses
		fresh, wr, ids, err := op.interpret(ctx, first(getResp(r[0])), first(getResp(r[1])), first(getResp(r[2])), first(getResp(r[3])), resp.Header.Revision)
		if err != nil {
			return a.fail(err)
		}
		if done, err := check(fresh, wr, ids, now); done || err != nil {
			if done {
				op.staging.close()
				op.staging = nil
			}
			return err
		}
		// Every check passes on the fresh state: what failed was a stale
		// cached thread record or a stale index record. Retry on fresh state.
		staleIdx = ids.staleRev
	}
}

// publishTxn builds the transaction that publishes op's checkpoint as the
// head of its thread on top of st, at seq (see Append): its comparisons, its
// Then branch (the records, writes, and the deletes of the lease's claims
// when they fit and nothing was staged; inTxn says they are there) and its
// Else branch. staleIdx is the mod revision of a stale index record of the
// id, else 0.
func (op *appendOp) publishTxn(st threadState, seq uint64, writes []*etcdserverpb.RequestOp, staleIdx int64, now float64) (cmps []*etcdserverpb.Compare, then, els []*etcdserverpb.RequestOp, inTxn bool) {
	s, in, c := op.s, &op.in, &op.in.Checkpoint
	wk := s.writerKeys(c.ThreadID)
	threadKey, idxKey := s.layout.Thread(c.ThreadID), s.layout.Index(c.ID)
	cmps = s.withRawGuards(append(fence.GuardCompares(wk, in.Writer.OwnerToken, in.Writer.Fence, now),
		cmpState(idxKey, staleIdx), cmpState(threadKey, st.rev)))
	then = append(s.records(op.w, st, seq, op.nonce), writes...)
	// The lease's claims end with the append, in its transaction when they
	// fit: a staged append deletes them after its publish.
	inTxn = op.staging == nil && len(then)+len(op.claims) <= MaxTxnOps
	if inTxn {
		for _, k := range op.claims {
			then = append(then, deleteReq(k))
		}
	}
	els = []*etcdserverpb.RequestOp{getReq(wk.Owner), getReq(wk.Expiry), getReqBytes(idxKey), getReqBytes(threadKey)}
	return cmps, then, els, inTxn
}

func getResp(r *etcdserverpb.ResponseOp) *clientv3.GetResponse {
	return (*clientv3.GetResponse)(r.GetResponseRange())
}
