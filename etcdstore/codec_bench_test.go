package etcdstore

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/cairnstore/cairn"
)

// benchCheckpoint returns a checkpoint of n files in directories of 100, each
// with its own blob key: the shape of a capture.
func benchCheckpoint(n int) cairn.Checkpoint {
	c := cairn.Checkpoint{ID: "id", ThreadID: "t", CreatedAt: 1, Reason: "automatic"}
	for i := range n {
		c.Files = append(c.Files, cairn.Entry{Path: fmt.Sprintf("src/pkg%03d/file%05d.go", i/100, i), Kind: cairn.KindFile,
			BlobKey: fmt.Sprintf("sandbox-files/sha256/%x", sha256.Sum256([]byte(fmt.Sprint(i)))), Size: int64(i)})
	}
	c.Conversation = []byte(`[{"role":"user","content":"hello"}]`)
	return c
}

func BenchmarkRefParts200(b *testing.B) {
	c := benchCheckpoint(200)
	for b.Loop() {
		refParts(&c)
	}
}
func BenchmarkRefParts20000(b *testing.B) {
	c := benchCheckpoint(20000)
	for b.Loop() {
		refParts(&c)
	}
}

// The client-side costs of an append and a get, at 200 and 20,000 entries.

func BenchmarkCheck200(b *testing.B) {
	c := benchCheckpoint(200)
	in := cairn.AppendInput{Checkpoint: c, Writer: cairn.Writer{ThreadID: "t"}}
	for b.Loop() {
		cairn.CheckAppendInput(&in)
	}
}
func BenchmarkCheck20000(b *testing.B) {
	c := benchCheckpoint(20000)
	in := cairn.AppendInput{Checkpoint: c, Writer: cairn.Writer{ThreadID: "t"}}
	for b.Loop() {
		cairn.CheckAppendInput(&in)
	}
}
func BenchmarkDecode20000(b *testing.B) {
	c := benchCheckpoint(20000)
	body := encodeCheckpoint(&c)
	for b.Loop() {
		decodeCheckpoint(body)
	}
}
func BenchmarkEncode20000(b *testing.B) {
	c := benchCheckpoint(20000)
	for b.Loop() {
		encodeCheckpoint(&c)
	}
}
func BenchmarkClone20000(b *testing.B) {
	c := benchCheckpoint(20000)
	for b.Loop() {
		c.Clone()
	}
}

// BenchmarkCheckDigests200 is BenchmarkCheck200 decoding the blob keys on
// the way, as an append checks its input.
func BenchmarkCheckDigests200(b *testing.B) {
	c := benchCheckpoint(200)
	in := cairn.AppendInput{Checkpoint: c, Writer: cairn.Writer{ThreadID: "t"}}
	var d cairn.BlobDigests
	for b.Loop() {
		cairn.CheckAppendInputDigests(&in, &d)
	}
}
