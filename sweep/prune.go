package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cairnstore/cairn"
)

// PruneOptions configure Prune. Keep is required.
type PruneOptions struct {
	// Keep is the number of checkpoints each thread keeps: its head and the
	// Keep-1 checkpoints before it on the parent chain. It must be at least 1.
	Keep int
	// PageSize is the number of thread ids asked for per ListThreads call;
	// zero lets the store choose. It must not be negative.
	PageSize int
	// DryRun removes nothing and takes no writer lease: it reads each
	// thread's head and checkpoints and reports how many a prune would
	// remove. Without leases it cannot tell which threads are busy, so it
	// reports none as Busy.
	DryRun bool
	// Logger receives the log records. Nil discards them.
	Logger *slog.Logger
}

// ThreadPruned is the number of checkpoints removed from one thread.
type ThreadPruned struct {
	ThreadID string `json:"threadId"`
	Removed  int    `json:"removed"`
}

// PruneReport tells what Prune did.
type PruneReport struct {
	// DryRun says nothing was removed; the counts are what a prune would
	// remove.
	DryRun bool `json:"dryRun"`
	// Threads is the number of threads visited.
	Threads int `json:"threads"`
	// Pruned lists the threads that lost checkpoints, in the order visited
	// (byte order of their ids), with how many each lost.
	Pruned []ThreadPruned `json:"pruned"`
	// Removed is the total number of checkpoints removed.
	Removed int `json:"removed"`
	// Busy are the threads skipped because another writer held their lease.
	Busy []string `json:"busy"`
	// Duration is how long the prune took.
	Duration time.Duration `json:"duration"`
}

// LogValue summarises the report, with counts instead of lists.
func (r PruneReport) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Bool("dry_run", r.DryRun),
		slog.Int("threads", r.Threads),
		slog.Int("pruned_threads", len(r.Pruned)),
		slog.Int("removed", r.Removed),
		slog.Int("busy", len(r.Busy)),
		slog.Duration("duration", r.Duration),
	)
}

func (o PruneOptions) validate() (PruneOptions, error) {
	switch {
	case o.Keep < 1:
		return o, fmt.Errorf("%w: Keep must be at least 1, got %d", ErrInvalidArgument, o.Keep)
	case o.PageSize < 0:
		return o, fmt.Errorf("%w: PageSize must not be negative, got %d", ErrInvalidArgument, o.PageSize)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o, nil
}

// Prune keeps the newest opts.Keep checkpoints of every thread of the store.
// It pages through the threads with cairn.ThreadLister and calls
// cairn.KeepNewest on each, which takes the thread's writer lease, prunes and
// releases the lease. A thread whose lease another writer holds
// (cairn.ErrWriterConflict) is skipped and reported as Busy.
//
// It returns an error matching ErrInvalidArgument for a Keep below 1 or a
// negative PageSize, and one matching cairn.ErrUnsupported when the store is
// not a cairn.ThreadLister and cairn.Pruner, before it does anything. Any other
// error stops it and is returned with the report so far; context errors are
// returned as they are.
func Prune(ctx context.Context, store cairn.Store, opts PruneOptions) (PruneReport, error) {
	began := time.Now()
	rep := PruneReport{DryRun: opts.DryRun}
	opts, err := opts.validate()
	if err != nil {
		return rep, err
	}
	lister, ok := store.(cairn.ThreadLister)
	if !ok {
		return rep, fmt.Errorf("sweep: prune: the store cannot list its threads: %w", cairn.ErrUnsupported)
	}
	if _, ok := store.(cairn.Pruner); !ok {
		return rep, fmt.Errorf("sweep: prune: the store cannot delete checkpoints: %w", cairn.ErrUnsupported)
	}
	log := opts.Logger
	err = pruneAll(ctx, store, lister, opts, &rep)
	rep.Duration = time.Since(began)
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelError
	}
	log.Log(ctx, level, "prune finished", "phase", "prune", "report", rep, "error", err)
	return rep, err
}

func pruneAll(ctx context.Context, store cairn.Store, lister cairn.ThreadLister, opts PruneOptions, rep *PruneReport) error {
	log := opts.Logger
	after := ""
	for {
		threads, err := lister.ListThreads(ctx, after, opts.PageSize)
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
			rep.Threads++
			var removed int
			if opts.DryRun {
				removed, err = planPrune(ctx, store, thread, opts.Keep)
			} else {
				var ids []string
				ids, err = cairn.KeepNewest(ctx, store, thread, opts.Keep)
				removed = len(ids)
				if err == nil && removed > 0 {
					log.DebugContext(ctx, "checkpoints removed", "phase", "prune", "thread", thread, "checkpoints", ids)
				}
			}
			switch {
			case errors.Is(err, cairn.ErrWriterConflict):
				rep.Busy = append(rep.Busy, thread)
				log.InfoContext(ctx, "thread skipped: another writer holds it", "phase", "prune", "thread", thread)
				continue
			case err != nil:
				return wrap(err, "sweep: prune thread %q", thread)
			}
			if removed > 0 {
				rep.Pruned = append(rep.Pruned, ThreadPruned{ThreadID: thread, Removed: removed})
				rep.Removed += removed
				log.InfoContext(ctx, "thread pruned", "phase", "prune", "thread", thread, "removed", removed, "dry_run", opts.DryRun)
			}
		}
	}
}

// planPrune returns how many checkpoints KeepNewest would remove from the
// thread: those on the parent chain from the head past the first keep.
func planPrune(ctx context.Context, store cairn.Store, thread string, keep int) (int, error) {
	head, err := store.GetHead(ctx, thread)
	if err != nil {
		return 0, err
	}
	list, err := store.List(ctx, thread)
	if err != nil {
		return 0, err
	}
	parent := make(map[string]string, len(list))
	for _, c := range list {
		parent[c.ID] = c.ParentCheckpointID
	}
	chain := 0
	for id := head; id != ""; {
		p, ok := parent[id]
		if !ok {
			break
		}
		chain++
		id = p
	}
	return max(0, chain-keep), nil
}

// RunOptions configure Run.
type RunOptions struct {
	// Keep is the number of checkpoints each thread keeps; see
	// PruneOptions.Keep.
	Keep int
	// ThreadPageSize is PruneOptions.PageSize.
	ThreadPageSize int
	// Sweep configures the sweep. Its DryRun and Logger apply to the prune
	// too.
	Sweep Options
}

// RunReport tells what Run did.
type RunReport struct {
	Prune PruneReport `json:"prune"`
	Sweep Report      `json:"sweep"`
}

// Run does what the upstream page asks in its order: keep the newest
// checkpoints of every thread (Prune), then sweep (Sweep), so that the sweep
// also deletes the blobs only the removed checkpoints used.
//
// It checks both sets of options first and returns an error matching
// ErrInvalidArgument before it does anything. When the prune fails it does not
// sweep and returns the prune's error; otherwise it returns the sweep's. A
// thread busy with another writer does not stop it.
func Run(ctx context.Context, store cairn.Store, blobs Blobs, opts RunOptions) (RunReport, error) {
	var rep RunReport
	popts := PruneOptions{Keep: opts.Keep, PageSize: opts.ThreadPageSize, DryRun: opts.Sweep.DryRun, Logger: opts.Sweep.Logger}
	if _, err := popts.validate(); err != nil {
		return rep, err
	}
	if _, err := opts.Sweep.validate(); err != nil {
		return rep, err
	}
	var err error
	rep.Prune, err = Prune(ctx, store, popts)
	if err != nil {
		return rep, err
	}
	rep.Sweep, err = Sweep(ctx, store, blobs, opts.Sweep)
	return rep, err
}
