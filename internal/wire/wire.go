// Package wire converts between the root package's types and the messages of
// the Connect API (gen/cairn/v1), and between the contract's errors and
// Connect errors. The server (internal/server) and the Go client (package
// remote) both use it, so the two sides of the wire agree by construction.
package wire

import (
	"encoding/json"
	"math"

	"github.com/cairnstore/cairn"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
)

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// OptionalID returns the id of an optional id field: "" when absent. A field
// that is present but empty cannot be told apart from an absent one in Go,
// so it is reported as invalid (bad true); the contract rejects the empty id
// as an invalid id, which is the first check of every operation.
func OptionalID(p *string) (id string, bad bool) {
	if p == nil {
		return "", false
	}
	return *p, *p == ""
}

// OptionalString returns the text of an optional field, "" when absent.
func OptionalString(p *string) string { return deref(p) }

// Opt returns nil for "" and a pointer to s otherwise.
func Opt(s string) *string { return opt(s) }

// FromWriter converts a writer.
func FromWriter(w *cairnv1.Writer) cairn.Writer {
	if w == nil {
		return cairn.Writer{}
	}
	return cairn.Writer{ThreadID: w.ThreadId, OwnerToken: w.OwnerToken, Fence: w.Fence}
}

// ToWriter converts a writer.
func ToWriter(w cairn.Writer) *cairnv1.Writer {
	return &cairnv1.Writer{ThreadId: w.ThreadID, OwnerToken: w.OwnerToken, Fence: w.Fence}
}

// ToCheckpoint converts a checkpoint to its message.
func ToCheckpoint(c *cairn.Checkpoint) *cairnv1.Checkpoint {
	m := &cairnv1.Checkpoint{
		Id: c.ID, ThreadId: c.ThreadID, ParentCheckpointId: opt(c.ParentCheckpointID),
		CreatedAt: c.CreatedAt, Reason: c.Reason, Label: opt(c.Label), SourceRunId: opt(c.SourceRunID),
		Files:     make([]*cairnv1.Entry, len(c.Files)),
		Artifacts: make([]*cairnv1.Artifact, len(c.Artifacts)),
	}
	if c.Conversation != nil {
		m.Conversation = []byte(c.Conversation)
		if m.Conversation == nil {
			m.Conversation = []byte{}
		}
	}
	// The entries and their optional fields come from one slice each.
	entries := make([]cairnv1.Entry, len(c.Files))
	keys := make([]string, len(c.Files))
	sizes := make([]float64, len(c.Files))
	for i, e := range c.Files {
		w := &entries[i]
		w.Path, w.Kind = e.Path, string(e.Kind)
		if e.Kind == cairn.KindFile || e.BlobKey != "" {
			keys[i] = e.BlobKey
			w.BlobKey = &keys[i]
		}
		if e.Kind == cairn.KindFile || e.Size != 0 {
			sizes[i] = float64(e.Size)
			w.Size = &sizes[i]
		}
		m.Files[i] = w
	}
	arts := make([]cairnv1.Artifact, len(c.Artifacts))
	for i, a := range c.Artifacts {
		w := &arts[i]
		w.ArtifactId, w.Name, w.MimeType, w.Size, w.BlobKey, w.CreatedAt =
			a.ArtifactID, a.Name, a.MimeType, float64(a.Size), a.BlobKey, a.CreatedAt
		m.Artifacts[i] = w
	}
	return m
}

// FromCheckpoint converts a message to a checkpoint. It never fails: a field
// the Go type cannot hold (a fractional, negative or unsafe size; a
// directory that carries a size or blob key) becomes an entry or artifact
// that validation rejects with cairn.ErrInvalidEntry at the point of the
// check order where the contract checks it. badID is set when an optional id
// field is present but empty (see OptionalID).
func FromCheckpoint(m *cairnv1.Checkpoint) (c cairn.Checkpoint, badID bool) {
	if m == nil {
		return cairn.Checkpoint{}, false
	}
	parent, badID := OptionalID(m.ParentCheckpointId)
	c = cairn.Checkpoint{
		ID: m.Id, ThreadID: m.ThreadId, ParentCheckpointID: parent, CreatedAt: m.CreatedAt,
		Reason: m.Reason, Label: deref(m.Label), SourceRunID: deref(m.SourceRunId),
	}
	if m.Conversation != nil {
		c.Conversation = json.RawMessage(m.Conversation)
	}
	if len(m.Files) > 0 {
		c.Files = make([]cairn.Entry, len(m.Files))
		for i, e := range m.Files {
			c.Files[i] = fromEntry(e)
		}
	}
	if len(m.Artifacts) > 0 {
		c.Artifacts = make([]cairn.Artifact, len(m.Artifacts))
		for i, a := range m.Artifacts {
			c.Artifacts[i] = fromArtifact(a)
		}
	}
	return c, badID
}

// safeSize reports whether f is a size the contract accepts: an integer in
// [0, 2^53-1].
func safeSize(f float64) bool {
	return f >= 0 && f <= cairn.MaxSafeInteger && f == math.Trunc(f)
}

func fromEntry(e *cairnv1.Entry) cairn.Entry {
	if e == nil {
		return invalidEntry("", "")
	}
	out := cairn.Entry{Path: e.Path, Kind: cairn.EntryKind(e.Kind), BlobKey: deref(e.BlobKey)}
	if e.Size != nil {
		if !safeSize(*e.Size) {
			return invalidEntry(e.Path, e.Kind)
		}
		out.Size = int64(*e.Size)
	}
	switch {
	case e.Kind == string(cairn.KindFile) && e.Size == nil:
		return invalidEntry(e.Path, e.Kind)
	case e.Kind != string(cairn.KindFile) && (e.Size != nil || e.BlobKey != nil) && out.Size == 0 && out.BlobKey == "":
		// A directory that carries the fields of a file, with zero values
		// the Go type cannot tell from absent ones: decode it as the JSON
		// form would, which remembers that the fields were there.
		var d cairn.Entry
		raw, _ := json.Marshal(map[string]any{"path": e.Path, "kind": e.Kind, "size": 0})
		if json.Unmarshal(raw, &d) == nil {
			d.Path = e.Path
			return d
		}
		return invalidEntry(e.Path, e.Kind)
	}
	return out
}

// invalidEntry returns an entry that carries a decoding problem, which
// validation reports as cairn.ErrInvalidEntry.
func invalidEntry(path, kind string) cairn.Entry {
	var e cairn.Entry
	raw, _ := json.Marshal(map[string]any{"path": path, "kind": kind, "size": -1})
	_ = json.Unmarshal(raw, &e)
	return e
}

func fromArtifact(a *cairnv1.Artifact) cairn.Artifact {
	if a == nil || !safeSize(a.Size) {
		var bad cairn.Artifact
		_ = json.Unmarshal([]byte(`{"size":-1}`), &bad)
		return bad
	}
	return cairn.Artifact{
		ArtifactID: a.ArtifactId, Name: a.Name, MimeType: a.MimeType,
		Size: int64(a.Size), BlobKey: a.BlobKey, CreatedAt: a.CreatedAt,
	}
}

// ToInstance converts an instance record.
func ToInstance(r *cairn.InstanceRecord) *cairnv1.InstanceRecord {
	return &cairnv1.InstanceRecord{
		Key: r.Key, Provider: r.Provider, ProviderSandboxId: r.ProviderSandboxID,
		LatestSnapshotId: opt(r.LatestSnapshotID), ThreadId: r.ThreadID,
		LatestRunId: opt(r.LatestRunID), UpdatedAt: r.UpdatedAt,
	}
}

// FromInstance converts an instance record.
func FromInstance(m *cairnv1.InstanceRecord) cairn.InstanceRecord {
	if m == nil {
		return cairn.InstanceRecord{}
	}
	return cairn.InstanceRecord{
		Key: m.Key, Provider: m.Provider, ProviderSandboxID: m.ProviderSandboxId,
		LatestSnapshotID: deref(m.LatestSnapshotId), ThreadID: m.ThreadId,
		LatestRunID: deref(m.LatestRunId), UpdatedAt: m.UpdatedAt,
	}
}

// ToRefs converts blob references.
func ToRefs(refs []cairn.BlobReference) []*cairnv1.BlobReference {
	out := make([]*cairnv1.BlobReference, len(refs))
	for i, r := range refs {
		out[i] = &cairnv1.BlobReference{Key: r.Key, References: int64(r.References)}
	}
	return out
}

// FromRef converts a blob reference.
func FromRef(r *cairnv1.BlobReference) cairn.BlobReference {
	return cairn.BlobReference{Key: r.GetKey(), References: int(r.GetReferences())}
}

// ToRecords converts GC records.
func ToRecords(recs []cairn.GCRecord) []*cairnv1.GCRecord {
	out := make([]*cairnv1.GCRecord, len(recs))
	for i, r := range recs {
		out[i] = &cairnv1.GCRecord{Key: r.Key, State: string(r.State), Since: r.Since, Version: r.Version}
	}
	return out
}

// FromRecords converts GC records; nil for none.
func FromRecords(recs []*cairnv1.GCRecord) []cairn.GCRecord {
	if len(recs) == 0 {
		return nil
	}
	out := make([]cairn.GCRecord, len(recs))
	for i, r := range recs {
		out[i] = cairn.GCRecord{Key: r.GetKey(), State: cairn.GCState(r.GetState()), Since: r.GetSince(), Version: r.GetVersion()}
	}
	return out
}
