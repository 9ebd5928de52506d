package etcdstore

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/fence"
	"github.com/cairnstore/cairn/keys"
)

// transcriptRec describes a transcript kept in chunks. The value of a
// transcript record is 'i' followed by the transcript itself, byte for byte,
// or 'c' followed by a transcriptRec in JSON.
type transcriptRec struct {
	Nonce  string `json:"nonce"`
	Chunks int    `json:"chunks"`
	Size   int    `json:"size"`
}

func inlineTranscript(b []byte) string { return "i" + string(b) }

// rootTranscript is a transcript that is the conversation of a root object
// of the capacity layout: 'r' and the root's hex digest. The transcript
// reference record (keys.TranscriptShard) keeps the root and its
// conversation chunks live for the sweep until SaveThread replaces it.
func rootTranscript(root keys.Digest) string { return "r" + hex.EncodeToString(root[:]) }

func chunkedTranscript(r transcriptRec) string {
	v, _ := json.Marshal(r)
	return "c" + string(v)
}

// transcriptInline is the largest transcript stored in its record.
const transcriptInline = 512 << 10

// ForkFromCheckpoint implements cairn.Forker. It reads the source and the
// destination at one revision, checks them in the contract's order, and
// publishes the fork root, its body and references, the destination's thread,
// index and transcript records in one transaction:
//
//	If   the destination writer lease is current
//	     the destination thread record is as read (absent, or without a head)
//	     the destination has no transcript record
//	     the destination id's index record is absent (or stale, as read)
//	     the source checkpoint record and its thread record are as read
//	Then put the records; put (or detach, when staged) the bodies
//
// Contention: when the source or the destination changes between the read
// and the commit, the fork reads both again, runs the checks again in their
// order, and retries for as long as ctx allows (see the package
// documentation, Contention). Errors: the contract's, in its order; ctx's
// error; *UnknownOutcomeError.
func (s *Store) ForkFromCheckpoint(ctx context.Context, in cairn.ForkInput) (_ *cairn.Checkpoint, err error) {
	defer definite("forkFromCheckpoint", &err)
	if err := cairn.CheckForkInput(&in); err != nil {
		return nil, err
	}
	op := &forkOp{s: s, in: in, nonce: newNonce()}
	return op.run(ctx, nil, 0)
}

type forkOp struct {
	s     *Store
	in    cairn.ForkInput
	nonce keys.Nonce
	root  *cairn.Checkpoint
}

func (op *forkOp) run(ctx context.Context, pending error, pendingRev int64) (*cairn.Checkpoint, error) {
	s, in := op.s, &op.in
	dest := in.DestinationThreadID
	a := &attempts{s: s, op: "forkFromCheckpoint", nonce: op.nonce, thread: dest, pending: pending, pendingRev: pendingRev,
		retry: func(ctx context.Context, pending error, rev int64) error {
			_, err := op.run(ctx, pending, rev)
			return err
		}}
	wk := s.writerKeys(dest)
	var staging *stager
	defer func() { staging.abort(ctx) }()
	for {
		if err := a.next(ctx); err != nil {
			return nil, err
		}
		now := s.now()
		rs, rev, err := s.readOnly(ctx,
			clientv3.OpGet(string(s.layout.Index(in.SourceCheckpointID))),
			clientv3.OpGet(wk.Owner), clientv3.OpGet(wk.Expiry),
			clientv3.OpGet(string(s.layout.Thread(dest))),
			clientv3.OpGet(string(s.layout.Transcript(dest))),
			clientv3.OpGet(string(s.layout.Index(in.DestinationCheckpointID))),
		)
		if err != nil {
			return nil, a.fail(err)
		}
		destSt, err := parseThread(first(rs[3]))
		if err != nil {
			return nil, a.fail(err)
		}
		if ok, err := a.landed(ctx, destSt); err != nil {
			return nil, err
		} else if ok && op.root != nil {
			s.forget(dest)
			out := op.root.Clone()
			return &out, nil
		}
		// The source, if it exists, as of rev.
		var src *cairn.Checkpoint
		var srcKV *mvccpb.KeyValue
		var srcSt threadState
		var srcRoot *keys.Digest // the source's root, for a source of the capacity layout
		if kv := first(rs[0]); kv != nil {
			idx, err := parseIdx(kv)
			if err != nil {
				return nil, err
			}
			nonce, err := parseNonce(idx.Nonce)
			if err != nil {
				return nil, err
			}
			r2, _, err := s.readOnly(ctx,
				clientv3.OpGet(string(s.layout.Checkpoint(idx.Thread, idx.CreatedAt, in.SourceCheckpointID)), clientv3.WithRev(rev)),
				clientv3.OpGet(string(s.layout.Thread(idx.Thread)), clientv3.WithRev(rev)),
				clientv3.OpGet(string(s.layout.CheckpointChunks(idx.Thread, idx.Seq, nonce)), clientv3.WithPrefix(), clientv3.WithRev(rev)),
			)
			if err != nil {
				return nil, a.fail(err)
			}
			if srcSt, err = parseThread(first(r2[1])); err != nil {
				return nil, err
			}
			if mkv := first(r2[0]); mkv != nil && mkv.Lease == 0 {
				m, err := parseMeta(mkv)
				if err != nil {
					return nil, err
				}
				if m.Seq == idx.Seq && m.Seq >= srcSt.rec.Floor {
					c, err := s.assemble(ctx, mkv.Key, m, r2[2].Kvs)
					if err != nil {
						return nil, err
					}
					src, srcKV = &c, mkv
					if m.Layout == layoutObjects {
						d, _ := parseRoot(m.Root) // assemble parsed it
						srcRoot = &d
					}
				}
			}
		}
		// The destination id.
		ids, err := s.idStateOf(ctx, first(rs[5]), op.nonce, dest, destSt, rev)
		if err != nil {
			return nil, a.fail(err)
		}
		if ids.ours && op.root != nil {
			s.forget(dest)
			out := op.root.Clone()
			return &out, nil
		}
		view := cairn.ForkView{
			Writer:          fence.Decode(first(rs[1]), first(rs[2])),
			DestinationUsed: first(rs[4]) != nil || destSt.rec.Head != "" || ids.taken,
		}
		if src != nil {
			view.SourceThread = src.ThreadID
		}
		if err := view.Check(in, now); err != nil {
			return nil, a.fail(err)
		}
		root := cairn.ForkRoot(src, in)
		op.root = &root
		w := newCheckpointOf(&root)
		transcript := []byte(root.Conversation)
		if transcript == nil {
			transcript = []byte("[]")
		}
		seq := destSt.rec.LastSeq + 1
		var tvals []blob
		tv := inlineTranscript(transcript)
		if srcRoot != nil {
			// The fork root names the source's root (a root holds no
			// header, so it is the fork root's too), and the transcript
			// names that root's conversation: O(1) in etcd. The source is
			// live and compared below, so its objects need no claim.
			w.setRoot(*srcRoot)
			tv = rootTranscript(*srcRoot)
			tvals = []blob{{key: s.layout.RefThread(keys.TranscriptShard, dest), value: srcRoot[:]}}
		}
		vals := append(s.blobs(w, dest, seq, op.nonce), tvals...)
		if srcRoot == nil && len(transcript) > transcriptInline {
			tvals := chunks(transcript, func(i int) []byte { return s.layout.TranscriptChunk(dest, op.nonce, i) })
			tv = chunkedTranscript(transcriptRec{Nonce: op.nonce.String(), Chunks: len(tvals), Size: len(transcript)})
			vals = append(vals, tvals...)
		}
		if publishFixedOps+1+len(vals) > MaxTxnOps {
			return nil, cairn.NewError(cairn.CodeInvalidEntry, "checkpoint %q is too large to fork in one transaction", in.SourceCheckpointID)
		}
		var writes []*etcdserverpb.RequestOp
		if mustStage(vals, len(tv)+w.inlineBytes()) {
			staging.abort(ctx)
			if staging, err = s.stage(ctx, vals); err != nil {
				staging = nil
				return nil, a.fail(err)
			}
			writes = detachReqs(vals)
		} else {
			writes = putReqs(vals)
		}
		ops := append(s.records(w, destSt, seq, op.nonce), writes...)
		ops = append(ops, putReq(string(s.layout.Transcript(dest)), []byte(tv)))
		cmps := s.withRawGuards(append(fence.GuardCompares(wk, in.Writer.OwnerToken, in.Writer.Fence, now),
			s.threadCompare(dest, destSt),
			cmpAbsent(s.layout.Transcript(dest)),
			s.idxCompare(in.DestinationCheckpointID, ids.staleRev),
			cmpModRev(srcKV.Key, srcKV.ModRevision),
			s.threadCompare(src.ThreadID, srcSt),
		))
		resp, err := s.raw.txn(ctx, cmps, ops, nil)
		if err != nil {
			if err := a.committed(ctx, err, destSt.rev); err != nil {
				return nil, err
			}
			continue
		}
		if resp.Succeeded {
			s.remember(dest, threadState{rec: destSt.nextRecord(w, seq, op.nonce, s.localReads), rev: resp.Header.Revision})
			staging.close()
			staging = nil
			out := root.Clone()
			return &out, nil
		}
		if err := s.guardErr(ctx); err != nil {
			return nil, a.fail(err)
		}
		// Something changed since the read; read and check again.
	}
}

// Transcripts implements cairn.Forker: the transcript store in the same
// keyspace as the checkpoints.
func (s *Store) Transcripts() cairn.TranscriptStore { return transcripts{s} }

type transcripts struct{ s *Store }

// LoadThread implements cairn.TranscriptStore.
func (t transcripts) LoadThread(ctx context.Context, threadID string) (json.RawMessage, error) {
	if err := cairn.ValidateID(threadID, "thread id"); err != nil {
		return nil, err
	}
	s := t.s
	resp, err := s.client.Get(ctx, string(s.layout.Transcript(threadID)))
	if err != nil {
		return nil, err
	}
	kv := first(resp)
	if kv == nil {
		return json.RawMessage("[]"), nil
	}
	if len(kv.Value) > 0 && kv.Value[0] == 'i' {
		return kv.Value[1:], nil
	}
	if len(kv.Value) > 0 && kv.Value[0] == 'r' {
		return s.rootConversation(ctx, kv)
	}
	var rec transcriptRec
	if len(kv.Value) == 0 || kv.Value[0] != 'c' {
		return nil, corrupt("transcript record", kv.Key, errCodec)
	}
	if err := json.Unmarshal(kv.Value[1:], &rec); err != nil {
		return nil, corrupt("transcript record", kv.Key, err)
	}
	nonce, err := parseNonce(rec.Nonce)
	if err != nil {
		return nil, err
	}
	cr, err := s.client.Get(ctx, string(s.layout.TranscriptWriteChunks(threadID, nonce)), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		return nil, err
	}
	var out []byte
	n := 0
	for _, c := range cr.Kvs {
		if c.Lease == 0 {
			out = append(out, c.Value...)
			n++
		}
	}
	if n != rec.Chunks || len(out) != rec.Size {
		return nil, corrupt("transcript", kv.Key, fmt.Errorf("have %d chunks and %d bytes, want %d and %d", n, len(out), rec.Chunks, rec.Size))
	}
	return out, nil
}

// SaveThread implements cairn.TranscriptStore: one transaction replaces the
// record and deletes the chunks of the transcript it replaces. A large
// transcript is staged first.
func (t transcripts) SaveThread(ctx context.Context, threadID string, messages json.RawMessage) (err error) {
	defer definite("saveThread", &err)
	if err := cairn.ValidateID(threadID, "thread id"); err != nil {
		return err
	}
	if !json.Valid(messages) {
		return cairn.NewError(cairn.CodeInvalidEntry, "transcript of thread %q must be valid JSON", threadID)
	}
	s := t.s
	all := s.layout.TranscriptChunks(threadID)
	recKey := string(s.layout.Transcript(threadID))
	rootRef := clientv3.OpDelete(string(s.layout.RefThread(keys.TranscriptShard, threadID)))
	if len(messages) <= transcriptInline {
		_, err := s.client.Txn(ctx).Then(clientv3.OpPut(recKey, inlineTranscript(messages)), deletePrefix(all), rootRef).Commit()
		return err
	}
	nonce := newNonce()
	vals := chunks(messages, func(i int) []byte { return s.layout.TranscriptChunk(threadID, nonce, i) })
	if len(vals)+3 > MaxTxnOps {
		return cairn.NewError(cairn.CodeInvalidEntry, "transcript of thread %q is larger than this store accepts", threadID)
	}
	stg, err := s.stage(ctx, vals)
	if err != nil {
		return err
	}
	mine := s.layout.TranscriptWriteChunks(threadID, nonce)
	v := chunkedTranscript(transcriptRec{Nonce: nonce.String(), Chunks: len(vals), Size: len(messages)})
	ops := append(detach(vals), clientv3.OpPut(recKey, v),
		deleteRange(all, mine), deleteRange(keys.PrefixEnd(mine), keys.PrefixEnd(all)), rootRef)
	if _, err := s.client.Txn(ctx).Then(ops...).Commit(); err != nil {
		stg.abort(ctx)
		return err
	}
	stg.close()
	return nil
}

// rootConversation returns the transcript of a record that names a root:
// the root's conversation, or [] for a root without one.
func (s *Store) rootConversation(ctx context.Context, kv *mvccpb.KeyValue) (json.RawMessage, error) {
	d, err := parseRoot(string(kv.Value[1:]))
	if err != nil {
		return nil, corrupt("transcript record", kv.Key, err)
	}
	r, err := s.root(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	if !r.convPresent {
		return json.RawMessage("[]"), nil
	}
	got, err := s.fetchParts(ctx, r.conv)
	if err != nil {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	out := json.RawMessage{}
	for _, p := range r.conv {
		b := got[objectKey(p.digest)]
		if _, ok := objHeader(b, objTypeConv); !ok || len(b)-2 != p.n {
			return nil, fmt.Errorf("transcript: %w", objError(p.digest, errCodec))
		}
		out = append(out, b[2:]...)
	}
	return out, nil
}
