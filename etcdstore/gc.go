package etcdstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/fence"
	"github.com/cairnstore/cairn/keys"
)

// The online sweep protocol (cairn.BlobClaimer, cairn.BlobCollector) keeps
// two kinds of keys, both named by the blob key in compact form B (package
// keys: a namespace byte and the raw digest):
//
//	P g B        GC record: a state byte ('c' candidate, 'd' deleting) and
//	             Since (float64, 8 bytes big-endian); its mod revision is the
//	             record's version
//	P q B T f    claim of B by the writer lease of thread T with fence f; the
//	             value is the lease's owner token; attached to the etcd lease
//	             of that writer's record, so that a claim never outlives the
//	             record that makes it live, and an abandoned record takes its
//	             claims with it when etcd's leader ends its lease
//
// Because a blob's claims share the prefix P q B, "B has no claim" is one
// range comparison (CreateRevision over the prefix = 0, true for an empty
// range). A claim is live while its lease's record is the lease's:
// ModRevision(w_T) = f and Value(w_T) = token. No clock is compared: a lease
// whose stored expiry passed by somebody's clock, but whose record nobody
// replaced, can still append, since its guard reads its own writer's clock.
// Dead claims are reaped with fence.IfSuperseded, so a reap never removes a
// live claim.

var (
	_ cairn.BlobClaimer   = (*Store)(nil)
	_ cairn.BlobCollector = (*Store)(nil)
)

// GC record states as stored.
const (
	gcCandidateByte = 'c'
	gcDeletingByte  = 'd'
	gcValueLen      = 1 + 8
)

// Batch sizes. Each bounds the keys one transaction handles so that its
// comparison, success and failure lists all stay within MaxTxnOps whatever
// the store's guards (batchOf subtracts them).
const (
	// claimBatch: 3 guard comparisons + 1 a key; a put and at most one
	// delete a key; 2 + 1 get a key.
	claimBatch = 60
	// recordBatch: 2 comparisons a record (so 60), 3 for Begin (so 42 with
	// one guard); 1 operation and 1 or 2 gets a record.
	recordBatch = 60
	// reapBatch: each reap is a nested transaction of two levels with one
	// comparison and one delete each (fence.IfSuperseded): 3 operations and
	// 2 comparisons below the outer one. With 40, even the operations of all
	// levels added up (120) stay within MaxTxnOps.
	reapBatch = 40
	// deleteBatch: plain deletes of this store's own claims.
	deleteBatch = MaxTxnOps
	// readBatch: gets in one read-only transaction.
	readBatch = MaxTxnOps
	// scanPage: keys a page of a range read of claims or GC records.
	scanPage = 512
)

// batchOf returns how many items fit in one transaction when each item takes
// per comparisons and fixed comparisons are taken by other checks and the
// store's guards, capped at max.
func (s *Store) batchOf(max, per, fixed int) int {
	return min(max, (MaxTxnOps-fixed-len(s.guards))/per)
}

func gcValue(state byte, since float64) string {
	b := make([]byte, 0, gcValueLen)
	b = append(b, state)
	return string(binary.BigEndian.AppendUint64(b, math.Float64bits(since)))
}

// gcState returns the stored state of a GC record value.
func gcState(s byte) (cairn.GCState, bool) {
	switch s {
	case gcCandidateByte:
		return cairn.GCCandidate, true
	case gcDeletingByte:
		return cairn.GCDeleting, true
	}
	return "", false
}

func gcStateByte(st cairn.GCState) byte {
	if st == cairn.GCDeleting {
		return gcDeletingByte
	}
	return gcCandidateByte
}

// parseGC decodes a GC record key-value.
func (s *Store) parseGC(kv *mvccpb.KeyValue) (cairn.GCRecord, error) {
	b, err := s.layout.DecodeGCRecord(kv.Key)
	if err != nil {
		return cairn.GCRecord{}, corrupt("GC record key", kv.Key, err)
	}
	if len(kv.Value) != gcValueLen {
		return cairn.GCRecord{}, corrupt("GC record", kv.Key, fmt.Errorf("length %d", len(kv.Value)))
	}
	st, ok := gcState(kv.Value[0])
	if !ok {
		return cairn.GCRecord{}, corrupt("GC record", kv.Key, fmt.Errorf("state %q", kv.Value[0]))
	}
	return cairn.GCRecord{
		Key: b.Key(), State: st, Version: kv.ModRevision,
		Since: math.Float64frombits(binary.BigEndian.Uint64(kv.Value[1:])),
	}, nil
}

// blobsOf returns the compact form of keys, which the caller has checked.
func blobsOf(blobKeys []string) []keys.Blob {
	out := make([]keys.Blob, len(blobKeys))
	for i, k := range blobKeys {
		out[i], _ = keys.ParseBlob(k)
	}
	return out
}

// sortedBlobs sorts blobs in key order and removes repeats.
func sortedBlobs(blobs []keys.Blob) []keys.Blob {
	slices.SortFunc(blobs, func(a, b keys.Blob) int {
		if a.NS != b.NS {
			return int(a.NS) - int(b.NS)
		}
		return bytes.Compare(a.Digest[:], b.Digest[:])
	})
	return slices.Compact(blobs)
}

// claimKey returns the claim key of b by the lease w.
func (s *Store) claimKey(b keys.Blob, w cairn.Writer) string {
	return string(s.layout.Claim(b, w.ThreadID, uint64(w.Fence)))
}

// claim is one claim key-value, decoded.
type claim struct {
	key   string
	ck    keys.ClaimKey
	token string
}

func (c claim) writer() cairn.Writer {
	return cairn.Writer{ThreadID: c.ck.Thread, OwnerToken: c.token, Fence: int64(c.ck.Fence)}
}

// writersAt reads the writer records of threads at revision rev (0: now), in
// read-only transactions of readBatch gets.
func (s *Store) writersAt(ctx context.Context, rev int64, threads []string) (map[string]*cairn.WriterRecord, error) {
	threads = cairn.SortedKeys(threads)
	out := make(map[string]*cairn.WriterRecord, len(threads))
	var opts []clientv3.OpOption
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	for len(threads) > 0 {
		n := min(len(threads), readBatch/2)
		gets := make([]clientv3.Op, 0, 2*n)
		for _, t := range threads[:n] {
			wk := s.writerKeys(t)
			gets = append(gets, clientv3.OpGet(wk.Owner, opts...), clientv3.OpGet(wk.Expiry, opts...))
		}
		rs, _, err := s.readOnly(ctx, gets...)
		if err != nil {
			return nil, err
		}
		for i, t := range threads[:n] {
			out[t] = fence.Decode(first(rs[2*i]), first(rs[2*i+1]))
		}
		threads = threads[n:]
	}
	return out, nil
}

// liveness sorts the claims of some blobs, read at revision rev, into live
// and dead ones by the writer records at rev alone, never by a clock: a claim
// is live while its lease's record Holds it.
// A claim key that does not decode counts as live: nobody can tell which
// lease it belongs to.
type liveness struct {
	live map[string]bool // blob keys with a live (or undecodable) claim
	dead []claim
}

func (s *Store) classify(ctx context.Context, rev int64, kvs []*mvccpb.KeyValue) (liveness, error) {
	lv := liveness{live: map[string]bool{}}
	var claims []claim
	var threads []string
	for _, kv := range kvs {
		ck, err := s.layout.DecodeClaim(kv.Key)
		if err != nil {
			if b, _, err := keys.DecodeBlob(kv.Key[len(s.layout.Claims()):]); err == nil {
				lv.live[b.Key()] = true
			}
			continue
		}
		claims = append(claims, claim{key: string(kv.Key), ck: ck, token: string(kv.Value)})
		threads = append(threads, ck.Thread)
	}
	if len(claims) == 0 {
		return lv, nil
	}
	writers, err := s.writersAt(ctx, rev, threads)
	if err != nil {
		return lv, err
	}
	for _, c := range claims {
		if writers[c.ck.Thread].Holds(c.writer()) {
			lv.live[c.ck.Blob.Key()] = true
		} else {
			lv.dead = append(lv.dead, c)
		}
	}
	return lv, nil
}

// reap deletes claims found dead, each only if its lease's record is still
// superseded (which, once true, stays true), in guarded batches.
func (s *Store) reap(ctx context.Context, dead []claim) error {
	for len(dead) > 0 {
		n := min(len(dead), reapBatch)
		ops := make([]clientv3.Op, n)
		for i, c := range dead[:n] {
			ops[i] = fence.IfSuperseded(s.writerKeys(c.ck.Thread), c.token, int64(c.ck.Fence), clientv3.OpDelete(c.key))
		}
		resp, _, err := s.commit(ctx, s.guards, ops, nil)
		if err != nil {
			return fmt.Errorf("etcdstore: reap dead claims: %w", err)
		}
		if !resp.Succeeded {
			return ErrGuardFailed
		}
		s.log.Debug("etcdstore: reaped dead claims", "count", n)
		dead = dead[n:]
	}
	return nil
}

// commit sends one transaction, and sends it again while its error leaves
// the outcome unknown and ctx has time. The callers' transactions are
// compare-and-swaps or idempotent puts and deletes, so a repeat applies at
// most once what matters. unsure reports that an attempt's outcome was
// unknown: it may have applied before the answer that is returned.
func (s *Store) commit(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (resp *clientv3.TxnResponse, unsure bool, err error) {
	for attempt := 1; ; attempt++ {
		resp, err = s.client.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
		if err == nil || !ambiguous(err) || ctx.Err() != nil || attempt >= maxAttempts {
			return resp, unsure, err
		}
		unsure = true
	}
}

// backoff waits before attempt number attempt (from 0) of a compare-and-swap
// that keeps losing to concurrent writes: not at all for the first two, then
// a jittered wait that doubles up to about 100 ms. It returns ctx's error if
// ctx ends first.
func backoff(ctx context.Context, attempt int) error {
	if attempt < 2 {
		return ctx.Err()
	}
	d := time.Millisecond << min(attempt-2, 7)
	d = d/2 + rand.N(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// claimSet remembers, per writer lease, the claim keys this store put, so
// that the lease's next append, its release, or the news that it is lost can
// delete them. Claims it forgets are still dead once their lease is, and the
// sweeper reaps them; the set only saves it the work.
//
// It also remembers the etcd lease that each writer lease's record is
// attached to, which its claims are attached to as well.
type claimSet struct {
	mu      sync.Mutex
	byLease map[cairn.Writer]map[string]struct{}
	etcd    map[cairn.Writer]clientv3.LeaseID
}

func newClaimSet() *claimSet {
	return &claimSet{byLease: map[cairn.Writer]map[string]struct{}{}, etcd: map[cairn.Writer]clientv3.LeaseID{}}
}

// setLease records the etcd lease of w's record.
func (c *claimSet) setLease(w cairn.Writer, id clientv3.LeaseID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.etcd[w] = id
}

// leaseOf returns the etcd lease of w's record, if known.
func (c *claimSet) leaseOf(w cairn.Writer) (clientv3.LeaseID, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.etcd[w]
	return id, ok
}

// forget drops everything remembered of w: its record ended, and every key
// attached to its etcd lease with it.
func (c *claimSet) forget(w cairn.Writer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byLease, w)
	delete(c.etcd, w)
}

func (c *claimSet) add(w cairn.Writer, ks []string) {
	if len(ks) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byLease[w]
	if m == nil {
		m = make(map[string]struct{}, len(ks))
		c.byLease[w] = m
	}
	for _, k := range ks {
		m[k] = struct{}{}
	}
}

// of returns the claim keys of w, sorted.
func (c *claimSet) of(w cairn.Writer) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byLease[w]
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// remove forgets the claim keys ks of w.
func (c *claimSet) remove(w cairn.Writer, ks []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byLease[w]
	for _, k := range ks {
		delete(m, k)
	}
	if len(m) == 0 {
		delete(c.byLease, w)
	}
}

// before returns the leases of thread with a fence lower than fenceRev: once a
// lease of fence fenceRev was current, they never are again.
func (c *claimSet) before(thread string, fenceRev int64) []cairn.Writer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []cairn.Writer
	for w := range c.byLease {
		if w.ThreadID == thread && w.Fence < fenceRev {
			out = append(out, w)
		}
	}
	for w := range c.etcd {
		if w.ThreadID == thread && w.Fence < fenceRev && c.byLease[w] == nil {
			delete(c.etcd, w) // no claims to delete; nothing else to do
		}
	}
	return out
}

// deleteClaims deletes the claims this store holds for w, in batches, and
// forgets those it deleted. It is best effort: a failure is logged, the
// claims it could not delete stay remembered (the lease's next append or its
// release tries again), and they end with the lease anyway. Each batch has
// time of its own, so that it also runs after the caller's context ended.
func (s *Store) deleteClaims(ctx context.Context, w cairn.Writer) {
	s.deleteClaimKeys(ctx, w, s.claims.of(w))
}

// deleteClaimKeys deletes the claim keys ks of w as deleteClaims does, in
// batches of deleteBatch, claimParallel batches at a time.
func (s *Store) deleteClaimKeys(ctx context.Context, w cairn.Writer, ks []string) {
	if len(ks) == 0 {
		return
	}
	n := (len(ks) + deleteBatch - 1) / deleteBatch
	err := forEach(context.WithoutCancel(ctx), n, claimParallel, func(ctx context.Context, i int) error {
		batch := ks[i*deleteBatch : min((i+1)*deleteBatch, len(ks))]
		ops := make([]clientv3.Op, len(batch))
		for j, k := range batch {
			ops[j] = clientv3.OpDelete(k)
		}
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		if _, _, err := s.commit(cctx, nil, ops, nil); err != nil {
			return err
		}
		s.claims.remove(w, batch)
		return nil
	})
	if err != nil {
		s.log.Warn("etcdstore: delete of claims failed; they end with the lease", "thread", w.ThreadID, "fence", w.Fence, "claims", len(ks), "err", err)
	}
}

// dropSuperseded deletes the claims this store holds for leases of thread
// older than fenceRev, which can never be current again.
func (s *Store) dropSuperseded(ctx context.Context, thread string, fenceRev int64) {
	for _, w := range s.claims.before(thread, fenceRev) {
		s.deleteClaims(ctx, w)
		s.claims.forget(w)
	}
}

// scanAt reads a range at revision *rev page by page, pinning *rev at the
// revision of the first read when it is 0.
func (s *Store) scanAt(ctx context.Context, rev *int64, prefix []byte, fn func(kv *mvccpb.KeyValue) error) error {
	start, end := string(prefix), string(keys.PrefixEnd(prefix))
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(scanPage)}
		if *rev != 0 {
			opts = append(opts, clientv3.WithRev(*rev))
		}
		resp, err := s.client.Get(ctx, start, opts...)
		if err != nil {
			return err
		}
		if *rev == 0 {
			*rev = resp.Header.Revision
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

// sortedRecords returns recs sorted by key, one record a key (the first).
func sortedRecords(recs []cairn.GCRecord) []cairn.GCRecord {
	out := slices.Clone(recs)
	slices.SortStableFunc(out, func(a, b cairn.GCRecord) int { return strings.Compare(a.Key, b.Key) })
	return slices.CompactFunc(out, func(a, b cairn.GCRecord) bool { return a.Key == b.Key })
}
