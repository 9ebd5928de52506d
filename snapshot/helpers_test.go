package snapshot_test

import (
	"bytes"
	"context"
	"io"
	"sort"
	"sync"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/s3test"
	"github.com/cairnstore/cairn/snapshot"
)

// env is a memory store with fork support and a memory bucket.
type env struct {
	store *cairn.MemoryForkStore
	blobs *bucket.Memory
}

func newEnv(t *testing.T) *env {
	t.Helper()
	st, err := cairn.NewMemoryForkStore(cairn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{store: st, blobs: bucket.NewMemory(nil)}
}

// uploader takes a writer lease on thread for the test and returns an
// Uploader for it.
func (e *env) uploader(t *testing.T, thread string) snapshot.Uploader {
	t.Helper()
	lease, err := e.store.AcquireWriter(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Release(context.Background()) })
	return snapshot.Uploader{Bucket: e.blobs, Claimer: e.store, Writer: lease.Writer}
}

func paths(files []cairn.Entry) []string {
	out := make([]string, len(files))
	for i, e := range files {
		out[i] = e.Path
		if e.Kind == cairn.KindDir {
			out[i] += "/"
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// streamBlobs is a bucket that streams both ways.
type streamBlobs interface {
	snapshot.Blobs
	bucket.StreamPutter
	bucket.StreamReader
}

// hookBucket wraps a bucket: it runs onHead before each Head and onPut
// before each streamed put, and counts streamed puts. Being a wrapper, it is
// taken to head in its put (bucket.PutsFindExisting), so a capture heads
// every key first; putFirstBucket is the same wrapper without that.
type hookBucket struct {
	streamBlobs
	onHead func(key string)
	onPut  func(key string)
	mu     sync.Mutex
	puts   int
}

// putFirstBucket is a hookBucket whose put finds existing keys itself, as
// a conditional put does.
type putFirstBucket struct{ *hookBucket }

func (putFirstBucket) PutMode() bucket.PutMode { return bucket.PutModeConditional }

func (h *hookBucket) Head(ctx context.Context, key string) (bucket.Object, error) {
	if h.onHead != nil {
		h.onHead(key)
	}
	return h.streamBlobs.Head(ctx, key)
}

func (h *hookBucket) PutIfAbsentFrom(ctx context.Context, key string, body io.ReadSeeker, size int64) (bool, error) {
	h.mu.Lock()
	h.puts++
	h.mu.Unlock()
	if h.onPut != nil {
		h.onPut(key)
	}
	return h.streamBlobs.PutIfAbsentFrom(ctx, key, body, size)
}

func (h *hookBucket) putCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.puts
}

// fakeS3 starts a gofakes3 server for the test and returns a bucket.S3 on it.
func fakeS3(t *testing.T) *bucket.S3 {
	t.Helper()
	srv := s3test.StartFake(t, s3test.FakeOptions{})
	b, err := bucket.NewS3(t.Context(), bucket.Config{
		Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.Bucket, PathStyle: true,
		AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// discardBucket streams puts into nothing and keeps nothing: a bucket that
// costs the capture no memory of its own. It never holds a key.
type discardBucket struct{}

func (discardBucket) Get(ctx context.Context, key string) ([]byte, error) {
	return nil, &bucket.Error{Op: "GetObject", Key: key, Kind: bucket.ErrNotFound}
}

func (discardBucket) Head(ctx context.Context, key string) (bucket.Object, error) {
	return bucket.Object{}, &bucket.Error{Op: "HeadObject", Key: key, Kind: bucket.ErrNotFound}
}

func (d discardBucket) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	return d.PutIfAbsentFrom(ctx, key, bytes.NewReader(data), int64(len(data)))
}

func (discardBucket) PutIfAbsentFrom(ctx context.Context, key string, body io.ReadSeeker, size int64) (bool, error) {
	if _, err := io.Copy(io.Discard, body); err != nil {
		return false, err
	}
	return true, nil
}
