package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnstore/cairn"
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

// total is every request of every kind.
func (a reqCounts) total() int64 {
	var n int64
	for _, v := range a {
		n += v
	}
	return n
}

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
//
// With dir set, the bytes of the store's objects (keys under
// cairn.ObjectPrefix, which hold most of the bytes) are kept in files there,
// and the in-memory bucket keeps their keys and upload times only: a run of
// 10^5 kept checkpoints writes tens of GiB of them, more than a process
// should hold, and the process's RSS then tells about the sweeper rather than
// about the bucket.
type countingBucket struct {
	mem *bucket.Memory
	dir string
	// filesOnly: reads come from the files in dir alone (newFileReader).
	filesOnly bool
	latency   time.Duration
	n         [numReqKinds]atomic.Int64
	// created counts the puts that stored a new object, and createdBytes
	// their bytes.
	created, createdBytes atomic.Int64

	// The listing's index: bucket.Memory sorts every key for each page,
	// which makes a listing of n keys cost n²/1000 at the sizes of the
	// harness; the index sorts them once after a change.
	mu     sync.Mutex
	keys   map[string]bool
	sorted []string // nil after a change
}

var (
	_ bucket.Bucket      = (*countingBucket)(nil)
	_ bucket.RangeReader = (*countingBucket)(nil)
)

func newCountingBucket(latency time.Duration, dir string) *countingBucket {
	return &countingBucket{mem: bucket.NewMemory(nil), latency: latency, dir: dir, keys: map[string]bool{}}
}

// file returns the file that holds key's bytes, or "" when the bucket keeps
// them in memory.
func (c *countingBucket) file(key string) string {
	if c.dir == "" || !strings.HasPrefix(key, cairn.ObjectPrefix) {
		return ""
	}
	return filepath.Join(c.dir, strings.ReplaceAll(strings.TrimPrefix(key, cairn.ObjectPrefix), "/", "_"))
}

// read returns the bytes of key, from its file when it has one.
func (c *countingBucket) read(ctx context.Context, key string) ([]byte, error) {
	f := c.file(key)
	if c.filesOnly {
		return readObjectFile(f, key)
	}
	if f == "" {
		return c.mem.Get(ctx, key)
	}
	if _, err := c.mem.Head(ctx, key); err != nil {
		return nil, err
	}
	return os.ReadFile(f)
}

// newFileReader returns a countingBucket that answers reads of the store's
// objects from the files another process's countingBucket keeps in dir, and
// holds nothing itself: the sweeper process of B18 reads through it.
func newFileReader(dir string) *countingBucket {
	c := newCountingBucket(0, dir)
	c.filesOnly = true
	return c
}

// readObjectFile reads the object key from its file f ("" when key is not
// an object's).
func readObjectFile(f, key string) ([]byte, error) {
	if f == "" {
		return nil, fmt.Errorf("%w: %s (a reader of the objects' files only)", bucket.ErrNotFound, key)
	}
	b, err := os.ReadFile(f)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", bucket.ErrNotFound, key)
	}
	return b, err
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
	return c.read(ctx, key)
}

func (c *countingBucket) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := c.req(ctx, reqRange, 1); err != nil {
		return nil, err
	}
	b, err := c.read(ctx, key)
	if err != nil {
		return nil, err
	}
	if off < 0 || n < 0 || off+n > int64(len(b)) {
		return nil, fmt.Errorf("%w: %s: %d bytes from %d of %d", bucket.ErrInvalidRange, key, n, off, len(b))
	}
	return b[off : off+n], nil
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
	stored := data
	if f := c.file(key); f != "" {
		// The file first, under a name of its own and renamed: an object's
		// bytes never change (its key is their digest), so a second put of
		// the key rewrites the same bytes.
		tmp := fmt.Sprintf("%s.%d.tmp", f, c.n[reqPut].Load())
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return false, err
		}
		if err := os.Rename(tmp, f); err != nil {
			return false, err
		}
		stored = nil
	}
	created, err := c.mem.PutIfAbsent(ctx, key, stored)
	if created {
		c.mu.Lock()
		c.keys[key], c.sorted = true, nil
		c.mu.Unlock()
		c.created.Add(1)
		c.createdBytes.Add(int64(len(data)))
	}
	return created, err
}

func (c *countingBucket) List(ctx context.Context, prefix, token string, limit int) (bucket.Page, error) {
	if err := c.req(ctx, reqList, 1); err != nil {
		return bucket.Page{}, err
	}
	if limit <= 0 || limit > bucket.MaxPageSize {
		limit = bucket.MaxPageSize
	}
	c.mu.Lock()
	if c.sorted == nil {
		c.sorted = make([]string, 0, len(c.keys))
		for k := range c.keys {
			c.sorted = append(c.sorted, k)
		}
		slices.Sort(c.sorted)
	}
	sorted := c.sorted
	c.mu.Unlock()
	from := max(prefix, token)
	i, _ := slices.BinarySearch(sorted, from)
	var page bucket.Page
	for ; i < len(sorted) && strings.HasPrefix(sorted[i], prefix); i++ {
		k := sorted[i]
		if k <= token {
			continue
		}
		if len(page.Objects) == limit {
			page.NextToken = page.Objects[limit-1].Key
			break
		}
		o, err := c.mem.Head(ctx, k)
		if errors.Is(err, bucket.ErrNotFound) {
			continue
		}
		if err != nil {
			return bucket.Page{}, err
		}
		page.Objects = append(page.Objects, o)
	}
	return page, nil
}

func (c *countingBucket) Delete(ctx context.Context, keys []string) (bucket.DeleteResult, error) {
	if len(keys) > 0 {
		if err := c.req(ctx, reqDelete, int64((len(keys)+bucket.MaxDeleteKeys-1)/bucket.MaxDeleteKeys)); err != nil {
			return bucket.DeleteResult{}, err
		}
	}
	res, err := c.mem.Delete(ctx, keys)
	c.mu.Lock()
	for _, k := range res.Deleted {
		delete(c.keys, k)
	}
	c.sorted = nil
	c.mu.Unlock()
	for _, k := range res.Deleted {
		if f := c.file(k); f != "" {
			if rerr := os.Remove(f); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				return res, rerr
			}
		}
	}
	return res, err
}
