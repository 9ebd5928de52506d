package bucket

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnstore/cairn"
)

// StreamPutter writes objects from a stream, without holding them in memory.
type StreamPutter interface {
	// PutIfAbsentFrom stores the size bytes read from body under key unless
	// the key exists, and reports whether it stored them, as
	// Putter.PutIfAbsent does. body is read from its start; it may be read
	// (and rewound with Seek) more than once, to sign or to retry. When a read
	// of body fails, the request fails with that error and nothing is stored:
	// a reader that checks the bytes can stop a wrong upload before its last
	// byte. It returns an error matching ErrInvalidKey for a key S3 cannot
	// store.
	PutIfAbsentFrom(ctx context.Context, key string, body io.ReadSeeker, size int64) (created bool, err error)
}

// StreamReader reads objects as a stream.
type StreamReader interface {
	// GetStream returns the object's bytes as a stream, with its length as
	// the server reported it. The caller closes the stream. It returns an
	// error matching ErrNotFound when the key does not exist. Errors while
	// reading the stream are the transport's.
	GetStream(ctx context.Context, key string) (body io.ReadCloser, size int64, err error)
}

var (
	_ StreamPutter = (*S3)(nil)
	_ StreamReader = (*S3)(nil)
	_ StreamPutter = (*Memory)(nil)
	_ StreamReader = (*Memory)(nil)
)

// PutIfAbsentFrom implements StreamPutter in the bucket's PutMode, like
// PutIfAbsent.
func (b *S3) PutIfAbsentFrom(ctx context.Context, key string, body io.ReadSeeker, size int64) (bool, error) {
	if err := checkKey("PutObject", key); err != nil {
		return false, err
	}
	if size < 0 {
		return false, &Error{Op: "PutObject", Key: key, Err: fmt.Errorf("negative size %d", size)}
	}
	// A content key names the SHA-256 of its bytes, which is the payload
	// hash SigV4 signs: given it, the SDK need not read the body an extra
	// time to sign it, and the server checks the bytes it receives against
	// it.
	signCtx := ctx
	if d, ok := contentDigest(key); ok {
		signCtx = v4.SetPayloadHash(ctx, d)
	}
	put := func(ifAbsent bool) error {
		if _, err := body.Seek(0, io.SeekStart); err != nil {
			return &Error{Op: "PutObject", Key: key, Err: err}
		}
		in := &s3.PutObjectInput{
			Bucket:        &b.name,
			Key:           &key,
			Body:          body,
			ContentLength: aws.Int64(size),
			ContentType:   aws.String("application/octet-stream"),
		}
		if ifAbsent {
			in.IfNoneMatch = aws.String("*")
		}
		_, err := b.client.PutObject(signCtx, in)
		return classify("PutObject", key, false, err)
	}
	return b.putIfAbsent(ctx, key, put)
}

// GetStream implements StreamReader with one GetObject.
func (b *S3) GetStream(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	if err := checkKey("GetObject", key); err != nil {
		return nil, 0, err
	}
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.name, Key: &key})
	if err != nil {
		return nil, 0, classify("GetObject", key, false, err)
	}
	return out.Body, aws.ToInt64(out.ContentLength), nil
}

// PutIfAbsentFrom implements StreamPutter. The memory bucket keeps every
// object in memory, so it reads body whole; a read error stores nothing.
func (m *Memory) PutIfAbsentFrom(ctx context.Context, key string, body io.ReadSeeker, size int64) (bool, error) {
	if err := checkKey("PutObject", key); err != nil {
		return false, err
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return false, &Error{Op: "PutObject", Key: key, Err: err}
	}
	data, err := io.ReadAll(io.LimitReader(body, size))
	if err != nil {
		return false, &Error{Op: "PutObject", Key: key, Err: err}
	}
	if int64(len(data)) != size {
		return false, &Error{Op: "PutObject", Key: key, Err: fmt.Errorf("the body ended after %d of %d bytes", len(data), size)}
	}
	return m.PutIfAbsent(ctx, key, data)
}

// GetStream implements StreamReader.
func (m *Memory) GetStream(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	data, err := m.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	return io.NopCloser(bytes.NewReader(data)), int64(len(data)), nil
}

// ClaimKeys is the claiming step of UploadBlobs, for callers that upload the
// bytes themselves (from streams): it claims every key for the writer lease
// w and, for keys a sweep is deleting, waits until the sweep has settled them
// (cairn.BlobClaimer.WaitBlobs) and claims them again. When it returns nil,
// every key is claimed: a sweep cannot delete it until the lease's next
// Append, so the caller may rely on bytes it finds in the bucket, or upload
// them. Call it before looking in the bucket.
//
// It returns ErrInvalidBlob (through a *BlobError) for a key that is not a
// content key, the store's errors of ClaimBlobs as they are
// (cairn.ErrWriterLost when w is not current), and ctx's error when the wait
// for a deleted key outlasts it.
func ClaimKeys(ctx context.Context, c cairn.BlobClaimer, w cairn.Writer, keys []string) error {
	for _, k := range keys {
		if err := checkBlobKey(k); err != nil {
			return err
		}
	}
	keys = slices.Clone(keys)
	for len(keys) > 0 {
		busy, err := c.ClaimBlobs(ctx, w, keys)
		if err != nil {
			return err
		}
		if len(busy) == 0 {
			return nil
		}
		// A sweep is deleting these: their bytes may be gone, or about to
		// be. Wait until it has settled them, then claim them again.
		if err := c.WaitBlobs(ctx, busy); err != nil {
			return fmt.Errorf("bucket: wait for a sweep to finish deleting %d blobs before uploading them again: %w", len(busy), err)
		}
		keys = busy
	}
	return nil
}

// contentDigest returns the hex SHA-256 a file or artifact content key
// names.
func contentDigest(key string) (string, bool) {
	if !cairn.IsFileBlobKey(key) && !cairn.IsArtifactBlobKey(key) {
		return "", false
	}
	return key[strings.LastIndexByte(key, '/')+1:], true
}
