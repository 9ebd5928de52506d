package etcdstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// Repair deletes the garbage Verify finds (records hidden behind a prune
	// floor, index records of pruned checkpoints), each delete guarded so that
	// a record written since the read is never touched. Problems are never
	// repaired, they need a person, except GC records and claims that do not
	// decode: the sweep refuses to run while they exist, and deleting one only
	// returns its key to "not yet seen by a sweep".
	Repair bool
	// Objects also fetches the root and every object of each checkpoint of
	// the capacity layout from Options.Objects, checks that they exist, match
	// their digests and decode (problem "missing-object") and that the
	// reference chunks hold exactly the body's distinct blob keys, each once
	// (problem "reference-chunk-mismatch": the sweep counts those chunks),
	// and counts their blob keys in References and BlobKeys; without it,
	// Verify reads etcd only and counts the blob keys of version-1
	// checkpoints.
	Objects bool
}

// Problem is one finding of Verify.
type Problem struct {
	Kind       string `json:"kind"`
	Thread     string `json:"thread,omitempty"`
	Checkpoint string `json:"checkpoint,omitempty"`
	Key        string `json:"key,omitempty"`
	Detail     string `json:"detail,omitempty"`
}

// String formats the problem on one line.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.Kind)
	if p.Thread != "" {
		fmt.Fprintf(&b, " thread=%q", p.Thread)
	}
	if p.Checkpoint != "" {
		fmt.Fprintf(&b, " checkpoint=%q", p.Checkpoint)
	}
	if p.Key != "" {
		fmt.Fprintf(&b, " key=%q", p.Key)
	}
	if p.Detail != "" {
		b.WriteString(": " + p.Detail)
	}
	return b.String()
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	// Revision is the etcd revision every read was made at.
	Revision int64 `json:"revision"`
	// Threads, Checkpoints, BlobKeys and References count what is live: the
	// threads with a record, their checkpoints, the distinct blob keys they
	// reference and the sum of the reference counts.
	Threads     int `json:"threads"`
	Checkpoints int `json:"checkpoints"`
	BlobKeys    int `json:"blobKeys"`
	References  int `json:"references"`
	// GCRecords and Claims count the keys of the online sweep protocol.
	GCRecords int `json:"gcRecords"`
	Claims    int `json:"claims"`
	// Problems are broken invariants: a reference count that differs from
	// the one recomputed from the checkpoints, a dangling head, a checkpoint
	// whose body or index record is missing, and so on.
	Problems []Problem `json:"problems"`
	// Garbage lists reclaimable leftovers that no read can see.
	Garbage  []Problem `json:"garbage"`
	Repaired int       `json:"repaired"`
}

// OK reports whether Verify found no problem. Garbage is not a problem.
func (r VerifyReport) OK() bool { return len(r.Problems) == 0 }

// Verify reads the whole store at one etcd revision and checks its invariants:
// each thread's head exists, its checkpoints form one chain from the head down
// to the prune floor (or to a parent pruned under the alarm, with nothing
// older live), each live checkpoint has its index record, a complete
// body that decodes to the checkpoint its keys name, and reference records that
// hold exactly its distinct blob keys; no reference record, body chunk or
// transcript chunk belongs to nothing. Because a key's reference count is the
// number of records that hold it, the last two checks mean the reference counts
// equal the counts recomputed from the checkpoints themselves. Every GC
// record and claim key of the online sweep must decode.
//
// It returns an error, without a report, if it cannot read the store (for
// example when the revision it pinned is compacted before it finishes; run it
// again). With Repair, it returns the report with an error when a delete of
// garbage fails, or ErrGuardFailed when the store is a Guarded view whose
// guard no longer holds; Repaired counts what was deleted before. It holds every reference record of the store in memory, about 32
// bytes a reference, and one thread's checkpoints at a time.
func (s *Store) Verify(ctx context.Context, opts VerifyOptions) (VerifyReport, error) {
	v := &verifier{s: s, ctx: ctx, opts: opts}
	if err := v.run(); err != nil {
		return VerifyReport{}, err
	}
	if opts.Repair {
		if err := v.repair(); err != nil {
			return v.r, err
		}
	}
	return v.r, nil
}

type writeID struct {
	thread string
	seq    uint64
	nonce  keys.Nonce
}

type verifier struct {
	s    *Store
	ctx  context.Context
	r    VerifyReport
	opts VerifyOptions

	// refs holds, per write, the digests of its published reference records
	// by shard; verified checkpoints remove theirs, and what is left at the
	// end belongs to no checkpoint.
	refs map[writeID]map[byte][]byte
	// live maps each live checkpoint id to its index record value.
	live map[string]string
	// repairs are the guarded deletes of the garbage found.
	repairs  []clientv3.Op
	keysSeen map[string]int
	// transcriptRefs are the transcript reference records (shard
	// keys.TranscriptShard) by key; verified transcripts remove theirs.
	transcriptRefs map[string]*mvccpb.KeyValue
}

func (v *verifier) problem(kind, thread, id, key, format string, args ...any) {
	v.r.Problems = append(v.r.Problems, Problem{Kind: kind, Thread: thread, Checkpoint: id, Key: key, Detail: fmt.Sprintf(format, args...)})
}

// scan reads a range at the verifier's revision, page by page.
func (v *verifier) scan(prefix []byte, fn func(kv *mvccpb.KeyValue) error) error {
	start, end := string(prefix), string(keys.PrefixEnd(prefix))
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(512)}
		if v.r.Revision != 0 {
			opts = append(opts, clientv3.WithRev(v.r.Revision))
		}
		resp, err := v.s.client.Get(v.ctx, start, opts...)
		if err != nil {
			return err
		}
		if v.r.Revision == 0 {
			v.r.Revision = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func (v *verifier) run() error {
	l := v.s.layout
	v.refs = map[writeID]map[byte][]byte{}
	v.live = map[string]string{}
	v.keysSeen = map[string]int{}
	v.transcriptRefs = map[string]*mvccpb.KeyValue{}
	// Reference records first: the scan pins the revision.
	err := v.scan(l.Refs(), func(kv *mvccpb.KeyValue) error {
		if kv.Lease != 0 {
			return nil // staged, not published
		}
		if bytes.HasPrefix(kv.Key, l.RefShard(keys.TranscriptShard)) {
			v.transcriptRefs[string(kv.Key)] = kv
			return nil
		}
		rk, err := l.DecodeRef(kv.Key)
		if err != nil || len(kv.Value)%keys.DigestLen != 0 {
			v.problem("malformed-reference-record", "", "", string(kv.Key), "cannot decode")
			return nil
		}
		w := writeID{rk.Thread, rk.Seq, rk.Nonce}
		if v.refs[w] == nil {
			v.refs[w] = map[byte][]byte{}
		}
		v.refs[w][rk.Shard] = append(v.refs[w][rk.Shard], kv.Value...)
		return nil
	})
	if err != nil {
		return err
	}
	var threads []string
	if err := v.scan(l.Threads(), func(kv *mvccpb.KeyValue) error {
		t, err := l.DecodeThread(kv.Key)
		if err != nil {
			v.problem("malformed-thread-key", "", "", string(kv.Key), "%v", err)
			return nil
		}
		threads = append(threads, t)
		return nil
	}); err != nil {
		return err
	}
	for _, t := range threads {
		if err := v.thread(t); err != nil {
			return err
		}
	}
	v.r.Threads = len(threads)
	for k := range v.transcriptRefs {
		v.problem("orphan-reference-record", "", "", k, "a transcript reference record of a thread without a record")
	}
	for w, shards := range v.refs {
		for shard := range shards {
			v.problem("orphan-reference-record", w.thread, "", string(l.RefSeq(shard, w.thread, w.seq)),
				"a reference record of sequence %d (write %s) belongs to no checkpoint: its keys are over-counted", w.seq, w.nonce)
		}
	}
	v.r.BlobKeys = len(v.keysSeen)
	if err := v.sweepKeys(); err != nil {
		return err
	}
	// Index records: each must name a live checkpoint.
	defer v.finish()
	return v.scan(l.Indexes(), func(kv *mvccpb.KeyValue) error {
		id, err := l.DecodeIndex(kv.Key)
		if err != nil {
			v.problem("malformed-index-key", "", "", string(kv.Key), "%v", err)
			return nil
		}
		want, ok := v.live[id]
		switch {
		case ok && want == string(kv.Value):
			delete(v.live, id)
		case ok:
			v.problem("wrong-index-record", "", id, string(kv.Key), "names %s, want %s", kv.Value, want)
			delete(v.live, id)
		default:
			v.garbage("stale-index-record", "", id, kv, "names a checkpoint that no longer exists")
		}
		return nil
	})
}

// sweepKeys checks that every GC record and claim decodes.
func (v *verifier) sweepKeys() error {
	l := v.s.layout
	if err := v.scan(l.GCRecords(), func(kv *mvccpb.KeyValue) error {
		v.r.GCRecords++
		if _, err := v.s.parseGC(kv); err != nil {
			v.malformed("malformed-gc-record", kv, err)
		}
		return nil
	}); err != nil {
		return err
	}
	return v.scan(l.Claims(), func(kv *mvccpb.KeyValue) error {
		v.r.Claims++
		if _, err := l.DecodeClaim(kv.Key); err != nil {
			v.malformed("malformed-claim", kv, err)
		}
		return nil
	})
}

// malformed reports a key of the online sweep that does not decode, and
// queues its guarded delete for Repair.
func (v *verifier) malformed(kind string, kv *mvccpb.KeyValue, err error) {
	v.problem(kind, "", "", string(kv.Key), "%v", err)
	v.repairs = append(v.repairs, guardedDelete(kv))
}

func guardedDelete(kv *mvccpb.KeyValue) clientv3.Op {
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)},
		[]clientv3.Op{clientv3.OpDelete(string(kv.Key))}, nil)
}

// finish reports live checkpoints whose index record was never seen. It runs
// after the index scan.
func (v *verifier) finish() {
	for id := range v.live {
		v.problem("missing-index-record", "", id, string(v.s.layout.Index(id)), "Get cannot find this checkpoint")
	}
}

func (v *verifier) garbage(kind, thread, id string, kv *mvccpb.KeyValue, detail string) {
	v.r.Garbage = append(v.r.Garbage, Problem{Kind: kind, Thread: thread, Checkpoint: id, Key: string(kv.Key), Detail: detail})
	v.repairs = append(v.repairs, guardedDelete(kv))
}

func (v *verifier) thread(t string) error {
	s, l := v.s, v.s.layout
	at := clientv3.WithRev(v.r.Revision)
	rs, _, err := s.readOnly(v.ctx,
		clientv3.OpGet(string(l.Thread(t)), at),
		clientv3.OpGet(string(l.Checkpoints(t)), clientv3.WithPrefix(), at),
		clientv3.OpGet(string(l.Chunks(t)), clientv3.WithPrefix(), at),
		clientv3.OpGet(string(l.Transcript(t)), at),
		clientv3.OpGet(string(l.TranscriptChunks(t)), clientv3.WithPrefix(), at),
	)
	if err != nil {
		return err
	}
	st, err := parseThread(first(rs[0]))
	if err != nil {
		v.problem("malformed-thread-record", t, "", string(l.Thread(t)), "%v", err)
		return nil
	}
	// Chunks by write.
	plen := len(l.CheckpointChunks(t, 0, keys.Nonce{}))
	chunksOf := map[string][]*mvccpb.KeyValue{}
	for _, kv := range rs[2].Kvs {
		if kv.Lease == 0 && len(kv.Key) > plen {
			chunksOf[string(kv.Key[:plen])] = append(chunksOf[string(kv.Key[:plen])], kv)
		}
	}
	type rec struct {
		kv *mvccpb.KeyValue
		m  ckptMeta
		id string
		at float64
	}
	bySeq := map[uint64]rec{}
	for _, kv := range rs[1].Kvs {
		if kv.Lease != 0 {
			continue
		}
		_, at, id, err := l.DecodeCheckpoint(kv.Key)
		if err != nil {
			v.problem("malformed-checkpoint-key", t, "", string(kv.Key), "%v", err)
			continue
		}
		m, err := parseMeta(kv)
		if err != nil {
			v.problem("malformed-checkpoint-record", t, id, string(kv.Key), "%v", err)
			continue
		}
		if m.Seq < st.rec.Floor {
			v.garbage("pruned-checkpoint-record", t, id, kv, "hidden behind the prune floor")
			continue
		}
		if m.Seq > st.rec.LastSeq {
			v.problem("sequence-beyond-last", t, id, string(kv.Key), "sequence %d > last %d", m.Seq, st.rec.LastSeq)
		}
		if other, dup := bySeq[m.Seq]; dup {
			v.problem("duplicate-sequence", t, id, string(kv.Key), "shares sequence %d with %q", m.Seq, other.id)
		}
		bySeq[m.Seq] = rec{kv, m, id, at}
	}
	// The chain from the head must cover every live checkpoint.
	onChain := map[uint64]bool{}
	if st.rec.Head != "" {
		h, ok := bySeq[st.rec.HeadSeq]
		if !ok || h.id != st.rec.Head || h.at != st.rec.HeadCreatedAt {
			v.problem("dangling-head", t, st.rec.Head, string(l.Thread(t)), "the head names no live checkpoint")
		}
		for seq, ok := st.rec.HeadSeq, true; ok; {
			r, found := bySeq[seq]
			if !found || onChain[seq] {
				break
			}
			onChain[seq] = true
			if r.m.ParentID == "" || r.m.ParentSeq < st.rec.Floor {
				break
			}
			p, found := bySeq[r.m.ParentSeq]
			if !found && !liveBelow(bySeq, r.m.ParentSeq) {
				break // pruned under the alarm (KeepNewestUnderAlarm): nothing older is live
			}
			if !found || p.id != r.m.ParentID {
				v.problem("broken-chain", t, r.id, string(r.kv.Key), "parent %q (sequence %d) is missing", r.m.ParentID, r.m.ParentSeq)
			}
			seq = r.m.ParentSeq
		}
	}
	seqs := slices.Sorted(func(yield func(uint64) bool) {
		for seq := range bySeq {
			if !yield(seq) {
				return
			}
		}
	})
	for _, seq := range seqs {
		r := bySeq[seq]
		if !onChain[seq] {
			v.problem("off-chain-checkpoint", t, r.id, string(r.kv.Key), "not on the chain from the head")
		}
		v.checkpoint(t, r.kv, r.m, r.id, r.at, chunksOf)
	}
	for prefix, kvs := range chunksOf {
		v.problem("orphan-chunk", t, "", prefix, "%d body chunks belong to no checkpoint", len(kvs))
	}
	v.transcript(t, first(rs[3]), rs[4].Kvs)
	return nil
}

func (v *verifier) checkpoint(t string, kv *mvccpb.KeyValue, m ckptMeta, id string, at float64, chunksOf map[string][]*mvccpb.KeyValue) {
	l := v.s.layout
	v.r.Checkpoints++
	nonce, err := parseNonce(m.Nonce)
	if err != nil {
		v.problem("malformed-checkpoint-record", t, id, string(kv.Key), "%v", err)
		return
	}
	v.live[id] = idxValue(idxRec{Thread: t, CreatedAt: at, Seq: m.Seq, Nonce: m.Nonce})
	prefix := string(l.CheckpointChunks(t, m.Seq, nonce))
	c, err := assembleRecord(kv.Key, m, chunksOf[prefix])
	delete(chunksOf, prefix)
	if err != nil {
		v.problem("bad-body", t, id, string(kv.Key), "%v", err)
		return
	}
	if m.Layout == layoutObjects {
		v.objectCheckpoint(t, kv, m, id, at, c, nonce)
		return
	}
	if c.ID != id || c.ThreadID != t || c.CreatedAt != at && !(c.CreatedAt == 0 && at == 0) || c.ParentCheckpointID != m.ParentID {
		v.problem("body-mismatch", t, id, string(kv.Key), "the body is checkpoint %q of thread %q, createdAt %v, parent %q", c.ID, c.ThreadID, c.CreatedAt, c.ParentCheckpointID)
	}
	// Its reference records must hold exactly its distinct blob keys.
	want, mask := refParts(&c)
	have := v.refs[writeID{t, m.Seq, nonce}]
	delete(v.refs, writeID{t, m.Seq, nonce})
	if mask != m.Shards {
		v.problem("wrong-shard-mask", t, id, string(kv.Key), "record says %032b, keys give %032b", m.Shards, mask)
	}
	for shard := range byte(keys.NumShards) {
		w := bytes.Join(want[shard], nil)
		if !bytes.Equal(w, have[shard]) {
			v.problem("reference-mismatch", t, id, string(l.RefSeq(shard, t, m.Seq)),
				"shard %d holds %d references, the checkpoint has %d keys there", shard, len(have[shard])/keys.DigestLen, len(w)/keys.DigestLen)
		}
	}
	for _, k := range c.BlobKeys() {
		v.keysSeen[k]++
		v.r.References++
	}
}

func (v *verifier) transcript(t string, rec *mvccpb.KeyValue, chunks []*mvccpb.KeyValue) {
	l := v.s.layout
	var mine []byte // the chunk prefix of the current transcript, if chunked
	refKey := string(l.RefThread(keys.TranscriptShard, t))
	ref := v.transcriptRefs[refKey]
	delete(v.transcriptRefs, refKey)
	if rec != nil && len(rec.Value) > 0 && rec.Value[0] == 'r' {
		d, err := parseRoot(string(rec.Value[1:]))
		if err != nil {
			v.problem("malformed-transcript-record", t, "", string(rec.Key), "%v", err)
		} else if ref == nil || !bytes.Equal(ref.Value, d[:]) {
			v.problem("bad-transcript", t, "", string(rec.Key), "the transcript names root %x without its reference record", d)
		}
		ref = nil
	} else if rec != nil && (len(rec.Value) == 0 || rec.Value[0] != 'i') {
		var tr transcriptRec
		n, err := keys.Nonce{}, error(nil)
		if len(rec.Value) == 0 || rec.Value[0] != 'c' {
			err = errCodec
		} else if err = json.Unmarshal(rec.Value[1:], &tr); err == nil {
			n, err = parseNonce(tr.Nonce)
		}
		if err != nil {
			v.problem("malformed-transcript-record", t, "", string(rec.Key), "%v", err)
			return
		}
		mine = l.TranscriptWriteChunks(t, n)
		count, size := 0, 0
		for _, kv := range chunks {
			if kv.Lease == 0 && bytes.HasPrefix(kv.Key, mine) {
				count, size = count+1, size+len(kv.Value)
			}
		}
		if count != tr.Chunks || size != tr.Size {
			v.problem("bad-transcript", t, "", string(rec.Key), "have %d chunks and %d bytes, want %d and %d", count, size, tr.Chunks, tr.Size)
		}
	}
	for _, kv := range chunks {
		if kv.Lease == 0 && (mine == nil || !bytes.HasPrefix(kv.Key, mine)) {
			v.problem("orphan-transcript-chunk", t, "", string(kv.Key), "belongs to no transcript")
		}
	}
	if ref != nil {
		v.problem("orphan-reference-record", t, "", refKey, "a transcript reference record belongs to no transcript")
	}
}

// repair deletes the garbage found, in batches of guarded deletes. A Guarded
// store's guards go into every batch: a repair by a process that has lost its
// lock deletes nothing.
func (v *verifier) repair() error {
	for len(v.repairs) > 0 {
		n := min(len(v.repairs), MaxTxnOps/2)
		resp, err := v.s.client.Txn(v.ctx).If(v.s.guards...).Then(v.repairs[:n]...).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: verify: delete garbage: %w", err)
		}
		if !resp.Succeeded {
			return ErrGuardFailed
		}
		v.r.Repaired += n
		v.repairs = v.repairs[n:]
	}
	return nil
}

// objectCheckpoint checks a checkpoint of the capacity layout: its header
// fields, its one reference record naming its root, and, with
// VerifyOptions.Objects, that its objects exist and decode.
func (v *verifier) objectCheckpoint(t string, kv *mvccpb.KeyValue, m ckptMeta, id string, at float64, c cairn.Checkpoint, nonce keys.Nonce) {
	l := v.s.layout
	if c.ID != id || c.ThreadID != t || c.CreatedAt != at && !(c.CreatedAt == 0 && at == 0) || c.ParentCheckpointID != m.ParentID {
		v.problem("body-mismatch", t, id, string(kv.Key), "the record is checkpoint %q of thread %q, createdAt %v, parent %q", c.ID, c.ThreadID, c.CreatedAt, c.ParentCheckpointID)
	}
	root, err := parseRoot(m.Root)
	if err != nil {
		v.problem("malformed-checkpoint-record", t, id, string(kv.Key), "%v", err)
		return
	}
	have := v.refs[writeID{t, m.Seq, nonce}]
	delete(v.refs, writeID{t, m.Seq, nonce})
	if m.Shards != 1<<keys.RootShard {
		v.problem("wrong-shard-mask", t, id, string(kv.Key), "record says %032b, a version-2 checkpoint has %032b", m.Shards, 1<<keys.RootShard)
	}
	for shard := range keys.RootShard + 1 {
		switch {
		case shard != keys.RootShard && len(have[shard]) > 0:
			v.problem("reference-mismatch", t, id, string(l.RefSeq(shard, t, m.Seq)),
				"shard %d holds %d references, a version-2 checkpoint has none there", shard, len(have[shard])/keys.DigestLen)
		case shard == keys.RootShard && len(have[shard]) == 0:
			v.problem("reference-mismatch", t, id, string(l.RefSeq(shard, t, m.Seq)),
				"the checkpoint names root %x, but no shard-4 record does: the sweep does not count its objects or blob keys", root)
		case shard == keys.RootShard && !bytes.Equal(have[shard], root[:]):
			v.problem("reference-mismatch", t, id, string(l.RefSeq(shard, t, m.Seq)),
				"the checkpoint names root %x, its shard-4 record names %x: the sweep counts another body's objects and blob keys", root, have[shard])
		}
	}
	if !v.opts.Objects {
		return
	}
	files, _, arts, err := v.s.readBody(v.ctx, root)
	if err != nil {
		v.problem("missing-object", t, id, string(kv.Key), "%v", err)
		return
	}
	c.Files, c.Artifacts = files, arts
	for _, k := range c.BlobKeys() {
		v.keysSeen[k]++
		v.r.References++
	}
	v.refChunks(t, id, string(kv.Key), root, c.BlobKeys())
}

// refChunks checks that the reference chunks of the root hold exactly the
// distinct blob keys of the body, each once: they, not the leaves, are what
// the sweep counts.
func (v *verifier) refChunks(t, id, key string, root keys.Digest, want []string) {
	r, err := v.s.root(v.ctx, root)
	var got map[string][]byte
	if err == nil {
		got, err = v.s.fetchParts(v.ctx, r.refs)
	}
	if err != nil {
		v.problem("missing-object", t, id, key, "%v", err)
		return
	}
	var have []string
	for _, p := range r.refs {
		ks, err := decodeRefChunk(got[objectKey(p.digest)])
		if err != nil {
			v.problem("missing-object", t, id, key, "%v", objError(p.digest, err))
			return
		}
		have = append(have, ks...)
	}
	slices.Sort(have)
	if slices.Equal(have, want) {
		return
	}
	detail := fmt.Sprintf("the reference chunks of root %x hold %d keys, the body has %d distinct blob keys", root, len(have), len(want))
	if k, ok := firstDifference(have, want); ok {
		detail += fmt.Sprintf("; %s is counted %d times, referenced %d times", k, count(have, k), count(want, k))
	}
	v.problem("reference-chunk-mismatch", t, id, key, "%s: the sweep's counts of this checkpoint are wrong", detail)
}

// firstDifference returns the smallest key whose number of occurrences
// differs between the sorted lists a and b.
func firstDifference(a, b []string) (string, bool) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i] < b[j]:
			return a[i], true
		case i == len(a) || b[j] < a[i]:
			return b[j], true
		}
		i, j = i+1, j+1
	}
	return "", false
}

func count(list []string, k string) int {
	n := 0
	for _, x := range list {
		if x == k {
			n++
		}
	}
	return n
}

// liveBelow reports whether a live checkpoint record of bySeq has a sequence
// number below seq. A chain may end at a parent that is gone only when none
// has: a prune under the alarm deletes the oldest checkpoints first.
func liveBelow[V any](bySeq map[uint64]V, seq uint64) bool {
	for s := range bySeq {
		if s < seq {
			return true
		}
	}
	return false
}
