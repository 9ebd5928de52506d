package wire_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/internal/wire"
)

// The codec against package proto on a 200-entry append request, both ways
// (the codec encodes with package proto).
func BenchmarkCodec(b *testing.B) {
	req := &cairnv1.AppendRequest{Checkpoint: largeCheckpoint(200), Writer: &cairnv1.Writer{ThreadId: "thread-1", OwnerToken: "owner", Fence: 1}}
	data, _ := proto.Marshal(req)
	codecs := []struct {
		name      string
		marshal   func([]byte, any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{
		{"codec", wire.Codec{}.MarshalAppend, wire.Codec{}.Unmarshal},
		{"proto", func(dst []byte, m any) ([]byte, error) {
			return proto.MarshalOptions{}.MarshalAppend(dst, m.(proto.Message))
		},
			func(data []byte, m any) error { return proto.Unmarshal(data, m.(proto.Message)) }},
	}
	for _, c := range codecs {
		b.Run("marshal/"+c.name, func(b *testing.B) {
			buf := make([]byte, 0, len(data))
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.marshal(buf, req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("unmarshal/"+c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				var m cairnv1.AppendRequest
				if err := c.unmarshal(data, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
