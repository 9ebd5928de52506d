package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/sweep"
)

// RunOptions say what each run of a Sweeper does.
type RunOptions struct {
	// Keep prunes every thread to its newest Keep checkpoints before the
	// sweep; 0 turns the rule off. A Keep above zero replaces Policy.Keep.
	Keep int
	// Policy holds the retention rules (sweep.Policy); a policy without a
	// rule prunes nothing.
	Policy sweep.Policy
	// Apply, when not nil, is a plan (sweep.PruneOptions.Apply) that the
	// prune carries out instead of the policy.
	Apply []sweep.ThreadPlan
	// PolicyName labels the per-policy metrics; "" reads "default".
	PolicyName string
	// OlderThan, DryRun and MaxDeletes are the sweep's options.
	OlderThan  time.Duration
	DryRun     bool
	MaxDeletes int
	// BatchSize is the number of keys per delete request; 0 selects 1000.
	BatchSize int
	// Verify runs the store's Verify after the sweep, under the lock; Repair
	// also deletes the garbage it finds.
	Verify bool
	Repair bool
	// AllowEmptyStore lets a run delete blobs when the store has no
	// checkpoint at all.
	AllowEmptyStore bool
	// LockTTL is the TTL of the lock's etcd session, RequestTimeout the
	// deadline of each lock and status request.
	LockTTL        time.Duration
	RequestTimeout time.Duration
	// Now is the sweep's clock; nil selects time.Now.
	Now func() time.Time
	// Bucket names the bucket in log lines.
	Bucket string
	// Mirror, when set, answers the sweep's reference reads (the
	// incremental sweep, etcdstore.Mirrored); nil walks every reference.
	// Every FullRunEvery (0: never) a run first compares it with a full
	// walk (Mirrored.Check) and deletes nothing when they differ.
	Mirror       *etcdstore.Mirror
	FullRunEvery time.Duration
	// Others are the other prefixes whose objects the bucket holds: each is
	// pruned by its own policy after the sweeper's store, and the one sweep
	// of the bucket covers them all (sweep.Options.Others). Their stores
	// must be on the sweeper's etcd cluster.
	Others []OtherTarget
}

// OtherTarget is a prefix swept with the sweeper's own on one bucket.
type OtherTarget struct {
	Store *etcdstore.Store
	// Policy, PolicyName and Apply are as in RunOptions, for this prefix.
	Policy     sweep.Policy
	PolicyName string
	Apply      []sweep.ThreadPlan
}

// Sweeper runs the prune and the sweep under the sweeper lock. One Sweeper
// serves any number of runs, one at a time; Close it at the end.
type Sweeper struct {
	client  *clientv3.Client
	store   *etcdstore.Store
	blobs   sweep.Blobs
	opts    RunOptions
	log     *slog.Logger
	metrics *Metrics
	lock    *locker
	holder  string
	// lastFull is when the last full run's comparison passed (or the
	// sweeper started).
	lastFull time.Time
	// beforePrune, when set, runs right before the prune; tests use it to
	// lose the lock or to stop the run there.
	beforePrune func(ctx context.Context, held *heldLock)
}

// NewSweeper returns a sweeper of the store (on client) and the bucket. A nil
// logger discards, nil metrics record nothing.
func NewSweeper(client *clientv3.Client, store *etcdstore.Store, blobs sweep.Blobs, opts RunOptions, log *slog.Logger, metrics *Metrics) *Sweeper {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.LockTTL <= 0 {
		opts.LockTTL = 30 * time.Second
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Keep > 0 {
		opts.Policy.Keep = opts.Keep
	}
	if opts.PolicyName == "" {
		opts.PolicyName = "default"
	}
	host, _ := os.Hostname()
	return &Sweeper{
		lastFull: time.Now(),
		client:   client,
		store:    store,
		blobs:    blobs,
		opts:     opts,
		log:      log,
		metrics:  metrics,
		lock:     newLocker(client, store.Layout(), opts.LockTTL, opts.RequestTimeout, log),
		holder:   fmt.Sprintf("%s/%d", host, os.Getpid()),
	}
}

// Close ends the lock's etcd session. It closes neither the client nor the
// store.
func (s *Sweeper) Close() { s.lock.close() }

// LockMode says what a run does when another sweeper holds the lock.
type LockMode struct {
	// Wait waits for the lock until the stop context ends.
	Wait bool
	// Timeout, without Wait, waits at most this long; 0 gives up at once.
	Timeout time.Duration
}

// RunReport tells what one run did.
type RunReport struct {
	RunID string `json:"runId"`
	// Policy is RunOptions.PolicyName.
	Policy string `json:"policy"`
	// Locked says the run took the lock, and LockRevision is the etcd
	// revision at which it did: the run's fencing token.
	Locked       bool  `json:"locked"`
	LockRevision int64 `json:"lockRevision"`
	// Pruned and Swept say the phases ran (perhaps not to the end).
	Pruned bool              `json:"pruned"`
	Prune  sweep.PruneReport `json:"prune"`
	// OtherPrunes are the prunes of RunOptions.Others, in their order, and
	// OtherPolicies their policy names.
	OtherPrunes   []sweep.PruneReport `json:"otherPrunes,omitempty"`
	OtherPolicies []string            `json:"otherPolicies,omitempty"`
	// UnderAlarm says the run could not take the lock because etcd is out
	// of space, and pruned with deletes only, without sweeping (see
	// Sweeper.Run).
	UnderAlarm bool                    `json:"underAlarm,omitempty"`
	Swept      bool                    `json:"swept"`
	Sweep      sweep.Report            `json:"sweep"`
	Verify     *etcdstore.VerifyReport `json:"verify,omitempty"`
	Start      time.Time               `json:"start"`
	// Duration is the time from taking the lock to the end of the run.
	Duration time.Duration `json:"duration"`
}

// Run does one run: take the lock, keep the newest checkpoints of every
// thread, sweep, verify when asked, and release the lock.
//
// stop asks the run to end at the next safe point: a listing or the wait for
// the lock ends at once, a prune ends between threads, and a sweep ends
// between delete batches, the batch in flight finishing. ctx ends everything
// at once, requests in flight included. A run that stop ended returns an
// error matching ErrInterrupted.
//
// Each write of the run carries the lock's guard: the prune writes through
// store.Guarded(mutex.IsOwner()), and before each delete batch a transaction
// "If the lock is ours Then put the status record" must succeed, so a
// sweeper that lost its lock deletes nothing more.
func (s *Sweeper) Run(ctx, stop context.Context, mode LockMode) (RunReport, error) {
	var rep RunReport
	rep.RunID, rep.Policy = newRunID(), s.opts.PolicyName
	log := s.log.With("run_id", rep.RunID)

	lctx, cancel := merge(ctx, stop)
	held, err := s.lock.acquire(lctx, mode.Wait, mode.Timeout)
	cancel()
	if err != nil {
		if errors.Is(err, rpctypes.ErrNoSpace) && !s.opts.DryRun && stop.Err() == nil {
			return s.runUnderAlarm(ctx, stop, rep, log, err)
		}
		if stop.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w while waiting for the sweeper lock", ErrInterrupted)
		}
		s.metrics.observe(rep, err)
		log.Log(ctx, levelOf(err), "no run: the sweeper lock was not taken", "phase", "lock", "error", err)
		return rep, err
	}
	rep.Locked, rep.LockRevision, rep.Start = true, held.Revision(), time.Now()
	s.metrics.setLockHeld(true)
	p := s.opts.Policy
	log.Info("sweeper lock taken; run started", "phase", "start", "lock_revision", rep.LockRevision, "dry_run", s.opts.DryRun,
		"policy", s.opts.PolicyName, "keep", p.Keep, "max_age", p.MaxAge.String(), "delete_idle_threads", p.DeleteIdle.String(),
		"protect", p.Protect, "apply", s.opts.Apply != nil,
		"older_than", s.opts.OlderThan.String(), "max_deletes", s.opts.MaxDeletes)

	st := &Status{RunID: rep.RunID, Holder: s.holder, Phase: "starting", DryRun: s.opts.DryRun, StartedAt: rep.Start.UTC()}
	if prev, perr := s.lock.readStatus(ctx); perr == nil && prev != nil {
		st.LastSuccessAt = prev.LastSuccessAt
	}
	err = s.phases(ctx, stop, held, st, &rep, log)
	rep.Duration = time.Since(rep.Start)

	// The final status, fenced like every other write.
	st.Phase, st.Result = "done", Result(err)
	st.Pruned, st.Deleted, st.BytesFreed = rep.Prune.Removed, len(rep.Sweep.Deleted), rep.Sweep.BytesFreed
	if err != nil {
		st.Error = err.Error()
	}
	if err == nil && !s.opts.DryRun {
		now := time.Now().UTC()
		st.LastSuccessAt = &now
	}
	if werr := held.writeStatus(context.WithoutCancel(ctx), st); werr != nil {
		log.Warn("could not record the run's end", "phase", "done", "error", werr)
	}
	held.release(ctx)
	s.metrics.setLockHeld(false)
	// The metrics first, so that they tell the run's outcome by the time the
	// summary line is logged.
	s.metrics.observe(rep, err)
	s.summary(ctx, log, rep, err)
	return rep, err
}

// prunes runs the prune of every policy that has rules or a plan to apply,
// the sweeper's own and the other prefixes', each on the store guard
// returns for its own.
func (s *Sweeper) prunes(ctx, stop context.Context, rep *RunReport, log *slog.Logger, clock func() time.Time, guard func(*etcdstore.Store) *etcdstore.Store) error {
	interrupted := func(err error) error {
		if errors.Is(err, etcdstore.ErrGuardFailed) {
			err = fmt.Errorf("%w: a prune write found the lock gone: %w", ErrLockLost, err)
		}
		if err != nil && stop.Err() != nil && !errors.Is(err, ErrInterrupted) && !errors.Is(err, ErrLockLost) {
			return fmt.Errorf("%w: %w", ErrInterrupted, err)
		}
		return err
	}
	if hasRule(s.opts.Policy) || s.opts.Apply != nil {
		rep.Pruned = true
		var err error
		popts := s.opts.Policy.PruneOptions()
		popts.Now, popts.DryRun, popts.Apply, popts.Logger = clock, s.opts.DryRun, s.opts.Apply, log
		rep.Prune, err = sweep.Prune(ctx, &pruneStore{Store: guard(s.store), stop: stop}, popts)
		if err = interrupted(err); err != nil {
			return err
		}
	}
	rep.OtherPrunes = make([]sweep.PruneReport, len(s.opts.Others))
	for _, o := range s.opts.Others {
		rep.OtherPolicies = append(rep.OtherPolicies, o.PolicyName)
	}
	for i, o := range s.opts.Others {
		if !hasRule(o.Policy) && o.Apply == nil {
			continue
		}
		popts := o.Policy.PruneOptions()
		popts.Now, popts.DryRun, popts.Apply, popts.Logger = clock, s.opts.DryRun, o.Apply, log.With("policy", o.PolicyName)
		var err error
		rep.OtherPrunes[i], err = sweep.Prune(ctx, &pruneStore{Store: guard(o.Store), stop: stop}, popts)
		if err = interrupted(err); err != nil {
			return err
		}
	}
	return nil
}

// runUnderAlarm is the run of a sweeper that could not take its lock
// because etcd is out of space (its NOSPACE alarm refuses the lock's etcd
// lease and key): it prunes every policy's threads with deletes only
// (cairn.AlarmPruner, through sweep.Prune), without the lock, and sweeps no
// blob, since the online sweep's marks are puts. The lock serialises the
// blob sweep, not the prunes: writers prune their own threads without it,
// and a prune with deletes only is guarded by each thread's record (see
// docs/design.md, "Out of space"). The run frees etcd's space for the
// recovery (cairn doctor --recover); the next run after it sweeps.
func (s *Sweeper) runUnderAlarm(ctx, stop context.Context, rep RunReport, log *slog.Logger, lockErr error) (RunReport, error) {
	rep.UnderAlarm, rep.Start = true, time.Now()
	log.Warn("etcd is out of space (NOSPACE alarm): the sweeper lock cannot be taken; pruning with deletes only, without the lock; no blob is swept this run",
		"phase", "prune", "error", lockErr)
	now := s.opts.Now()
	err := s.prunes(ctx, stop, &rep, log, func() time.Time { return now }, func(st *etcdstore.Store) *etcdstore.Store { return st })
	rep.Duration = time.Since(rep.Start)
	s.metrics.observe(rep, err)
	s.summary(ctx, log, rep, err)
	return rep, err
}

// phases runs the prune, the sweep and the verification.
func (s *Sweeper) phases(ctx, stop context.Context, held *heldLock, st *Status, rep *RunReport, log *slog.Logger) error {
	interrupted := func(err error) error {
		if err != nil && stop.Err() != nil && !errors.Is(err, ErrInterrupted) && !errors.Is(err, ErrLockLost) {
			return fmt.Errorf("%w: %w", ErrInterrupted, err)
		}
		return err
	}
	guarded := s.store.Guarded(held.Guard())
	// One now for the prune and the sweep, so that a dry run and the real
	// run on the same state judge ages alike.
	now := s.opts.Now()
	clock := func() time.Time { return now }
	if hasRule(s.opts.Policy) || s.opts.Apply != nil {
		st.Phase = "pruning"
		if err := held.writeStatus(ctx, st); err != nil {
			return err
		}
		if s.beforePrune != nil {
			s.beforePrune(ctx, held)
		}
	}
	if err := s.prunes(ctx, stop, rep, log, clock, func(st *etcdstore.Store) *etcdstore.Store { return st.Guarded(held.Guard()) }); err != nil {
		return err
	}
	if err := stop.Err(); err != nil {
		return fmt.Errorf("%w before the sweep", ErrInterrupted)
	}

	st.Phase = "listing"
	if err := held.writeStatus(ctx, st); err != nil {
		return err
	}
	refs := &refsView{store: guarded, stop: stop}
	var inc sweep.Incremental
	full := false
	if m := s.opts.Mirror; m != nil {
		refs.mirrored = guarded.WithMirror(m)
		var err error
		if full, err = s.fullRun(ctx, stop, refs.mirrored, log); err != nil {
			return interrupted(err)
		}
		inc = incrementalView{Mirrored: refs.mirrored, stop: stop}
	}
	var others []sweep.Other
	views := []*refsView{refs}
	for i, o := range s.opts.Others {
		v := &refsView{store: o.Store.Guarded(held.Guard()), stop: stop}
		views = append(views, v)
		var released map[string]int
		if s.opts.DryRun {
			released = rep.OtherPrunes[i].Released
		}
		others = append(others, sweep.Other{Store: v, Released: released})
	}
	first := true
	before := func(bctx context.Context, batch []string) error {
		if stop.Err() != nil {
			return fmt.Errorf("%w: stopped before the next delete batch", ErrInterrupted)
		}
		if first {
			first = false
			// A dry run's prune removed nothing; the real run's, when it
			// removes every thread, leaves the store empty.
			threads, deleted := rep.Prune.Threads, rep.Prune.ThreadsDeleted
			for _, p := range rep.OtherPrunes {
				threads, deleted = threads+p.Threads, deleted+p.ThreadsDeleted
			}
			emptied := s.opts.DryRun && threads > 0 && deleted == threads
			if err := s.checkNotEmpty(bctx, views, emptied, len(batch)); err != nil {
				return err
			}
		}
		st.Phase = "deleting"
		st.Batches++
		st.KeysSent += len(batch)
		return held.writeStatus(bctx, st)
	}
	rep.Swept = true
	var err error
	var released map[string]int
	if s.opts.DryRun {
		// What the real run's prune would have released.
		released = rep.Prune.Released
	}
	rep.Sweep, err = sweep.Sweep(ctx, refs, blobsView{Blobs: s.blobs, stop: stop}, sweep.Options{
		OlderThan:    s.opts.OlderThan,
		Now:          clock,
		DryRun:       s.opts.DryRun,
		Released:     released,
		MaxDeletes:   s.opts.MaxDeletes,
		BatchSize:    s.opts.BatchSize,
		BeforeDelete: before,
		// A run paused after moving keys to deleting must not delete them
		// once its lock has expired (after two thirds of the TTL at the
		// earliest) and the next run has settled them.
		DeleteWithin: s.opts.LockTTL / 3,
		Others:       others,
		Incremental:  inc,
		List:         full,
		Logger:       log,
	})
	if m := s.opts.Mirror; m != nil {
		s.observeMirror(m)
	}
	if errors.Is(err, sweep.ErrUncovered) {
		log.Error("sweep refused: the bucket is bound to prefixes this sweeper does not serve; nothing deleted",
			"phase", "bindings", "bucket", s.opts.Bucket, "uncovered", sweep.FormatBindings(rep.Sweep.Uncovered),
			"unregistered", rep.Sweep.Unregistered, "dry_run", s.opts.DryRun)
	}
	if errors.Is(err, etcdstore.ErrGuardFailed) {
		err = fmt.Errorf("%w: a sweep write found the lock gone: %w", ErrLockLost, err)
	}
	if err = interrupted(err); err != nil && !onlyIncomplete(err) {
		return err
	}
	if !s.opts.Verify {
		return err
	}
	sweepErr := err

	st.Phase = "verifying"
	if err := held.writeStatus(ctx, st); err != nil {
		return err
	}
	vctx, cancel := merge(ctx, stop)
	// With a bucket for body objects, the checkpoints of the capacity layout
	// are checked too: their objects exist, match their digests and decode,
	// and their reference chunks hold exactly their blob keys (what the
	// sweep just counted).
	vr, err := guarded.Verify(vctx, etcdstore.VerifyOptions{Repair: s.opts.Repair, Objects: guarded.HasObjects()})
	cancel()
	if err != nil {
		return interrupted(fmt.Errorf("verify the store: %w", err))
	}
	rep.Verify = &vr
	for _, p := range vr.Problems {
		log.Warn("store problem", "phase", "verify", "kind", p.Kind, "thread", p.Thread, "checkpoint", p.Checkpoint, "key", p.Key, "detail", p.Detail)
	}
	log.Log(ctx, levelOfBool(vr.OK()), "store verified", "phase", "verify", "revision", vr.Revision, "threads", vr.Threads,
		"checkpoints", vr.Checkpoints, "blob_keys", vr.BlobKeys, "references", vr.References,
		"problems", len(vr.Problems), "garbage", len(vr.Garbage), "repaired", vr.Repaired)
	if !vr.OK() {
		return errors.Join(sweepErr, fmt.Errorf("%w: --verify found %d (the first: %s)", ErrVerifyProblems, len(vr.Problems), vr.Problems[0]))
	}
	return sweepErr
}

// onlyIncomplete reports whether err says only that the bucket refused some
// keys: the sweep otherwise completed.
func onlyIncomplete(err error) bool {
	return ExitCode(err) == ExitPartial
}

// checkNotEmpty refuses the first delete batch when the store has no
// checkpoint at all, which is what a wrong --prefix looks like, unless
// AllowEmptyStore.
//
// emptied says that the prune (of a dry run) would have removed every
// thread, so that the real run would find the store empty.
func (s *Sweeper) checkNotEmpty(ctx context.Context, views []*refsView, emptied bool, batch int) error {
	var seen int64
	for _, v := range views {
		seen += v.seen.Load()
	}
	if s.opts.AllowEmptyStore || (seen > 0 && !emptied) {
		return nil
	}
	if !emptied {
		for _, v := range views {
			threads, err := v.store.ListThreads(ctx, "", 1)
			if err != nil {
				return fmt.Errorf("check that the store is not empty: %w", err)
			}
			if len(threads) > 0 {
				return nil
			}
		}
	}
	return fmt.Errorf("%w under this prefix, yet the sweep would delete blobs (%d in the first batch); "+
		"a wrong --prefix looks like this, so nothing was deleted (pass --allow-empty-store if the store really is empty)", ErrEmptyStore, batch)
}

// summary logs the run's one summary line, "Deleted N blobs".
func (s *Sweeper) summary(ctx context.Context, log *slog.Logger, rep RunReport, err error) {
	n := len(rep.Sweep.Deleted)
	msg := "Deleted " + count(n, "blob")
	if s.opts.DryRun {
		msg = "Dry run: would delete " + count(n, "blob")
	}
	if rep.UnderAlarm {
		msg = "etcd is out of space: pruned " + count(rep.Prune.Removed, "checkpoint") +
			" with deletes only and swept nothing; recover etcd (cairn doctor --recover), then run again"
	}
	attrs := []any{
		"phase", "summary", "result", Result(err), "dry_run", s.opts.DryRun, "policy", s.opts.PolicyName,
		"pruned_checkpoints", rep.Prune.Removed, "deleted_threads", rep.Prune.ThreadsDeleted,
		"protected", rep.Prune.Protected, "busy_threads", len(rep.Prune.Busy), "marked", rep.Sweep.Marked,
		"listed", rep.Sweep.Listed, "listed_bytes", rep.Sweep.ListedBytes, "young", rep.Sweep.Young,
		"referenced", rep.Sweep.Referenced, "candidates", rep.Sweep.Candidates,
		"deleted", n, "bytes_freed", rep.Sweep.BytesFreed, "failed", len(rep.Sweep.Failed),
		"pending", len(rep.Sweep.Pending), "skipped", len(rep.Sweep.Skipped),
		"duration", rep.Duration.String(), "under_alarm", rep.UnderAlarm,
	}
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	}
	log.Log(ctx, levelOf(err), msg, attrs...)
}

// count says "1 blob", "2 blobs".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func levelOf(err error) slog.Level {
	switch ExitCode(err) {
	case ExitOK:
		return slog.LevelInfo
	case ExitLockHeld, ExitInterrupted, ExitPartial:
		return slog.LevelWarn
	}
	return slog.LevelError
}

func levelOfBool(ok bool) slog.Level {
	if ok {
		return slog.LevelInfo
	}
	return slog.LevelError
}

func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// merge returns a context that ends when ctx or stop ends.
func merge(ctx, stop context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(stop, cancel)
	return c, func() { unhook(); cancel() }
}

// pruneStore is the store a prune runs on: the guarded view, whose
// AcquireWriter refuses once stop has ended, so that the prune ends between
// threads while the thread in flight finishes.
type pruneStore struct {
	*etcdstore.Store
	stop context.Context
}

func (p *pruneStore) AcquireWriter(ctx context.Context, threadID string) (*cairn.Lease, error) {
	if p.stop.Err() != nil {
		return nil, fmt.Errorf("%w: the prune stopped before thread %q", ErrInterrupted, threadID)
	}
	return p.Store.AcquireWriter(ctx, threadID)
}

func (p *pruneStore) ListThreads(ctx context.Context, after string, limit int) ([]string, error) {
	c, cancel := merge(ctx, p.stop)
	defer cancel()
	return p.Store.ListThreads(c, after, limit)
}

// refsView is what the sweep reads references from: the store, streamed, with
// the read ended by stop, counting the references seen.
type refsView struct {
	store *etcdstore.Store
	stop  context.Context
	seen  atomic.Int64
	// mirrored, when set, answers ReadBlobGC from the mirror.
	mirrored *etcdstore.Mirrored
}

var (
	_ cairn.BlobReferenceWalker = (*refsView)(nil)
	_ cairn.BlobCollector       = (*refsView)(nil)
	_ cairn.Bound               = (*refsView)(nil)
)

// BucketBinding is the store's: the sweep covers the store's binding.
func (r *refsView) BucketBinding(ctx context.Context) (cairn.Binding, bool, error) {
	return r.store.BucketBinding(ctx)
}

func (r *refsView) ListBlobReferences(ctx context.Context) ([]cairn.BlobReference, error) {
	c, cancel := merge(ctx, r.stop)
	defer cancel()
	list, err := r.store.ListBlobReferences(c)
	r.seen.Add(int64(len(list)))
	return list, err
}

func (r *refsView) WalkBlobReferences(ctx context.Context, fn func(cairn.BlobReference) error) error {
	c, cancel := merge(ctx, r.stop)
	defer cancel()
	return r.store.WalkBlobReferences(c, func(ref cairn.BlobReference) error {
		r.seen.Add(1)
		return fn(ref)
	})
}

// ReadBlobGC reads references, claims and GC records; stop ends it, like the
// walk, and the references seen are counted.
func (r *refsView) ReadBlobGC(ctx context.Context, fn func(cairn.BlobReference) error) (cairn.BlobGCView, error) {
	c, cancel := merge(ctx, r.stop)
	defer cancel()
	count := func(ref cairn.BlobReference) error {
		r.seen.Add(1)
		return fn(ref)
	}
	if r.mirrored != nil {
		return r.mirrored.ReadBlobGC(c, count)
	}
	return r.store.ReadBlobGC(c, count)
}

// MarkBlobs, BeginBlobDeletes and DropBlobRecords are the sweep's steps
// before a delete: stop ends them, so a signal stops the run before it starts
// a delete. Each is a write of the guarded store, so a sweeper that lost its
// lock changes nothing.
func (r *refsView) MarkBlobs(ctx context.Context, keys []string, since float64) ([]cairn.GCRecord, error) {
	c, cancel := merge(ctx, r.stop)
	defer cancel()
	return r.store.MarkBlobs(c, keys, since)
}

func (r *refsView) BeginBlobDeletes(ctx context.Context, recs []cairn.GCRecord) ([]cairn.GCRecord, error) {
	c, cancel := merge(ctx, r.stop)
	defer cancel()
	return r.store.BeginBlobDeletes(c, recs)
}

func (r *refsView) DropBlobRecords(ctx context.Context, recs []cairn.GCRecord) error {
	c, cancel := merge(ctx, r.stop)
	defer cancel()
	return r.store.DropBlobRecords(c, recs)
}

// EndBlobDeletes settles the deletes the bucket answered. It runs on the
// sweep's context, not stop: like the delete batch in flight, it finishes
// after a signal, so that writers do not wait for the next run.
func (r *refsView) EndBlobDeletes(ctx context.Context, recs []cairn.GCRecord, deleted bool) error {
	return r.store.EndBlobDeletes(ctx, recs, deleted)
}

// blobsView is the bucket as the sweep sees it: listings end when stop ends;
// deletes run on the sweep's context, so the batch in flight finishes.
type blobsView struct {
	sweep.Blobs
	stop context.Context
}

// PutIfAbsent, Head and Get are the bucket's, for the sweep's marker and
// the binding registry (bucket.Bind); a bucket without them fails them.
func (b blobsView) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	p, ok := b.Blobs.(bucket.Putter)
	if !ok {
		return false, fmt.Errorf("%w: %T", bucket.ErrCannotBind, b.Blobs)
	}
	return p.PutIfAbsent(ctx, key, data)
}

func (b blobsView) Head(ctx context.Context, key string) (bucket.Object, error) {
	r, ok := b.Blobs.(bucket.Reader)
	if !ok {
		return bucket.Object{}, fmt.Errorf("%w: %T", bucket.ErrCannotBind, b.Blobs)
	}
	return r.Head(ctx, key)
}

func (b blobsView) Get(ctx context.Context, key string) ([]byte, error) {
	r, ok := b.Blobs.(bucket.Reader)
	if !ok {
		return nil, fmt.Errorf("%w: %T", bucket.ErrCannotBind, b.Blobs)
	}
	return r.Get(ctx, key)
}

func (b blobsView) List(ctx context.Context, prefix, token string, limit int) (bucket.Page, error) {
	c, cancel := merge(ctx, b.stop)
	defer cancel()
	return b.Blobs.List(c, prefix, token, limit)
}

// fullRun, when a full run is due (RunOptions.FullRunEvery), compares the
// mirror with a full walk at one revision (etcdstore.Mirrored.Check) and
// reports true: the run's sweep then lists the bucket too. When they differ
// it returns an error matching etcdstore.ErrMirrorMismatch: the run deletes
// nothing, and the discarded mirror is rebuilt by the next run. The schedule
// is the process's: a restart starts it again.
func (s *Sweeper) fullRun(ctx, stop context.Context, x *etcdstore.Mirrored, log *slog.Logger) (bool, error) {
	defer s.observeMirror(x.Mirror())
	if s.opts.FullRunEvery <= 0 || time.Since(s.lastFull) < s.opts.FullRunEvery {
		return false, nil
	}
	c, cancel := merge(ctx, stop)
	defer cancel()
	log.Info("full run: comparing the mirror with a walk of every reference, then listing the bucket", "phase", "full-run")
	err := x.Check(c)
	if errors.Is(err, etcdstore.ErrMirrorMismatch) {
		s.metrics.mirrorMismatch()
		log.Error("full run: the mirror differs from the walk; nothing is deleted, the mirror is rebuilt", "phase", "full-run", "error", err)
		return true, err
	}
	if err != nil {
		return true, fmt.Errorf("full run: %w", err)
	}
	s.lastFull = time.Now()
	log.Info("full run: the mirror equals the walk", "phase", "full-run", "revision", x.Mirror().Revision())
	return true, nil
}

// incrementalView is the mirror as the sweep's source of candidates
// (sweep.Incremental): stop ends its reads, as it ends the walk's.
type incrementalView struct {
	*etcdstore.Mirrored
	stop context.Context
}

func (v incrementalView) Sync(ctx context.Context) (int64, error) {
	c, cancel := merge(ctx, v.stop)
	defer cancel()
	return v.Mirrored.Sync(c)
}

func (v incrementalView) ReadGC(ctx context.Context) (cairn.BlobGCView, int64, error) {
	c, cancel := merge(ctx, v.stop)
	defer cancel()
	return v.Mirrored.ReadGC(c)
}

// observeMirror publishes the mirror's counters.
func (s *Sweeper) observeMirror(m *etcdstore.Mirror) {
	s.metrics.observeMirror(m.Stats(), m.Revision())
}
