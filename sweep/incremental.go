package sweep

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

// Incremental is a source of references that also names the keys that may
// have become garbage since the last sweep, so that a sweep need not list the
// bucket: etcdstore.Mirrored, a store whose references a local mirror
// follows with an etcd watch. The sweep calls its methods from one goroutine.
type Incremental interface {
	// Sync brings the source to the store's current revision and returns
	// that revision. A listing sweep calls it before it lists.
	Sync(ctx context.Context) (int64, error)
	// ReadGC reads the live claims and the GC records at a revision R, then
	// brings the source to a revision no older than R, and returns the view
	// and R. Count, Candidates and Complete then answer for that state.
	ReadGC(ctx context.Context) (cairn.BlobGCView, int64, error)
	// Count returns the number of references to key.
	Count(key string) int
	// Candidates returns, sorted, the unreferenced keys whose last reference
	// ended, or whose claim ended, since they were last settled.
	Candidates() []string
	// Complete reports whether Candidates and the GC records together name
	// every key that can have become garbage: a listing sweep began after
	// the source last lost track of single changes, and wrote its marks.
	Complete() bool
	// Settle forgets the candidates among keys that a sweep decided on with
	// a read at revision rev; a key that became a candidate again after rev
	// stays.
	Settle(keys []string, rev int64) error
	// Listed records that a sweep which began listing after the source
	// reached rev (Sync's answer) has written its marks.
	Listed(rev int64) error
}

// headWorkers bounds the HEAD requests an incremental run has in flight.
const headWorkers = 32

// incremental returns the Incremental source a run may use instead of a
// listing, or nil: the option is set and the sweep covers one store (the
// other stores' keys are not in its candidates). Options.List is the
// caller's to check.
func (s *sweeper) incremental() Incremental {
	if s.opts.Incremental == nil || len(s.opts.Others) > 0 {
		return nil
	}
	return s.opts.Incremental
}

// runIncremental is the online sweep without a listing (docs/design.md,
// "Candidates without a listing"). Its candidates are the source's and the
// keys with GC records (and, in a dry run, the keys the prune would release);
// each goes through the same steps as in a listing run, so a wrong candidate
// list can only leave garbage: a key is deleted only once its record has been
// marked and moved to deleting by compare-and-swaps on etcd state.
//
// What a listing gave, a HEAD request gives where a decision needs it: before
// a key is moved to deleting (absent: its record is dropped; uploaded within
// OlderThan: it waits; its size for BytesFreed). Keys are marked without one.
// A run with no candidate and no record sends no bucket request at all.
func (s *sweeper) runIncremental(ctx context.Context, inc Incremental) error {
	rep := s.rep
	s.begin(ctx, "incremental")
	t := time.Now()
	view, rev, err := inc.ReadGC(ctx)
	rep.ReferencesDuration = time.Since(t)
	if err != nil {
		s.log.ErrorContext(ctx, "sweep aborted: reading claims, records and the mirror failed, nothing deleted", "phase", "references", "error", err)
		return wrap(err, "sweep: read claims, records and references (nothing deleted)")
	}
	if !inc.Complete() {
		// The source lost track of single changes while it caught up (a
		// compacted watch): only a listing finds what changed meanwhile.
		s.log.WarnContext(ctx, "the mirror's candidates are incomplete after its catch-up; listing the bucket", "phase", "references")
		at, err := inc.Sync(ctx)
		if err != nil {
			return wrap(err, "sweep: sync the references (nothing deleted)")
		}
		return s.runListing(ctx, inc, at)
	}
	if h := s.opts.hooks; h != nil && h.afterRead != nil {
		h.afterRead(ctx, view)
	}
	cands, named := s.incrementalCandidates(inc, &view)
	s.log.InfoContext(ctx, "candidates named without a listing", "phase", "references", "from_mirror", rep.FromMirror,
		"records", len(view.Records), "claimed", len(view.Claimed), "duration", rep.ReferencesDuration.String())
	if len(cands) == 0 {
		// Nothing can have become garbage: no bucket request, no write.
		return s.finish(ctx, func() error { return nil })
	}
	s.hasObjects = true
	if err := s.checkBindings(ctx); err != nil {
		return err
	}
	if s.opts.trustCandidates {
		return s.finish(ctx, func() error { return s.delete(ctx, cands) })
	}
	targets, drop, mark := s.classify(cands, &view)
	targets, gone, err := s.head(ctx, targets)
	if err != nil {
		return s.abort(ctx, "reading the candidates' sizes and upload times", err)
	}
	drop = append(drop, gone...)
	return s.decide(ctx, cands, targets, drop, mark, func() {
		// Settle after the marks: every named key is now referenced,
		// claimed, recorded or absent, each as of rev.
		if err := inc.Settle(named, rev); err != nil {
			s.log.WarnContext(ctx, "the mirror did not record the settled candidates; the next run looks at them again", "error", err)
		}
	})
}

// incrementalCandidates returns the keys of an incremental run, sorted and
// distinct, as candidates flagged referenced by the source's counts, and the
// source's candidates to settle once the run's marks are written.
func (s *sweeper) incrementalCandidates(inc Incremental, view *cairn.BlobGCView) (cands []candidate, named []string) {
	named = inc.Candidates()
	s.rep.FromMirror = len(named)
	ks := slices.Clone(named)
	for _, r := range view.Records {
		ks = append(ks, r.Key)
	}
	if s.opts.DryRun {
		for k := range s.opts.Released {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	ks = slices.Compact(ks)
	for _, k := range ks {
		if !s.swept(k) {
			continue
		}
		n := inc.Count(k)
		referenced := n > 0 && !s.released(cairn.BlobReference{Key: k, References: n})
		if referenced {
			s.rep.Referenced++
		}
		cands = append(cands, candidate{key: k, referenced: referenced})
	}
	return cands, named
}

// swept reports whether key is one the sweep manages: under a swept prefix,
// and under MetaPrefix a body object's key.
func (s *sweeper) swept(key string) bool {
	for _, p := range s.prefixes() {
		if strings.HasPrefix(key, p) {
			return p != MetaPrefix || cairn.IsObjectKey(key)
		}
	}
	return false
}

// head sends one HEAD request for each target, before any is moved to
// deleting, and returns the targets that stay, with their sizes, and the
// candidate records of keys the bucket does not hold, to drop (a listing run
// drops those of unlisted keys). A candidate uploaded within OlderThan, or
// without an upload time, waits as a listed young key does. A key already in
// the deleting state stays a target whatever the answer: deleting again is
// harmless. An error other than the key's absence is returned.
func (s *sweeper) head(ctx context.Context, targets []target) (kept []target, gone []cairn.GCRecord, err error) {
	if len(targets) == 0 {
		return targets, nil, nil
	}
	r, ok := s.blobs.(bucket.Reader)
	if !ok {
		return nil, nil, fmt.Errorf("%w: an incremental sweep's bucket must answer HEAD requests (bucket.Reader), %T does not", ErrInvalidArgument, s.blobs)
	}
	objs := make([]bucket.Object, len(targets))
	found := make([]bool, len(targets))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(headWorkers)
	for i, t := range targets {
		g.Go(func() error {
			o, err := r.Head(gctx, t.rec.Key)
			switch {
			case errors.Is(err, bucket.ErrNotFound):
				return nil
			case err != nil:
				return fmt.Errorf("HEAD %q: %w", t.rec.Key, err)
			}
			objs[i], found[i] = o, true
			return nil
		})
	}
	err = g.Wait()
	s.rep.HeadRequests += len(targets)
	if err != nil {
		return nil, nil, err
	}
	for i, t := range targets {
		if t.rec.State == cairn.GCDeleting {
			t.size = objs[i].Size
			kept = append(kept, t)
			continue
		}
		if !found[i] {
			gone = append(gone, t.rec)
			continue
		}
		o := objs[i]
		if o.UploadedAt.IsZero() || s.rep.Now.Sub(o.UploadedAt) <= s.opts.OlderThan {
			s.rep.Young++
			s.rep.Waiting++
			continue
		}
		t.size = o.Size
		kept = append(kept, t)
	}
	return kept, gone, nil
}
