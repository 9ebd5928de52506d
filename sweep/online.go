package sweep

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

// hooks are called between the steps of the online sweep. They exist for the
// package's tests, which use them to run a capture at each point where it
// could interleave with a sweep.
type hooks struct {
	afterRead   func(ctx context.Context, view cairn.BlobGCView)
	afterMark   func(ctx context.Context, marked []cairn.GCRecord)
	afterBegin  func(ctx context.Context, moved []cairn.GCRecord)
	afterDelete func(ctx context.Context, res bucket.DeleteResult, err error)
}

// target is one key the online sweep will delete: a candidate it moves to
// GCDeleting first, or a key already in GCDeleting that an earlier run left
// unsettled.
type target struct {
	rec  cairn.GCRecord
	size int64
}

// runOnline is the sweep under the online protocol (see the package doc):
//
//  1. now and the cutoff, then the listing (as the plain sweep);
//  2. one read of references, live claims and GC records at one point in
//     time after the listing;
//  3. records of keys that are referenced, claimed or no longer listed are
//     dropped; unreferenced, unclaimed listed keys without a record are
//     marked with Since = now;
//  4. when OlderThan is zero the keys just marked are deletable at once, but
//     only on the strength of a read taken after their mark, so the read is
//     repeated;
//  5. each batch: BeforeDelete, then candidates to GCDeleting (a claim since
//     the read aborts that key), then one S3 DeleteObjects for those keys and
//     for the keys earlier runs left in GCDeleting, then each key's record is
//     settled by the bucket's answer: gone on success, back to candidate on a
//     refusal, left in GCDeleting when the answer is unknown.
//
// A dry run does the listing and the read and writes nothing.
//
// With Options.Incremental, a run whose source names every possible
// candidate lists nothing (runIncremental); a listing run syncs the source
// before it lists, and once its marks are written tells the source it listed
// and settles the source's candidates.
func (s *sweeper) runOnline(ctx context.Context) error {
	inc := s.incremental()
	if inc == nil {
		return s.runListing(ctx, nil, 0)
	}
	if inc.Complete() && !s.opts.List {
		// Its read syncs the source, and lists instead if the set is no
		// longer complete then.
		return s.runIncremental(ctx, inc)
	}
	rev, err := inc.Sync(ctx)
	if err != nil {
		s.begin(ctx, "online")
		s.log.ErrorContext(ctx, "sweep aborted: bringing the mirror up to date failed, nothing deleted", "phase", "references", "error", err)
		return wrap(err, "sweep: sync the references (nothing deleted)")
	}
	if inc.Complete() && !s.opts.List {
		// A new mirror's file said so only once it was read.
		return s.runIncremental(ctx, inc)
	}
	return s.runListing(ctx, inc, rev)
}

// runListing is the online sweep with a listing of the bucket. When inc is
// set, rev is a revision the source reached before the listing began.
func (s *sweeper) runListing(ctx context.Context, inc Incremental, rev int64) error {
	rep := s.rep
	cands, err := s.startAndList(ctx, "online")
	if err != nil {
		return err
	}

	t := time.Now()
	view, err := s.readGC(ctx, cands)
	rep.ReferencesDuration = time.Since(t)
	if err != nil {
		s.log.ErrorContext(ctx, "sweep aborted: reading references and claims failed, nothing deleted", "phase", "references", "error", err)
		return err
	}
	s.log.InfoContext(ctx, "references read", "phase", "references", "references", rep.References,
		"referenced", rep.Referenced, "claimed", len(view.Claimed), "records", len(view.Records),
		"duration", rep.ReferencesDuration.String())
	if h := s.opts.hooks; h != nil && h.afterRead != nil {
		h.afterRead(ctx, view)
	}

	targets, drop, mark := s.classify(cands, &view)
	return s.decide(ctx, cands, targets, drop, mark, func() {
		if inc == nil {
			return
		}
		// Every key that became garbage by rev was listed, and is now
		// referenced, claimed or recorded; later ones are the source's.
		if err := inc.Settle(inc.Candidates(), rev); err != nil {
			s.log.WarnContext(ctx, "the mirror did not record the settled candidates; the next run looks at them again", "error", err)
		}
		if err := inc.Listed(rev); err != nil {
			s.log.WarnContext(ctx, "the mirror did not record the listing; the next run lists again", "error", err)
		}
	})
}

// begin takes now and the cutoff and logs the start; every run begins with
// it.
func (s *sweeper) begin(ctx context.Context, protocol string) {
	rep := s.rep
	rep.DryRun = s.opts.DryRun
	rep.Online = protocol != "upstream"
	rep.Incremental = protocol == "incremental"
	rep.Now = s.opts.Now()
	rep.Cutoff = rep.Now.Add(-s.opts.OlderThan)
	s.log.InfoContext(ctx, "sweep started", "phase", "start", "older_than", s.opts.OlderThan.String(),
		"now", rep.Now, "cutoff", rep.Cutoff, "dry_run", s.opts.DryRun, "max_deletes", s.opts.MaxDeletes, "protocol", protocol)
}

// decide writes what one read decided (drops, then marks; with OlderThan
// zero, the marked keys still unreferenced at a second read become targets),
// calls marked once the marks are written (never in a dry run), and deletes
// the targets. A dry run writes nothing and reports what the real run would
// do. An incremental run's new targets get the HEAD requests its first ones
// got.
func (s *sweeper) decide(ctx context.Context, cands []candidate, targets []target, drop []cairn.GCRecord, mark []string, marked func()) error {
	rep := s.rep
	fresh := func(ts []target) ([]target, error) {
		if !rep.Incremental {
			return ts, nil
		}
		kept, gone, err := s.head(ctx, ts)
		if err != nil {
			return nil, err
		}
		if !s.opts.DryRun {
			if err := s.col.DropBlobRecords(ctx, gone); err != nil {
				return nil, err
			}
		}
		rep.Dropped += len(gone)
		return kept, nil
	}
	if !s.opts.DryRun {
		if err := s.col.DropBlobRecords(ctx, drop); err != nil {
			return s.abort(ctx, "dropping stale GC records", err)
		}
		rep.Dropped += len(drop)
		recs, err := s.col.MarkBlobs(ctx, mark, float64(rep.Now.UnixMilli()))
		if err != nil {
			return s.abort(ctx, "marking candidates", err)
		}
		rep.Marked = len(recs)
		if h := s.opts.hooks; h != nil && h.afterMark != nil {
			h.afterMark(ctx, recs)
		}
		marked()
		if s.opts.OlderThan == 0 && len(recs) > 0 {
			ts, err := s.confirm(ctx, cands, recs)
			if err == nil {
				ts, err = fresh(ts)
			}
			if err != nil {
				return s.abort(ctx, "reading references after marking", err)
			}
			targets = append(targets, ts...)
		}
	} else {
		// What the real run would drop and mark.
		rep.Dropped, rep.Marked = rep.Dropped+len(drop), len(mark)
	}
	if s.opts.DryRun && s.opts.OlderThan == 0 {
		// What the real run would mark and then delete.
		var ts []target
		for _, k := range mark {
			if c := find(cands, k); c != nil && !c.young {
				ts = append(ts, target{rec: cairn.GCRecord{Key: k, State: cairn.GCCandidate}, size: c.size})
			}
		}
		ts, err := fresh(ts)
		if err != nil {
			return s.abort(ctx, "reading the candidates' sizes and upload times", err)
		}
		targets = append(targets, ts...)
	}
	slices.SortFunc(targets, func(a, b target) int { return strings.Compare(a.rec.Key, b.rec.Key) })

	return s.finish(ctx, func() error { return s.deleteOnline(ctx, targets) })
}

// abort logs and wraps an error of the store that stops the sweep before its
// deletes.
func (s *sweeper) abort(ctx context.Context, what string, err error) error {
	s.log.ErrorContext(ctx, "sweep aborted: "+what+" failed, nothing deleted", "phase", "mark", "error", err)
	return wrap(err, "sweep: %s (nothing deleted)", what)
}

// readGC reads references, claims and records, flags the listed keys that are
// referenced, and counts the old enough ones in the report (young keys are
// counted as Young already, as in the plain sweep).
func (s *sweeper) readGC(ctx context.Context, cands []candidate) (cairn.BlobGCView, error) {
	view, err := s.col.ReadBlobGC(ctx, func(r cairn.BlobReference) error {
		s.rep.References++
		if s.released(r) {
			return nil
		}
		if c := find(cands, r.Key); c != nil && !c.referenced {
			c.referenced = true
			if !c.young {
				s.rep.Referenced++
			}
		}
		return nil
	})
	if err != nil {
		return view, wrap(err, "sweep: read references and claims (nothing deleted)")
	}
	return view, nil
}

// classify decides, from one read, what happens to each key: targets are the
// keys to delete in this run (eligible candidates and unsettled deletes),
// drop the records that no longer describe garbage, mark the listed keys
// found unreferenced and unclaimed for the first time.
func (s *sweeper) classify(cands []candidate, view *cairn.BlobGCView) (targets []target, drop []cairn.GCRecord, mark []string) {
	rep := s.rep
	nowMs := float64(rep.Now.UnixMilli())
	graceMs := float64(s.opts.OlderThan.Milliseconds())
	for _, r := range view.Records {
		c := find(cands, r.Key)
		switch {
		case r.State == cairn.GCDeleting:
			// An earlier run did not learn whether its delete worked. The
			// key stays gone for writers until a delete is known to have
			// succeeded; deleting again is harmless.
			var size int64
			if c != nil {
				size = c.size
			}
			targets = append(targets, target{rec: r, size: size})
			rep.Unsettled++
		case r.State != cairn.GCCandidate:
			// A state this sweeper does not know: leave it alone.
		case c == nil || c.referenced || view.IsClaimed(r.Key):
			drop = append(drop, r)
		case !c.young && nowMs-r.Since >= graceMs:
			targets = append(targets, target{rec: r, size: c.size})
		default:
			rep.Waiting++
		}
	}
	for i := range cands {
		c := &cands[i]
		switch {
		case c.referenced:
		case view.IsClaimed(c.key):
			rep.Claimed++
		default:
			if _, ok := view.Record(c.key); !ok {
				mark = append(mark, c.key)
			}
		}
	}
	return targets, drop, mark
}

// confirm reads references and claims again, after the keys of marked got
// their records, and returns those that are still unreferenced, unclaimed,
// old enough by upload time and unchanged.
func (s *sweeper) confirm(ctx context.Context, cands []candidate, marked []cairn.GCRecord) ([]target, error) {
	var view cairn.BlobGCView
	var referenced func(key string) bool
	if inc := s.opts.Incremental; s.rep.Incremental {
		// The source's read, and its counts instead of every reference.
		v, _, err := inc.ReadGC(ctx)
		if err != nil {
			return nil, err
		}
		view, referenced = v, func(k string) bool { return inc.Count(k) > 0 }
	} else {
		seen := map[string]bool{}
		v, err := s.col.ReadBlobGC(ctx, func(r cairn.BlobReference) error {
			if _, ok := slices.BinarySearchFunc(marked, r.Key, recordKey); ok {
				seen[r.Key] = true
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		view, referenced = v, func(k string) bool { return seen[k] }
	}
	var out []target
	for _, m := range marked {
		c := find(cands, m.Key)
		cur, ok := view.Record(m.Key)
		if c == nil || c.young || referenced(m.Key) || view.IsClaimed(m.Key) || !ok || cur.Version != m.Version {
			continue
		}
		out = append(out, target{rec: cur, size: c.size})
	}
	return out, nil
}

func recordKey(r cairn.GCRecord, k string) int { return strings.Compare(r.Key, k) }

// find returns the listed key k, or nil.
func find(cands []candidate, k string) *candidate {
	i, ok := slices.BinarySearchFunc(cands, k, func(c candidate, k string) int { return strings.Compare(c.key, k) })
	if !ok {
		return nil
	}
	return &cands[i]
}

// deleteOnline deletes the targets in batches, each through the protocol.
func (s *sweeper) deleteOnline(ctx context.Context, targets []target) error {
	rep := s.rep
	rep.Candidates = len(targets)
	if s.opts.MaxDeletes > 0 && len(targets) > s.opts.MaxDeletes {
		targets = s.capDeletes(targets)
		s.log.WarnContext(ctx, "more candidates than MaxDeletes; the rest are skipped", "phase", "delete",
			"candidates", rep.Candidates, "max_deletes", s.opts.MaxDeletes, "skipped", len(rep.Skipped))
	}
	pending := func(ts []target) {
		for _, t := range ts {
			rep.Pending = append(rep.Pending, t.rec.Key)
		}
	}
	var stopErr error
	for start := 0; start < len(targets); start += s.opts.BatchSize {
		batch := targets[start:min(start+s.opts.BatchSize, len(targets))]
		keys := make([]string, len(batch))
		for i, t := range batch {
			keys[i] = t.rec.Key
		}
		if err := ctx.Err(); err != nil {
			pending(targets[start:])
			stopErr = err
			break
		}
		if s.opts.BeforeDelete != nil {
			if err := s.opts.BeforeDelete(ctx, keys); err != nil {
				pending(targets[start:])
				stopErr = fmt.Errorf("%w: BeforeDelete refused a batch of %d keys: %w", ErrStopped, len(keys), err)
				s.log.WarnContext(ctx, "BeforeDelete stopped the sweep", "phase", "delete", "batch", rep.Batches, "keys", len(keys), "error", err)
				break
			}
		}
		rep.Batches++
		if s.opts.DryRun {
			for _, t := range batch {
				rep.Deleted = append(rep.Deleted, t.rec.Key)
				rep.BytesFreed += t.size
			}
			s.log.InfoContext(ctx, "batch not deleted: dry run", "phase", "delete", "batch", rep.Batches, "keys", len(keys))
			continue
		}
		if err := s.deleteBatch(ctx, batch); err != nil {
			pending(targets[start+len(batch):])
			stopErr = err
			break
		}
	}
	if len(rep.Failed) > 0 {
		incomplete := fmt.Errorf("%w: %d of %d keys; the first %v", ErrIncomplete, len(rep.Failed), rep.Candidates, rep.Failed[0])
		return errors.Join(stopErr, incomplete)
	}
	return stopErr
}

// capDeletes keeps MaxDeletes of the targets, in key order, and reports the
// others as Skipped. The keys that earlier runs left in GCDeleting are kept
// first: writers wait for those until a run settles them, so a cap must not
// put them off behind candidates that block no one.
func (s *sweeper) capDeletes(targets []target) []target {
	keep := make([]bool, len(targets))
	n := 0
	for _, unsettled := range []bool{true, false} {
		for i, t := range targets {
			if n < s.opts.MaxDeletes && !keep[i] && (t.rec.State == cairn.GCDeleting) == unsettled {
				keep[i] = true
				n++
			}
		}
	}
	kept := make([]target, 0, n)
	for i, t := range targets {
		if keep[i] {
			kept = append(kept, t)
		} else {
			s.rep.Skipped = append(s.rep.Skipped, t.rec.Key)
		}
	}
	return kept
}

// deleteBatch moves the batch's candidates to GCDeleting, deletes the bytes
// of those and of the batch's unsettled keys, and settles each record by the
// bucket's answer. It returns an error that stops the sweep: the store
// refused the transitions, or the delete request failed as a whole (then the
// batch's records stay in GCDeleting, for a later run to settle).
func (s *sweeper) deleteBatch(ctx context.Context, batch []target) error {
	rep := s.rep
	var fresh []cairn.GCRecord
	sizes := make(map[string]int64, len(batch))
	var ready []cairn.GCRecord // records in GCDeleting whose bytes this batch deletes
	for _, t := range batch {
		sizes[t.rec.Key] = t.size
		if t.rec.State == cairn.GCDeleting {
			ready = append(ready, t.rec)
		} else {
			fresh = append(fresh, t.rec)
		}
	}
	began := time.Now()
	moved, err := s.col.BeginBlobDeletes(ctx, fresh)
	if err != nil {
		for _, t := range batch {
			rep.Pending = append(rep.Pending, t.rec.Key)
		}
		s.log.ErrorContext(ctx, "the store refused to start the deletes; sweep stopped", "phase", "delete", "error", err)
		return fmt.Errorf("%w: start the deletes of %d keys: %w", ErrStopped, len(fresh), err)
	}
	if h := s.opts.hooks; h != nil && h.afterBegin != nil {
		h.afterBegin(ctx, moved)
	}
	for _, r := range fresh {
		if _, ok := slices.BinarySearchFunc(moved, r.Key, recordKey); !ok {
			// Claimed, or changed, since the read: the key lives on.
			rep.Aborted = append(rep.Aborted, r.Key)
		}
	}
	ready = append(ready, moved...)
	if len(ready) == 0 {
		return nil
	}
	slices.SortFunc(ready, func(a, b cairn.GCRecord) int { return strings.Compare(a.Key, b.Key) })
	keys := make([]string, len(ready))
	for i, r := range ready {
		keys[i] = r.Key
	}
	dctx := ctx
	if w := s.opts.DeleteWithin; w > 0 {
		if late := time.Since(began); late >= w {
			// Paused, or slow: another sweeper may hold the lock by now
			// and have settled these keys. Leave them to it.
			rep.Pending = append(rep.Pending, keys...)
			s.log.ErrorContext(ctx, "the batch's delete did not start within its bound after the keys moved to deleting; not sent, a later run settles them; sweep stopped",
				"phase", "delete", "batch", rep.Batches, "keys", len(keys), "late", late.String(), "bound", w.String())
			return fmt.Errorf("%w: the delete of %d keys would start %v after they moved to deleting, past the bound of %v", ErrStopped, len(keys), late.Round(time.Millisecond), w)
		}
		// The deadline also fences the request: an S3 bucket writes none
		// of it to the network past the bound, even when this process was
		// paused between the check above and the send.
		var cancel context.CancelFunc
		dctx, cancel = bucket.WithSendDeadline(ctx, began.Add(w))
		defer cancel()
	}
	res, derr := s.blobs.Delete(dctx, keys)
	if h := s.opts.hooks; h != nil && h.afterDelete != nil {
		h.afterDelete(ctx, res, derr)
	}
	if derr != nil && !errors.Is(derr, bucket.ErrPartialDelete) {
		// The answer is unknown: the records stay in GCDeleting and writers
		// keep treating the bytes as gone until a later run settles them.
		rep.Pending = append(rep.Pending, keys...)
		s.log.ErrorContext(ctx, "delete request failed; its keys stay in the deleting state for the next run; sweep stopped",
			"phase", "delete", "batch", rep.Batches, "keys", len(keys), "error", derr)
		return fmt.Errorf("%w: a delete request failed: %w", ErrStopped, derr)
	}
	outcome := make(map[string]error, len(keys))
	for _, k := range res.Deleted {
		outcome[k] = nil
	}
	for _, f := range res.Failed {
		outcome[f.Key] = f.Err
		if f.Err == nil {
			outcome[f.Key] = errors.New("the bucket reported a failure without a reason")
		}
	}
	var gone, kept, unknown []cairn.GCRecord
	for _, r := range ready {
		err, seen := outcome[r.Key]
		switch {
		case !seen:
			unknown = append(unknown, r)
			rep.Failed = append(rep.Failed, bucket.KeyError{Key: r.Key, Err: errors.New("the bucket did not report this key")})
		case err == nil:
			gone = append(gone, r)
			rep.Deleted = append(rep.Deleted, r.Key)
			rep.BytesFreed += sizes[r.Key]
		default:
			kept = append(kept, r)
			rep.Failed = append(rep.Failed, bucket.KeyError{Key: r.Key, Err: err})
			s.log.WarnContext(ctx, "blob not deleted", "phase", "delete", "blob", r.Key, "error", err)
		}
	}
	s.log.InfoContext(ctx, "batch deleted", "phase", "delete", "batch", rep.Batches, "keys", len(keys),
		"deleted", len(gone), "failed", len(kept)+len(unknown))
	// Settle what is known. A failure here leaves records in GCDeleting: the
	// keys stay unusable for writers until the next run, never unsafe.
	if err := s.col.EndBlobDeletes(ctx, gone, true); err != nil {
		return fmt.Errorf("%w: record %d deletes: %w", ErrStopped, len(gone), err)
	}
	if err := s.col.EndBlobDeletes(ctx, kept, false); err != nil {
		return fmt.Errorf("%w: record %d refused deletes: %w", ErrStopped, len(kept), err)
	}
	return nil
}
