package cairn

import (
	"errors"
	"fmt"
)

// Code is the upstream error code carried by every checkpoint error.
type Code string

// The codes of the upstream contract. Stores return all but
// CodeCheckpointNotFound and CodeAtomicForkRequired, which exist for callers
// that need to speak the same vocabulary. CodeStoreFull is cairn's own, not
// the upstream contract's: see ErrStoreFull.
const (
	CodeStaleHead                Code = "SANDBOX_SNAPSHOT_STALE_HEAD"
	CodeParentMismatch           Code = "SANDBOX_SNAPSHOT_PARENT_MISMATCH"
	CodeDuplicateID              Code = "SANDBOX_SNAPSHOT_DUPLICATE_ID"
	CodeNotHead                  Code = "SANDBOX_SNAPSHOT_NOT_HEAD"
	CodeWriterConflict           Code = "SANDBOX_SNAPSHOT_WRITER_CONFLICT"
	CodeWriterLost               Code = "SANDBOX_SNAPSHOT_WRITER_LOST"
	CodeInvalidID                Code = "SANDBOX_SNAPSHOT_INVALID_ID"
	CodeInvalidEntry             Code = "SANDBOX_SNAPSHOT_INVALID_ENTRY"
	CodeForkSourceNotFound       Code = "SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND"
	CodeForkSourceThreadMismatch Code = "SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH"
	CodeForkDestinationNotEmpty  Code = "SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY"
	CodeCheckpointNotFound       Code = "SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND"
	CodeAtomicForkRequired       Code = "SANDBOX_SNAPSHOT_ATOMIC_FORK_REQUIRED"
	CodeStoreFull                Code = "SANDBOX_SNAPSHOT_STORE_FULL"
)

// Error is the error type of every contract failure. Code says which rule
// failed; Message says how, for people, and is not part of the contract.
//
// Two *Error values match under errors.Is when their codes are equal, so
// errors.Is(err, ErrStaleHead) is the way to test for a code. Err, when set, is
// the underlying cause and is reachable with errors.As.
type Error struct {
	Code    Code
	Message string
	Err     error
}

// NewError returns an *Error with the given code and a formatted message.
// Store implementations use it so that their errors match the sentinels.
func NewError(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error returns the message and the code, for people.
func (e *Error) Error() string {
	if e.Message == "" {
		return "cairn: " + string(e.Code)
	}
	return "cairn: " + e.Message + " (" + string(e.Code) + ")"
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Sentinels, one per code. Compare with errors.Is; never return them directly
// from a store (return NewError with a message instead), and never modify them.
var (
	ErrStaleHead                = &Error{Code: CodeStaleHead}
	ErrParentMismatch           = &Error{Code: CodeParentMismatch}
	ErrDuplicateID              = &Error{Code: CodeDuplicateID}
	ErrNotHead                  = &Error{Code: CodeNotHead}
	ErrWriterConflict           = &Error{Code: CodeWriterConflict}
	ErrWriterLost               = &Error{Code: CodeWriterLost}
	ErrInvalidID                = &Error{Code: CodeInvalidID}
	ErrInvalidEntry             = &Error{Code: CodeInvalidEntry}
	ErrForkSourceNotFound       = &Error{Code: CodeForkSourceNotFound}
	ErrForkSourceThreadMismatch = &Error{Code: CodeForkSourceThreadMismatch}
	ErrForkDestinationNotEmpty  = &Error{Code: CodeForkDestinationNotEmpty}
	ErrCheckpointNotFound       = &Error{Code: CodeCheckpointNotFound}
	ErrAtomicForkRequired       = &Error{Code: CodeAtomicForkRequired}
	// ErrStoreFull is the code of a write the store refused because its
	// backend is out of space (etcd's NOSPACE alarm is raised, or the write
	// would cross etcd's space quota). It is a definite answer: nothing of
	// the write was applied, and retrying does not help until an operator
	// frees space (see docs/operations.md). Reads still work; so do the
	// deletes that free space (etcdstore's prune under the alarm).
	ErrStoreFull = &Error{Code: CodeStoreFull}
)

// ErrUnsupported is returned by helpers such as KeepNewest when the store
// lacks the optional capability they need. It is a plain error, not an *Error.
var ErrUnsupported = errors.New("cairn: the store does not support this operation")

// CodeOf returns the code of the first *Error in err's chain, or "" when there
// is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
