package bench

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cairnstore/cairn/bucket"
)

// The kinds of bucket request the scale harness counts.
const (
	reqGet = iota
	reqRange
	reqHead
	reqPut
	reqList
	reqDelete
	numReqKinds
)

var reqKindNames = [numReqKinds]string{"GET", "range GET", "HEAD", "PUT", "LIST", "DELETE"}

// reqCounts are request counts by kind.
type reqCounts [numReqKinds]int64

func (a reqCounts) sub(b reqCounts) reqCounts {
	for i := range a {
		a[i] -= b[i]
	}
	return a
}

// reads are the requests that read an object: GET, range GET and HEAD.
func (a reqCounts) reads() int64 { return a[reqGet] + a[reqRange] + a[reqHead] }

func (a reqCounts) String() string {
	var parts []string
	for i, n := range a {
		if n != 0 {
			parts = append(parts, fmt.Sprintf("%s %s", fmtInt(n), reqKindNames[i]))
		}
	}
	if len(parts) == 0 {
		return "no requests"
	}
	return strings.Join(parts, ", ")
}

// countingBucket is an in-process bucket (bucket.Memory) that counts the
// requests it answers by kind, as S3 would bill them (a Delete of up to
// bucket.MaxDeleteKeys keys is one request), and waits latency before
// answering each, as a remote bucket would.
type countingBucket struct {
	mem     *bucket.Memory
	latency time.Duration
	n       [numReqKinds]atomic.Int64
	// created counts the puts that stored a new object, and createdBytes
	// their bytes.
	created, createdBytes atomic.Int64
}

var (
	_ bucket.Bucket      = (*countingBucket)(nil)
	_ bucket.RangeReader = (*countingBucket)(nil)
)

func newCountingBucket(latency time.Duration) *countingBucket {
	return &countingBucket{mem: bucket.NewMemory(nil), latency: latency}
}

func (c *countingBucket) counts() reqCounts {
	var out reqCounts
	for i := range out {
		out[i] = c.n[i].Load()
	}
	return out
}

// req counts one request of kind k and waits the latency.
func (c *countingBucket) req(ctx context.Context, k int, n int64) error {
	c.n[k].Add(n)
	if c.latency <= 0 {
		return nil
	}
	t := time.NewTimer(c.latency)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *countingBucket) Get(ctx context.Context, key string) ([]byte, error) {
	if err := c.req(ctx, reqGet, 1); err != nil {
		return nil, err
	}
	return c.mem.Get(ctx, key)
}

func (c *countingBucket) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := c.req(ctx, reqRange, 1); err != nil {
		return nil, err
	}
	return c.mem.GetRange(ctx, key, off, n)
}

func (c *countingBucket) Head(ctx context.Context, key string) (bucket.Object, error) {
	if err := c.req(ctx, reqHead, 1); err != nil {
		return bucket.Object{}, err
	}
	return c.mem.Head(ctx, key)
}

func (c *countingBucket) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	if err := c.req(ctx, reqPut, 1); err != nil {
		return false, err
	}
	created, err := c.mem.PutIfAbsent(ctx, key, data)
	if created {
		c.created.Add(1)
		c.createdBytes.Add(int64(len(data)))
	}
	return created, err
}

func (c *countingBucket) List(ctx context.Context, prefix, token string, limit int) (bucket.Page, error) {
	if err := c.req(ctx, reqList, 1); err != nil {
		return bucket.Page{}, err
	}
	return c.mem.List(ctx, prefix, token, limit)
}

func (c *countingBucket) Delete(ctx context.Context, keys []string) (bucket.DeleteResult, error) {
	if len(keys) > 0 {
		if err := c.req(ctx, reqDelete, int64((len(keys)+bucket.MaxDeleteKeys-1)/bucket.MaxDeleteKeys)); err != nil {
			return bucket.DeleteResult{}, err
		}
	}
	return c.mem.Delete(ctx, keys)
}
