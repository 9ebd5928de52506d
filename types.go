package cairn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// EntryKind is the kind of a workspace entry: KindFile or KindDir.
type EntryKind string

// The entry kinds of the contract. There is no symlink kind.
const (
	KindFile EntryKind = "file"
	KindDir  EntryKind = "dir"
)

// Checkpoint is one saved state of a sandbox thread: its files, its
// conversation and its artifacts. Checkpoints never change once appended.
//
// The zero value of ParentCheckpointID, Label and SourceRunID means null or
// absent. Files and Artifacts keep the order they are given in; a nil slice is
// an empty list. Conversation is opaque JSON that the store returns byte for
// byte; nil means JSON null.
type Checkpoint struct {
	ID                 string
	ThreadID           string
	ParentCheckpointID string
	CreatedAt          float64 // milliseconds; any finite number
	Reason             string  // "automatic", "named" or "fork-root"; never validated
	Label              string
	SourceRunID        string
	Files              []Entry
	Conversation       json.RawMessage
	Artifacts          []Artifact
}

// The reasons the upstream producers use. The store stores any reason verbatim.
const (
	ReasonAutomatic = "automatic"
	ReasonNamed     = "named"
	ReasonForkRoot  = "fork-root"
)

// Entry is one file or empty directory of a checkpoint. A file has a BlobKey of
// the form sandbox-files/sha256/<64 lower-case hex digits> and a Size; a
// directory has neither.
type Entry struct {
	Path    string
	Kind    EntryKind
	BlobKey string
	Size    int64

	// fileFields records that a decoded JSON entry carried a blobKey or size
	// key, so that a directory with "size": 0 is rejected as upstream does.
	fileFields bool
	// decodeProblem is set when a decoded JSON entry had a field of the wrong
	// type (a fractional size, a non-string path, ...). Validation reports it.
	decodeProblem string
}

// Artifact is an immutable copy of a thread artifact owned by a checkpoint.
// BlobKey has the form sandbox-artifacts/sha256/<64 lower-case hex digits>.
type Artifact struct {
	ArtifactID string
	Name       string
	MimeType   string
	Size       int64
	BlobKey    string
	CreatedAt  float64 // milliseconds; any finite number

	decodeProblem string
}

// Writer identifies a writer lease: the thread it writes, a token unique to the
// lease and the lease's fence. Identity is by value: any Writer with the fields
// of the current lease may write.
type Writer struct {
	ThreadID   string `json:"threadId"`
	OwnerToken string `json:"ownerToken"`
	Fence      int64  `json:"fence"`
}

// BlobReference is a blob key together with the number of checkpoints that use
// it. Only keys with References > 0 are ever reported.
type BlobReference struct {
	Key        string `json:"key"`
	References int    `json:"references"`
}

// AppendInput is the argument of Store.Append. ExpectedHeadID "" means the
// thread must be empty.
type AppendInput struct {
	Checkpoint     Checkpoint
	ExpectedHeadID string
	Writer         Writer
}

// AppendResult is the result of a successful Store.Append.
type AppendResult struct {
	HeadID string `json:"headId"`
}

// DeleteHeadInput is the argument of Store.DeleteHead.
type DeleteHeadInput struct {
	ThreadID     string
	CheckpointID string
	Writer       Writer
}

// DeleteCheckpointsInput is the argument of Pruner.DeleteCheckpoints. Keep is a
// JavaScript number: it must be a safe integer of 1 or more.
type DeleteCheckpointsInput struct {
	ThreadID string
	Keep     float64
	Writer   Writer
}

// DeleteThreadInput is the argument of ThreadDeleter.DeleteThread.
type DeleteThreadInput struct {
	ThreadID string
	Writer   Writer
}

// ForkInput is the argument of Forker.ForkFromCheckpoint. Writer is a lease on
// the destination thread.
type ForkInput struct {
	SourceThreadID          string
	SourceCheckpointID      string
	DestinationThreadID     string
	DestinationCheckpointID string
	CreatedAt               float64
	Writer                  Writer
}

// Clone returns a deep copy of c that shares no memory with it.
func (c *Checkpoint) Clone() Checkpoint {
	out := *c
	out.Files = slices.Clone(c.Files)
	out.Artifacts = slices.Clone(c.Artifacts)
	if c.Conversation != nil {
		out.Conversation = bytes.Clone(c.Conversation)
		if out.Conversation == nil {
			out.Conversation = json.RawMessage{}
		}
	}
	return out
}

// BlobKeys returns the distinct blob keys of c, from its file entries and its
// artifacts, sorted by their bytes. A checkpoint that uses a key twice counts
// it once.
func (c *Checkpoint) BlobKeys() []string {
	keys := make([]string, 0, len(c.Files)+len(c.Artifacts))
	for _, e := range c.Files {
		if e.Kind == KindFile {
			keys = append(keys, e.BlobKey)
		}
	}
	for _, a := range c.Artifacts {
		keys = append(keys, a.BlobKey)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

type checkpointJSON struct {
	ID                 string          `json:"id"`
	ThreadID           string          `json:"threadId"`
	ParentCheckpointID *string         `json:"parentCheckpointId"`
	CreatedAt          float64         `json:"createdAt"`
	Reason             string          `json:"reason"`
	Label              string          `json:"label,omitempty"`
	SourceRunID        string          `json:"sourceRunId,omitempty"`
	Files              []Entry         `json:"files"`
	Conversation       json.RawMessage `json:"conversation"`
	Artifacts          []Artifact      `json:"artifacts"`
}

// MarshalJSON encodes c in the upstream wire shape: parentCheckpointId is null
// for a root, label and sourceRunId are omitted when empty, and files and
// artifacts are arrays even when nil.
//
// JSON is a wire shape, not a storage format: encoding/json replaces invalid
// UTF-8 (which paths, labels and artifact names may hold) with U+FFFD and
// compacts the conversation, so a store must not persist checkpoints through
// it if it is to return them byte for byte.
func (c Checkpoint) MarshalJSON() ([]byte, error) {
	j := checkpointJSON{
		ID: c.ID, ThreadID: c.ThreadID, CreatedAt: c.CreatedAt, Reason: c.Reason,
		Label: c.Label, SourceRunID: c.SourceRunID,
		Files: c.Files, Conversation: c.Conversation, Artifacts: c.Artifacts,
	}
	if c.ParentCheckpointID != "" {
		p := c.ParentCheckpointID
		j.ParentCheckpointID = &p
	}
	if j.Files == nil {
		j.Files = []Entry{}
	}
	if j.Artifacts == nil {
		j.Artifacts = []Artifact{}
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes the upstream wire shape. It fails, with ErrInvalidID,
// only when the data is not a JSON object or an identifier field is present
// but not a string: every identifier check of the contract comes before every
// other check, so that is the error validation would report first. Any other
// field of the wrong type decodes into a value that fails validation later, at
// the point where the contract checks it: a createdAt that is not a number
// becomes NaN, and files or artifacts that are not arrays become a list whose
// single element is invalid. A label, sourceRunId or reason that is not a
// string is dropped.
func (c *Checkpoint) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		return &Error{Code: CodeInvalidID, Message: "checkpoint is not a JSON object", Err: err}
	}
	*c = Checkpoint{}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"threadId", &c.ThreadID}, {"id", &c.ID}, {"parentCheckpointId", &c.ParentCheckpointID}} {
		v, ok := raw[f.name]
		if !ok || isJSONNull(v) {
			continue
		}
		if !decodeString(v, f.dst) {
			return NewError(CodeInvalidID, "checkpoint %s is not a string", f.name)
		}
	}
	_ = decodeString(raw["reason"], &c.Reason)
	_ = decodeString(raw["label"], &c.Label)
	_ = decodeString(raw["sourceRunId"], &c.SourceRunID)
	if f, ok := decodeFloat(raw["createdAt"]); ok {
		c.CreatedAt = f
	} else {
		c.CreatedAt = math.NaN()
	}
	if err := json.Unmarshal(raw["files"], &c.Files); err != nil || c.Files == nil {
		c.Files = []Entry{{decodeProblem: "checkpoint files must be an array"}}
	}
	if err := json.Unmarshal(raw["artifacts"], &c.Artifacts); err != nil || c.Artifacts == nil {
		c.Artifacts = []Artifact{{decodeProblem: "checkpoint artifacts must be an array"}}
	}
	if v, ok := raw["conversation"]; ok && !isJSONNull(v) {
		c.Conversation = bytes.Clone(v)
	}
	return nil
}

func isJSONNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// MarshalJSON encodes e in the upstream shape: a file carries path, kind,
// blobKey and size; a directory carries only path and kind.
func (e Entry) MarshalJSON() ([]byte, error) {
	type file struct {
		Path    string    `json:"path"`
		Kind    EntryKind `json:"kind"`
		BlobKey string    `json:"blobKey"`
		Size    int64     `json:"size"`
	}
	type other struct {
		Path    string    `json:"path"`
		Kind    EntryKind `json:"kind"`
		BlobKey string    `json:"blobKey,omitempty"`
		Size    int64     `json:"size,omitempty"`
	}
	if e.Kind == KindFile {
		return json.Marshal(file{e.Path, e.Kind, e.BlobKey, e.Size})
	}
	return json.Marshal(other{e.Path, e.Kind, e.BlobKey, e.Size})
}

// UnmarshalJSON decodes an entry. A field of the wrong type does not fail the
// decoding; it makes the entry invalid, and validation reports ErrInvalidEntry.
func (e *Entry) UnmarshalJSON(data []byte) error {
	*e = Entry{}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		e.decodeProblem = "entry is not a JSON object"
		return nil
	}
	if !decodeString(raw["path"], &e.Path) {
		e.decodeProblem = "entry path is not a string"
	}
	var kind string
	if !decodeString(raw["kind"], &kind) {
		e.decodeProblem = firstProblem(e.decodeProblem, "entry kind is not a string")
	}
	e.Kind = EntryKind(kind)
	_, hasKey := raw["blobKey"]
	_, hasSize := raw["size"]
	e.fileFields = hasKey || hasSize
	if hasKey && !decodeString(raw["blobKey"], &e.BlobKey) {
		e.decodeProblem = firstProblem(e.decodeProblem, "entry blobKey is not a string")
	}
	if hasSize {
		n, ok := decodeSafeInt(raw["size"])
		if !ok {
			e.decodeProblem = firstProblem(e.decodeProblem, "entry size is not a non-negative safe integer")
		}
		e.Size = n
	} else if e.Kind == KindFile {
		e.decodeProblem = firstProblem(e.decodeProblem, "file entry has no size")
	}
	return nil
}

type artifactJSON struct {
	ArtifactID string  `json:"artifactId"`
	Name       string  `json:"name"`
	MimeType   string  `json:"mimeType"`
	Size       int64   `json:"size"`
	BlobKey    string  `json:"blobKey"`
	CreatedAt  float64 `json:"createdAt"`
}

// MarshalJSON encodes a in the upstream shape.
func (a Artifact) MarshalJSON() ([]byte, error) {
	return json.Marshal(artifactJSON{a.ArtifactID, a.Name, a.MimeType, a.Size, a.BlobKey, a.CreatedAt})
}

// UnmarshalJSON decodes an artifact. A field of the wrong type, or a missing
// one, makes the artifact invalid; validation reports ErrInvalidEntry.
func (a *Artifact) UnmarshalJSON(data []byte) error {
	*a = Artifact{}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		a.decodeProblem = "artifact is not a JSON object"
		return nil
	}
	ok := decodeString(raw["artifactId"], &a.ArtifactID) &&
		decodeString(raw["name"], &a.Name) &&
		decodeString(raw["mimeType"], &a.MimeType) &&
		decodeString(raw["blobKey"], &a.BlobKey)
	size, sizeOK := decodeSafeInt(raw["size"])
	a.Size = size
	created, createdOK := decodeFloat(raw["createdAt"])
	a.CreatedAt = created
	if !ok || !sizeOK || !createdOK {
		a.decodeProblem = "artifact has invalid fields"
	}
	return nil
}

func decodeString(raw json.RawMessage, dst *string) bool {
	if raw == nil {
		return false
	}
	return json.Unmarshal(raw, dst) == nil
}

// decodeFloat accepts a JSON number. Null is not a number, although
// encoding/json would decode it into a float64 as a no-op.
func decodeFloat(raw json.RawMessage) (float64, bool) {
	var f float64
	if raw == nil || isJSONNull(raw) || json.Unmarshal(raw, &f) != nil {
		return 0, false
	}
	return f, true
}

// decodeSafeInt accepts a JSON number that is an integer in [0, 2^53-1],
// written in any notation JavaScript accepts for such a number (1, 1.0, 1e3).
func decodeSafeInt(raw json.RawMessage) (int64, bool) {
	f, ok := decodeFloat(raw)
	if !ok || f != f || f < 0 || f > MaxSafeInteger || f != float64(int64(f)) {
		return 0, false
	}
	return int64(f), true
}

func firstProblem(have, next string) string {
	if have != "" {
		return have
	}
	return next
}

// String returns a short description of c for logs and test failures.
func (c Checkpoint) String() string {
	return fmt.Sprintf("checkpoint %q (thread %q, parent %q, createdAt %v, %d files, %d artifacts)",
		c.ID, c.ThreadID, c.ParentCheckpointID, c.CreatedAt, len(c.Files), len(c.Artifacts))
}
