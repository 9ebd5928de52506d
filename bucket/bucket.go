package bucket

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"time"
	"unicode/utf8"
)

// MaxDeleteKeys is the largest number of keys one S3 DeleteObjects request may
// carry. Delete splits longer key lists into requests of at most this many.
const MaxDeleteKeys = 1000

// MaxPageSize is the largest page a List call returns, as in S3.
const MaxPageSize = 1000

// maxKeyLen is the longest key S3 and R2 accept, in bytes.
const maxKeyLen = 1024

// Object describes a stored object.
type Object struct {
	// Key is the object's key.
	Key string
	// Size is the object's length in bytes.
	Size int64
	// UploadedAt is when the object's last write completed, by the server's
	// clock (S3's LastModified). It is the zero time when the server did not
	// report one. Listings may carry a finer precision than Head.
	UploadedAt time.Time
}

// Page is one page of a listing.
type Page struct {
	// Objects are the page's objects in ascending order of their key's bytes.
	Objects []Object
	// NextToken continues the listing in the next List call. It is "" on the
	// last page.
	NextToken string
}

// KeyError is a key that Delete did not delete, with the reason.
type KeyError struct {
	Key string
	Err error
}

// Error names the key and its reason.
func (e KeyError) Error() string { return fmt.Sprintf("%q: %v", e.Key, e.Err) }

// MarshalJSON encodes the key error as {"key": ..., "error": "..."}.
func (e KeyError) MarshalJSON() ([]byte, error) {
	msg := ""
	if e.Err != nil {
		msg = e.Err.Error()
	}
	return json.Marshal(struct {
		Key   string `json:"key"`
		Error string `json:"error"`
	}{e.Key, msg})
}

// DeleteResult tells exactly which keys a Delete call deleted. Every distinct
// key given to Delete is in exactly one of the two lists.
type DeleteResult struct {
	// Deleted are the keys the server reported deleted, in the order given. A
	// key that did not exist counts as deleted, as in S3.
	Deleted []string
	// Failed are the keys that were not deleted, or whose deletion the server
	// did not confirm, with the reason for each: a per-key error from the
	// server, the error of a request that failed as a whole (its outcome is
	// unknown), ErrNotAttempted for a key whose request was never sent, or
	// ErrInvalidKey.
	Failed []KeyError
}

// Reader reads objects.
type Reader interface {
	// Get returns the bytes of the object. It returns an error matching
	// ErrNotFound when the key does not exist.
	Get(ctx context.Context, key string) ([]byte, error)

	// Head returns the object's description without its bytes. It returns an
	// error matching ErrNotFound when the key does not exist.
	Head(ctx context.Context, key string) (Object, error)
}

// RangeReader reads part of an object: one request (an S3 GET with a Range
// header) for n bytes from offset off. It returns an error matching
// ErrNotFound when the key does not exist, and an error when the object is
// shorter than off+n (a range past the end is never returned short).
type RangeReader interface {
	GetRange(ctx context.Context, key string, off, n int64) ([]byte, error)
}

// Putter writes objects that do not exist yet.
type Putter interface {
	// PutIfAbsent stores data under key unless the key exists, and reports
	// whether it stored it. An existing object is never replaced: when the key
	// exists, PutIfAbsent returns false and a nil error. It returns an error
	// matching ErrInvalidKey for a key S3 cannot store.
	PutIfAbsent(ctx context.Context, key string, data []byte) (created bool, err error)
}

// Lister lists objects.
type Lister interface {
	// List returns one page of the objects whose key starts with prefix, in
	// ascending order of their key's bytes. token is "" for the first page and
	// the previous page's NextToken after that. limit caps the page size;
	// limit <= 0 or above MaxPageSize selects MaxPageSize. A page may hold
	// fewer objects than limit and still not be the last: only an empty
	// NextToken ends the listing.
	List(ctx context.Context, prefix, token string, limit int) (Page, error)
}

// Deleter deletes objects.
type Deleter interface {
	// Delete deletes the given keys in requests of at most MaxDeleteKeys
	// keys, and never sends a request without keys. A repeated key is deleted
	// once. The result lists every key as deleted or failed.
	//
	// Delete returns a nil error only when every key was deleted. When only
	// some keys failed on their own, the error matches ErrPartialDelete and
	// Delete went on with the remaining requests. When a request failed as a
	// whole, Delete stops and returns that request's error, whose keys fail
	// with it (their outcome is unknown); the keys of later requests fail with
	// ErrNotAttempted. When ctx ends between requests, Delete returns ctx's
	// error and the keys not sent fail with ErrNotAttempted.
	Delete(ctx context.Context, keys []string) (DeleteResult, error)
}

// Bucket is an object store holding the blobs of sandbox checkpoints.
// Implementations are safe for concurrent use.
type Bucket interface {
	Reader
	Putter
	Lister
	Deleter
}

// Objects returns an iterator over every object whose key starts with prefix,
// fetched from l one page of at most pageSize objects at a time (pageSize <= 0
// selects MaxPageSize). Only one page is held in memory. The iteration yields
// the zero Object and the error, and stops, when a List call fails or the listing
// does not advance.
func Objects(ctx context.Context, l Lister, prefix string, pageSize int) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		token := ""
		for {
			page, err := l.List(ctx, prefix, token, pageSize)
			if err != nil {
				yield(Object{}, err)
				return
			}
			for _, o := range page.Objects {
				if !yield(o, nil) {
					return
				}
			}
			if page.NextToken == "" {
				return
			}
			if page.NextToken == token {
				yield(Object{}, fmt.Errorf("bucket: list %q: the listing did not advance past token %q", prefix, token))
				return
			}
			token = page.NextToken
		}
	}
}

// checkKey returns an *Error matching ErrInvalidKey when key is empty, longer
// than 1024 bytes or not valid UTF-8.
func checkKey(op, key string) error {
	switch {
	case key == "":
		return &Error{Op: op, Key: key, Kind: ErrInvalidKey, Err: errString("the key is empty")}
	case len(key) > maxKeyLen:
		return &Error{Op: op, Key: key, Kind: ErrInvalidKey, Err: fmt.Errorf("the key is %d bytes long; the limit is %d", len(key), maxKeyLen)}
	case !utf8.ValidString(key):
		return &Error{Op: op, Key: key, Kind: ErrInvalidKey, Err: errString("the key is not valid UTF-8")}
	}
	return nil
}

// pageLimit maps a requested page size onto 1..MaxPageSize.
func pageLimit(limit int) int {
	if limit <= 0 || limit > MaxPageSize {
		return MaxPageSize
	}
	return limit
}

// distinct returns keys without repeats, in first-seen order.
func distinct(keys []string) []string {
	seen := make(map[string]struct{}, len(keys))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		out = append(out, k)
	}
	return out
}

type errString string

// Error returns the message.
func (e errString) Error() string { return string(e) }
