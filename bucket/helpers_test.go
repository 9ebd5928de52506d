package bucket_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/s3test"
)

// target is one Bucket implementation the shared tests run against.
type target struct {
	name string
	b    bucket.Bucket
	// fake is the gofakes3 server behind b, or nil.
	fake *s3test.Fake
	// overwrite replaces an object's bytes unconditionally, to corrupt it.
	overwrite func(t *testing.T, key string, data []byte)
}

// configFor returns a bucket.Config for a test server.
func configFor(srv *s3test.Server) bucket.Config {
	return bucket.Config{
		Endpoint:        srv.Endpoint,
		Region:          srv.Region,
		Bucket:          srv.Bucket,
		PathStyle:       true,
		AccessKeyID:     srv.AccessKeyID,
		SecretAccessKey: srv.SecretAccessKey,
	}
}

// newS3 opens an S3 bucket and closes it when the test ends.
func newS3(t testing.TB, cfg bucket.Config) *bucket.S3 {
	t.Helper()
	b, err := bucket.NewS3(t.Context(), cfg)
	if err != nil {
		t.Fatalf("NewS3(%v): %v", cfg, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// s3Target returns a target over an S3 server in the given put mode.
func s3Target(t testing.TB, name string, srv *s3test.Server, fake *s3test.Fake, mode bucket.PutMode) target {
	t.Helper()
	cfg := configFor(srv)
	cfg.PutMode = mode
	b := newS3(t, cfg)
	return target{name: name, b: b, fake: fake, overwrite: func(t *testing.T, key string, data []byte) {
		t.Helper()
		_, err := b.Client().PutObject(t.Context(), putInput(srv.Bucket, key, data))
		if err != nil {
			t.Fatalf("overwrite %q: %v", key, err)
		}
	}}
}

// allTargets starts a gofakes3 server and a versitygw server and returns
// every implementation and put mode to test.
func allTargets(t *testing.T) []target {
	t.Helper()
	mem := bucket.NewMemory(nil)
	fake := s3test.StartFake(t, s3test.FakeOptions{})
	vgw := s3test.StartVersityGW(t)
	return []target{
		{name: "memory", b: mem, overwrite: func(t *testing.T, key string, data []byte) {
			t.Helper()
			if err := mem.Put(t.Context(), key, data); err != nil {
				t.Fatal(err)
			}
		}},
		s3Target(t, "gofakes3/conditional", &fake.Server, fake, bucket.PutModeConditional),
		s3Target(t, "gofakes3/head-then-put", &fake.Server, fake, bucket.PutModeHeadThenPut),
		s3Target(t, "versitygw/conditional", vgw, nil, bucket.PutModeConditional),
		s3Target(t, "versitygw/head-then-put", vgw, nil, bucket.PutModeHeadThenPut),
	}
}

// checkPutIfAbsent verifies PutIfAbsent on a fresh key: the first put stores,
// a second put with other bytes reports false and leaves the first bytes. A
// server that ignores If-None-Match fails this check, because the second put
// then replaces the bytes.
func checkPutIfAbsent(ctx context.Context, b bucket.Bucket, key string) error {
	first, second := []byte("first bytes"), []byte("second, longer bytes")
	created, err := b.PutIfAbsent(ctx, key, first)
	if err != nil || !created {
		return fmt.Errorf("first PutIfAbsent(%q) = %t, %v; want true, nil", key, created, err)
	}
	created, err = b.PutIfAbsent(ctx, key, second)
	if err != nil || created {
		return fmt.Errorf("second PutIfAbsent(%q) = %t, %v; want false, nil", key, created, err)
	}
	got, err := b.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(got, first) {
		return fmt.Errorf("Get(%q) = %q after the second put; want the first bytes %q: the existing object was replaced", key, got, first)
	}
	o, err := b.Head(ctx, key)
	if err != nil {
		return fmt.Errorf("Head(%q): %v", key, err)
	}
	if o.Size != int64(len(first)) {
		return fmt.Errorf("Head(%q).Size = %d; want %d", key, o.Size, len(first))
	}
	return nil
}

// putMany stores n small objects named prefix%05d with a few goroutines, and
// returns their keys in order.
func putMany(t *testing.T, b bucket.Putter, prefix string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%05d", prefix, i)
	}
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if _, err := b.PutIfAbsent(t.Context(), keys[i], []byte(keys[i])); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(<-errs); err != nil {
		t.Fatalf("put %d objects under %q: %v", n, prefix, err)
	}
	return keys
}

// listAll lists every key under prefix with the given page size, checking
// that no page is larger than that.
func listAll(t *testing.T, l bucket.Lister, prefix string, pageSize int) ([]bucket.Object, int) {
	t.Helper()
	var all []bucket.Object
	token, pages := "", 0
	for {
		page, err := l.List(t.Context(), prefix, token, pageSize)
		if err != nil {
			t.Fatalf("List(%q, %q, %d): %v", prefix, token, pageSize, err)
		}
		pages++
		if len(page.Objects) > pageSize {
			t.Fatalf("List returned %d objects; page size %d", len(page.Objects), pageSize)
		}
		all = append(all, page.Objects...)
		if page.NextToken == "" {
			return all, pages
		}
		token = page.NextToken
	}
}

func keysOf(objs []bucket.Object) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Key
	}
	return out
}
