package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

// The prefixes a sweep lists, in the order it lists them (byte order).
const (
	ArtifactPrefix = "sandbox-artifacts/"
	FilePrefix     = "sandbox-files/"
	// MetaPrefix holds a store's own body objects (cairn.IsObjectKey). Only
	// the online sweep lists it, because only a store of the online
	// protocol reports which objects it needs (cairn.BlobCollector); keys
	// under it that are not object keys are left alone.
	MetaPrefix = "sandbox-meta/"
)

// Prefixes are the prefixes a sweep lists, in byte order: the online sweep
// lists all three, the plain sweep the two blob prefixes only.
var Prefixes = [...]string{ArtifactPrefix, FilePrefix, MetaPrefix}

// prefixes returns the prefixes this sweep lists.
func (s *sweeper) prefixes() []string {
	if s.col == nil {
		return []string{ArtifactPrefix, FilePrefix}
	}
	return Prefixes[:]
}

// Blobs is what a sweep needs of a bucket: listing with upload times, and
// batched deletes. *bucket.S3 and *bucket.Memory implement it.
type Blobs interface {
	bucket.Lister
	bucket.Deleter
}

// References is what a sweep needs of a checkpoint store: every cairn.Store
// has it. When the store also implements cairn.BlobReferenceWalker the sweep
// streams the references instead.
type References interface {
	ListBlobReferences(ctx context.Context) ([]cairn.BlobReference, error)
}

// Options configure a sweep. OlderThan is required; the zero value of every
// other field selects a default.
type Options struct {
	// OlderThan is how old an unreferenced blob must be to go: a blob is
	// deleted only when now minus its upload time is strictly greater. It
	// must not be negative, and should be longer than the longest capture.
	OlderThan time.Duration
	// Now returns the current time. Nil selects time.Now.
	Now func() time.Time
	// DryRun runs every step, BeforeDelete included, except the delete
	// requests, and reports the keys it would delete as Deleted.
	DryRun bool
	// MaxDeletes caps the keys deleted in one run; candidates past the cap,
	// in key order, are reported as Skipped. Online, the keys that earlier
	// runs left in the deleting state come within the cap first, since
	// writers wait for them. Zero means no cap; it must not be negative.
	MaxDeletes int
	// BatchSize is the number of keys per delete request, 1 to
	// bucket.MaxDeleteKeys. Zero selects bucket.MaxDeleteKeys.
	BatchSize int
	// PageSize is the number of keys per listing request; zero or a value
	// above bucket.MaxPageSize selects bucket.MaxPageSize.
	PageSize int
	// BeforeDelete, when set, is called before each batch is deleted (and in
	// a dry run, where the batch is then not deleted), with the batch's keys
	// in order; it must not keep or change the slice. When it returns an
	// error the sweep stops without deleting that batch or any later one,
	// reports their keys as Pending, and returns the error (matching
	// ErrStopped). The sweeper uses it to check that it still holds its lock
	// and to record its progress.
	BeforeDelete func(ctx context.Context, batch []string) error
	// DeleteWithin bounds, for the online protocol, the time from the start
	// of a batch's move to the deleting state to the end of its S3 delete:
	// past it the batch is not sent (or its request is cancelled), its keys
	// stay in the deleting state and a later run settles them. A sweeper
	// under a lock sets it to a third of the lock's TTL, so that a sweeper
	// paused after moving keys to deleting cannot delete them once another
	// sweeper has taken the lock, settled them, and a writer has uploaded
	// them again: S3 takes no fencing token, time is the only fence. The
	// request is sent with bucket.WithSendDeadline at the bound, so an S3
	// bucket writes none of it to the network past the bound even when the
	// process was paused between this check and the send. Zero is no bound.
	DeleteWithin time.Duration
	// Released, in a dry run, are references to count as gone, by blob
	// key: those a prune that did not run (a dry run's) would have dropped
	// (PruneReport.Released). A key whose count they cancel is treated as
	// unreferenced, as the real run, after its prune, would find it.
	// Outside a dry run it is ignored.
	Released map[string]int
	// Logger receives the sweep's log records. Nil discards them.
	Logger *slog.Logger

	// Others are the other stores whose keys the bucket holds, swept together
	// with the store Sweep is given: a key is kept while any of them
	// references or claims it, and every GC record is moved in each of them
	// (docs/design.md, "A bucket shared by several stores"). Either every
	// store implements cairn.BlobCollector or none does.
	Others []Other

	// Incremental, when set with a store that implements
	// cairn.BlobCollector and no Others, names the candidates of a run
	// without a listing of the bucket whenever it can name every one
	// (Incremental.Complete): such a run sends HEAD requests only for the
	// keys it is about to delete, and none at all when nothing changed. A
	// run that cannot lists, and then tells Incremental so.
	Incremental Incremental
	// List makes a run with Incremental list the bucket anyway: the full
	// run, which also finds bytes that writers outside the protocol left.
	List bool

	// hooks lets the package's tests stop the online sweep between its steps.
	hooks *hooks
	// ignoreBindings is a deliberately broken sweep, for the tests that show
	// the bindings are needed: it neither writes a marker nor refuses.
	ignoreBindings bool
	// trustCandidates is a deliberately broken incremental sweep: it
	// deletes the unreferenced candidates at once, without the protocol.
	trustCandidates bool
}

// The sweep's errors, matched with errors.Is.
var (
	// ErrInvalidArgument: an option is out of range. Nothing was listed.
	ErrInvalidArgument = errors.New("sweep: invalid argument")
	// ErrStopped: the sweep stopped before it had sent every batch, because
	// BeforeDelete returned an error or a delete request failed as a whole.
	// The report's Pending keys were not sent.
	ErrStopped = errors.New("sweep: stopped before the last batch")
	// ErrIncomplete: the bucket refused to delete some keys; the report's
	// Failed lists them with the reason for each.
	ErrIncomplete = errors.New("sweep: some blobs were not deleted")
)

// Report tells what a sweep did. The key lists are in key order. Every
// candidate is in exactly one of Deleted, Failed, Pending, Skipped and (online)
// Aborted.
type Report struct {
	// DryRun says the sweep sent no delete request; Deleted and BytesFreed
	// then describe what it would have deleted.
	DryRun bool `json:"dryRun"`
	// Now is the time the sweep judged ages by; Cutoff is Now - OlderThan.
	// Only blobs uploaded strictly before Cutoff can go.
	Now    time.Time `json:"now"`
	Cutoff time.Time `json:"cutoff"`

	// Listed is the number of keys listed under the two prefixes, and
	// ListedBytes their total size.
	Listed      int   `json:"listed"`
	ListedBytes int64 `json:"listedBytes"`
	// ListRequests is the number of LIST requests the sweep sent for the
	// swept prefixes (one per page, Options.PageSize keys a page), and
	// BindingListRequests those for the bucket's bindings (one page for up
	// to 1000 bindings). On R2 and S3 each is a billed Class A request.
	ListRequests        int `json:"listRequests"`
	BindingListRequests int `json:"bindingListRequests"`
	// Young is the number of listed keys kept because they are not older
	// than OlderThan, or have no upload time.
	Young int `json:"young"`
	// References is the number of blob references the store reported.
	References int `json:"references"`
	// Referenced is the number of old-enough keys kept because a checkpoint
	// references them.
	Referenced int `json:"referenced"`
	// Candidates is the number of keys the sweep set out to delete: the
	// old-enough, unreferenced keys; online, the candidates whose grace has
	// passed and the keys earlier runs left in the deleting state.
	Candidates int `json:"candidates"`

	// Deleted are the keys the bucket confirmed deleted.
	Deleted []string `json:"deleted"`
	// BytesFreed is the listed size of the Deleted keys.
	BytesFreed int64 `json:"bytesFreed"`
	// Failed are the keys whose delete the bucket refused or did not
	// confirm, with the reason.
	Failed []bucket.KeyError `json:"failed"`
	// Pending are candidates never sent because the sweep stopped early;
	// online, also the keys of a delete request that failed as a whole, whose
	// outcome is unknown (they stay in the deleting state for the next run).
	Pending []string `json:"pending"`
	// Skipped are candidates past MaxDeletes.
	Skipped []string `json:"skipped"`

	// The online protocol (a store that implements cairn.BlobCollector).
	//
	// Online says the sweep ran under it.
	Online bool `json:"online"`
	// Claimed is the number of listed, unreferenced keys that a writer has
	// claimed: in use by a capture that has not appended yet.
	Claimed int `json:"claimed"`
	// Marked is the number of keys found unreferenced and unclaimed for the
	// first time: their grace starts now.
	Marked int `json:"marked"`
	// Waiting is the number of candidates whose grace has not passed.
	Waiting int `json:"waiting"`
	// Dropped is the number of candidate records removed because their key
	// was referenced, claimed or gone from the bucket.
	Dropped int `json:"dropped"`
	// Unsettled is the number of keys an earlier run left in the deleting
	// state (its delete's outcome was unknown); this run deletes them again.
	Unsettled int `json:"unsettled"`
	// Aborted are candidates that a writer claimed after the read: their
	// delete was called off.
	Aborted []string `json:"aborted"`
	// Batches is the number of batches sent (or, in a dry run, passed over).
	Batches int `json:"batches"`

	// Incremental says the run named its candidates without a listing
	// (Options.Incremental): Listed is then zero, FromMirror counts the
	// keys the source named, and HeadRequests the HEAD requests sent for
	// the keys about to be deleted (each billed Class B on R2).
	Incremental  bool `json:"incremental"`
	FromMirror   int  `json:"fromMirror"`
	HeadRequests int  `json:"headRequests"`

	// Bindings are the stores the bucket is bound to (bucket.Bindings), as
	// listed after the objects.
	Bindings []cairn.Binding `json:"bindings"`
	// Uncovered are the Bindings this sweep does not cover; when there are
	// any, the sweep refused (ErrUncovered) and deleted nothing.
	Uncovered []cairn.Binding `json:"uncovered"`
	// Unregistered says the bucket has objects and bindings (or a store
	// with a binding) but no registry marker: the sweep refused.
	Unregistered bool `json:"unregistered"`

	// ListDuration, ReferencesDuration and DeleteDuration time the three
	// phases; Duration the whole sweep.
	ListDuration       time.Duration `json:"listDuration"`
	ReferencesDuration time.Duration `json:"referencesDuration"`
	DeleteDuration     time.Duration `json:"deleteDuration"`
	Duration           time.Duration `json:"duration"`
}

// LogValue summarises the report, with counts instead of key lists.
func (r Report) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Bool("dry_run", r.DryRun),
		slog.Time("cutoff", r.Cutoff),
		slog.Int("listed", r.Listed),
		slog.Int64("listed_bytes", r.ListedBytes),
		slog.Int("list_requests", r.ListRequests),
		slog.Int("binding_list_requests", r.BindingListRequests),
		slog.Int("young", r.Young),
		slog.Int("references", r.References),
		slog.Int("referenced", r.Referenced),
		slog.Int("candidates", r.Candidates),
		slog.Int("deleted", len(r.Deleted)),
		slog.Int64("bytes_freed", r.BytesFreed),
		slog.Int("failed", len(r.Failed)),
		slog.Int("pending", len(r.Pending)),
		slog.Int("skipped", len(r.Skipped)),
		slog.Bool("online", r.Online),
		slog.Int("claimed", r.Claimed),
		slog.Int("marked", r.Marked),
		slog.Int("waiting", r.Waiting),
		slog.Int("dropped", r.Dropped),
		slog.Int("unsettled", r.Unsettled),
		slog.Int("aborted", len(r.Aborted)),
		slog.Int("batches", r.Batches),
		slog.Bool("incremental", r.Incremental),
		slog.Int("from_mirror", r.FromMirror),
		slog.Int("head_requests", r.HeadRequests),
		slog.Int("bindings", len(r.Bindings)),
		slog.Int("uncovered", len(r.Uncovered)),
		slog.Bool("unregistered", r.Unregistered),
		slog.String("duration", r.Duration.String()),
	)
}

// candidate is a listed key old enough to delete.
type candidate struct {
	key        string
	size       int64
	referenced bool
	// young says the key was uploaded too recently to delete; only the
	// online sweep keeps young keys (it may mark them).
	young bool
}

// validate checks the options and applies the defaults.
func (o Options) validate() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
	}
	switch {
	case o.OlderThan < 0:
		return bad("OlderThan must not be negative, got %v", o.OlderThan)
	case o.MaxDeletes < 0:
		return bad("MaxDeletes must not be negative, got %d", o.MaxDeletes)
	case o.BatchSize < 0 || o.BatchSize > bucket.MaxDeleteKeys:
		return bad("BatchSize must be between 1 and %d, got %d", bucket.MaxDeleteKeys, o.BatchSize)
	case o.PageSize < 0:
		return bad("PageSize must not be negative, got %d", o.PageSize)
	case o.DeleteWithin < 0:
		return bad("DeleteWithin must not be negative, got %v", o.DeleteWithin)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BatchSize == 0 {
		o.BatchSize = bucket.MaxDeleteKeys
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o, nil
}

// Sweep deletes the blobs under sandbox-files/ and sandbox-artifacts/ (and,
// online, the body objects under sandbox-meta/ that the store no longer
// needs) that no checkpoint references and that are older than opts.OlderThan, and returns
// what it did; Report.Deleted are the deleted keys. The steps, in order:
//
//  1. Check the options: a negative OlderThan, MaxDeletes, BatchSize or
//     PageSize, or a BatchSize above 1000, returns an error matching
//     ErrInvalidArgument before anything is listed.
//  2. Take now from opts.Now.
//  3. List both prefixes. A listing error aborts the sweep before any delete.
//     Then list the bucket's bindings; a binding of a store the sweep does
//     not cover (the store and Options.Others), or objects without the
//     registry's marker, refuse the sweep with an *UncoveredError matching
//     ErrUncovered before any write.
//  4. Read the store's references. An error aborts the sweep before any
//     delete.
//  5. Delete the candidates in key order, in batches of opts.BatchSize keys,
//     calling opts.BeforeDelete before each.
//
// The report is filled as far as the sweep got, also when it returns an
// error. A BeforeDelete error or a delete request that failed as a whole stops
// the sweep with an error matching ErrStopped (and the cause); keys the bucket
// refused one by one give an error matching ErrIncomplete after the other
// batches are done. When ctx ends during the listing, the references or
// between batches, the context error is returned as it is.
func Sweep(ctx context.Context, refs References, blobs Blobs, opts Options) (Report, error) {
	began := time.Now()
	var rep Report
	opts, err := opts.validate()
	if err != nil {
		return rep, err
	}
	s := &sweeper{refs: refs, blobs: blobs, opts: opts, log: opts.Logger, rep: &rep, began: began, members: []References{refs}}
	if len(opts.Others) > 0 {
		u, err := newUnion(refs, opts)
		if err != nil {
			return rep, err
		}
		for _, o := range opts.Others {
			s.members = append(s.members, o.Store)
		}
		// The union applies each store's Released itself.
		s.refs, s.opts.Released = u, nil
	}
	if col, ok := s.refs.(cairn.BlobCollector); ok {
		s.col, s.keepYoung = col, true
		err = s.runOnline(ctx)
	} else {
		err = s.run(ctx)
	}
	s.endMarker(ctx, err)
	rep.Duration = time.Since(began)
	return rep, err
}

type sweeper struct {
	refs  References
	blobs Blobs
	// col is the store's side of the online sweep protocol, when it has one.
	col cairn.BlobCollector
	// keepYoung makes the listing keep keys too young to delete.
	keepYoung bool
	opts      Options
	log       *slog.Logger
	rep       *Report
	began     time.Time
	// marker is the key of the sweep's marker in the bucket, once written.
	marker string
	// members are the stores the sweep covers: Sweep's, then Options.Others.
	members []References
	// hasObjects says the bucket holds objects under the swept prefixes
	// although the run listed none (an incremental run with candidates).
	hasObjects bool
}

func (s *sweeper) run(ctx context.Context) error {
	rep := s.rep
	rep.DryRun = s.opts.DryRun
	cands, err := s.startAndList(ctx, "upstream")
	if err != nil {
		return err
	}

	t := time.Now()
	err = s.markReferenced(ctx, cands)
	rep.ReferencesDuration = time.Since(t)
	if err != nil {
		s.log.ErrorContext(ctx, "sweep aborted: reading references failed, nothing deleted", "phase", "references", "error", err)
		return err
	}
	s.log.InfoContext(ctx, "references read", "phase", "references", "references", rep.References,
		"referenced", rep.Referenced, "duration", rep.ReferencesDuration)

	return s.finish(ctx, func() error { return s.delete(ctx, cands) })
}

// startAndList takes now and the cutoff, logs the start, and lists the
// bucket; both paths begin with it.
func (s *sweeper) startAndList(ctx context.Context, protocol string) ([]candidate, error) {
	rep := s.rep
	s.begin(ctx, protocol)
	t := time.Now()
	cands, err := s.list(ctx)
	rep.ListDuration = time.Since(t)
	if err != nil {
		s.log.ErrorContext(ctx, "sweep aborted: listing failed, nothing deleted", "phase", "list", "error", err)
		return nil, err
	}
	if err := s.checkBindings(ctx); err != nil {
		return nil, err
	}
	old := len(cands)
	if s.keepYoung {
		old -= rep.Young
	}
	s.log.InfoContext(ctx, "bucket listed", "phase", "list", "listed", rep.Listed, "young", rep.Young,
		"old", old, "duration", rep.ListDuration.String())
	return cands, nil
}

// finish runs the deletes, times them, and logs the report.
func (s *sweeper) finish(ctx context.Context, deletes func() error) error {
	rep := s.rep
	t := time.Now()
	err := deletes()
	rep.DeleteDuration = time.Since(t)
	rep.Duration = time.Since(s.began)
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelError
	}
	s.log.Log(ctx, level, "sweep finished", "phase", "done", "report", *rep, "error", err)
	return err
}

// list lists both prefixes and returns the keys old enough to delete, sorted
// and without repeats.
func (s *sweeper) list(ctx context.Context) ([]candidate, error) {
	var cands []candidate
	lister := countingLister{l: s.blobs, n: &s.rep.ListRequests}
	for _, prefix := range s.prefixes() {
		for o, err := range bucket.Objects(ctx, lister, prefix, s.opts.PageSize) {
			if err != nil {
				return nil, wrap(err, "sweep: list %q (nothing deleted)", prefix)
			}
			if !strings.HasPrefix(o.Key, prefix) {
				return nil, fmt.Errorf("sweep: list %q (nothing deleted): the bucket listed %q, outside the prefix", prefix, o.Key)
			}
			if prefix == MetaPrefix && !cairn.IsObjectKey(o.Key) {
				continue // not a body object: not the sweep's
			}
			s.rep.Listed++
			s.rep.ListedBytes += o.Size
			// Strictly older than OlderThan; a key without an upload time
			// cannot be judged and stays.
			young := o.UploadedAt.IsZero() || s.rep.Now.Sub(o.UploadedAt) <= s.opts.OlderThan
			if young {
				s.rep.Young++
				if !s.keepYoung {
					continue
				}
			}
			cands = append(cands, candidate{key: o.Key, size: o.Size, young: young})
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int { return strings.Compare(a.key, b.key) })
	cands = slices.CompactFunc(cands, func(a, b candidate) bool { return a.key == b.key })
	return cands, nil
}

// countingLister counts the List requests it passes on.
type countingLister struct {
	l bucket.Lister
	n *int
}

func (c countingLister) List(ctx context.Context, prefix, token string, limit int) (bucket.Page, error) {
	*c.n++
	return c.l.List(ctx, prefix, token, limit)
}

// markReferenced reads the store's references and marks the candidates they
// name, streaming them when the store can.
func (s *sweeper) markReferenced(ctx context.Context, cands []candidate) error {
	mark := func(r cairn.BlobReference) error {
		s.rep.References++
		if s.released(r) {
			return nil
		}
		i, found := slices.BinarySearchFunc(cands, r.Key, func(c candidate, k string) int { return strings.Compare(c.key, k) })
		if found && !cands[i].referenced {
			cands[i].referenced = true
			s.rep.Referenced++
		}
		return nil
	}
	if w, ok := s.refs.(cairn.BlobReferenceWalker); ok {
		if err := w.WalkBlobReferences(ctx, mark); err != nil {
			return wrap(err, "sweep: walk blob references (nothing deleted)")
		}
		return nil
	}
	list, err := s.refs.ListBlobReferences(ctx)
	if err != nil {
		return wrap(err, "sweep: list blob references (nothing deleted)")
	}
	for _, r := range list {
		_ = mark(r)
	}
	return nil
}

// released reports whether a dry run counts every reference of r as
// released by its prune.
func (s *sweeper) released(r cairn.BlobReference) bool {
	return s.opts.DryRun && r.References <= s.opts.Released[r.Key]
}

// delete deletes the unreferenced candidates, batch by batch.
func (s *sweeper) delete(ctx context.Context, cands []candidate) error {
	rep := s.rep
	var todo []int // indexes of unreferenced candidates
	for i := range cands {
		if !cands[i].referenced {
			todo = append(todo, i)
		}
	}
	rep.Candidates = len(todo)
	if s.opts.MaxDeletes > 0 && len(todo) > s.opts.MaxDeletes {
		for _, i := range todo[s.opts.MaxDeletes:] {
			rep.Skipped = append(rep.Skipped, cands[i].key)
		}
		s.log.WarnContext(ctx, "more candidates than MaxDeletes; the rest are skipped", "phase", "delete",
			"candidates", len(todo), "max_deletes", s.opts.MaxDeletes, "skipped", len(rep.Skipped))
		todo = todo[:s.opts.MaxDeletes]
	}
	pending := func(from int) {
		for _, i := range todo[from:] {
			rep.Pending = append(rep.Pending, cands[i].key)
		}
	}
	var stopErr error
	for start := 0; start < len(todo); start += s.opts.BatchSize {
		idx := todo[start:min(start+s.opts.BatchSize, len(todo))]
		batch := make([]string, len(idx))
		for j, i := range idx {
			batch[j] = cands[i].key
		}
		if err := ctx.Err(); err != nil {
			pending(start)
			stopErr = err
			break
		}
		if s.opts.BeforeDelete != nil {
			if err := s.opts.BeforeDelete(ctx, batch); err != nil {
				pending(start)
				stopErr = fmt.Errorf("%w: BeforeDelete refused a batch of %d keys: %w", ErrStopped, len(batch), err)
				s.log.WarnContext(ctx, "BeforeDelete stopped the sweep", "phase", "delete", "batch", rep.Batches, "keys", len(batch), "error", err)
				break
			}
		}
		rep.Batches++
		if s.opts.DryRun {
			for _, i := range idx {
				rep.Deleted = append(rep.Deleted, cands[i].key)
				rep.BytesFreed += cands[i].size
			}
			s.log.InfoContext(ctx, "batch not deleted: dry run", "phase", "delete", "batch", rep.Batches, "keys", len(batch), "dry_run", true)
			continue
		}
		res, err := s.blobs.Delete(ctx, batch)
		s.record(ctx, cands, idx, res)
		if err != nil && !errors.Is(err, bucket.ErrPartialDelete) {
			pending(start + len(idx))
			stopErr = fmt.Errorf("%w: a delete request failed: %w", ErrStopped, err)
			s.log.ErrorContext(ctx, "delete request failed; sweep stopped", "phase", "delete", "batch", rep.Batches, "keys", len(batch), "error", err)
			break
		}
	}
	if len(rep.Failed) > 0 {
		incomplete := fmt.Errorf("%w: %d of %d keys; the first %v", ErrIncomplete, len(rep.Failed), rep.Candidates, rep.Failed[0])
		return errors.Join(stopErr, incomplete)
	}
	return stopErr
}

// record adds one batch's delete result to the report: each key of the batch
// is deleted or failed, whatever the bucket reported.
func (s *sweeper) record(ctx context.Context, cands []candidate, idx []int, res bucket.DeleteResult) {
	rep := s.rep
	outcome := make(map[string]error, len(idx))
	for _, k := range res.Deleted {
		outcome[k] = nil
	}
	for _, f := range res.Failed {
		outcome[f.Key] = f.Err
		if f.Err == nil {
			outcome[f.Key] = errors.New("the bucket reported a failure without a reason")
		}
	}
	deleted := 0
	for _, i := range idx {
		c := &cands[i]
		err, seen := outcome[c.key]
		switch {
		case !seen:
			err = errors.New("the bucket did not report this key")
		case err == nil:
			rep.Deleted = append(rep.Deleted, c.key)
			rep.BytesFreed += c.size
			deleted++
			continue
		}
		rep.Failed = append(rep.Failed, bucket.KeyError{Key: c.key, Err: err})
		s.log.WarnContext(ctx, "blob not deleted", "phase", "delete", "blob", c.key, "error", err)
	}
	s.log.InfoContext(ctx, "batch deleted", "phase", "delete", "batch", rep.Batches, "keys", len(idx),
		"deleted", deleted, "failed", len(idx)-deleted)
}

// wrap adds context to err, except that context errors are returned as they
// are.
func wrap(err error, format string, args ...any) error {
	for _, ce := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, ce) {
			return ce
		}
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
