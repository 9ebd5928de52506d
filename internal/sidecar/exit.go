package sidecar

import (
	"context"
	"errors"

	"github.com/cairnstore/cairn/sweep"
)

// The exit codes of the sweeper. A script must treat an unknown code as a
// failure.
const (
	// ExitOK: the run completed, also when there was nothing to delete; in
	// --interval mode, a clean stop after SIGTERM or SIGINT.
	ExitOK = 0
	// ExitFailure: the run failed (etcd or bucket unreachable or refusing,
	// a listing error that aborted the sweep, the lock lost), and it deleted
	// nothing more after the failure.
	ExitFailure = 1
	// ExitUsage: a bad flag, environment variable or combination of them.
	ExitUsage = 2
	// ExitPartial: the run completed, but the bucket refused to delete some
	// blobs; the next run retries them.
	ExitPartial = 3
	// ExitVerify: the run completed, but --verify found broken invariants in
	// the store.
	ExitVerify = 4
	// ExitUncovered: the sweep refused to delete anything because the
	// bucket is bound to a prefix (or another etcd cluster's prefix) that this
	// sweeper does not serve, or has cairn objects but no binding registry
	// (sweep.ErrUncovered; docs/shared-buckets.md). Nothing was deleted.
	ExitUncovered = 5
	// ExitLockHeld: with --once, another sweeper held the lock (for longer
	// than --lock-timeout). Nothing was done.
	ExitLockHeld = 11
	// ExitInterrupted: SIGTERM or SIGINT stopped a --once run before it
	// completed. The delete batch in flight finished; later ones were not sent.
	ExitInterrupted = 130
)

// The errors a run ends with, besides those of the store, the bucket and the
// sweep.
var (
	// ErrLockHeld: another sweeper holds the lock.
	ErrLockHeld = errors.New("another sweeper holds the lock")
	// ErrLockLost: the sweeper lost its lock during the run (its etcd session
	// expired, or its lock key was deleted); it stopped before the next write.
	ErrLockLost = errors.New("the sweeper lost its lock")
	// ErrInterrupted: a signal stopped the run.
	ErrInterrupted = errors.New("interrupted")
	// ErrVerifyProblems: --verify found problems in the store.
	ErrVerifyProblems = errors.New("the store has problems")
	// ErrEmptyStore: the store has no checkpoint, yet the sweep would delete
	// blobs; see --allow-empty-store.
	ErrEmptyStore = errors.New("the store has no checkpoints")
)

// ExitCode maps the error a run or the start-up ended with onto the process's
// exit code.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage):
		return ExitUsage
	case errors.Is(err, ErrInterrupted):
		return ExitInterrupted
	case errors.Is(err, ErrLockHeld):
		return ExitLockHeld
	case errors.Is(err, sweep.ErrUncovered):
		return ExitUncovered
	case errors.Is(err, ErrVerifyProblems):
		return ExitVerify
	case errors.Is(err, sweep.ErrIncomplete) && !errors.Is(err, sweep.ErrStopped) && !errors.Is(err, context.Canceled):
		return ExitPartial
	}
	return ExitFailure
}

// Result names the outcome of a run, as the result label of
// cairn_sweeper_runs_total.
func Result(err error) string {
	switch ExitCode(err) {
	case ExitOK:
		return "success"
	case ExitPartial:
		return "partial"
	case ExitVerify:
		return "verify_problems"
	case ExitUncovered:
		return "uncovered"
	case ExitLockHeld:
		return "lock_held"
	case ExitInterrupted:
		return "interrupted"
	}
	if errors.Is(err, ErrLockLost) {
		return "lock_lost"
	}
	return "failure"
}
