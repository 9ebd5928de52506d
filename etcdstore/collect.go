package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// ReadBlobGC implements cairn.BlobCollector. Everything is read at one etcd
// revision R, that of its first read: the claims (a paged range of P q), the
// GC records (a paged range of P g), the writer records of the threads the
// claims name, and the blob references, walked shard by shard as
// WalkBlobReferences does, calling fn for each. A claim is live when its
// lease's writer record at R is still the lease's (WriterRecord.Holds): no
// clock is read. A lease whose stored expiry has passed but that nobody took
// over can still write, so its claims still protect. A claim key or record that does
// not decode fails the read (the sweep must not decide on what it cannot
// read); Verify reports them. If R is compacted before the read ends, it
// returns an error wrapping rpctypes.ErrCompacted.
func (s *Store) ReadBlobGC(ctx context.Context, fn func(cairn.BlobReference) error) (cairn.BlobGCView, error) {
	var rev int64
	view, err := s.readGCState(ctx, &rev)
	if err != nil {
		return view, err
	}
	if err := s.walkRefs(ctx, rev, true, fn); err != nil {
		return cairn.BlobGCView{}, err
	}
	return view, nil
}

// readGCState reads the live claims and the GC records at one revision,
// pinning *rev at that of its first read.
func (s *Store) readGCState(ctx context.Context, rev *int64) (cairn.BlobGCView, error) {
	if err := ctx.Err(); err != nil {
		return cairn.BlobGCView{}, err
	}
	var claimKVs []*mvccpb.KeyValue
	if err := s.scanAt(ctx, rev, s.layout.Claims(), func(kv *mvccpb.KeyValue) error {
		if _, err := s.layout.DecodeClaim(kv.Key); err != nil {
			return corrupt("claim key", kv.Key, err)
		}
		claimKVs = append(claimKVs, kv)
		return nil
	}); err != nil {
		return cairn.BlobGCView{}, fmt.Errorf("etcdstore: read claims at revision %d: %w", *rev, err)
	}
	var view cairn.BlobGCView
	if err := s.scanAt(ctx, rev, s.layout.GCRecords(), func(kv *mvccpb.KeyValue) error {
		rec, err := s.parseGC(kv)
		if err != nil {
			return err
		}
		view.Records = append(view.Records, rec)
		return nil
	}); err != nil {
		return cairn.BlobGCView{}, fmt.Errorf("etcdstore: read GC records at revision %d: %w", *rev, err)
	}
	lv, err := s.classify(ctx, *rev, claimKVs)
	if err != nil {
		return cairn.BlobGCView{}, fmt.Errorf("etcdstore: read claimants at revision %d: %w", *rev, err)
	}
	// Claim keys sort by blob, and blobs sort like their keys.
	for _, kv := range claimKVs {
		ck, _ := s.layout.DecodeClaim(kv.Key)
		k := ck.Blob.Key()
		if lv.live[k] && (len(view.Claimed) == 0 || view.Claimed[len(view.Claimed)-1] != k) {
			view.Claimed = append(view.Claimed, k)
		}
	}
	return view, nil
}

// MarkBlobs implements cairn.BlobCollector, in batches of at most recordBatch
// keys, one transaction a batch:
//
//	If   for each key: CreateRevision(P g B) = 0             -- no record
//	                   CreateRevision(P q B …) = 0 (range)    -- no claim at all
//	Then for each key: Put(P g B, candidate + since)
//	Else for each key: Get(P g B), Get(P q B …)
//
// When a batch fails, its Else reads settle each key: a key with a record or
// a live claim leaves the batch; the dead claims of a key that has no live
// one are reaped (fence.IfSuperseded); the rest is sent again. The records
// created have the version of the transaction that created them. A batch
// whose answer was lost is sent again; if the lost attempt had applied, its
// records are not reported (the next ReadBlobGC shows them).
func (s *Store) MarkBlobs(ctx context.Context, blobKeys []string, since float64) (_ []cairn.GCRecord, err error) {
	defer definite("markBlobs", &err)
	if err := cairn.CheckCollectorKeys(blobKeys); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	blobs := blobsOf(cairn.SortedKeys(blobKeys))
	n := s.batchOf(recordBatch, 2, 0)
	parts := make([][]cairn.GCRecord, (len(blobs)+n-1)/n)
	err = forEach(ctx, len(parts), collectParallel, func(ctx context.Context, i int) (err error) {
		parts[i], err = s.markBatch(ctx, blobs[i*n:min((i+1)*n, len(blobs))], since)
		return err
	})
	if err != nil {
		return nil, err
	}
	return slices.Concat(parts...), nil
}

// collectParallel is how many batches of a sweeper's step (mark, begin,
// settle, drop) one call sends at once. The batches touch disjoint keys, and
// etcd commits concurrent requests together, so a sweep of many keys takes a
// fraction of the time of one batch after the other.
const collectParallel = 16

func (s *Store) markBatch(ctx context.Context, batch []keys.Blob, since float64) ([]cairn.GCRecord, error) {
	value := gcValue(gcCandidateByte, since)
	for attempt := 0; len(batch) > 0; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
		cmps := s.withGuards(nil)
		var then, els []clientv3.Op
		for _, b := range batch {
			g, q := string(s.layout.GCRecord(b)), s.layout.BlobClaims(b)
			cmps = append(cmps,
				clientv3.Compare(clientv3.CreateRevision(g), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(string(q)), "=", 0).WithPrefix())
			then = append(then, clientv3.OpPut(g, value))
			els = append(els, clientv3.OpGet(g), clientv3.OpGet(string(q), clientv3.WithPrefix()))
		}
		resp, _, err := s.commit(ctx, cmps, then, els)
		if err != nil {
			return nil, err
		}
		if resp.Succeeded {
			out := make([]cairn.GCRecord, len(batch))
			for i, b := range batch {
				out[i] = cairn.GCRecord{Key: b.Key(), State: cairn.GCCandidate, Since: since, Version: resp.Header.Revision}
			}
			return out, nil
		}
		if err := s.guardErr(ctx); err != nil {
			return nil, err
		}
		// Which keys qualify, as of the failed comparisons?
		r := resp.Responses
		var claimed []*mvccpb.KeyValue
		var unrecorded []keys.Blob
		for i, b := range batch {
			if first(getResp(r[2*i])) != nil {
				continue // a record exists
			}
			claimed = append(claimed, getResp(r[2*i+1]).Kvs...)
			unrecorded = append(unrecorded, b)
		}
		lv, err := s.classify(ctx, resp.Header.Revision, claimed)
		if err != nil {
			return nil, err
		}
		if err := s.reap(ctx, deadOf(lv)); err != nil {
			return nil, err
		}
		batch = batch[:0:0]
		for _, b := range unrecorded {
			if !lv.live[b.Key()] {
				batch = append(batch, b)
			}
		}
	}
	return nil, nil
}

// deadOf returns the dead claims of blobs without a live one: those worth
// reaping now, because they alone hold the key back.
func deadOf(lv liveness) []claim {
	var out []claim
	for _, c := range lv.dead {
		if !lv.live[c.ck.Blob.Key()] {
			out = append(out, c)
		}
	}
	return out
}

// recordMove is one kind of compare-and-swap on GC records.
type recordMove struct {
	op   string
	from byte // the state the record must be in
	to   byte // the state it moves to; 0 deletes the record
	// unclaimed also requires that the key has no claim at all (a range
	// comparison); dead claims are reaped when they alone fail it.
	unclaimed bool
}

// BeginBlobDeletes implements cairn.BlobCollector, in batches of at most
// recordBatch records (fewer when 3 comparisons a record would not fit), one
// transaction a batch:
//
//	If   for each record: ModRevision(P g B) = Version
//	                      Value(P g B) = candidate + Since
//	                      CreateRevision(P q B …) = 0 (range)   -- no claim at all
//	Then for each record: Put(P g B, deleting + Since)
//	Else for each record: Get(P g B), Get(P q B …)
//
// When a batch fails, a record that changed leaves it (one of the same
// version whose Since differs is compared with its stored Since, which it
// keeps), and so does a record whose key has a live claim; the dead claims of
// the others are reaped, and the batch is sent again. The moved records are
// returned with the version of the transaction that moved them. When an
// attempt's answer was lost, a record found deleting with the same Since is
// reported as moved: whoever moved it, its bytes may be deleted.
func (s *Store) BeginBlobDeletes(ctx context.Context, recs []cairn.GCRecord) (_ []cairn.GCRecord, err error) {
	defer definite("beginBlobDeletes", &err)
	return s.moveRecords(ctx, recs, recordMove{op: "begin blob deletes", from: gcCandidateByte, to: gcDeletingByte, unclaimed: true})
}

// EndBlobDeletes implements cairn.BlobCollector, in batches of at most
// recordBatch records, one transaction a batch:
//
//	If   for each record: ModRevision(P g B) = Version
//	                      Value(P g B) = deleting + Since
//	Then for each record: Delete(P g B)                      -- deleted
//	                  or  Put(P g B, candidate + Since)      -- not deleted
//	Else for each record: Get(P g B)
//
// and again without the records that changed.
func (s *Store) EndBlobDeletes(ctx context.Context, recs []cairn.GCRecord, deleted bool) (err error) {
	defer definite("endBlobDeletes", &err)
	m := recordMove{op: "end blob deletes", from: gcDeletingByte, to: gcCandidateByte}
	if deleted {
		m.to = 0
	}
	_, err = s.moveRecords(ctx, recs, m)
	return err
}

// DropBlobRecords implements cairn.BlobCollector, in batches of at most
// recordBatch records, one transaction a batch:
//
//	If   for each record: ModRevision(P g B) = Version
//	                      Value(P g B) = candidate + Since
//	Then for each record: Delete(P g B)
//	Else for each record: Get(P g B)
//
// and again without the records that changed.
func (s *Store) DropBlobRecords(ctx context.Context, recs []cairn.GCRecord) (err error) {
	defer definite("dropBlobRecords", &err)
	_, err = s.moveRecords(ctx, recs, recordMove{op: "drop blob records", from: gcCandidateByte})
	return err
}

func (s *Store) moveRecords(ctx context.Context, recs []cairn.GCRecord, m recordMove) ([]cairn.GCRecord, error) {
	if err := cairn.CheckGCRecords(recs); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	recs = sortedRecords(recs)
	per := 2
	if m.unclaimed {
		per = 3
	}
	n := s.batchOf(recordBatch, per, 0)
	parts := make([][]cairn.GCRecord, (len(recs)+n-1)/n)
	err := forEach(ctx, len(parts), collectParallel, func(ctx context.Context, i int) (err error) {
		parts[i], err = s.moveBatch(ctx, recs[i*n:min((i+1)*n, len(recs))], m)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("etcdstore: %s: %w", m.op, err)
	}
	return slices.Concat(parts...), nil
}

func (s *Store) moveBatch(ctx context.Context, batch []cairn.GCRecord, m recordMove) ([]cairn.GCRecord, error) {
	type item struct {
		b     keys.Blob
		rec   cairn.GCRecord
		g     string
		since float64 // the stored Since, once read
	}
	items := make([]item, len(batch))
	for i, r := range batch {
		b, _ := keys.ParseBlob(r.Key)
		items[i] = item{b: b, rec: r, g: string(s.layout.GCRecord(b)), since: r.Since}
	}
	var out []cairn.GCRecord
	unsure := false
	for attempt := 0; len(items) > 0; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
		cmps := s.withGuards(nil)
		var then, els []clientv3.Op
		for _, it := range items {
			cmps = append(cmps,
				clientv3.Compare(clientv3.ModRevision(it.g), "=", it.rec.Version),
				clientv3.Compare(clientv3.Value(it.g), "=", gcValue(m.from, it.since)))
			if m.to == 0 {
				then = append(then, clientv3.OpDelete(it.g))
			} else {
				then = append(then, clientv3.OpPut(it.g, gcValue(m.to, it.since)))
			}
			els = append(els, clientv3.OpGet(it.g))
			if m.unclaimed {
				q := string(s.layout.BlobClaims(it.b))
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(q), "=", 0).WithPrefix())
				els = append(els, clientv3.OpGet(q, clientv3.WithPrefix()))
			}
		}
		resp, maybe, err := s.commit(ctx, cmps, then, els)
		unsure = unsure || maybe
		if err != nil {
			return nil, err
		}
		if resp.Succeeded {
			if m.to != 0 {
				for _, it := range items {
					st, _ := gcState(m.to)
					out = append(out, cairn.GCRecord{Key: it.rec.Key, State: st, Since: it.since, Version: resp.Header.Revision})
				}
			}
			return sortedRecords(out), nil
		}
		if err := s.guardErr(ctx); err != nil {
			return nil, err
		}
		r := resp.Responses
		step := 1
		if m.unclaimed {
			step = 2
		}
		var keep []item
		var claimed []*mvccpb.KeyValue
		for i, it := range items {
			kv := first(getResp(r[step*i]))
			if kv == nil {
				continue
			}
			cur, err := s.parseGC(kv)
			if err != nil {
				return nil, err
			}
			if kv.ModRevision != it.rec.Version || gcStateByte(cur.State) != m.from {
				if unsure && m.to != 0 && gcStateByte(cur.State) == m.to && cur.Since == it.since {
					// Most likely moved by an attempt whose answer was
					// lost. Reporting it is safe whoever moved it: it is in
					// the target state at that version.
					out = append(out, cur)
				}
				continue
			}
			it.since = cur.Since
			keep = append(keep, it)
			if m.unclaimed {
				claimed = append(claimed, getResp(r[step*i+1]).Kvs...)
			}
		}
		if m.unclaimed {
			lv, err := s.classify(ctx, resp.Header.Revision, claimed)
			if err != nil {
				return nil, err
			}
			if err := s.reap(ctx, deadOf(lv)); err != nil {
				return nil, err
			}
			kept := keep[:0]
			for _, it := range keep {
				if !lv.live[it.rec.Key] {
					kept = append(kept, it)
				}
			}
			keep = kept
		}
		items = keep
	}
	return sortedRecords(out), nil
}

// Mirrored is a store whose online sweep reads the references from a Mirror
// instead of walking them (docs/design.md, "The incremental sweep"). Every
// method but ReadBlobGC is the Store's.
type Mirrored struct {
	*Store
	m *Mirror
}

// WithMirror returns s with its ReadBlobGC answered from m, a mirror of s
// (Store.OpenMirror). The caller keeps m and closes it.
func (s *Store) WithMirror(m *Mirror) *Mirrored { return &Mirrored{Store: s, m: m} }

// Mirror returns the mirror that answers ReadBlobGC.
func (x *Mirrored) Mirror() *Mirror { return x.m }

// ReadBlobGC implements cairn.BlobCollector as Store.ReadBlobGC does, but
// for the references: it reads the claims and GC records at revision R, then
// syncs the mirror, which brings it to a revision no older than R, and calls
// fn for each key the mirror counts, with the walk's count. A decision on a
// key therefore rests on references read after its GC record and its mark, as
// the protocol requires (the safety argument is in docs/design.md). Errors:
// Store.ReadBlobGC's for the claims and records, Mirror.Sync's, and ctx's.
func (x *Mirrored) ReadBlobGC(ctx context.Context, fn func(cairn.BlobReference) error) (cairn.BlobGCView, error) {
	view, _, err := x.ReadGC(ctx)
	if err != nil {
		return cairn.BlobGCView{}, err
	}
	if err := x.m.Live(fn); err != nil {
		return cairn.BlobGCView{}, err
	}
	return view, nil
}

// ReadGC is ReadBlobGC without the references: it reads the claims and GC
// records at revision R and syncs the mirror to a revision no older than R,
// so that Count, Candidates and Complete answer for a state after R. It
// returns the view and R. It costs the claims' and records' range reads and
// the watch's events since the last sync, whatever the store holds. Errors:
// Store.ReadBlobGC's for the claims and records, Mirror.Sync's, an error
// matching ErrMirror when the mirror did not reach R, and ctx's.
func (x *Mirrored) ReadGC(ctx context.Context) (cairn.BlobGCView, int64, error) {
	var rev int64
	view, err := x.readGCState(ctx, &rev)
	if err != nil {
		return cairn.BlobGCView{}, 0, err
	}
	var at int64
	if x.m.broken.skipSync {
		at = rev
	} else {
		at, err = x.m.Sync(ctx)
	}
	if err != nil {
		return cairn.BlobGCView{}, 0, err
	}
	if at < rev {
		return cairn.BlobGCView{}, 0, fmt.Errorf("%w: synced to revision %d, older than the GC state's %d", ErrMirror, at, rev)
	}
	return view, rev, nil
}

// Sync brings the mirror to the current revision and returns it
// (Mirror.Sync).
func (x *Mirrored) Sync(ctx context.Context) (int64, error) { return x.m.Sync(ctx) }

// Count returns the mirror's count of references to key.
func (x *Mirrored) Count(key string) int { return x.m.Count(key) }

// Candidates returns the mirror's zeroed keys (Mirror.Zeroed).
func (x *Mirrored) Candidates() []string { return x.m.Zeroed() }

// Complete reports whether the candidates and the GC records name every key
// that can have become garbage (Mirror.Complete).
func (x *Mirrored) Complete() bool { return x.m.Complete() }

// Settle forgets candidates a sweep decided on at revision rev
// (Mirror.Settle). Errors: ErrMirror.
func (x *Mirrored) Settle(keys []string, rev int64) error { return x.m.Settle(keys, rev) }

// Listed records that a sweep which listed the bucket from revision rev on
// wrote its marks (Mirror.SetListed). Errors: ErrMirror.
func (x *Mirrored) Listed(rev int64) error { return x.m.SetListed(rev) }

// ErrMirrorMismatch: the mirror's keys or counts differ from a full walk's
// at the same revision. The mirror must not be trusted: Check discards it,
// and the next Sync rebuilds it.
var ErrMirrorMismatch = errors.New("etcdstore: the mirror differs from the full walk")

// Check is the full run's comparison: it syncs the mirror, walks every
// reference at the revision the mirror reached (reading every root and
// reference chunk from the bucket, as the walk does), and compares keys and
// counts. On a difference it discards the mirror (the next Sync rebuilds it)
// and returns an error matching ErrMirrorMismatch that names the first
// differing keys. Errors: also Sync's and the walk's (one matching
// rpctypes.ErrCompacted when that revision was compacted meanwhile).
func (x *Mirrored) Check(ctx context.Context) error {
	at, err := x.m.Sync(ctx)
	if err != nil {
		return err
	}
	var walk []cairn.BlobReference
	if err := x.walkRefs(ctx, at, true, func(r cairn.BlobReference) error {
		walk = append(walk, r)
		return nil
	}); err != nil {
		return err
	}
	i, n, first := 0, 0, ""
	note := func(k string) {
		if n == 0 {
			first = k
		}
		n++
	}
	_ = x.m.Live(func(r cairn.BlobReference) error {
		for ; i < len(walk) && walk[i].Key < r.Key; i++ {
			note(walk[i].Key)
		}
		if i < len(walk) && walk[i].Key == r.Key {
			if walk[i].References != r.References {
				note(r.Key)
			}
			i++
			return nil
		}
		note(r.Key)
		return nil
	})
	for ; i < len(walk); i++ {
		note(walk[i].Key)
	}
	if n == 0 {
		return nil
	}
	if err := x.m.Discard(); err != nil {
		return errors.Join(fmt.Errorf("%w at revision %d: %d keys differ, the first %s", ErrMirrorMismatch, at, n, first), err)
	}
	return fmt.Errorf("%w at revision %d: %d keys differ, the first %s; the mirror is discarded", ErrMirrorMismatch, at, n, first)
}
