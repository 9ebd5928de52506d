package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/cairnstore/cairn"
)

// PruneOptions configure Prune. At least one rule (Keep, MaxAge, DeleteIdle)
// is required; see Policy for what each does and how they combine.
type PruneOptions struct {
	// Keep is the number of checkpoints each thread keeps: its head and the
	// Keep-1 checkpoints before it on the parent chain. Zero turns the rule
	// off; it must not be negative.
	Keep int
	// MaxAge prunes chain checkpoints created more than MaxAge ago; see
	// Policy.MaxAge.
	MaxAge time.Duration
	// DeleteIdle removes whole threads whose head is older than it; see
	// Policy.DeleteIdle. The store must be a cairn.ThreadDeleter.
	DeleteIdle time.Duration
	// Protect and ProtectLabelPrefix mark the checkpoints no rule removes;
	// see Policy.
	Protect            []string
	ProtectLabelPrefix string
	// Now returns the time ages are judged by, taken once per prune. Nil
	// selects time.Now.
	Now func() time.Time
	// PageSize is the number of thread ids asked for per ListThreads call;
	// zero lets the store choose. It must not be negative.
	PageSize int
	// DryRun removes nothing and takes no writer lease: it reads each
	// thread's head and checkpoints and reports what a prune would remove,
	// decided by the same code (Policy.Plan) on the same read. Without
	// leases it cannot tell which threads are busy, so it reports none as
	// Busy.
	DryRun bool
	// Apply, when not nil, replaces the listing and the policy: Prune does
	// exactly what these plans (an earlier dry run's Plans) say. It first
	// reads every planned thread and returns an error matching ErrPlanStale,
	// having removed nothing, when one changed since (another head, other
	// checkpoints on the chain); each thread is checked again under its
	// writer lease before its removal.
	Apply []ThreadPlan
	// Logger receives the log records. Nil discards them.
	Logger *slog.Logger
}

// ErrPlanStale: the store changed since the plan was made, so applying it
// could remove what the plan did not show.
var ErrPlanStale = errors.New("sweep: the store changed since the plan was made")

// ThreadPruned is the number of checkpoints removed from one thread.
type ThreadPruned struct {
	ThreadID string `json:"threadId"`
	Removed  int    `json:"removed"`
	// ThreadDeleted says the whole thread went (DeleteIdle).
	ThreadDeleted bool `json:"threadDeleted,omitempty"`
}

// PruneReport tells what Prune did.
type PruneReport struct {
	// DryRun says nothing was removed; the counts are what a prune would
	// remove.
	DryRun bool `json:"dryRun"`
	// Now is the time ages were judged by.
	Now time.Time `json:"now"`
	// Threads is the number of threads visited.
	Threads int `json:"threads"`
	// Pruned lists the threads that lost checkpoints, in the order visited
	// (byte order of their ids), with how many each lost.
	Pruned []ThreadPruned `json:"pruned"`
	// Removed is the total number of checkpoints removed, those of deleted
	// threads included.
	Removed int `json:"removed"`
	// ThreadsDeleted is the number of threads removed entirely.
	ThreadsDeleted int `json:"threadsDeleted"`
	// Protected is the number of protected checkpoints that the rules would
	// have removed without their protection.
	Protected int `json:"protected"`
	// Plans are the plans of the threads that lost checkpoints, in the
	// order of Pruned, with the removed ids; PruneOptions.Apply takes them.
	Plans []ThreadPlan `json:"plans"`
	// Busy are the threads skipped because another writer held their lease.
	Busy []string `json:"busy"`
	// UnderAlarm counts the threads pruned with deletes only
	// (cairn.AlarmPruner) because the store was full (cairn.ErrStoreFull):
	// their writer lease could not be taken.
	UnderAlarm int `json:"underAlarm,omitempty"`
	// Released counts, by blob key, the references the removals dropped;
	// a dry run's sweep (Options.Released) subtracts them.
	Released map[string]int `json:"-"`
	// Duration is how long the prune took.
	Duration time.Duration `json:"duration"`
}

// LogValue summarises the report, with counts instead of lists. The dry run
// flag is not in it: the records that carry a report carry it already.
func (r PruneReport) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("threads", r.Threads),
		slog.Int("pruned_threads", len(r.Pruned)),
		slog.Int("removed", r.Removed),
		slog.Int("threads_deleted", r.ThreadsDeleted),
		slog.Int("protected", r.Protected),
		slog.Int("busy", len(r.Busy)),
		slog.Int("under_alarm", r.UnderAlarm),
		slog.String("duration", r.Duration.String()),
	)
}

// PruneOptions returns prune options with the rules of p.
func (p Policy) PruneOptions() PruneOptions {
	return PruneOptions{Keep: p.Keep, MaxAge: p.MaxAge, DeleteIdle: p.DeleteIdle, Protect: p.Protect, ProtectLabelPrefix: p.ProtectLabelPrefix}
}

func (o PruneOptions) policy() Policy {
	return Policy{Keep: o.Keep, MaxAge: o.MaxAge, DeleteIdle: o.DeleteIdle, Protect: o.Protect, ProtectLabelPrefix: o.ProtectLabelPrefix}
}

func (o PruneOptions) validate() (PruneOptions, error) {
	if o.Apply == nil {
		if err := o.policy().Validate(); err != nil {
			return o, err
		}
	}
	if o.PageSize < 0 {
		return o, fmt.Errorf("%w: PageSize must not be negative, got %d", ErrInvalidArgument, o.PageSize)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o, nil
}

// Prune applies the retention rules of opts to every thread of the store. It
// pages through the threads with cairn.ThreadLister and, for each, takes the
// thread's writer lease, reads its head and checkpoints, decides with
// Policy.Plan, removes with cairn.Pruner.DeleteCheckpoints or
// cairn.ThreadDeleter.DeleteThread, and releases the lease. A thread whose
// lease another writer holds (cairn.ErrWriterConflict), or takes over before
// the removal commits (cairn.ErrWriterLost: nothing of it was removed), is
// skipped and reported as Busy. A dry run makes the same decisions on the same reads
// without the lease and removes nothing.
//
// It returns an error matching ErrInvalidArgument for invalid rules or a
// negative PageSize, and one matching cairn.ErrUnsupported when the store is
// not a cairn.ThreadLister and cairn.Pruner (and, with DeleteIdle, a
// cairn.ThreadDeleter), before it does anything. With Apply it returns an
// error matching ErrPlanStale, see PruneOptions.Apply. Any other error stops
// it and is returned with the report so far; context errors are returned as
// they are.
func Prune(ctx context.Context, store cairn.Store, opts PruneOptions) (PruneReport, error) {
	began := time.Now()
	rep := PruneReport{DryRun: opts.DryRun, Released: map[string]int{}}
	opts, err := opts.validate()
	if err != nil {
		return rep, err
	}
	rep.Now = opts.Now()
	lister, ok := store.(cairn.ThreadLister)
	if !ok && opts.Apply == nil {
		return rep, fmt.Errorf("sweep: prune: the store cannot list its threads: %w", cairn.ErrUnsupported)
	}
	if _, ok := store.(cairn.Pruner); !ok {
		return rep, fmt.Errorf("sweep: prune: the store cannot delete checkpoints: %w", cairn.ErrUnsupported)
	}
	deletes := opts.DeleteIdle > 0 || slices.ContainsFunc(opts.Apply, func(p ThreadPlan) bool { return p.DeleteThread })
	if _, ok := store.(cairn.ThreadDeleter); !ok && deletes {
		return rep, fmt.Errorf("sweep: prune: the store cannot delete threads: %w", cairn.ErrUnsupported)
	}
	p := &pruner{store: store, opts: opts, rep: &rep, log: opts.Logger, policy: opts.policy()}
	if opts.Apply != nil {
		err = p.apply(ctx)
	} else {
		err = p.all(ctx, lister)
	}
	rep.Duration = time.Since(began)
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelError
	}
	p.log.Log(ctx, level, "prune finished", "phase", "prune", "report", rep, "error", err)
	return rep, err
}

type pruner struct {
	store  cairn.Store
	opts   PruneOptions
	policy Policy
	rep    *PruneReport
	log    *slog.Logger
}

func (p *pruner) all(ctx context.Context, lister cairn.ThreadLister) error {
	after := ""
	for {
		threads, err := lister.ListThreads(ctx, after, p.opts.PageSize)
		if err != nil {
			return wrap(err, "sweep: prune: list threads after %q", after)
		}
		if len(threads) == 0 {
			return nil
		}
		for _, thread := range threads {
			if thread <= after {
				return fmt.Errorf("sweep: prune: ListThreads returned %q after %q: the listing does not advance", thread, after)
			}
			after = thread
			plan := func(head string, list []cairn.Checkpoint) (ThreadPlan, error) {
				return p.policy.Plan(p.rep.Now, thread, head, list), nil
			}
			if err := p.thread(ctx, thread, plan); err != nil {
				return err
			}
		}
	}
}

// apply checks every plan against the store, then carries them out.
func (p *pruner) apply(ctx context.Context) error {
	for _, tp := range p.opts.Apply {
		head, list, err := readThread(ctx, p.store, tp.ThreadID)
		if err != nil {
			return wrap(err, "sweep: apply: read thread %q", tp.ThreadID)
		}
		if err := tp.check(head, list); err != nil {
			return err
		}
	}
	for _, tp := range p.opts.Apply {
		plan := func(head string, list []cairn.Checkpoint) (ThreadPlan, error) {
			return tp, tp.check(head, list)
		}
		if err := p.thread(ctx, tp.ThreadID, plan); err != nil {
			return err
		}
	}
	return nil
}

// check returns an error matching ErrPlanStale unless the plan removes the
// same checkpoints from the thread as it is now.
func (tp ThreadPlan) check(head string, list []cairn.Checkpoint) error {
	var now ThreadPlan
	if tp.DeleteThread {
		now = ThreadPlan{Head: head, DeleteThread: true}
		for _, c := range list {
			now.Removed = append(now.Removed, c.ID)
		}
	} else {
		now = Policy{Keep: max(tp.Keep, 1)}.Plan(time.Time{}, tp.ThreadID, head, list)
	}
	if head != tp.Head || !slices.Equal(now.Removed, tp.Removed) {
		return fmt.Errorf("%w: thread %q: planned head %q removing %d checkpoints, now head %q removing %d",
			ErrPlanStale, tp.ThreadID, tp.Head, len(tp.Removed), head, len(now.Removed))
	}
	return nil
}

// thread plans one thread from one read (under its writer lease unless dry)
// and carries the plan out.
func (p *pruner) thread(ctx context.Context, thread string, plan func(head string, list []cairn.Checkpoint) (ThreadPlan, error)) error {
	p.rep.Threads++
	decide := func() (ThreadPlan, error) {
		head, list, err := readThread(ctx, p.store, thread)
		if err != nil {
			return ThreadPlan{}, err
		}
		return plan(head, list)
	}
	var tp ThreadPlan
	var err error
	if p.opts.DryRun {
		tp, err = decide()
	} else {
		tp, err = cairn.WithWriter(ctx, p.store, thread, func(w cairn.Writer) (ThreadPlan, error) {
			tp, err := decide()
			if err != nil || len(tp.Removed) == 0 {
				return tp, err
			}
			return tp, p.remove(ctx, w, &tp)
		})
		if errors.Is(err, cairn.ErrStoreFull) {
			if ap, ok := p.store.(cairn.AlarmPruner); ok {
				tp, err = p.underAlarm(ctx, ap, thread, decide)
			}
		}
	}
	switch {
	case errors.Is(err, cairn.ErrWriterConflict), errors.Is(err, cairn.ErrWriterLost):
		// Another writer holds the thread, or took it over while the prune
		// held it (a writer whose clock runs ahead): the prune's fenced write
		// was refused, nothing of the thread was removed, and the thread is
		// busy like any other.
		p.rep.Busy = append(p.rep.Busy, thread)
		p.log.InfoContext(ctx, "thread skipped: another writer holds it", "phase", "prune", "thread", thread, "err", err)
		return nil
	case err != nil:
		return wrap(err, "sweep: prune thread %q", thread)
	}
	p.rep.Protected += tp.Protected
	if len(tp.Removed) == 0 {
		return nil
	}
	p.rep.Pruned = append(p.rep.Pruned, ThreadPruned{ThreadID: thread, Removed: len(tp.Removed), ThreadDeleted: tp.DeleteThread})
	p.rep.Plans = append(p.rep.Plans, tp)
	p.rep.Removed += len(tp.Removed)
	for k, n := range tp.Released {
		p.rep.Released[k] += n
	}
	msg := "thread pruned"
	if tp.DeleteThread {
		p.rep.ThreadsDeleted++
		msg = "thread deleted: idle"
	}
	p.log.InfoContext(ctx, msg, "phase", "prune", "thread", thread, "removed", len(tp.Removed), "protected", tp.Protected)
	p.log.DebugContext(ctx, "checkpoints removed", "phase", "prune", "thread", thread, "checkpoints", tp.Removed)
	return nil
}

// underAlarm plans a thread again and carries the plan out with deletes
// only (cairn.AlarmPruner), for a store that refused the writer lease or the
// prune with cairn.ErrStoreFull. A plan to delete the thread (idle) keeps its
// head instead: deleting the thread writes its record. The removed ids are
// the store's answer.
func (p *pruner) underAlarm(ctx context.Context, ap cairn.AlarmPruner, thread string, decide func() (ThreadPlan, error)) (ThreadPlan, error) {
	tp, err := decide()
	if err != nil || len(tp.Removed) == 0 {
		return tp, err
	}
	keep := tp.Keep
	if tp.DeleteThread {
		tp.DeleteThread, keep = false, 1
	}
	ids, err := ap.KeepNewestUnderAlarm(ctx, thread, keep)
	p.rep.UnderAlarm++
	p.log.InfoContext(ctx, "thread pruned with deletes only: the store is full", "phase", "prune", "thread", thread, "removed", len(ids))
	if !slices.Equal(ids, tp.Removed) {
		tp.Removed = ids
	}
	return tp, err
}

// remove carries out tp with the writer w. The removed ids are the store's
// answer; under the lease they are the plan's.
func (p *pruner) remove(ctx context.Context, w cairn.Writer, tp *ThreadPlan) error {
	var ids []string
	var err error
	if tp.DeleteThread {
		ids, err = p.store.(cairn.ThreadDeleter).DeleteThread(ctx, cairn.DeleteThreadInput{ThreadID: tp.ThreadID, Writer: w})
	} else {
		ids, err = p.store.(cairn.Pruner).DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: tp.ThreadID, Keep: float64(tp.Keep), Writer: w})
	}
	if err != nil {
		return err
	}
	if !slices.Equal(ids, tp.Removed) {
		p.log.WarnContext(ctx, "the store removed other checkpoints than planned", "phase", "prune", "thread", tp.ThreadID,
			"planned", len(tp.Removed), "removed", len(ids))
		tp.Removed = ids
	}
	return nil
}

// readThread reads the thread's head and checkpoints.
func readThread(ctx context.Context, store cairn.Store, thread string) (string, []cairn.Checkpoint, error) {
	head, err := store.GetHead(ctx, thread)
	if err != nil {
		return "", nil, err
	}
	list, err := store.List(ctx, thread)
	if err != nil {
		return "", nil, err
	}
	return head, list, nil
}

// RunOptions configure Run.
type RunOptions struct {
	// Keep is the number of checkpoints each thread keeps; see
	// PruneOptions.Keep.
	Keep int
	// Policy holds the other retention rules; a Keep above zero replaces
	// Policy.Keep.
	Policy Policy
	// Apply is PruneOptions.Apply: when not nil, the prune carries out these
	// plans instead of the policy.
	Apply []ThreadPlan
	// ThreadPageSize is PruneOptions.PageSize.
	ThreadPageSize int
	// Sweep configures the sweep. Its DryRun, Now and Logger apply to the
	// prune too. In a dry run the sweep counts the references the prune
	// would have released as gone (Options.Released), so that its report
	// is the real run's. Its Others are swept with the store, not pruned:
	// prune them first (and pass their Released in a dry run).
	Sweep Options
}

// RunReport tells what Run did.
type RunReport struct {
	Prune PruneReport `json:"prune"`
	Sweep Report      `json:"sweep"`
}

// Run does what the upstream page asks in its order: apply the retention
// rules to every thread (Prune), then sweep (Sweep), so that the sweep also
// deletes the blobs only the removed checkpoints used. A dry run reports
// what the real run would do on the same state, the blobs freed by its own
// prune included.
//
// It checks both sets of options first and returns an error matching
// ErrInvalidArgument before it does anything. When the prune fails it does not
// sweep and returns the prune's error; otherwise it returns the sweep's. A
// thread busy with another writer does not stop it.
func Run(ctx context.Context, store cairn.Store, blobs Blobs, opts RunOptions) (RunReport, error) {
	var rep RunReport
	popts := opts.Policy.PruneOptions()
	if opts.Keep > 0 {
		popts.Keep = opts.Keep
	}
	popts.Apply, popts.PageSize, popts.DryRun, popts.Logger = opts.Apply, opts.ThreadPageSize, opts.Sweep.DryRun, opts.Sweep.Logger
	popts, err := popts.validate()
	if err != nil {
		return rep, err
	}
	sopts, err := opts.Sweep.validate()
	if err != nil {
		return rep, err
	}
	// One now for both, so that a dry run and its sweep judge ages alike.
	now := sopts.Now()
	popts.Now = func() time.Time { return now }
	sopts.Now = popts.Now
	rep.Prune, err = Prune(ctx, store, popts)
	if err != nil {
		return rep, err
	}
	if sopts.DryRun {
		sopts.Released = rep.Prune.Released
	}
	rep.Sweep, err = Sweep(ctx, store, blobs, sopts)
	return rep, err
}
