package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
)

// countingObjects counts the object reads and puts of a store.
type countingObjects struct {
	etcdstore.ObjectStore
	gets, bytes       atomic.Int64
	puts, putBytes    atomic.Int64 // PutIfAbsent calls and their bytes
	created, creBytes atomic.Int64 // those that stored a new object
}

// List passes through to the bucket, which an etcd store needs to record its
// binding (bucket.Binder); it is not counted.
func (c *countingObjects) List(ctx context.Context, prefix, token string, limit int) (bucket.Page, error) {
	l, ok := c.ObjectStore.(bucket.Lister)
	if !ok {
		return bucket.Page{}, fmt.Errorf("bench: %T cannot list", c.ObjectStore)
	}
	return l.List(ctx, prefix, token, limit)
}

func (c *countingObjects) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	created, err := c.ObjectStore.PutIfAbsent(ctx, key, data)
	c.puts.Add(1)
	c.putBytes.Add(int64(len(data)))
	if created {
		c.created.Add(1)
		c.creBytes.Add(int64(len(data)))
	}
	return created, err
}

func (c *countingObjects) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := c.ObjectStore.Get(ctx, key)
	c.gets.Add(1)
	c.bytes.Add(int64(len(b)))
	return b, err
}

// GetRange counts a range read as one read of its bytes; a bucket without
// range reads is read whole, and counted so.
func (c *countingObjects) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	rr, ok := c.ObjectStore.(bucket.RangeReader)
	if !ok {
		b, err := c.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		if off+n > int64(len(b)) {
			return nil, bucket.ErrInvalidRange
		}
		return b[off : off+n], nil
	}
	b, err := rr.GetRange(ctx, key, off, n)
	c.gets.Add(1)
	c.bytes.Add(int64(len(b)))
	return b, err
}

// b11Walk is the cost of the online sweep's read of a store, the walk that
// counts every reference: ReadBlobGC on a fresh store (its object cache
// empty), as a sweeper run does it, with the objects it fetches counted.
type b11Walk struct {
	took         time.Duration
	refs         int   // references reported (blob keys and live objects)
	gets, bytes  int64 // object reads and their bytes
	records      int   // checkpoints walked
	listTook     time.Duration
	listRefs     int // blob keys ListBlobReferences reported
	listGets     int64
	listGetBytes int64
}

// measureWalk times ReadBlobGC and ListBlobReferences over the kept
// checkpoints of a B11 side, each on a store of its own that open returns
// with the given object bucket (nil for version 1).
func measureWalk(ctx context.Context, open func(etcdstore.ObjectStore) (*etcdstore.Store, error), objs etcdstore.ObjectStore, kept int) (b11Walk, error) {
	w := b11Walk{records: kept}
	run := func(fn func(s *etcdstore.Store) (int, error)) (time.Duration, int, int64, int64, error) {
		var counted etcdstore.ObjectStore
		var c *countingObjects
		if objs != nil {
			c = &countingObjects{ObjectStore: objs}
			counted = c
		}
		s, err := open(counted)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		defer s.Close()
		start := time.Now()
		n, err := fn(s)
		took := time.Since(start)
		if c == nil {
			return took, n, 0, 0, err
		}
		return took, n, c.gets.Load(), c.bytes.Load(), err
	}
	var err error
	w.took, w.refs, w.gets, w.bytes, err = run(func(s *etcdstore.Store) (int, error) {
		n := 0
		_, err := s.ReadBlobGC(ctx, func(cairn.BlobReference) error { n++; return nil })
		return n, err
	})
	if err != nil {
		return w, fmt.Errorf("ReadBlobGC: %w", err)
	}
	w.listTook, w.listRefs, w.listGets, w.listGetBytes, err = run(func(s *etcdstore.Store) (int, error) {
		refs, err := s.ListBlobReferences(ctx)
		return len(refs), err
	})
	if err != nil {
		return w, fmt.Errorf("ListBlobReferences: %w", err)
	}
	return w, nil
}

// fmtLong prints a long duration in hours past two hours, else as fmtDur.
func fmtLong(d time.Duration) string {
	if d >= 2*time.Hour {
		return fmt.Sprintf("%.1f h", d.Hours())
	}
	return fmtDur(d)
}

// fmtLarge prints a byte count in GiB past 10 GiB, else as fmtBytes.
func fmtLarge(n int64) string {
	if n >= 10<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmtBytes(n)
}

// walkNote describes the walk of both layouts, measured and extrapolated to
// 100,000 and 1,000,000 kept checkpoints of the same workload: the walk reads
// one shard-4 record a checkpoint and fetches each distinct root and
// reference chunk once, so its cost is linear in the checkpoints kept.
func walkNote(v2, v1 b11Walk) string {
	per := func(d time.Duration, n int, at int) string {
		return fmtLong(time.Duration(float64(d) / float64(max(1, n)) * float64(at)))
	}
	perN := func(x int64, n int, at int) string {
		return fmtInt(int64(float64(x) / float64(max(1, n)) * float64(at)))
	}
	return fmt.Sprintf("Walk of the online sweep (ReadBlobGC on a fresh store, object cache empty, in-process bucket) over the %d kept checkpoints: version 2 %s, reporting %s references (blob keys and live objects) after %s object reads (%s); version 1 %s. "+
		"Extrapolated linearly (one shard-4 record a checkpoint, each distinct root and reference chunk fetched once): per 100,000 kept checkpoints version 2 %s and %s object reads (%s), per 1,000,000 %s and %s reads (%s); version 1 %s and %s. "+
		"Object reads dominate on a real bucket: at %d in flight (the store's bound) and ~10 ms a read, 1,000,000 checkpoints cost about %s of reads a sweep. ListBlobReferences (blob keys only): version 2 %s after %s reads, version 1 %s.",
		v2.records, fmtDur(v2.took), fmtInt(int64(v2.refs)), fmtInt(v2.gets), fmtBytes(v2.bytes), fmtDur(v1.took),
		per(v2.took, v2.records, 100_000), perN(v2.gets, v2.records, 100_000), fmtLarge(int64(float64(v2.bytes)/float64(max(1, v2.records))*100_000)),
		per(v2.took, v2.records, 1_000_000), perN(v2.gets, v2.records, 1_000_000), fmtLarge(int64(float64(v2.bytes)/float64(max(1, v2.records))*1_000_000)),
		per(v1.took, v1.records, 100_000), per(v1.took, v1.records, 1_000_000),
		b3oObjectParallel, fmtLong(time.Duration(float64(v2.gets)/float64(max(1, v2.records))*1_000_000/b3oObjectParallel*float64(10*time.Millisecond))),
		fmtDur(v2.listTook), fmtInt(v2.listGets), fmtDur(v1.listTook))
}
