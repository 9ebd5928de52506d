package etcdstore

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/cairnstore/cairn"
)

func FuzzCheckpointCodec(f *testing.F) {
	f.Add("id", "thread", "", 1.5, "automatic", "label", "run", "a.txt", "file", "sandbox-files/sha256/00", int64(3), []byte(`[{"role":"user"}]`), "art", int64(9))
	f.Add("\xed\xa0\x80", "\x00", "p", math.Inf(-1), "", "", "", "\xff", "dir", "", int64(-1), []byte(nil), "", int64(0))
	f.Fuzz(func(t *testing.T, id, thread, parent string, createdAt float64, reason, label, run, path, kind, key string, size int64, conv []byte, art string, asize int64) {
		c := cairn.Checkpoint{ID: id, ThreadID: thread, ParentCheckpointID: parent, CreatedAt: createdAt, Reason: reason, Label: label, SourceRunID: run,
			Files:        []cairn.Entry{{Path: path, Kind: cairn.EntryKind(kind), BlobKey: key, Size: size}, {Path: path + "/x"}},
			Conversation: json.RawMessage(conv),
			Artifacts:    []cairn.Artifact{{ArtifactID: art, Name: art, MimeType: kind, Size: asize, BlobKey: key, CreatedAt: createdAt}},
		}
		b := encodeCheckpoint(&c)
		got, err := decodeCheckpoint(b)
		if err != nil {
			t.Fatalf("decode(encode(c)): %v", err)
		}
		if math.IsNaN(createdAt) { // NaN != NaN: compare the rest
			got.CreatedAt, c.CreatedAt = 0, 0
			got.Artifacts[0].CreatedAt, c.Artifacts[0].CreatedAt = 0, 0
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip changed the checkpoint:\n%#v\n%#v", c, got)
		}
		// Every prefix and every corrupted copy decodes to an error or a
		// value, never a panic.
		for i := 0; i < len(b); i += 1 + len(b)/64 {
			_, _ = decodeCheckpoint(b[:i])
			bad := bytes.Clone(b)
			bad[i] ^= 0xA5
			_, _ = decodeCheckpoint(bad)
		}
	})
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(encodeCheckpoint(&cairn.Checkpoint{ID: "a", Files: []cairn.Entry{{Path: "x"}}}))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCheckpoint(b)
		if err == nil && !bytes.Equal(encodeCheckpoint(&c), b) {
			t.Fatalf("decoded %x into a checkpoint that encodes differently", b)
		}
	})
}

func FuzzInstanceCodec(f *testing.F) {
	f.Add("k", "p", "sb", "", "t", "", 1.0)
	f.Fuzz(func(t *testing.T, k, p, sb, snap, th, run string, at float64) {
		r := cairn.InstanceRecord{Key: k, Provider: p, ProviderSandboxID: sb, LatestSnapshotID: snap, ThreadID: th, LatestRunID: run, UpdatedAt: at}
		got, err := decodeInstance(encodeInstance(&r))
		if err != nil || (got != r && !math.IsNaN(at)) {
			t.Fatalf("round trip: %#v, %v", got, err)
		}
	})
}
