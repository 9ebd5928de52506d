package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"

	"github.com/cairnstore/cairn"
)

var errTodo = errors.New("snapshot: not yet implemented")

// CaptureDir captures the directory dir (see the package documentation for
// the rules) and the artifacts, uploads their blobs through up, and returns
// the manifest. It appends nothing: Save does, or the caller with the
// manifest's Files and Artifacts.
//
// It returns an *Error matching ErrInvalidWorkspace when dir is not a
// directory, ErrUnsupportedEntry naming the first refused entry,
// ErrInvalidPath for a name no manifest can hold, ErrFileChanged naming a
// file that changed while it was captured, and path.ErrBadPattern for a
// malformed pattern; the store's errors of ClaimBlobs as they are
// (cairn.ErrWriterLost when up.Writer is not current); and the first I/O or
// bucket error. Nothing is appended on error; blobs already uploaded stay for
// a sweep to remove.
func CaptureDir(ctx context.Context, dir string, artifacts []ArtifactSource, up Uploader, opts *Options) (*Manifest, error) {
	return nil, errTodo
}

// CaptureFS is CaptureDir on an fs.FS, whose root is the workspace root. The
// stat cache is not used. Files must open as io.Seeker (os.DirFS,
// embed.FS and fstest.MapFS files do) to be streamed; others are read
// whole. Its errors are those of CaptureDir.
func CaptureFS(ctx context.Context, fsys fs.FS, artifacts []ArtifactSource, up Uploader, opts *Options) (*Manifest, error) {
	return nil, errTodo
}

// Restore writes the files and empty directories of cp into dir, creating
// dir when it does not exist, with the guarantee the package documentation
// states. Files are written with mode 0644 and directories with 0755.
//
// Before it touches dir it returns an *Error matching ErrInvalidPath for a
// manifest path restore refuses, ErrMissingBlob naming the path of a blob
// the bucket lacks, ErrInvalidBlob naming the path of a blob whose bytes do
// not hash to its key or whose length is not the entry's size,
// ErrInvalidWorkspace when dir is not a directory; and I/O, bucket and ctx
// errors. After that point only I/O errors remain possible.
func Restore(ctx context.Context, r Blobs, cp *cairn.Checkpoint, dir string, opts *Options) (RestoreStats, error) {
	return RestoreStats{}, errTodo
}

// SaveInput is the argument of Save.
type SaveInput struct {
	// ThreadID is the thread to append to. Required.
	ThreadID string
	// Dir is the directory to capture. When it is "", FS is captured.
	Dir string
	FS  fs.FS
	// Artifacts are captured with the files.
	Artifacts []ArtifactSource
	// Conversation is the checkpoint's transcript. nil takes the thread's
	// transcript when the store is a cairn.Forker, and JSON null otherwise.
	Conversation json.RawMessage
	// ID is the new checkpoint's id; "" selects a random UUID.
	ID string
	// Reason defaults to cairn.ReasonNamed, as upstream's save.
	Reason string
	// Label and SourceRunID are stored as given.
	Label       string
	SourceRunID string
	// CreatedAt is in milliseconds; 0 selects the current time.
	CreatedAt float64
	// Options tune the capture.
	Options Options
	// StaleHeadRetries bounds how many times Save re-reads the head and
	// appends again after cairn.ErrStaleHead or cairn.ErrParentMismatch; 0
	// selects 3, and a negative value none.
	StaleHeadRetries int
}

// SaveResult is the result of a successful Save.
type SaveResult struct {
	Checkpoint cairn.Checkpoint
	Stats      CaptureStats
	// Attempts is the number of appends tried, 1 unless the head moved.
	Attempts int
}

// Save is upstream's snapshots.save: it acquires the thread's writer lease
// (and renews it every RenewAfter while it works), captures Dir or FS with
// the artifacts under that lease, reads the head, and appends the checkpoint
// with the head as parent and expected head. On cairn.ErrStaleHead or
// cairn.ErrParentMismatch it reads the head again and re-appends the same
// capture, at most StaleHeadRetries more times. It releases the lease once,
// whatever happens.
//
// It returns an *Error matching ErrClaimsRequired when st is not a
// cairn.BlobClaimer; the store's errors as they are (cairn.ErrWriterConflict
// when another writer holds the lease, cairn.ErrInvalidID, cairn.ErrWriterLost
// when the lease was lost; a renewal failure wins over the error it caused);
// the errors of CaptureDir; and cairn.ErrStaleHead when the retries ran out.
func Save(ctx context.Context, st cairn.Store, b Blobs, in SaveInput) (*SaveResult, error) {
	return nil, errTodo
}

// ForkInput is the argument of Fork.
type ForkInput struct {
	// SourceCheckpointID is the checkpoint to fork. Required.
	SourceCheckpointID string
	// SourceThreadID is its thread; "" reads it from the checkpoint.
	SourceThreadID string
	// DestinationThreadID is the new, empty thread. Required.
	DestinationThreadID string
	// DestinationCheckpointID is the new root's id; "" selects a random UUID.
	DestinationCheckpointID string
	// CreatedAt is in milliseconds; 0 selects the current time.
	CreatedAt float64
}

// Fork is upstream's snapshots.fork: it acquires the destination thread's
// writer lease, calls cairn.Forker.ForkFromCheckpoint, releases the lease,
// and returns the new root.
//
// It returns an *Error matching ErrForkUnavailable when st is not a
// cairn.Forker (after acquiring and releasing the lease, as upstream does),
// ErrMissingCheckpoint when SourceThreadID is "" and the source does not
// exist, and the store's errors as they are (cairn.ErrWriterConflict,
// cairn.ErrForkDestinationNotEmpty, cairn.ErrForkSourceNotFound, ...).
func Fork(ctx context.Context, st cairn.Store, in ForkInput) (*cairn.Checkpoint, error) {
	return nil, errTodo
}

// ChangeKind says how a path differs between two manifests.
type ChangeKind string

// The kinds of change.
const (
	Added    ChangeKind = "added"    // only in b
	Removed  ChangeKind = "removed"  // only in a
	Modified ChangeKind = "modified" // in both, with another kind, key or size
)

// Change is one path that differs. Old is the entry of a (zero when Added),
// New the entry of b (zero when Removed).
type Change struct {
	Path string
	Kind ChangeKind
	Old  cairn.Entry
	New  cairn.Entry
}

// Diff returns the file and directory entries that differ between the
// manifests of a and b, sorted by the bytes of the path. Artifacts are not
// compared. A manifest that names a path twice is compared by its last entry.
func Diff(a, b cairn.Checkpoint) []Change {
	return nil
}
