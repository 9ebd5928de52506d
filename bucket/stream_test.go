package bucket_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/cairnstore/cairn/bucket"
)

// failLast reads data but fails the read that would deliver its last byte,
// as a reader that finds the bytes changed does.
type failLast struct {
	r    *bytes.Reader
	size int64
}

var errChanged = errors.New("the bytes changed")

func (f *failLast) Read(p []byte) (int, error) {
	if int64(len(p)) >= int64(f.r.Len()) {
		return 0, errChanged
	}
	return f.r.Read(p)
}

func (f *failLast) Seek(off int64, whence int) (int64, error) { return f.r.Seek(off, whence) }

func TestStreams(t *testing.T) {
	for _, tg := range allTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := t.Context()
			sp, ok := tg.b.(bucket.StreamPutter)
			sr, ok2 := tg.b.(bucket.StreamReader)
			if !ok || !ok2 {
				t.Fatalf("%T does not stream", tg.b)
			}
			data := bytes.Repeat([]byte("stream "+tg.name), 20000)
			key := bucket.FileKey(data)
			created, err := sp.PutIfAbsentFrom(ctx, key, bytes.NewReader(data), int64(len(data)))
			if err != nil || !created {
				t.Fatalf("first put: %v, %v", created, err)
			}
			created, err = sp.PutIfAbsentFrom(ctx, key, bytes.NewReader(data), int64(len(data)))
			if err != nil || created {
				t.Fatalf("second put: %v, %v; want not created", created, err)
			}
			body, size, err := sr.GetStream(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(body)
			body.Close()
			if err != nil || size != int64(len(data)) || !bytes.Equal(got, data) {
				t.Fatalf("GetStream: %d bytes (size %d), %v", len(got), size, err)
			}
			if _, _, err := sr.GetStream(ctx, bucket.FileKey([]byte("absent"))); !errors.Is(err, bucket.ErrNotFound) {
				t.Fatalf("GetStream of a missing key: %v, want ErrNotFound", err)
			}

			// A body that fails before its last byte stores nothing.
			other := bytes.Repeat([]byte("other "+tg.name), 20000)
			okey := bucket.FileKey(other)
			_, err = sp.PutIfAbsentFrom(ctx, okey, &failLast{r: bytes.NewReader(other), size: int64(len(other))}, int64(len(other)))
			if err == nil {
				t.Fatal("a put whose body failed succeeded")
			}
			if _, err := tg.b.Head(ctx, okey); !errors.Is(err, bucket.ErrNotFound) {
				t.Fatalf("Head after the failed put: %v, want ErrNotFound", err)
			}
		})
	}
}
