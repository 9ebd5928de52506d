package bucket

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// Memory is a Bucket kept in memory, for tests and quick starts. Objects
// record their upload time from the clock given to NewMemory. It is safe for
// concurrent use and copies bytes in and out.
type Memory struct {
	now func() time.Time

	mu      sync.Mutex
	objects map[string]memObject
}

type memObject struct {
	data       []byte
	uploadedAt time.Time
}

var _ Bucket = (*Memory)(nil)

// NewMemory returns an empty Memory bucket whose upload times come from now;
// nil selects time.Now.
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, objects: map[string]memObject{}}
}

// Probe implements the start-up check of S3.Probe; it fails only when ctx has
// ended.
func (m *Memory) Probe(ctx context.Context) error { return ctx.Err() }

// Get implements Reader.
func (m *Memory) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey("GetObject", key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[key]
	if !ok {
		return nil, &Error{Op: "GetObject", Key: key, Code: "NoSuchKey", Kind: ErrNotFound}
	}
	return slices.Clone(o.data), nil
}

// GetRange implements RangeReader.
func (m *Memory) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	b, err := m.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return sliceRange(key, b, off, n)
}

// Head implements Reader.
func (m *Memory) Head(ctx context.Context, key string) (Object, error) {
	if err := checkKey("HeadObject", key); err != nil {
		return Object{}, err
	}
	if err := ctx.Err(); err != nil {
		return Object{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[key]
	if !ok {
		return Object{}, &Error{Op: "HeadObject", Key: key, Code: "NotFound", Kind: ErrNotFound}
	}
	return Object{Key: key, Size: int64(len(o.data)), UploadedAt: o.uploadedAt}, nil
}

// PutIfAbsent implements Putter atomically.
func (m *Memory) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	if err := checkKey("PutObject", key); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objects[key]; ok {
		return false, nil
	}
	m.objects[key] = memObject{data: slices.Clone(data), uploadedAt: m.now()}
	return true, nil
}

// Put stores data under key, replacing any object there, with the clock's
// current time as its upload time. Blobs are never overwritten in normal use;
// tests use Put to stage objects, to refresh an upload time, or to corrupt a
// blob. It returns an error matching ErrInvalidKey for an invalid key.
func (m *Memory) Put(ctx context.Context, key string, data []byte) error {
	if err := checkKey("PutObject", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[key] = memObject{data: slices.Clone(data), uploadedAt: m.now()}
	return nil
}

// List implements Lister. Its continuation token is the last key of the
// previous page.
func (m *Memory) List(ctx context.Context, prefix, token string, limit int) (Page, error) {
	if err := ctx.Err(); err != nil {
		return Page{}, err
	}
	limit = pageLimit(limit)
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]string, 0, len(m.objects))
	for k := range m.objects {
		if strings.HasPrefix(k, prefix) && k > token {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var page Page
	for i, k := range keys {
		if i == limit {
			page.NextToken = keys[i-1]
			break
		}
		o := m.objects[k]
		page.Objects = append(page.Objects, Object{Key: k, Size: int64(len(o.data)), UploadedAt: o.uploadedAt})
	}
	return page, nil
}

// Delete implements Deleter. A missing key counts as deleted.
func (m *Memory) Delete(ctx context.Context, keys []string) (DeleteResult, error) {
	return deleteInBatches(ctx, keys, func(_ context.Context, batch []string) ([]string, []KeyError, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, k := range batch {
			delete(m.objects, k)
		}
		return slices.Clone(batch), nil, nil
	})
}

// Len returns the number of objects in the bucket.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.objects)
}

// sliceRange returns b[off:off+n], or an error matching ErrInvalidRange when
// b does not hold those bytes.
func sliceRange(key string, b []byte, off, n int64) ([]byte, error) {
	if off < 0 || n < 1 || off > int64(len(b)) || n > int64(len(b))-off {
		return nil, &Error{Op: "GetObject", Key: key, Code: "InvalidRange", Kind: ErrInvalidRange}
	}
	return b[off : off+n], nil
}
