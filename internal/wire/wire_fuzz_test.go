package wire_test

import (
	"bytes"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairnstore/cairn"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/internal/wire"
)

// FuzzCheckpointRoundTrip: a checkpoint sent over the wire and converted
// back is the checkpoint that was sent when the Go type can hold it, and
// otherwise fails validation with the code validation gives the original.
// Any bytes decoded as a checkpoint message convert without panicking.
func FuzzCheckpointRoundTrip(f *testing.F) {
	f.Add("c1", "t1", "", "a.txt", "file", int64(3), "x", int64(1), []byte(`{"a":1}`), []byte{})
	f.Add("c\xff", "t", "p", "\xed\xa0\x80", "dir", int64(0), "", int64(-1), []byte(nil), []byte{0x0a, 0x01})
	f.Add("c", "t", "p", "d", "symlink", int64(1<<53), "n", int64(1<<60), []byte(`[]`), []byte{0xff})
	f.Fuzz(func(t *testing.T, id, thread, parent, path, kind string, size int64, label string, artSize int64, conv, junk []byte) {
		var m cairnv1.Checkpoint
		if proto.Unmarshal(junk, &m) == nil {
			c, _ := wire.FromCheckpoint(&m)
			_ = cairn.ValidateEntries(c.Files)
			_ = cairn.ValidateArtifacts(c.Artifacts)
		}
		c := cairn.Checkpoint{
			ID: id, ThreadID: thread, ParentCheckpointID: parent, CreatedAt: 1.5, Reason: "named", Label: label,
			Files:        []cairn.Entry{{Path: path, Kind: cairn.EntryKind(kind), BlobKey: label, Size: size}},
			Conversation: conv,
			Artifacts:    []cairn.Artifact{{ArtifactID: id, Name: path, MimeType: kind, Size: artSize, BlobKey: label, CreatedAt: 2}},
		}
		b, err := proto.Marshal(wire.ToCheckpoint(&c))
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var back cairnv1.Checkpoint
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		got, badID := wire.FromCheckpoint(&back)
		if badID {
			t.Fatal("a checkpoint of the Go type came back with a present but empty parent")
		}
		if !bytes.Equal(got.Conversation, c.Conversation) || (got.Conversation == nil) != (c.Conversation == nil) {
			t.Fatalf("conversation %q, want %q", got.Conversation, c.Conversation)
		}
		got.Conversation, c.Conversation = nil, nil
		sizes := size >= 0 && size <= cairn.MaxSafeInteger && artSize >= 0 && artSize <= cairn.MaxSafeInteger
		if sizes && !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", got, c)
		}
		if e1, e2 := cairn.CodeOf(cairn.ValidateEntries(c.Files)), cairn.CodeOf(cairn.ValidateEntries(got.Files)); e1 != e2 {
			t.Fatalf("entries validate as %q, after the wire as %q", e1, e2)
		}
		if e1, e2 := cairn.CodeOf(cairn.ValidateArtifacts(c.Artifacts)), cairn.CodeOf(cairn.ValidateArtifacts(got.Artifacts)); e1 != e2 {
			t.Fatalf("artifacts validate as %q, after the wire as %q", e1, e2)
		}
	})
}
