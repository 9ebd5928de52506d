package etcdstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// parseThread decodes a thread record key-value; nil is an absent record.
func parseThread(kv *mvccpb.KeyValue) (threadState, error) {
	if kv == nil {
		return threadState{}, nil
	}
	var st threadState
	if err := json.Unmarshal(kv.Value, &st.rec); err != nil {
		return st, corrupt("thread record", kv.Key, err)
	}
	st.rev = kv.ModRevision
	return st, nil
}

func parseMeta(kv *mvccpb.KeyValue) (ckptMeta, error) {
	m, err := decodeMeta(kv.Value)
	if err != nil {
		return m, corrupt("checkpoint record", kv.Key, err)
	}
	return m, nil
}

func parseIdx(kv *mvccpb.KeyValue) (idxRec, error) {
	var r idxRec
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return r, corrupt("index record", kv.Key, err)
	}
	return r, nil
}

func idxValue(r idxRec) string {
	b, _ := json.Marshal(r)
	return string(b)
}

func first(r *clientv3.GetResponse) *mvccpb.KeyValue {
	if r == nil || len(r.Kvs) == 0 {
		return nil
	}
	return r.Kvs[0]
}

// readOnly runs gets atomically, at one revision, in one round trip.
func (s *Store) readOnly(ctx context.Context, gets ...clientv3.Op) ([]*clientv3.GetResponse, int64, error) {
	resp, err := s.client.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return nil, 0, err
	}
	out := make([]*clientv3.GetResponse, len(resp.Responses))
	for i, r := range resp.Responses {
		out[i] = (*clientv3.GetResponse)(r.GetResponseRange())
	}
	return out, resp.Header.Revision, nil
}

// readThread reads a thread record and remembers it.
func (s *Store) readThread(ctx context.Context, thread string) (threadState, error) {
	resp, err := s.client.Get(ctx, string(s.layout.Thread(thread)))
	if err != nil {
		return threadState{}, err
	}
	st, err := parseThread(first(resp))
	if err == nil {
		s.remember(thread, st)
	}
	return st, err
}

// GetHead implements cairn.Store in one read.
func (s *Store) GetHead(ctx context.Context, threadID string) (string, error) {
	if err := cairn.ValidateID(threadID, "thread id"); err != nil {
		return "", err
	}
	st, err := s.readThread(ctx, threadID)
	if err != nil {
		return "", err
	}
	return st.rec.Head, nil
}

// Get implements cairn.Store in two reads: the id's index record, then, at the
// same revision, the checkpoint record, its thread record and its body. With
// Options.LocalReads both reads go first to the connected member's own state
// (see getLocal), and to the leader only when that cannot answer.
func (s *Store) Get(ctx context.Context, id string) (*cairn.Checkpoint, error) {
	if err := cairn.ValidateID(id, "checkpoint id"); err != nil {
		return nil, err
	}
	if s.localReads {
		if c, ok := s.getLocal(ctx, id); ok {
			s.reads.local.Add(1)
			return &c, nil
		}
		s.reads.fallback.Add(1)
	}
	c, ok, err := s.getAt(ctx, id, false)
	if err != nil || !ok {
		return nil, err
	}
	return &c, nil
}

// getAt reads the id's index record, then loads the checkpoint it names at
// the same revision (loadAt); ok is false when there is none. local reads the
// connected member's own state (see getLocal).
func (s *Store) getAt(ctx context.Context, id string, local bool) (c cairn.Checkpoint, ok bool, err error) {
	var opts []clientv3.OpOption
	if local {
		opts = append(opts, clientv3.WithSerializable())
	}
	resp, err := s.client.Get(ctx, string(s.layout.Index(id)), opts...)
	if err != nil {
		return c, false, err
	}
	kv := first(resp)
	if kv == nil {
		return c, false, nil
	}
	idx, err := parseIdx(kv)
	if err != nil {
		return c, false, err
	}
	return s.loadAt(ctx, idx, id, resp.Header.Revision, local)
}

// loadAt loads the checkpoint an index record names, as of revision rev. ok is
// false when the index record is stale (the checkpoint was pruned). local
// reads the connected member's own state (serializable) and also requires
// the thread's read permit at rev (see getLocal): ok is false without it.
func (s *Store) loadAt(ctx context.Context, idx idxRec, id string, rev int64, local bool) (cairn.Checkpoint, bool, error) {
	nonce, err := parseNonce(idx.Nonce)
	if err != nil {
		return cairn.Checkpoint{}, false, err
	}
	at := []clientv3.OpOption{clientv3.WithRev(rev)}
	if local {
		at = append(at, clientv3.WithSerializable())
	}
	gets := []clientv3.Op{
		clientv3.OpGet(string(s.layout.Checkpoint(idx.Thread, idx.CreatedAt, id)), at...),
		clientv3.OpGet(string(s.layout.Thread(idx.Thread)), at...),
		clientv3.OpGet(string(s.layout.CheckpointChunks(idx.Thread, idx.Seq, nonce)), append(at, clientv3.WithPrefix())...),
	}
	if local {
		gets = append(gets, clientv3.OpGet(string(s.layout.ReadPermit(idx.Thread)), at...))
	}
	rs, _, err := s.readOnly(ctx, gets...)
	if err != nil {
		return cairn.Checkpoint{}, false, err
	}
	if local && first(rs[3]) == nil {
		return cairn.Checkpoint{}, false, nil
	}
	mkv := first(rs[0])
	st, err := parseThread(first(rs[1]))
	if err != nil || mkv == nil {
		return cairn.Checkpoint{}, false, err
	}
	m, err := parseMeta(mkv)
	if err != nil {
		return cairn.Checkpoint{}, false, err
	}
	if m.Seq != idx.Seq || m.Seq < st.rec.Floor || mkv.Lease != 0 {
		return cairn.Checkpoint{}, false, nil
	}
	c, err := s.assemble(ctx, mkv.Key, m, rs[2].Kvs)
	return c, err == nil, err
}

// assemble decodes a checkpoint from its record and, when its body is not
// inline, its chunks, in key order, or, for the capacity layout, its objects.
func (s *Store) assemble(ctx context.Context, key []byte, m ckptMeta, chunkKVs []*mvccpb.KeyValue) (cairn.Checkpoint, error) {
	c, err := assembleRecord(key, m, chunkKVs)
	if err != nil || m.Layout != layoutObjects {
		return c, err
	}
	root, err := parseRoot(m.Root)
	if err != nil {
		return c, corrupt("checkpoint record", key, err)
	}
	hint, err := parsePacks(m.Packs)
	if err != nil {
		return c, corrupt("checkpoint record", key, err)
	}
	if c.Files, c.Conversation, c.Artifacts, err = s.readBodyHint(ctx, root, hint); err != nil {
		return cairn.Checkpoint{}, fmt.Errorf("checkpoint %q: %w", c.ID, err)
	}
	return c, nil
}

// assembleRecord decodes what the record and its chunks hold: the whole
// checkpoint in version 1, its header fields in version 2.
func assembleRecord(key []byte, m ckptMeta, chunkKVs []*mvccpb.KeyValue) (cairn.Checkpoint, error) {
	if m.Layout != 0 && m.Layout != layoutObjects {
		return cairn.Checkpoint{}, corrupt("checkpoint record", key, fmt.Errorf("unknown layout %d", m.Layout))
	}
	body := m.Body
	n := 0
	if m.Chunks > 0 {
		body = make([]byte, 0, m.Size)
		for _, kv := range chunkKVs {
			if kv.Lease != 0 {
				continue
			}
			body = append(body, kv.Value...)
			n++
		}
	}
	if n != m.Chunks || len(body) != m.Size {
		return cairn.Checkpoint{}, corrupt("checkpoint body", key, fmt.Errorf("have %d chunks and %d bytes, want %d and %d", n, len(body), m.Chunks, m.Size))
	}
	c, err := decodeCheckpoint(body)
	if err != nil {
		return c, corrupt("checkpoint body", key, err)
	}
	return c, nil
}

// List implements cairn.Store in two reads at one revision: the thread record
// with its checkpoint records, then the bodies. The records come back in the
// contract's order because of the key encoding.
func (s *Store) List(ctx context.Context, threadID string) ([]cairn.Checkpoint, error) {
	if err := cairn.ValidateID(threadID, "thread id"); err != nil {
		return nil, err
	}
	rs, rev, err := s.readOnly(ctx,
		clientv3.OpGet(string(s.layout.Thread(threadID))),
		clientv3.OpGet(string(s.layout.Checkpoints(threadID)), clientv3.WithPrefix()),
	)
	if err != nil {
		return nil, err
	}
	st, err := parseThread(first(rs[0]))
	if err != nil {
		return nil, err
	}
	type item struct {
		key  []byte
		meta ckptMeta
	}
	var live []item
	chunked := false
	for _, kv := range rs[1].Kvs {
		m, err := parseMeta(kv)
		if err != nil {
			return nil, err
		}
		if kv.Lease == 0 && m.Seq >= st.rec.Floor {
			live = append(live, item{kv.Key, m})
			chunked = chunked || m.Chunks > 0
		}
	}
	out := make([]cairn.Checkpoint, 0, len(live))
	byWrite := map[string][]*mvccpb.KeyValue{}
	if chunked {
		if err := s.readChunks(ctx, threadID, rev, byWrite); err != nil {
			return nil, err
		}
	}
	for _, it := range live {
		nonce, err := parseNonce(it.meta.Nonce)
		if err != nil {
			return nil, err
		}
		c, err := s.assemble(ctx, it.key, it.meta, byWrite[string(s.layout.CheckpointChunks(threadID, it.meta.Seq, nonce))])
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// readChunks reads a thread's body chunks at rev, in pages, grouped by the
// write that staged them.
func (s *Store) readChunks(ctx context.Context, thread string, rev int64, byWrite map[string][]*mvccpb.KeyValue) error {
	prefix := s.layout.Chunks(thread)
	start, end := string(prefix), string(keys.PrefixEnd(prefix))
	plen := len(s.layout.CheckpointChunks(thread, 0, keys.Nonce{}))
	for {
		// A few chunks a page: each is up to ChunkSize.
		resp, err := s.client.Get(ctx, start, clientv3.WithRange(end), clientv3.WithRev(rev), clientv3.WithLimit(8))
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			if len(kv.Key) > plen {
				byWrite[string(kv.Key[:plen])] = append(byWrite[string(kv.Key[:plen])], kv)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// ListThreads implements cairn.ThreadLister: a paged range read over the
// thread records, skipping threads without a head. after may be of any
// length.
func (s *Store) ListThreads(ctx context.Context, after string, limit int) ([]string, error) {
	if limit <= 0 {
		limit = 1000
	}
	start := s.layout.Threads()
	if after != "" {
		// No thread id is longer than cairn.MaxIDBytes, so a longer cursor
		// orders every thread as its first MaxIDBytes+1 bytes do: the key
		// never grows past what etcd takes.
		start = append(s.layout.Thread(after[:min(len(after), cairn.MaxIDBytes+1)]), 0)
	}
	end := keys.PrefixEnd(s.layout.Threads())
	var out []string
	for len(out) < limit {
		resp, err := s.client.Get(ctx, string(start), clientv3.WithRange(string(end)), clientv3.WithLimit(int64(limit)))
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			t, err := s.layout.DecodeThread(kv.Key)
			if err != nil {
				return nil, corrupt("thread key", kv.Key, err)
			}
			st, err := parseThread(kv)
			if err != nil {
				return nil, err
			}
			if st.rec.Head != "" && len(out) < limit {
				out = append(out, t)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = append(bytes.Clone(resp.Kvs[len(resp.Kvs)-1].Key), 0)
	}
	return out, nil
}
