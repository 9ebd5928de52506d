package cairn

import (
	"context"
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
// It returns ErrUnsupported when store is not a Pruner, ErrWriterConflict when
// another writer holds the thread, and the errors of DeleteCheckpoints.
func KeepNewest(ctx context.Context, store Store, threadID string, keep int) ([]string, error) {
	p, ok := store.(Pruner)
	if !ok {
		return nil, fmt.Errorf("keep newest of thread %q: %w", threadID, ErrUnsupported)
	}
	lease, err := store.AcquireWriter(ctx, threadID)
	if err != nil {
		return nil, err
	}
	defer func() {
		// Release even when ctx has ended, so the thread is not left locked
		// until the lease expires; bound the attempt instead.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		lease.Release(rctx)
	}()
	return p.DeleteCheckpoints(ctx, DeleteCheckpointsInput{ThreadID: threadID, Keep: float64(keep), Writer: lease.Writer})
}
