// Package cairn defines the sandbox checkpoint contract: the data model, the
// Store interface and its optional capabilities, the error codes, the shared
// validation rules, and MemoryStore, the reference implementation that every
// other store is measured against.
//
// A thread is a chain of checkpoints. Each checkpoint names its parent, and the
// head is the newest checkpoint of the chain. Writes to a thread need the
// thread's writer lease (AcquireWriter) and are all or nothing: when a write
// returns an error, the store has not changed.
//
// # Errors
//
// Every contract failure is an *Error that carries one of the upstream codes
// (CodeStaleHead, CodeWriterLost, ...). Match them with errors.Is against the
// sentinel of the code:
//
//	if errors.Is(err, cairn.ErrStaleHead) { ... }
//
// Option-validation failures are plain errors, and context cancellation and
// deadline errors are returned as they are.
//
// # Check order
//
// Each method runs its checks in the order of the upstream reference store and
// returns the error of the first check that fails. For Append that order is:
// identifiers (ErrInvalidID), the writer's thread (ErrWriterLost), createdAt,
// files, artifacts and conversation (ErrInvalidEntry), then, atomically with the
// write, the writer lease (ErrWriterLost), the id (ErrDuplicateID), the head
// (ErrStaleHead) and the parent (ErrParentMismatch). The functions
// CheckAppendInput, AppendView.Check and their siblings encode these orders so
// that every implementation shares one copy of them.
//
// # Null
//
// The empty string stands for JavaScript null: a root checkpoint has
// ParentCheckpointID "", an empty thread is appended to with ExpectedHeadID "",
// and GetHead returns "" for a thread without a head. An empty identifier is
// never valid, so nothing is lost.
package cairn
