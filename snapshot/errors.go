package snapshot

import "fmt"

// Code says which rule a capture, restore, save or fork broke. The codes of
// upstream's snapshots.ts keep their upstream spelling.
type Code string

// The codes of an *Error.
const (
	// CodeUnsupportedEntry: a symlink, an executable regular file or another
	// special file in a captured tree.
	CodeUnsupportedEntry Code = "SANDBOX_SNAPSHOT_UNSUPPORTED_ENTRY"
	// CodeInvalidPath: a manifest path that restore refuses (upstream's
	// normalize()), a duplicate path, a file under a file, or a captured name
	// that no manifest can hold.
	CodeInvalidPath Code = "SANDBOX_SNAPSHOT_INVALID_PATH"
	// CodeMissingBlob: a blob the manifest names is not in the bucket.
	CodeMissingBlob Code = "SANDBOX_SNAPSHOT_MISSING_BLOB"
	// CodeInvalidBlob: a blob's bytes do not hash to its key, or its length
	// is not the entry's size, or the key is not a content key.
	CodeInvalidBlob Code = "SANDBOX_SNAPSHOT_INVALID_BLOB"
	// CodeFileChanged: a file changed while it was captured (its size or
	// mtime moved, or the bytes uploaded are not the bytes hashed).
	CodeFileChanged Code = "SANDBOX_SNAPSHOT_FILE_CHANGED"
	// CodeForkUnavailable: the store cannot fork (it is not a cairn.Forker).
	CodeForkUnavailable Code = "SANDBOX_SNAPSHOT_FORK_UNAVAILABLE"
	// CodeClaimsRequired: the store has no online sweep protocol (it is not a
	// cairn.BlobClaimer), so a capture cannot be made safe beside a sweeper.
	CodeClaimsRequired Code = "SANDBOX_SNAPSHOT_CLAIMS_REQUIRED"
	// CodeMissingCheckpoint: the checkpoint asked for does not exist.
	CodeMissingCheckpoint Code = "SANDBOX_SNAPSHOT_MISSING_CHECKPOINT"
	// CodeInvalidWorkspace: the directory to capture or restore into is not
	// usable (not a directory, or the restore target is a file).
	CodeInvalidWorkspace Code = "SANDBOX_SNAPSHOT_INVALID_WORKSPACE"
	// CodeWorkspaceBusy: another restore into the same directory is running;
	// nothing was touched, and trying again once it has ended is safe.
	CodeWorkspaceBusy Code = "SANDBOX_SNAPSHOT_WORKSPACE_BUSY"
)

// Error is the error of a capture or restore rule. Two *Error values match
// under errors.Is when their codes are equal: errors.Is(err,
// ErrUnsupportedEntry) is the way to test for a code. Path, when set, is the
// slash-separated path of the entry at fault, relative to the tree's root;
// Key, when set, is the blob key at fault. Err is the cause, if any.
type Error struct {
	Code    Code
	Path    string
	Key     string
	Message string
	Err     error
}

// Error names the path and key at fault, says what is wrong and ends with the
// code.
func (e *Error) Error() string {
	msg := "snapshot: "
	if e.Path != "" {
		msg += fmt.Sprintf("%q: ", e.Path)
	}
	if e.Message != "" {
		msg += e.Message
	}
	if e.Key != "" {
		msg += fmt.Sprintf(" (blob %s)", e.Key)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + " [" + string(e.Code) + "]"
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Sentinels, one per code, for errors.Is. Never modify them.
var (
	ErrUnsupportedEntry  = &Error{Code: CodeUnsupportedEntry}
	ErrInvalidPath       = &Error{Code: CodeInvalidPath}
	ErrMissingBlob       = &Error{Code: CodeMissingBlob}
	ErrInvalidBlob       = &Error{Code: CodeInvalidBlob}
	ErrFileChanged       = &Error{Code: CodeFileChanged}
	ErrForkUnavailable   = &Error{Code: CodeForkUnavailable}
	ErrClaimsRequired    = &Error{Code: CodeClaimsRequired}
	ErrMissingCheckpoint = &Error{Code: CodeMissingCheckpoint}
	ErrInvalidWorkspace  = &Error{Code: CodeInvalidWorkspace}
	ErrWorkspaceBusy     = &Error{Code: CodeWorkspaceBusy}
)
