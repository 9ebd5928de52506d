package etcdstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
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

// FuzzRefParts compares refParts, and refPartsFrom with the digests an
// append's check decodes, with the obvious computation: per shard, the sorted
// distinct digests of the checkpoint's blob keys.
func FuzzRefParts(f *testing.F) {
	f.Add([]byte{1, 2, 3, 1, 200, 7}, uint8(3))
	f.Add([]byte{0}, uint8(0))
	f.Fuzz(func(t *testing.T, seeds []byte, artifacts uint8) {
		var c cairn.Checkpoint
		for i, b := range seeds {
			// Small seeds repeat, so keys repeat within the checkpoint.
			k := fmt.Sprintf("%x", sha256.Sum256([]byte{b % 17}))
			if i%3 == 0 {
				c.Files = append(c.Files, cairn.Entry{Path: fmt.Sprint(i), Kind: cairn.KindDir})
			}
			c.Files = append(c.Files, cairn.Entry{Path: fmt.Sprint("f", i), Kind: cairn.KindFile, BlobKey: cairn.FileBlobPrefix + k})
			if i < int(artifacts) {
				c.Artifacts = append(c.Artifacts, cairn.Artifact{BlobKey: cairn.ArtifactBlobPrefix + k})
			}
		}
		var want [keys.NumShards][]byte
		for _, k := range c.BlobKeys() { // sorted and distinct
			shard, d, _ := keys.BlobShard(k)
			want[shard] = append(want[shard], d[:]...)
		}
		d := cairn.BlobDigests{Files: make([][32]byte, len(c.Files)), Artifacts: make([][32]byte, len(c.Artifacts))}
		for i, e := range c.Files {
			if e.Kind == cairn.KindFile {
				_, d.Files[i], _ = keys.BlobShard(e.BlobKey)
			}
		}
		for i, a := range c.Artifacts {
			_, d.Artifacts[i], _ = keys.BlobShard(a.BlobKey)
		}
		parts, mask := refParts(&c)
		pooled := &encodeBufs{sorted: make([]keys.Digest, 5)} // a stale array
		fparts, fmask := refPartsFrom(&c, &d, pooled)
		for shard := range keys.NumShards {
			got, fgot := bytes.Join(parts[shard], nil), bytes.Join(fparts[shard], nil)
			if !bytes.Equal(got, want[shard]) || !bytes.Equal(fgot, want[shard]) {
				t.Fatalf("shard %d: %x, from digests %x; want %x", shard, got, fgot, want[shard])
			}
			if (mask&(1<<shard) != 0) != (len(want[shard]) > 0) || fmask != mask {
				t.Fatalf("mask %b (from digests %b) wrong for shard %d", mask, fmask, shard)
			}
		}
	})
}
