package etcdstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/fence"
	"github.com/cairnstore/cairn/keys"
)

// ClaimBlobs implements cairn.BlobClaimer. It claims the sorted distinct keys
// in batches of at most claimBatch, one transaction a batch, claimParallel
// batches at a time:
//
//	If   Guard(w, now)
//	     for each key: CreateRevision(P g B) = 0         -- no GC record
//	               or  ModRevision(P g B) = v            -- a candidate seen at v
//	Then for each key: Put(P q B T f, token, lease = the etcd lease of w's record)
//	     for each candidate: Delete(P g B)               -- a claim ends a candidacy
//	Else Get(w), Get(x), for each key: Get(P g B)
//
// When the transaction fails, its Else reads say why: the lease is not
// current (cairn.ErrWriterLost), or a key has a record the comparisons did
// not expect. A deleting key is busy: it leaves the batch and is returned. A
// candidate is compared at the version read, and deleted. The batch is sent
// again until it succeeds or ctx ends. Claims of earlier batches stay when a
// later batch fails; they protect more than asked, and end with the lease.
//
// The store remembers the claim keys it puts, per lease, and deletes them
// when the lease's next Append succeeds (in the append's own transaction when
// it fits), when the lease is released, and when it learns the lease is lost.
func (s *Store) ClaimBlobs(ctx context.Context, w cairn.Writer, blobKeys []string) (_ []string, err error) {
	defer definite("claimBlobs", &err)
	if err := cairn.CheckClaimInput(w, blobKeys); err != nil {
		return nil, err
	}
	if err := cairn.CheckOwnerToken(w); err != nil { // the lease, before any request
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	busy, err := s.claim(ctx, w, blobsOf(cairn.SortedKeys(blobKeys)))
	if err != nil {
		return nil, err
	}
	return busy, nil
}

// claim is ClaimBlobs without the input checks, for blobs sorted and
// distinct; the store claims its body objects (namespace 2) through it.
func (s *Store) claim(ctx context.Context, w cairn.Writer, blobs []keys.Blob) ([]string, error) {
	return s.claimEach(ctx, w, blobs, nil)
}

// claimEach claims blobs as claim does and, when claimed is not nil, calls
// it, possibly from several goroutines at once, with the blobs of each batch
// as soon as that batch's claim has committed, its busy blobs left out.
func (s *Store) claimEach(ctx context.Context, w cairn.Writer, blobs []keys.Blob, claimed func([]keys.Blob)) ([]string, error) {
	lease, err := s.writerLease(ctx, w)
	if err != nil {
		return nil, err
	}
	n := s.batchOf(claimBatch, 1, 3)
	var batches [][]keys.Blob
	for i := 0; i == 0 || i < len(blobs); i += n {
		batches = append(batches, blobs[i:min(i+n, len(blobs))])
	}
	busy, err := s.claimBatches(ctx, w, lease, batches, claimed)
	if err != nil {
		if errors.Is(err, cairn.ErrWriterLost) {
			s.endLease(ctx, w)
		}
		return nil, err
	}
	s.dropSuperseded(ctx, w.ThreadID, w.Fence)
	return busy, nil
}

// writerLease returns the etcd lease that w's record is attached to, which
// w's claims are attached to as well: remembered from the Acquire or
// ResumeWriter that handed w out through this store, or read from the
// record. It returns cairn.ErrWriterLost when the record is not w's.
func (s *Store) writerLease(ctx context.Context, w cairn.Writer) (clientv3.LeaseID, error) {
	if id, ok := s.claims.leaseOf(w); ok {
		return id, nil
	}
	rs, _, err := s.readOnly(ctx, clientv3.OpGet(s.writerKeys(w.ThreadID).Owner))
	if err != nil {
		return 0, err
	}
	kv := first(rs[0])
	if kv == nil || kv.ModRevision != w.Fence || string(kv.Value) != w.OwnerToken {
		return 0, cairn.NewError(cairn.CodeWriterLost, "writer lease for thread %q is no longer current", w.ThreadID)
	}
	id := clientv3.LeaseID(kv.Lease)
	s.claims.setLease(w, id)
	return id, nil
}

// claimParallel is how many claim batches one ClaimBlobs sends at once: etcd
// commits concurrent requests together, so a claim of many keys takes a
// fraction of the time of one batch after the other.
const claimParallel = 4

// claimBatches claims the batches, up to claimParallel at a time, and returns
// the busy keys in order; it calls claimed (when not nil) as claimEach says.
func (s *Store) claimBatches(ctx context.Context, w cairn.Writer, lease clientv3.LeaseID, batches [][]keys.Blob, claimed func([]keys.Blob)) ([]string, error) {
	busy := make([][]string, len(batches))
	err := forEach(ctx, len(batches), claimParallel, func(ctx context.Context, i int) (err error) {
		if busy[i], err = s.claimBatch(ctx, w, lease, batches[i]); err != nil || claimed == nil {
			return err
		}
		done := batches[i]
		if len(busy[i]) > 0 {
			done = slices.DeleteFunc(slices.Clone(done), func(b keys.Blob) bool { return slices.Contains(busy[i], b.Key()) })
		}
		claimed(done)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range busy {
		out = append(out, b...)
	}
	return out, nil
}

// forEach runs fn for 0 <= i < n, up to par at a time, in order of i. At the
// first error it stops starting more, and it returns the error of the lowest
// i that failed, other than by that stop (ctx's error when ctx ended).
func forEach(ctx context.Context, n, par int, fn func(ctx context.Context, i int) error) error {
	if n == 1 {
		return fn(ctx, 0)
	}
	errs := make([]error, n)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(par, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || cctx.Err() != nil {
					return
				}
				if errs[i] = fn(cctx, i); errs[i] != nil {
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && (ctx.Err() != nil || !errors.Is(err, context.Canceled)) {
			return err
		}
	}
	return ctx.Err()
}

// claimBatch claims one batch of blobs and returns the busy ones.
func (s *Store) claimBatch(ctx context.Context, w cairn.Writer, lease clientv3.LeaseID, batch []keys.Blob) ([]string, error) {
	wk := s.writerKeys(w.ThreadID)
	known := map[int]int64{} // candidates: index -> version
	busy := map[int]bool{}   // deleting
	for attempt := 0; ; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
		now := s.now()
		cmps := s.withGuards(fence.Guard(wk, w.OwnerToken, w.Fence, now))
		var then []clientv3.Op
		els := []clientv3.Op{clientv3.OpGet(wk.Owner), clientv3.OpGet(wk.Expiry)}
		var idx []int
		var claimKeys []string
		opt := clientv3.WithLease(lease)
		for i, b := range batch {
			if busy[i] {
				continue
			}
			g := string(s.layout.GCRecord(b))
			if v, ok := known[i]; ok {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(g), "=", v))
				then = append(then, clientv3.OpDelete(g))
			} else {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(g), "=", 0))
			}
			ck := s.claimKey(b, w)
			then = append(then, clientv3.OpPut(ck, w.OwnerToken, opt))
			els = append(els, clientv3.OpGet(g))
			idx = append(idx, i)
			claimKeys = append(claimKeys, ck)
		}
		// Remembered before the request: if its outcome is unknown, the
		// claims may exist, and must be deleted with the others.
		s.claims.add(w, claimKeys)
		resp, _, err := s.commit(ctx, cmps, then, els)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The writer's record ended with its etcd lease.
			return nil, cairn.NewError(cairn.CodeWriterLost, "writer lease for thread %q is no longer current", w.ThreadID)
		}
		if err != nil {
			return nil, err
		}
		if resp.Succeeded {
			var out []string
			for i, b := range batch {
				if busy[i] {
					out = append(out, b.Key())
				}
			}
			return out, nil
		}
		if err := s.guardErr(ctx); err != nil {
			return nil, err
		}
		r := resp.Responses
		if !fence.Decode(first(getResp(r[0])), first(getResp(r[1]))).Current(w, now) {
			return nil, cairn.NewError(cairn.CodeWriterLost, "writer lease for thread %q is no longer current", w.ThreadID)
		}
		for j, i := range idx {
			kv := first(getResp(r[2+j]))
			if kv == nil {
				delete(known, i)
				continue
			}
			rec, err := s.parseGC(kv)
			if err != nil {
				return nil, err
			}
			if rec.State == cairn.GCDeleting {
				busy[i] = true
				delete(known, i)
			} else {
				known[i] = kv.ModRevision
			}
		}
	}
}

// WaitBlobs implements cairn.BlobClaimer. It reads the GC records of keys
// (read-only transactions of up to readBatch gets); while one is deleting, it
// watches that record from its mod revision + 1 until it is deleted or
// rewritten, and reads again.
func (s *Store) WaitBlobs(ctx context.Context, blobKeys []string) error {
	if err := cairn.CheckBlobKeys(blobKeys); err != nil {
		return err
	}
	return s.waitBlobs(ctx, blobsOf(cairn.SortedKeys(blobKeys)))
}

// waitBlobs is WaitBlobs without the input checks.
func (s *Store) waitBlobs(ctx context.Context, blobs []keys.Blob) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		kv, err := s.firstDeleting(ctx, blobs)
		if err != nil || kv == nil {
			return err
		}
		s.log.Debug("etcdstore: waiting for a blob delete to settle", "key", string(kv.Key), "rev", kv.ModRevision)
		wctx, cancel := context.WithCancel(ctx)
		for resp := range s.client.Watch(wctx, string(kv.Key), clientv3.WithRev(kv.ModRevision+1)) {
			if resp.Err() != nil || len(resp.Events) > 0 {
				break // settled, rewritten, or the history is compacted: read again
			}
		}
		cancel()
	}
}

// firstDeleting returns the first GC record of blobs that is deleting, or nil.
func (s *Store) firstDeleting(ctx context.Context, blobs []keys.Blob) (*mvccpb.KeyValue, error) {
	for len(blobs) > 0 {
		n := min(len(blobs), readBatch)
		gets := make([]clientv3.Op, n)
		for i, b := range blobs[:n] {
			gets[i] = clientv3.OpGet(string(s.layout.GCRecord(b)))
		}
		rs, _, err := s.readOnly(ctx, gets...)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			if kv := first(r); kv != nil {
				rec, err := s.parseGC(kv)
				if err != nil {
					return nil, err
				}
				if rec.State == cairn.GCDeleting {
					return kv, nil
				}
			}
		}
		blobs = blobs[n:]
	}
	return nil, nil
}
