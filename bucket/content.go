package bucket

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/cairnstore/cairn"
)

// FileKey returns the content key of workspace-file bytes:
// sandbox-files/sha256/ followed by the lower-case hex SHA-256 of data.
func FileKey(data []byte) string { return cairn.FileBlobPrefix + digest(data) }

// ArtifactKey returns the content key of artifact bytes:
// sandbox-artifacts/sha256/ followed by the lower-case hex SHA-256 of data.
// The same bytes have different file and artifact keys.
func ArtifactKey(data []byte) string { return cairn.ArtifactBlobPrefix + digest(data) }

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Blob is bytes to store under their content key.
type Blob struct {
	Key  string
	Data []byte
}

// FileBlob returns data as a workspace-file blob keyed by FileKey.
func FileBlob(data []byte) Blob { return Blob{Key: FileKey(data), Data: data} }

// ArtifactBlob returns data as an artifact blob keyed by ArtifactKey.
func ArtifactBlob(data []byte) Blob { return Blob{Key: ArtifactKey(data), Data: data} }

// The kinds of content errors, matched with errors.Is through a *BlobError.
var (
	// ErrMissingBlob: a referenced blob is not in the bucket.
	ErrMissingBlob = errors.New("missing blob")
	// ErrInvalidBlob: a blob's bytes do not hash to its key, or its key is
	// not a content key.
	ErrInvalidBlob = errors.New("invalid blob")
)

// BlobError reports a blob that is missing or does not match its key.
type BlobError struct {
	// Key is the blob's key.
	Key string
	// Kind is ErrMissingBlob or ErrInvalidBlob.
	Kind error
	// Digest is the hex SHA-256 of the bytes actually read, when they did
	// not match the key; "" otherwise.
	Digest string
	// Err is the underlying cause, if any: the bucket's ErrNotFound error for
	// a missing blob, or an ErrInvalidKey error for a malformed key.
	Err error
}

// Error names the blob, the kind of problem and, for a mismatch, the digest
// of the bytes read.
func (e *BlobError) Error() string {
	msg := fmt.Sprintf("bucket: blob %q: %v", e.Key, e.Kind)
	if e.Digest != "" {
		msg += ": its bytes hash to " + e.Digest
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the kind and the cause, so errors.Is matches both
// ErrMissingBlob and, through the cause, ErrNotFound.
func (e *BlobError) Unwrap() []error {
	out := []error{e.Kind}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// checkBlobKey returns a *BlobError matching ErrInvalidBlob and ErrInvalidKey
// when key is neither a file nor an artifact content key.
func checkBlobKey(key string) error {
	if cairn.IsFileBlobKey(key) || cairn.IsArtifactBlobKey(key) {
		return nil
	}
	return &BlobError{Key: key, Kind: ErrInvalidBlob, Err: &Error{Op: "check", Key: key, Kind: ErrInvalidKey,
		Err: fmt.Errorf("not of the form %s<hex> or %s<hex>", cairn.FileBlobPrefix, cairn.ArtifactBlobPrefix)}}
}

// hashMatches reports whether data hashes to the digest in key, and returns
// the digest of data.
func hashMatches(key string, data []byte) (bool, string) {
	d := digest(data)
	return key[strings.LastIndexByte(key, '/')+1:] == d, d
}

// UploadResult says what UploadBlobs did with each distinct key.
type UploadResult struct {
	// Uploaded are the keys it stored, in the order first given.
	Uploaded []string
	// Present are the keys the bucket already held, which it left alone.
	Present []string
}

// PutBlobs stores blobs without the online sweep protocol: for each distinct
// key, in the order first given, it puts the bytes only when the bucket lacks
// the key (one PutIfAbsent per distinct key; a repeated key with the same
// bytes costs nothing more). Existing objects are never replaced.
//
// PutBlobs is NOT safe beside a running sweeper: when it finds a key present
// and skips the upload, a sweep may delete those bytes before the checkpoint
// that references them is appended. Use UploadBlobs for captures; PutBlobs is
// for callers that bring their own protocol (or none, with no sweeper running).
//
// Before any request it checks every blob: a key that is not a content key,
// or bytes that do not hash to their key, give a *BlobError matching
// ErrInvalidBlob and nothing is uploaded. The first failed put stops the
// upload and returns its error with the keys stored so far; blobs already
// stored stay, and a later sweep removes them once they are old enough and
// unreferenced.
func PutBlobs(ctx context.Context, p Putter, blobs []Blob) (UploadResult, error) {
	todo, err := distinctBlobs(blobs)
	if err != nil {
		return UploadResult{}, err
	}
	return putAll(ctx, p, todo)
}

// distinctBlobs checks every blob and returns them with repeated keys dropped,
// in the order first given.
func distinctBlobs(blobs []Blob) ([]Blob, error) {
	seen := make(map[string]struct{}, len(blobs))
	todo := make([]Blob, 0, len(blobs))
	for _, b := range blobs {
		if err := checkBlobKey(b.Key); err != nil {
			return nil, err
		}
		if ok, d := hashMatches(b.Key, b.Data); !ok {
			return nil, &BlobError{Key: b.Key, Kind: ErrInvalidBlob, Digest: d}
		}
		if _, dup := seen[b.Key]; dup {
			continue
		}
		seen[b.Key] = struct{}{}
		todo = append(todo, b)
	}
	return todo, nil
}

func putAll(ctx context.Context, p Putter, todo []Blob) (UploadResult, error) {
	var res UploadResult
	for _, b := range todo {
		created, err := p.PutIfAbsent(ctx, b.Key, b.Data)
		if err != nil {
			return res, err
		}
		if created {
			res.Uploaded = append(res.Uploaded, b.Key)
		} else {
			res.Present = append(res.Present, b.Key)
		}
	}
	return res, nil
}

// UploadBlobs stores the blobs of one capture safely beside a running
// sweeper. It first claims every distinct key for the writer lease w through
// the store's online sweep protocol (cairn.BlobClaimer), and only then puts
// the bytes of each key the bucket lacks: a claimed key cannot be deleted by
// a sweep until the lease's next Append, which turns the claims into
// references. A key that a sweep is deleting is waited for
// (cairn.BlobClaimer.WaitBlobs), claimed again and uploaded, never reused.
// The wait ends when the sweeper settles the delete, normally within its
// delete batch, at the latest in its next run; ctx bounds it.
//
// Pass the blobs that the checkpoint references and its parent does not: keys
// the parent references are protected by that reference while the writer
// holds the lease (claiming them as well is harmless and costs a little).
//
// Before the first claim, a store that records bindings (cairn.Bound) is
// bound to p (BindStore): once per bucket and process.
//
// It returns the blob errors of PutBlobs before any request, BindStore's
// errors, the store's
// errors of ClaimBlobs as they are (cairn.ErrWriterLost when w is not
// current: then nothing may be appended), ctx's error when the wait for a
// deleted key outlasts it, and the first failed put.
func UploadBlobs(ctx context.Context, c cairn.BlobClaimer, w cairn.Writer, p Putter, blobs []Blob) (UploadResult, error) {
	todo, err := distinctBlobs(blobs)
	if err != nil {
		return UploadResult{}, err
	}
	keys := make([]string, len(todo))
	for i, b := range todo {
		keys[i] = b.Key
	}
	if err := BindStore(ctx, c, p); err != nil {
		return UploadResult{}, err
	}
	if err := ClaimKeys(ctx, c, w, keys); err != nil {
		return UploadResult{}, err
	}
	return putAll(ctx, p, todo)
}

// ReadBlob reads the blob under key and checks that its bytes hash to the key.
// It returns a *BlobError matching ErrMissingBlob (and ErrNotFound) when the
// bucket lacks the key, and matching ErrInvalidBlob when the key is not a
// content key or the bytes do not hash to it. Other errors of the bucket are
// returned as they are.
func ReadBlob(ctx context.Context, r Reader, key string) ([]byte, error) {
	if err := checkBlobKey(key); err != nil {
		return nil, err
	}
	data, err := r.Get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return nil, &BlobError{Key: key, Kind: ErrMissingBlob, Err: err}
	}
	if err != nil {
		return nil, err
	}
	if ok, d := hashMatches(key, data); !ok {
		return nil, &BlobError{Key: key, Kind: ErrInvalidBlob, Digest: d}
	}
	return data, nil
}
