package cairn

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// releaseTimeout bounds the release at the end of KeepNewest.
const releaseTimeout = 10 * time.Second

// KeepNewest keeps the newest keep checkpoints of a thread, following the
// parent chain from the head, and returns the removed ids, oldest first. It
// acquires the thread's writer lease, prunes with DeleteCheckpoints and
// releases the lease, also when pruning fails.
//
// When the store is full (the lease or the prune fails with ErrStoreFull) and
// store is an AlarmPruner, it prunes with AlarmPruner.KeepNewestUnderAlarm
// instead, which frees space with deletes only.
//
// It returns ErrUnsupported when store is not a Pruner, ErrWriterConflict when
// another writer holds the thread, and the errors of DeleteCheckpoints (and of
// KeepNewestUnderAlarm).
func KeepNewest(ctx context.Context, store Store, threadID string, keep int) ([]string, error) {
	p, ok := store.(Pruner)
	if !ok {
		return nil, fmt.Errorf("keep newest of thread %q: %w", threadID, ErrUnsupported)
	}
	ids, err := WithWriter(ctx, store, threadID, func(w Writer) ([]string, error) {
		return p.DeleteCheckpoints(ctx, DeleteCheckpointsInput{ThreadID: threadID, Keep: float64(keep), Writer: w})
	})
	if ap, ok := store.(AlarmPruner); ok && errors.Is(err, ErrStoreFull) {
		return ap.KeepNewestUnderAlarm(ctx, threadID, keep)
	}
	return ids, err
}

// DeleteThread removes the whole thread under its writer lease: it acquires
// the lease, calls ThreadDeleter.DeleteThread and releases the lease, also
// when the delete fails. It returns ErrUnsupported when store is not a
// ThreadDeleter, ErrWriterConflict when another writer holds the thread, and
// the errors of ThreadDeleter.DeleteThread.
func DeleteThread(ctx context.Context, store Store, threadID string) ([]string, error) {
	d, ok := store.(ThreadDeleter)
	if !ok {
		return nil, fmt.Errorf("delete thread %q: %w", threadID, ErrUnsupported)
	}
	return WithWriter(ctx, store, threadID, func(w Writer) ([]string, error) {
		return d.DeleteThread(ctx, DeleteThreadInput{ThreadID: threadID, Writer: w})
	})
}

// WithWriter acquires the thread's writer lease, calls fn with it and
// releases the lease, also when fn fails or ctx has ended (the release is
// then bounded by a timeout of its own). It returns the errors of
// AcquireWriter (ErrWriterConflict when another writer holds the thread)
// and those of fn.
func WithWriter[T any](ctx context.Context, store Store, threadID string, fn func(Writer) (T, error)) (T, error) {
	lease, err := store.AcquireWriter(ctx, threadID)
	if err != nil {
		var zero T
		return zero, err
	}
	defer func() {
		// Release even when ctx has ended, so the thread is not left locked
		// until the lease expires; bound the attempt instead.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		lease.Release(rctx)
	}()
	return fn(lease.Writer)
}
