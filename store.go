package cairn

import (
	"context"
	"encoding/json"
)

// Store is a sandbox checkpoint store: the Go form of upstream's
// SandboxCheckpointStore. Implementations are safe for concurrent use, every
// write is all or nothing, and reads return copies that share no memory with
// the store.
//
// Every method returns context errors unchanged when ctx ends first, and a
// store backed by a remote service may return transport errors of its own;
// the error contracts below list the contract's errors.
type Store interface {
	// Get returns the checkpoint with the given id, from any thread, or nil
	// when there is none. It returns ErrInvalidID for an invalid id.
	Get(ctx context.Context, id string) (*Checkpoint, error)

	// List returns every checkpoint of the thread sorted by CreatedAt, then by
	// the bytes of the id, or an empty list for an unknown thread. It returns
	// ErrInvalidID for an invalid thread id.
	List(ctx context.Context, threadID string) ([]Checkpoint, error)

	// GetHead returns the thread's head id, or "" when the thread has none.
	// It returns ErrInvalidID for an invalid thread id.
	GetHead(ctx context.Context, threadID string) (string, error)

	// Append adds the checkpoint to its thread and makes it the head, as one
	// compare-and-swap, and adds one reference to each of its distinct blob
	// keys. It returns, for the first failed check in this order:
	// ErrInvalidID for an invalid thread, writer thread, checkpoint, expected
	// head or parent id; ErrWriterLost when the writer's thread is not the
	// checkpoint's; ErrInvalidEntry for a non-finite createdAt or invalid files,
	// artifacts or conversation; ErrWriterLost when the writer lease is not
	// current; ErrDuplicateID when the id exists in any thread; ErrStaleHead
	// when the head is not ExpectedHeadID; ErrParentMismatch when the parent is
	// not ExpectedHeadID.
	Append(ctx context.Context, in AppendInput) (AppendResult, error)

	// DeleteHead removes the thread's head and makes its parent the head, or
	// leaves the thread without a head when the parent is null or no longer
	// exists. It removes one reference from each of the checkpoint's distinct
	// blob keys. It returns, in order: ErrInvalidID for an invalid thread,
	// checkpoint or writer thread id; ErrWriterLost when the writer's thread is
	// not ThreadID or the lease is not current; ErrNotHead when the checkpoint
	// is not the head.
	DeleteHead(ctx context.Context, in DeleteHeadInput) error

	// AcquireWriter takes the thread's writer lease without waiting. Each new
	// lease has a fresh owner token and a fence higher than every earlier
	// fence of the thread. It returns ErrInvalidID for an invalid thread id and
	// ErrWriterConflict when an unexpired lease exists; an expired lease is
	// taken over.
	AcquireWriter(ctx context.Context, threadID string) (*Lease, error)

	// ListBlobReferences returns every blob key with a count above zero, over
	// all threads, sorted by the key's bytes. The count of a key is the number
	// of checkpoints that use it.
	ListBlobReferences(ctx context.Context) ([]BlobReference, error)
}

// AlarmPruner is the optional capability to keep the newest checkpoints of
// a thread with deletes only, for a store whose backend refuses every write
// that adds data (ErrStoreFull) but still serves reads and deletes. It needs
// no writer lease, which cannot be taken then. KeepNewest and the sweeper's
// prune use it when the lease or the prune is refused with ErrStoreFull. It
// returns the removed ids, oldest first, and ErrInvalidID or ErrInvalidEntry
// (keep < 1) for bad input.
type AlarmPruner interface {
	KeepNewestUnderAlarm(ctx context.Context, threadID string, keep int) ([]string, error)
}

// Pruner is the optional capability to remove old checkpoints of a thread.
type Pruner interface {
	// DeleteCheckpoints keeps the thread's head and the Keep-1 checkpoints
	// before it along the parent chain, removes the checkpoints older than
	// those on that chain, and returns the removed ids, oldest first.
	// Checkpoints that are not on the head's chain stay. The blob references of
	// removed checkpoints go down. It is all or nothing, and returns, in order:
	// ErrInvalidID for an invalid thread or writer thread id; ErrWriterLost
	// when the writer's thread is not ThreadID; ErrInvalidEntry when Keep is
	// not a safe integer of 1 or more; ErrWriterLost when the lease is not
	// current.
	DeleteCheckpoints(ctx context.Context, in DeleteCheckpointsInput) ([]string, error)
}

// ThreadDeleter is the optional capability to remove a whole thread, which
// the contract does not have: a retention policy uses it to drop threads that
// went idle.
type ThreadDeleter interface {
	// DeleteThread removes every checkpoint of the thread, on its head's
	// chain or not, and its head, and removes one reference from each
	// distinct blob key of every removed checkpoint, as one atomic step. It
	// returns the removed ids in the order of List ([] for a thread without
	// checkpoints). The writer lease stays current until released, the
	// thread's fences keep rising, and the thread's transcript (Forker) is
	// not touched. It returns, in order: ErrInvalidID for an invalid thread
	// or writer thread id; ErrWriterLost when the writer's thread is not
	// ThreadID or the lease is not current.
	DeleteThread(ctx context.Context, in DeleteThreadInput) ([]string, error)
}

// Forker is the optional capability to fork a checkpoint into a new thread.
type Forker interface {
	// ForkFromCheckpoint copies the source checkpoint into the empty
	// destination thread as a root with reason "fork-root", sets the
	// destination transcript to the source's conversation, makes the root the
	// head and adds one reference per distinct blob key, in one atomic step.
	// It returns the new root. It returns, in order: ErrInvalidID for an
	// invalid id; ErrInvalidEntry for a non-finite createdAt;
	// ErrForkSourceThreadMismatch when source and destination threads are
	// equal; ErrForkSourceNotFound when the source checkpoint does not exist;
	// ErrForkSourceThreadMismatch when it belongs to another thread;
	// ErrWriterLost when the writer is not a current lease on the destination;
	// ErrForkDestinationNotEmpty when the destination has a transcript, a
	// checkpoint or a head, or the destination checkpoint id exists anywhere.
	ForkFromCheckpoint(ctx context.Context, in ForkInput) (*Checkpoint, error)

	// Transcripts returns the transcript store that forks write to. It lives
	// in the same transactional domain as the checkpoints.
	Transcripts() TranscriptStore
}

// TranscriptStore keeps the message transcript of each thread as opaque JSON.
type TranscriptStore interface {
	// LoadThread returns the thread's transcript, or the empty JSON array for
	// an unknown thread. It returns ErrInvalidID for an invalid thread id.
	LoadThread(ctx context.Context, threadID string) (json.RawMessage, error)
	// SaveThread replaces the thread's transcript. It returns ErrInvalidID for
	// an invalid thread id and ErrInvalidEntry when messages is not valid JSON.
	SaveThread(ctx context.Context, threadID string, messages json.RawMessage) error
}

// ThreadLister is the optional capability to enumerate threads, so that an
// operator can prune every thread without outside bookkeeping.
type ThreadLister interface {
	// ListThreads returns, sorted by their bytes, up to limit ids of threads
	// that have at least one checkpoint and whose id sorts after the given one
	// ("" starts at the beginning). An empty result means there are no more.
	// limit <= 0 selects a store-chosen page size.
	ListThreads(ctx context.Context, after string, limit int) ([]string, error)
}

// BlobReferenceWalker is the optional capability to stream blob references
// instead of building the whole list in memory.
type BlobReferenceWalker interface {
	// WalkBlobReferences calls fn for each blob key with a count above zero,
	// in the order and with the counts of ListBlobReferences, as of a single
	// point in time. It stops at, and returns, the first error of fn. A store
	// that cannot hold its snapshot until the walk ends returns an error and
	// never mixes two points in time.
	WalkBlobReferences(ctx context.Context, fn func(BlobReference) error) error
}

// InstanceRecord is the provider sandbox kept for a key by an InstanceStore.
// LatestSnapshotID and LatestRunID are optional: "" means absent, and an
// absent field is omitted from the JSON form.
type InstanceRecord struct {
	Key               string  `json:"key"`
	Provider          string  `json:"provider"`
	ProviderSandboxID string  `json:"providerSandboxId"`
	LatestSnapshotID  string  `json:"latestSnapshotId,omitempty"`
	ThreadID          string  `json:"threadId"`
	LatestRunID       string  `json:"latestRunId,omitempty"`
	UpdatedAt         float64 `json:"updatedAt"` // milliseconds since the Unix epoch
}

// InstanceStore keeps one InstanceRecord per key. No field is validated
// beyond this module's bounds (ValidateInstanceRecord): a key longer than
// MaxIDBytes gives ErrInvalidID in every method, another field longer than
// MaxNameBytes gives ErrInvalidEntry in Upsert, and nothing changes.
type InstanceStore interface {
	// Get returns the record of key, or nil without error when there is none.
	Get(ctx context.Context, key string) (*InstanceRecord, error)
	// Upsert replaces the whole record of rec.Key: optional fields it leaves
	// empty are absent afterwards. The last write wins and no other record
	// changes.
	Upsert(ctx context.Context, rec InstanceRecord) error
	// Delete removes the record of key. Deleting a missing key does nothing.
	Delete(ctx context.Context, key string) error
}
