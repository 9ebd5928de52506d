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
// # Bounds
//
// Upstream puts no bound on the length of an identifier or a name; this
// module does, on purpose, as it maps lone surrogates to invalid UTF-8:
// identifiers (thread, checkpoint, parent, expected-head and fork ids, a
// writer's thread, an instance key) are at most MaxIDBytes (1024) bytes,
// reasons, labels, run ids, artifact ids, names and MIME types and an
// instance record's other fields at most MaxNameBytes (1024), entry paths at
// most MaxPathBytes (4096), and an owner token longer than
// MaxOwnerTokenBytes (1024) can match no lease. Each is checked where the
// contract checks its field (ValidateID, CheckCheckpointContent,
// ValidateArtifacts, CheckOwnerToken, ValidateInstanceRecord), so a value
// past its bound fails with ErrInvalidID, ErrInvalidEntry or ErrWriterLost
// in the contract's order, naming the field and the bound, whatever the
// store. With every field within its bound, every write of etcdstore fits
// etcd's default limits; docs/limits.md gives the arithmetic.
//
// # Null
//
// The empty string stands for JavaScript null: a root checkpoint has
// ParentCheckpointID "", an empty thread is appended to with ExpectedHeadID "",
// and GetHead returns "" for a thread without a head. An empty identifier is
// never valid, so nothing is lost.
package cairn
