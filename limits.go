package cairn

// Bounds on identifiers and names: a deliberate difference from upstream,
// which has none (docs/limits.md gives the arithmetic behind each).
//
// Every store of this module, the memory store included, checks them in the
// contract's check order, so that a value is refused the same way whatever
// store is behind a call: an identifier past its bound fails where the
// identifier is checked (ErrInvalidID), a name or path where the content is
// checked (ErrInvalidEntry), and the message names the field and the bound.
// They are chosen so that every write whose fields are within them fits
// etcd's default limits (a request of 1.5 MiB, 128 operations a
// transaction) in every layout of etcdstore; no real identifier comes near
// them.
const (
	// MaxIDBytes bounds, in bytes of UTF-8, every identifier the contract
	// checks (thread ids, checkpoint ids, parent and expected-head ids, the
	// four ids of a fork, a writer's thread) and an instance record's key.
	// etcdstore's keys embed up to two identifiers, each escaped to at most
	// twice its length, and its largest transaction carries about 140 keys:
	// about 0.6 MiB at this bound, within a 1.5 MiB request beside the
	// 900 KiB of values the store puts into one request.
	MaxIDBytes = 1024
	// MaxOwnerTokenBytes bounds a writer's owner token. A token is never
	// validated: a longer one cannot be a lease's token (the stores issue
	// tokens of a few dozen bytes), so a write with it fails with
	// ErrWriterLost where the lease is checked, before any store sends it
	// to a database.
	MaxOwnerTokenBytes = 1024
	// MaxNameBytes bounds the names a checkpoint carries (reason, label,
	// sourceRunId, an artifact's artifactId, name and mimeType) and the
	// fields of an instance record other than its key.
	MaxNameBytes = 1024
	// MaxPathBytes bounds an entry's path: Linux's PATH_MAX, the longest
	// path a sandbox's file system hands a capture.
	MaxPathBytes = 4096
)

// tooLong returns the error of a value of what, n bytes long, past its bound
// max.
func tooLong(code Code, what string, n, max int) *Error {
	return NewError(code, "%s is %d bytes long, more than the %d bytes this store accepts", what, n, max)
}

// validateName returns ErrInvalidEntry when s, a name of what, is longer
// than MaxNameBytes.
func validateName(s, what string) error {
	if len(s) > MaxNameBytes {
		return tooLong(CodeInvalidEntry, what, len(s), MaxNameBytes)
	}
	return nil
}

// CheckOwnerToken returns ErrWriterLost when w's owner token is longer than
// MaxOwnerTokenBytes: no lease has such a token, so the writer is not
// current. A store runs it where it checks the lease (after every check of
// the input), so that it never sends such a token to its database.
func CheckOwnerToken(w Writer) error {
	if len(w.OwnerToken) > MaxOwnerTokenBytes {
		return NewError(CodeWriterLost, "writer lease for thread %q is no longer current: its owner token is %d bytes long, more than any lease's (%d bytes)",
			w.ThreadID, len(w.OwnerToken), MaxOwnerTokenBytes)
	}
	return nil
}

// ValidateInstanceKey returns ErrInvalidID when key, an instance record's
// key, is longer than MaxIDBytes. Keys are otherwise not validated (the
// empty key is a key).
func ValidateInstanceKey(key string) error {
	if len(key) > MaxIDBytes {
		return tooLong(CodeInvalidID, "instance key", len(key), MaxIDBytes)
	}
	return nil
}

// ValidateInstanceRecord checks rec's bounds in order: its key
// (ErrInvalidID, ValidateInstanceKey), then provider, providerSandboxId,
// latestSnapshotId, threadId and latestRunId, each at most MaxNameBytes
// (ErrInvalidEntry). No field is otherwise validated.
func ValidateInstanceRecord(rec *InstanceRecord) error {
	if err := ValidateInstanceKey(rec.Key); err != nil {
		return err
	}
	for _, f := range []struct{ v, what string }{
		{rec.Provider, "instance provider"},
		{rec.ProviderSandboxID, "instance providerSandboxId"},
		{rec.LatestSnapshotID, "instance latestSnapshotId"},
		{rec.ThreadID, "instance threadId"},
		{rec.LatestRunID, "instance latestRunId"},
	} {
		if err := validateName(f.v, f.what); err != nil {
			return err
		}
	}
	return nil
}
