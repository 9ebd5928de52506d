package bucket

import (
	"context"
	"fmt"
)

// batchDeleter deletes 1..MaxDeleteKeys valid, distinct keys in one request.
// A non-nil err means the request failed as a whole; otherwise every key is in
// deleted or failed.
type batchDeleter func(ctx context.Context, keys []string) (deleted []string, failed []KeyError, err error)

// deleteInBatches implements the Deleter contract on top of a one-request
// delete: it drops repeats, fails invalid keys without sending them, sends
// the rest in requests of at most MaxDeleteKeys keys and never an empty one,
// and stops at the first request that fails as a whole.
func deleteInBatches(ctx context.Context, keys []string, del batchDeleter) (DeleteResult, error) {
	var res DeleteResult
	valid := make([]string, 0, len(keys))
	for _, k := range distinct(keys) {
		if err := checkKey("DeleteObjects", k); err != nil {
			res.Failed = append(res.Failed, KeyError{Key: k, Err: err})
			continue
		}
		valid = append(valid, k)
	}
	for start := 0; start < len(valid); start += MaxDeleteKeys {
		batch := valid[start:min(start+MaxDeleteKeys, len(valid))]
		if err := ctx.Err(); err != nil {
			failRest(&res, valid[start:], fmt.Errorf("%w: %w", ErrNotAttempted, err))
			return res, err
		}
		deleted, failed, err := del(ctx, batch)
		if err != nil {
			for _, k := range batch {
				res.Failed = append(res.Failed, KeyError{Key: k, Err: err})
			}
			failRest(&res, valid[start+len(batch):], fmt.Errorf("%w: an earlier DeleteObjects request failed: %w", ErrNotAttempted, err))
			return res, err
		}
		res.Deleted = append(res.Deleted, deleted...)
		res.Failed = append(res.Failed, failed...)
	}
	if len(res.Failed) > 0 {
		return res, fmt.Errorf("bucket: delete: %w: %d of %d keys, the first %s", ErrPartialDelete, len(res.Failed), len(res.Failed)+len(res.Deleted), res.Failed[0])
	}
	return res, nil
}

// failRest records keys as not attempted because of cause.
func failRest(res *DeleteResult, keys []string, cause error) {
	for _, k := range keys {
		res.Failed = append(res.Failed, KeyError{Key: k, Err: cause})
	}
}
