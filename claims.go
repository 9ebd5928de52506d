package cairn

import (
	"context"
	"slices"
	"strings"
)

// The online sweep protocol. A sweep may run while captures run because a
// capture's decision to rely on bytes already in the bucket and a sweep's
// decision to delete them are both compare-and-swaps on the same store state,
// so they cannot both win:
//
//   - A writer claims (BlobClaimer.ClaimBlobs) every blob key its next
//     checkpoint will reference that its parent does not, before it looks in
//     the bucket. Only then may it reuse the bytes it finds, or upload them.
//     A claim belongs to the writer lease: it protects the key for as long as
//     that lease's writer record is the lease's (WriterRecord.Holds), and the
//     writer's next successful Append ends every claim of the lease (the keys
//     it references are then protected by the reference; the others were not
//     used). No clock decides that a claim is over: a lease whose expiry has
//     passed by some clock, but that nobody took over, released or ended, can
//     still append by its holder's clock, so its claims still protect. A
//     store ends a record its holder abandoned by a timer of its own (on etcd,
//     the leader's timer of the record's etcd lease), never by a reading of
//     anyone's wall clock.
//   - The sweeper moves a key through GC records: none, GCCandidate (found
//     unreferenced and unclaimed; Since says when), GCDeleting (its bytes may
//     be gone), none again once the delete succeeded. Every move is a
//     compare-and-swap on the record's version, and a claim of a candidate
//     removes the record, so a claim made at any time after the sweeper read
//     the key's state aborts that key's delete.
//   - A key in GCDeleting cannot be claimed: ClaimBlobs reports it as busy and
//     the writer waits (WaitBlobs) until the sweeper has settled the delete,
//     then claims again and uploads.
//
// docs/design.md ("Online sweep and capacity") gives the argument in full.

// GCState is the sweeper's state of one blob key.
type GCState string

// The states of a GC record. A key without a record is live or not yet seen
// unreferenced by any sweep.
const (
	// GCCandidate: a sweep found the key unreferenced and unclaimed. A claim
	// removes the record; a later sweep may move it to GCDeleting.
	GCCandidate GCState = "candidate"
	// GCDeleting: a sweep is deleting, or may have deleted, the key's bytes.
	// Writers treat the bytes as gone. The record goes when the delete is
	// known to have succeeded, or back to GCCandidate when it is known to have
	// failed; an unknown outcome leaves it for a later sweep to settle.
	GCDeleting GCState = "deleting"
)

// GCRecord is the sweeper's record of one blob key.
type GCRecord struct {
	Key   string  `json:"key"`
	State GCState `json:"state"`
	// Since is when a sweep first found the key unreferenced and unclaimed,
	// in milliseconds since the Unix epoch by the sweeper's clock. A claim
	// ends the record, so the time restarts after every use.
	Since float64 `json:"since"`
	// Version changes with every transition of the record and is never
	// given again to the same key, also after the record was removed and the
	// key marked anew (an etcd store uses the mod revision, not etcd's
	// per-key version, which restarts); the transitions compare it. Its
	// values are the store's own.
	Version int64 `json:"version"`
}

// BlobGCView is what a sweep decides from: the live claims and the GC
// records, as of the same point in time as the references the read reported.
type BlobGCView struct {
	// Claimed holds the keys with at least one live claim, sorted and
	// distinct. A claim is live while its writer lease's record is the
	// lease's (WriterRecord.Holds), whatever any clock says.
	Claimed []string
	// Records holds every GC record, sorted by key.
	Records []GCRecord
}

// IsClaimed reports whether key is in v.Claimed.
func (v BlobGCView) IsClaimed(key string) bool {
	_, ok := slices.BinarySearch(v.Claimed, key)
	return ok
}

// Record returns the record of key, if any.
func (v BlobGCView) Record(key string) (GCRecord, bool) {
	i, ok := slices.BinarySearchFunc(v.Records, key, func(r GCRecord, k string) int { return strings.Compare(r.Key, k) })
	if !ok {
		return GCRecord{}, false
	}
	return v.Records[i], true
}

// BlobClaimer is the writer's side of the online sweep protocol: the optional
// capability that makes a capture safe beside a running sweeper.
type BlobClaimer interface {
	// ClaimBlobs claims keys for the writer lease w, so that no sweep deletes
	// them while w's writer record is w's, and returns the keys it could not
	// claim because a sweep is deleting them (sorted, distinct; nil when
	// every key was claimed). The caller must not rely on the bytes of a busy
	// key: it waits with WaitBlobs, claims it again, and uploads it. A
	// claimed key's bytes may be reused if the bucket has them, or uploaded.
	// Claiming a key twice is harmless. Claims end when the lease's next
	// Append succeeds, and when the lease's record ends: released, taken over
	// (after it expired by the acquirer's clock), or ended by the store's own
	// timer after its holder stopped renewing it. Expiry alone does not end
	// them.
	//
	// It claims all of keys or, on error, claims nothing that the caller can
	// rely on. It returns, in order: ErrInvalidID for an invalid writer
	// thread id; ErrInvalidEntry for a key that is not a file or artifact
	// blob key; ErrWriterLost when w is not the thread's current lease.
	ClaimBlobs(ctx context.Context, w Writer, keys []string) (busy []string, err error)
	// WaitBlobs returns once none of keys is in GCDeleting, or with ctx's
	// error when ctx ends first. It returns ErrInvalidEntry for a key that is
	// not a blob key. It claims nothing.
	WaitBlobs(ctx context.Context, keys []string) error
}

// BlobCollector is the sweeper's side of the online sweep protocol. Its
// writes are compare-and-swaps on GC records; a record that changed since the
// caller read it is left alone and not reported. Every method returns
// ErrInvalidEntry for a key that is not a blob key, before it changes
// anything, and context or transport errors as they are.
type BlobCollector interface {
	// ReadBlobGC calls fn for each blob reference, in the order and with the
	// counts of ListBlobReferences, and returns the live claims and the GC
	// records, all as of one point in time after the call began. It stops
	// at, and returns, the first error of fn. A store that keeps body
	// objects of its own in the bucket (IsObjectKey) also calls fn, after
	// the blob keys and in key order, for each object it still needs, and
	// its claims and records may name object keys, so that a sweep keeps
	// exactly those objects; ListBlobReferences never reports them.
	ReadBlobGC(ctx context.Context, fn func(BlobReference) error) (BlobGCView, error)
	// MarkBlobs creates a GCCandidate record with the given Since for each key
	// that has neither a record nor a live claim, and returns the records it
	// created, sorted by key. It returns ErrInvalidEntry for a Since that is
	// not finite.
	MarkBlobs(ctx context.Context, keys []string, since float64) ([]GCRecord, error)
	// BeginBlobDeletes moves each record that is still a GCCandidate of the
	// same version, and whose key has no live claim, to GCDeleting, and
	// returns the moved records with their new versions, sorted by key. The
	// caller deletes the bytes of exactly those keys.
	BeginBlobDeletes(ctx context.Context, recs []GCRecord) ([]GCRecord, error)
	// EndBlobDeletes settles records that are still GCDeleting of the same
	// version: deleted says the bytes are known to be gone (the record is
	// removed) or known to be still there (the record returns to
	// GCCandidate with the same Since).
	EndBlobDeletes(ctx context.Context, recs []GCRecord, deleted bool) error
	// DropBlobRecords removes records that are still GCCandidate of the same
	// version: the caller found the key referenced, claimed, or gone from the
	// bucket.
	DropBlobRecords(ctx context.Context, recs []GCRecord) error
}

// CheckBlobKeys returns ErrInvalidEntry naming the first key of keys that is
// not a file or artifact blob key.
func CheckBlobKeys(keys []string) error {
	for _, k := range keys {
		if !IsFileBlobKey(k) && !IsArtifactBlobKey(k) {
			return NewError(CodeInvalidEntry, "%q is not a blob key", k)
		}
	}
	return nil
}

// CheckCollectorKeys returns ErrInvalidEntry naming the first key of keys that
// is neither a file or artifact blob key nor a body object key (IsObjectKey):
// the keys a sweep may mark and delete. Writers claim blob keys only; a store
// claims its own objects itself.
func CheckCollectorKeys(keys []string) error {
	for _, k := range keys {
		if !IsFileBlobKey(k) && !IsArtifactBlobKey(k) && !IsObjectKey(k) {
			return NewError(CodeInvalidEntry, "%q is neither a blob key nor an object key", k)
		}
	}
	return nil
}

// CheckClaimInput runs the checks of ClaimBlobs that need no store state, in
// order: the writer's thread id (ErrInvalidID), then the keys
// (ErrInvalidEntry).
func CheckClaimInput(w Writer, keys []string) error {
	if err := ValidateID(w.ThreadID, "writer thread id"); err != nil {
		return err
	}
	return CheckBlobKeys(keys)
}

// CheckMarkInput runs the checks of MarkBlobs that need no store state: the
// keys (blob or object keys), then a finite since (ErrInvalidEntry).
func CheckMarkInput(keys []string, since float64) error {
	if err := CheckCollectorKeys(keys); err != nil {
		return err
	}
	return ValidateCreatedAt(since, "GC record since")
}

// CheckGCRecords returns ErrInvalidEntry for the first record whose key is
// neither a blob key nor an object key.
func CheckGCRecords(recs []GCRecord) error {
	for _, r := range recs {
		if err := CheckCollectorKeys([]string{r.Key}); err != nil {
			return err
		}
	}
	return nil
}

// SortedKeys returns the distinct keys of keys, sorted by their bytes.
func SortedKeys(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}
