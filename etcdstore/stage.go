package etcdstore

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// blob is one value a write stores under one key: a chunk of a checkpoint or
// transcript body, or one part of a reference record.
type blob struct {
	key   []byte
	value []byte
}

// stager writes the values of a large write before the write is published,
// attached to an etcd lease of its own. The publish transaction detaches them
// (a put that keeps the value and drops the lease). If the writer dies or the
// write fails, the lease expires or is revoked and etcd deletes them; nothing
// staged is visible to reads, which skip keys with a lease.
type stager struct {
	client *clientv3.Client
	lease  clientv3.LeaseID
	stop   context.CancelFunc
	done   chan struct{}
}

// stage grants a staging lease, keeps it alive until close, and writes vals
// under it, batching small values into transactions that stay within etcd's
// default limits.
func (s *Store) stage(ctx context.Context, vals []blob) (*stager, error) {
	g, err := s.client.Grant(ctx, s.stagingTTL)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: grant staging lease: %w", err)
	}
	kctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	ch, err := s.client.KeepAlive(kctx, g.ID)
	if err != nil {
		stop()
		return nil, fmt.Errorf("etcdstore: keep staging lease alive: %w", err)
	}
	st := &stager{client: s.client, lease: g.ID, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(st.done)
		for range ch { // drain keep-alive responses until kctx ends
		}
	}()
	lease := clientv3.WithLease(g.ID)
	var batch []clientv3.Op
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := s.client.Txn(ctx).Then(batch...).Commit()
		batch, size = batch[:0], 0
		return err
	}
	for _, v := range vals {
		if size+len(v.value)+len(v.key) > inlineBudget || len(batch) == MaxTxnOps {
			if err := flush(); err != nil {
				st.abort(ctx)
				return nil, fmt.Errorf("etcdstore: stage: %w", err)
			}
		}
		batch = append(batch, clientv3.OpPut(string(v.key), string(v.value), lease))
		size += len(v.value) + len(v.key)
	}
	if err := flush(); err != nil {
		st.abort(ctx)
		return nil, fmt.Errorf("etcdstore: stage: %w", err)
	}
	return st, nil
}

// detach returns the publish operations that make staged keys permanent.
func detach(vals []blob) []clientv3.Op {
	ops := make([]clientv3.Op, len(vals))
	for i, v := range vals {
		ops[i] = clientv3.OpPut(string(v.key), "", clientv3.WithIgnoreValue())
	}
	return ops
}

// detachReqs is detach as built requests (see rawKV).
func detachReqs(vals []blob) []*etcdserverpb.RequestOp {
	ops := make([]*etcdserverpb.RequestOp, len(vals))
	for i, v := range vals {
		ops[i] = detachReq(v.key)
	}
	return ops
}

// putReqs returns the requests that write vals directly, without staging;
// they share the values.
func putReqs(vals []blob) []*etcdserverpb.RequestOp {
	ops := make([]*etcdserverpb.RequestOp, len(vals))
	for i, v := range vals {
		ops[i] = putReqBytes(v.key, v.value)
	}
	return ops
}

// close stops keeping the lease alive after a successful publish. Nothing is
// attached to the lease any more; it expires on its own.
func (st *stager) close() {
	if st == nil {
		return
	}
	st.stop()
	<-st.done
}

// abort stops the keep-alive and revokes the lease, which deletes whatever is
// still staged. It is best effort: if the revoke fails, the lease expires.
func (st *stager) abort(ctx context.Context) {
	if st == nil {
		return
	}
	st.close()
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	_, _ = st.client.Revoke(cctx, st.lease)
}

// chunks splits b into blobs of at most ChunkSize under keys made by key(i).
// An empty b is one empty chunk, so every body has at least one.
func chunks(b []byte, key func(i int) []byte) []blob {
	var out []blob
	for i := 0; i == 0 || len(b) > 0; i++ {
		n := min(len(b), ChunkSize)
		out = append(out, blob{key: key(i), value: b[:n]})
		b = b[n:]
	}
	return out
}

// mustStage reports whether a publish writing vals, and extra bytes of
// records, would not fit in one request, so that vals must be staged first.
func mustStage(vals []blob, extra int) bool { return opBytes(vals)+extra > inlineBudget }

// opBytes estimates the request size of writing vals.
func opBytes(vals []blob) int {
	n := 0
	for _, v := range vals {
		n += len(v.key) + len(v.value) + 16
	}
	return n
}
