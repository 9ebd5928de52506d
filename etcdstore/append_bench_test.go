package etcdstore

import (
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// BenchmarkAppendPrep200 is the client-side work of a 200-entry append up to
// the marshalled request, without I/O: the checks, the body and reference
// records, the records, the comparisons and the request's encoding.
func BenchmarkAppendPrep200(b *testing.B) {
	s := &Store{layout: keys.NewLayout("/cairn-bench/b1/")}
	c := benchCheckpoint(200)
	c.ThreadID, c.ParentCheckpointID = "b1-thread", "parent-checkpoint-0001"
	c.Conversation = []byte(`[{"role":"user","content":"` + strings.Repeat("x", 1000) + `"}]`)
	in := cairn.AppendInput{Checkpoint: c, ExpectedHeadID: c.ParentCheckpointID,
		Writer: cairn.Writer{ThreadID: c.ThreadID, OwnerToken: "owner-token-0123456789", Fence: 1234}}
	st := threadState{rec: threadRec{Head: c.ParentCheckpointID, HeadSeq: 41, HeadCreatedAt: 1.7e12, LastSeq: 41, Op: newNonce().String()}, rev: 999}
	claims := make([]string, 10)
	for i := range claims {
		claims[i] = string(s.layout.Claim(keys.Blob{NS: keys.NSFile, Digest: keys.Digest{byte(i)}}, c.ThreadID, 1234))
	}
	b.ReportAllocs()
	for b.Loop() {
		bufs := bufPool.Get().(*encodeBufs)
		if err := cairn.CheckAppendInputDigests(&in, &bufs.digests); err != nil {
			b.Fatal(err)
		}
		w := newCheckpointWith(&in.Checkpoint, bufs)
		if err := w.checkSize(); err != nil {
			b.Fatal(err)
		}
		op := &appendOp{s: s, in: in, w: w, nonce: newNonce(), claims: claims}
		seq := st.rec.LastSeq + 1
		cmps, then, els, _ := op.publishTxn(st, seq, putReqs(s.blobs(w, c.ThreadID, seq, op.nonce)), 0, 1.7e12)
		req := txnRequest(cmps, then, els)
		bs, err := requestCodec{}.Marshal(req)
		if err != nil {
			b.Fatal(err)
		}
		bs.Free()
		w.release()
	}
}

// BenchmarkRefPartsPooled200 is refParts as an append runs it, in arrays
// reused from one checkpoint to the next.
func BenchmarkRefPartsPooled200(b *testing.B) {
	c := benchCheckpoint(200)
	bufs := &encodeBufs{}
	in := cairn.AppendInput{Checkpoint: c, Writer: cairn.Writer{ThreadID: c.ThreadID}}
	if err := cairn.CheckAppendInputDigests(&in, &bufs.digests); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		refPartsFrom(&c, &bufs.digests, bufs)
	}
}
