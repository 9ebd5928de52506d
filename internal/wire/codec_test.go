package wire_test

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairnstore/cairn"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/internal/wire"
)

func ptr[T any](v T) *T { return &v }

// largeCheckpoint is a checkpoint of n file entries, an artifact and a
// conversation, in its message form.
func largeCheckpoint(n int) *cairnv1.Checkpoint {
	c := &cairn.Checkpoint{
		ID: "cp-000001", ThreadID: "thread-1", ParentCheckpointID: "cp-000000", CreatedAt: 1.7e12, Reason: "turn",
		Conversation: []byte(`[{"role":"user","content":"hello"}]`),
		Artifacts:    []cairn.Artifact{{ArtifactID: "a1", Name: "report.pdf", MimeType: "application/pdf", Size: 9, BlobKey: "sha256:aa", CreatedAt: 3}},
	}
	for i := range n {
		c.Files = append(c.Files, cairn.Entry{Path: fmt.Sprintf("src/pkg%02d/file-%04d.go", i%10, i), Kind: cairn.KindFile,
			BlobKey: fmt.Sprintf("sha256:%064x", i*7919), Size: int64(1000 + i)})
	}
	c.Files = append(c.Files, cairn.Entry{Path: "src", Kind: cairn.KindDir})
	return wire.ToCheckpoint(c)
}

func withUnknown[M proto.Message](m M, raw []byte) M {
	m.ProtoReflect().SetUnknown(raw)
	return m
}

// codecCases are messages of every shape the fast encoding covers and of
// the shapes it leaves to package proto.
func codecCases() map[string]proto.Message {
	unknownField := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7)
	odd := largeCheckpoint(2)
	odd.CreatedAt = math.Copysign(0, -1)
	odd.Label, odd.SourceRunId, odd.ParentCheckpointId = ptr(""), ptr("run"), ptr("")
	odd.Conversation = []byte{}
	odd.Files[0].Size = ptr(math.NaN())
	odd.Artifacts[0].Size = math.Copysign(0, -1)
	odd.Files[1] = withUnknown(odd.Files[1], unknownField)
	withNil := largeCheckpoint(2)
	withNil.Files[1] = nil
	return map[string]proto.Message{
		"append/large": &cairnv1.AppendRequest{Checkpoint: largeCheckpoint(200), ExpectedHeadId: ptr("cp-000000"),
			Writer: &cairnv1.Writer{ThreadId: "thread-1", OwnerToken: "owner", Fence: 12345}},
		"append/empty":              &cairnv1.AppendRequest{},
		"append/empty-parts":        &cairnv1.AppendRequest{Checkpoint: &cairnv1.Checkpoint{}, ExpectedHeadId: ptr(""), Writer: &cairnv1.Writer{}},
		"append/negative-fence":     &cairnv1.AppendRequest{Writer: &cairnv1.Writer{Fence: -1}},
		"append/odd-values":         &cairnv1.AppendRequest{Checkpoint: odd},
		"append/unknown-fields":     withUnknown(&cairnv1.AppendRequest{Checkpoint: withUnknown(largeCheckpoint(1), unknownField), Writer: withUnknown(&cairnv1.Writer{Fence: 1}, unknownField)}, unknownField),
		"append/nil-entry":          &cairnv1.AppendRequest{Checkpoint: withNil},
		"get/large":                 &cairnv1.GetCheckpointResponse{Checkpoint: largeCheckpoint(200)},
		"get/none":                  &cairnv1.GetCheckpointResponse{},
		"get/unknown-fields":        withUnknown(&cairnv1.GetCheckpointResponse{Checkpoint: largeCheckpoint(1)}, unknownField),
		"get/nil-artifact":          &cairnv1.GetCheckpointResponse{Checkpoint: &cairnv1.Checkpoint{Artifacts: []*cairnv1.Artifact{nil}}},
		"list/large":                &cairnv1.ListCheckpointsResponse{Checkpoint: largeCheckpoint(200)},
		"list/odd-values":           &cairnv1.ListCheckpointsResponse{Checkpoint: odd},
		"other/get-request":         &cairnv1.GetCheckpointRequest{Id: "cp"},
		"other/acquire-writer-resp": &cairnv1.AcquireWriterResponse{Lease: &cairnv1.Lease{Writer: &cairnv1.Writer{Fence: 3}, ExpiresAt: 5}},
	}
}

// TestCodecDecodesAsProto: the codec decodes the bytes of proto.Marshal of
// every message to a message proto.Equal to the original that encodes to the
// same bytes again (which tells -0 from +0 and keeps unknown fields, where
// proto.Equal alone would not).
func TestCodecDecodesAsProto(t *testing.T) {
	for name, m := range codecCases() {
		t.Run(name, func(t *testing.T) {
			want := deterministic(t, m)
			back := m.ProtoReflect().New().Interface()
			if err := (wire.Codec{}).Unmarshal(bytes.Clone(want), back); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(back, m) {
				t.Fatalf("decoded %v, want %v", back, m)
			}
			again, _ := proto.MarshalOptions{Deterministic: true}.Marshal(back)
			if !bytes.Equal(again, want) {
				t.Fatalf("the decoded message encodes to\n%x\nnot\n%x", again, want)
			}
		})
	}
}

// TestCodecEncodesAsProto: Marshal, MarshalStable and MarshalAppend (after a
// prefix it must keep) give proto.Marshal's bytes. The codec encodes with
// package proto today, so this guards the day an encoder of its own takes
// over, and MarshalAppend's handling of the buffer it is given.
func TestCodecEncodesAsProto(t *testing.T) {
	for name, m := range codecCases() {
		t.Run(name, func(t *testing.T) {
			want := deterministic(t, m)
			for _, enc := range []func(any) ([]byte, error){wire.Codec{}.Marshal, wire.Codec{}.MarshalStable} {
				got, err := enc(m)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("encoded\n%x\nproto.Marshal\n%x", got, want)
				}
			}
			prefix := []byte("prefix")
			got, err := wire.Codec{}.MarshalAppend(prefix[:len(prefix):len(prefix)], m)
			if err != nil || !bytes.Equal(got, append(prefix, want...)) {
				t.Fatalf("MarshalAppend = %x, %v; want the prefix and the encoding", got, err)
			}
		})
	}
}

// deterministic is proto's deterministic encoding of m, the bytes the codec
// tests compare with.
func deterministic(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCodecFallsBackToProto: inputs outside the fast path (a singular
// message given twice, which protobuf merges; a field of an unexpected wire
// type, which protobuf keeps as unknown; an unknown field; malformed bytes)
// decode exactly as proto.Unmarshal decodes them.
func TestCodecFallsBackToProto(t *testing.T) {
	one, _ := proto.Marshal(&cairnv1.AppendRequest{Checkpoint: &cairnv1.Checkpoint{Id: "a", Files: []*cairnv1.Entry{{Path: "x"}}}})
	two, _ := proto.Marshal(&cairnv1.AppendRequest{Checkpoint: &cairnv1.Checkpoint{ThreadId: "t", Files: []*cairnv1.Entry{{Path: "y"}}}})
	entryAsVarint := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.BytesType), 4)
	entryAsVarint = append(entryAsVarint, protowire.AppendVarint(protowire.AppendTag(nil, 8, protowire.VarintType), 1)...)
	entryAsVarint = append(entryAsVarint, protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)...)
	cases := map[string][]byte{
		"merged-checkpoint":  append(bytes.Clone(one), two...),
		"wire-type-mismatch": entryAsVarint,
		"unknown-top-level":  protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1),
		"group":              protowire.AppendTag(nil, 1, protowire.StartGroupType),
		"truncated":          one[:len(one)-1],
		"bad-length":         {0x0a, 0x7f},
		"field-zero":         {0x00, 0x01},
	}
	for name, data := range cases {
		for _, newMsg := range []func() proto.Message{
			func() proto.Message { return &cairnv1.AppendRequest{} },
			func() proto.Message { return &cairnv1.GetCheckpointResponse{} },
			func() proto.Message { return &cairnv1.ListCheckpointsResponse{} },
		} {
			want, got := newMsg(), newMsg()
			t.Run(fmt.Sprintf("%s/%T", name, want), func(t *testing.T) {
				checkSameDecoding(t, data, want, got)
			})
		}
	}
}

func checkSameDecoding(t *testing.T, data []byte, want, got proto.Message) {
	t.Helper()
	werr := proto.Unmarshal(data, want)
	gerr := wire.Codec{}.Unmarshal(bytes.Clone(data), got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("proto.Unmarshal: %v; the codec: %v", werr, gerr)
	}
	if werr != nil {
		return
	}
	wb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(want)
	gb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(got)
	if !proto.Equal(want, got) || !bytes.Equal(wb, gb) {
		t.Fatalf("decoded %v, proto.Unmarshal %v", got, want)
	}
}

// TestCodecDecodedStringsOwnTheirBytes: the codec copies its input, as
// Connect reuses the buffer it decodes from.
func TestCodecDecodedStringsOwnTheirBytes(t *testing.T) {
	data, _ := proto.Marshal(&cairnv1.GetCheckpointResponse{Checkpoint: largeCheckpoint(3)})
	var m cairnv1.GetCheckpointResponse
	if err := (wire.Codec{}).Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 'X'
	}
	if !proto.Equal(&m, &cairnv1.GetCheckpointResponse{Checkpoint: largeCheckpoint(3)}) {
		t.Fatalf("the decoded message changed with the buffer it was decoded from: %v", &m)
	}
}

// TestCodecFastPathAllocations: a 200-entry append request decodes with a
// fixed dozen allocations, which is what the fast path is for;
// proto.Unmarshal needs several per entry.
func TestCodecFastPathAllocations(t *testing.T) {
	data, _ := proto.Marshal(&cairnv1.AppendRequest{Checkpoint: largeCheckpoint(200), Writer: &cairnv1.Writer{Fence: 1}})
	n := testing.AllocsPerRun(20, func() {
		var m cairnv1.AppendRequest
		if err := (wire.Codec{}).Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
	})
	if n > 16 {
		t.Fatalf("a 200-entry append request took %v allocations to decode, want at most 16", n)
	}
}

// FuzzCodec: whatever the bytes, the codec decodes them as proto.Unmarshal
// does: the same error or lack of one, an equal message with the same
// encoding.
func FuzzCodec(f *testing.F) {
	for name, m := range codecCases() {
		if b, err := proto.Marshal(m); err == nil && name != "other/get-request" {
			f.Add(uint8(len(name)), b)
		}
	}
	f.Add(uint8(0), []byte{0x0a, 0x02, 0x42, 0x00})
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		newMsg := []func() proto.Message{
			func() proto.Message { return &cairnv1.AppendRequest{} },
			func() proto.Message { return &cairnv1.GetCheckpointResponse{} },
			func() proto.Message { return &cairnv1.ListCheckpointsResponse{} },
		}[int(which)%3]
		want, got := newMsg(), newMsg()
		checkSameDecoding(t, data, want, got)
	})
}
