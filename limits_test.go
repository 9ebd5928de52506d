package cairn_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
)

// TestBoundMessages checks that every refusal of a value past its bound has
// the bound's code and names the field and the bound, and that the value at
// the bound passes the same check.
func TestBoundMessages(t *testing.T) {
	valid := func() cairn.AppendInput {
		return cairn.AppendInput{
			Checkpoint: cairn.Checkpoint{
				ID: "c", ThreadID: "t", CreatedAt: 1, Reason: cairn.ReasonNamed,
				Files:     []cairn.Entry{{Path: "f", Kind: cairn.KindFile, BlobKey: cairn.FileBlobPrefix + strings.Repeat("a", 64), Size: 1}},
				Artifacts: []cairn.Artifact{{ArtifactID: "a", Name: "n", MimeType: "m", BlobKey: cairn.ArtifactBlobPrefix + strings.Repeat("b", 64), Size: 1, CreatedAt: 1}},
			},
			Writer: cairn.Writer{ThreadID: "t", OwnerToken: "o", Fence: 1},
		}
	}
	for _, tc := range []struct {
		name  string
		field string // what the message names
		max   int
		want  *cairn.Error
		set   func(in *cairn.AppendInput, s string)
		atErr *cairn.Error // the error at the bound: a later check's
	}{
		{"ThreadID", "checkpoint thread id", cairn.MaxIDBytes, cairn.ErrInvalidID, func(in *cairn.AppendInput, s string) { in.Checkpoint.ThreadID, in.Writer.ThreadID = s, s }, nil},
		{"WriterThreadID", "writer thread id", cairn.MaxIDBytes, cairn.ErrInvalidID, func(in *cairn.AppendInput, s string) { in.Writer.ThreadID = s }, cairn.ErrWriterLost},
		{"CheckpointID", "checkpoint id", cairn.MaxIDBytes, cairn.ErrInvalidID, func(in *cairn.AppendInput, s string) { in.Checkpoint.ID = s }, nil},
		{"ExpectedHeadID", "expected head id", cairn.MaxIDBytes, cairn.ErrInvalidID, func(in *cairn.AppendInput, s string) { in.ExpectedHeadID = s }, nil},
		{"ParentID", "parent checkpoint id", cairn.MaxIDBytes, cairn.ErrInvalidID, func(in *cairn.AppendInput, s string) { in.Checkpoint.ParentCheckpointID = s }, nil},
		{"Reason", "checkpoint reason", cairn.MaxNameBytes, cairn.ErrInvalidEntry, func(in *cairn.AppendInput, s string) { in.Checkpoint.Reason = s }, nil},
		{"Label", "checkpoint label", cairn.MaxNameBytes, cairn.ErrInvalidEntry, func(in *cairn.AppendInput, s string) { in.Checkpoint.Label = s }, nil},
		{"SourceRunID", "checkpoint sourceRunId", cairn.MaxNameBytes, cairn.ErrInvalidEntry, func(in *cairn.AppendInput, s string) { in.Checkpoint.SourceRunID = s }, nil},
		{"EntryPath", "entry path", cairn.MaxPathBytes, cairn.ErrInvalidEntry, func(in *cairn.AppendInput, s string) { in.Checkpoint.Files[0].Path = s }, nil},
		{"ArtifactID", "artifact artifactId", cairn.MaxNameBytes, cairn.ErrInvalidEntry, func(in *cairn.AppendInput, s string) { in.Checkpoint.Artifacts[0].ArtifactID = s }, nil},
		{"ArtifactName", "artifact name", cairn.MaxNameBytes, cairn.ErrInvalidEntry, func(in *cairn.AppendInput, s string) { in.Checkpoint.Artifacts[0].Name = s }, nil},
		{"ArtifactMimeType", "artifact mimeType", cairn.MaxNameBytes, cairn.ErrInvalidEntry, func(in *cairn.AppendInput, s string) { in.Checkpoint.Artifacts[0].MimeType = s }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := valid()
			tc.set(&at, strings.Repeat("x", tc.max))
			expectCode(t, "at the bound", cairn.CheckAppendInput(&at), tc.atErr)
			past := valid()
			tc.set(&past, strings.Repeat("x", tc.max+1))
			err := cairn.CheckAppendInput(&past)
			expectCode(t, "one byte past the bound", err, tc.want)
			if err != nil && (!strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), strconv.Itoa(tc.max)+" bytes")) {
				t.Errorf("message %q does not name %q and the bound %d", err, tc.field, tc.max)
			}
		})
	}
}

func TestCheckOwnerToken(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want *cairn.Error
	}{{0, nil}, {cairn.MaxOwnerTokenBytes, nil}, {cairn.MaxOwnerTokenBytes + 1, cairn.ErrWriterLost}} {
		t.Run(strconv.Itoa(tc.n), func(t *testing.T) {
			expectCode(t, "CheckOwnerToken", cairn.CheckOwnerToken(cairn.Writer{ThreadID: "t", OwnerToken: strings.Repeat("o", tc.n)}), tc.want)
		})
	}
}

func TestValidateInstanceRecord(t *testing.T) {
	base := cairn.InstanceRecord{Key: "k", Provider: "p", ProviderSandboxID: "s", ThreadID: "t", UpdatedAt: 1}
	for _, tc := range []struct {
		name string
		set  func(r *cairn.InstanceRecord, s string)
		max  int
		want *cairn.Error
	}{
		{"Key", func(r *cairn.InstanceRecord, s string) { r.Key = s }, cairn.MaxIDBytes, cairn.ErrInvalidID},
		{"Provider", func(r *cairn.InstanceRecord, s string) { r.Provider = s }, cairn.MaxNameBytes, cairn.ErrInvalidEntry},
		{"ProviderSandboxID", func(r *cairn.InstanceRecord, s string) { r.ProviderSandboxID = s }, cairn.MaxNameBytes, cairn.ErrInvalidEntry},
		{"LatestSnapshotID", func(r *cairn.InstanceRecord, s string) { r.LatestSnapshotID = s }, cairn.MaxNameBytes, cairn.ErrInvalidEntry},
		{"ThreadID", func(r *cairn.InstanceRecord, s string) { r.ThreadID = s }, cairn.MaxNameBytes, cairn.ErrInvalidEntry},
		{"LatestRunID", func(r *cairn.InstanceRecord, s string) { r.LatestRunID = s }, cairn.MaxNameBytes, cairn.ErrInvalidEntry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base
			tc.set(&r, strings.Repeat("x", tc.max))
			expectCode(t, "at the bound", cairn.ValidateInstanceRecord(&r), nil)
			tc.set(&r, strings.Repeat("x", tc.max+1))
			err := cairn.ValidateInstanceRecord(&r)
			expectCode(t, "one byte past", err, tc.want)
			if errors.Is(tc.want, cairn.ErrInvalidID) {
				expectCode(t, "ValidateInstanceKey", cairn.ValidateInstanceKey(r.Key), tc.want)
			}
		})
	}
}
