package etcdstore

import (
	"bytes"
	"math"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// sampleRequests are transactions of every shape the fast encoder writes,
// with zero, negative and large values, empty and absent bytes.
func sampleRequests() map[string]*etcdserverpb.TxnRequest {
	val := bytes.Repeat([]byte("v"), 300)
	cmp := func(target etcdserverpb.Compare_CompareTarget, u any) *etcdserverpb.Compare {
		c := &etcdserverpb.Compare{Result: etcdserverpb.Compare_NOT_EQUAL, Target: target, Key: []byte("k")}
		switch u := u.(type) {
		case *etcdserverpb.Compare_Version:
			c.TargetUnion = u
		case *etcdserverpb.Compare_CreateRevision:
			c.TargetUnion = u
		case *etcdserverpb.Compare_ModRevision:
			c.TargetUnion = u
		case *etcdserverpb.Compare_Value:
			c.TargetUnion = u
		case *etcdserverpb.Compare_Lease:
			c.TargetUnion = u
		}
		return c
	}
	put := putReq("p", val)
	put.GetRequestPut().Lease, put.GetRequestPut().PrevKv, put.GetRequestPut().IgnoreLease = -1, true, true
	del := deleteReq("d")
	del.GetRequestDeleteRange().RangeEnd, del.GetRequestDeleteRange().PrevKv = []byte("e"), true
	get := getReq("g")
	*get.GetRequestRange() = etcdserverpb.RangeRequest{Key: []byte("g"), RangeEnd: []byte{0}, Limit: 7, Revision: math.MaxInt64,
		SortOrder: etcdserverpb.RangeRequest_DESCEND, SortTarget: etcdserverpb.RangeRequest_VALUE, Serializable: true, KeysOnly: true,
		CountOnly: true, MinModRevision: -5, MaxModRevision: 1 << 40, MinCreateRevision: 3, MaxCreateRevision: 4}
	return map[string]*etcdserverpb.TxnRequest{
		"Empty": {},
		"Append": txnRequest(
			[]*etcdserverpb.Compare{cmpAbsent([]byte("/idx/a")), cmpModRev([]byte("/thread/t"), 99), cmpModRev([]byte("/owner"), 0)},
			[]*etcdserverpb.RequestOp{putReq("/thread/t", []byte(`{"head":"a"}`)), putReq("/ckpt/a", val), deleteReq("/claim/x")},
			[]*etcdserverpb.RequestOp{getReq("/owner"), getReq("/expiry"), getReq("/idx/a")}),
		"EveryCompare": txnRequest([]*etcdserverpb.Compare{
			cmp(etcdserverpb.Compare_VERSION, &etcdserverpb.Compare_Version{Version: 0}),
			cmp(etcdserverpb.Compare_CREATE, &etcdserverpb.Compare_CreateRevision{CreateRevision: -3}),
			cmp(etcdserverpb.Compare_MOD, &etcdserverpb.Compare_ModRevision{ModRevision: math.MaxInt64}),
			cmp(etcdserverpb.Compare_VALUE, &etcdserverpb.Compare_Value{Value: nil}),
			cmp(etcdserverpb.Compare_VALUE, &etcdserverpb.Compare_Value{Value: []byte("x")}),
			cmp(etcdserverpb.Compare_LEASE, &etcdserverpb.Compare_Lease{Lease: 0}),
			{Result: etcdserverpb.Compare_LESS, Key: []byte("r"), RangeEnd: []byte("s")},
			{Result: -1, Target: 1 << 20},
		}, nil, nil),
		"EveryOp":     txnRequest(nil, []*etcdserverpb.RequestOp{put, del, get, putReq("", nil), detachReq([]byte("k"))}, []*etcdserverpb.RequestOp{get}),
		"EmptyValues": txnRequest([]*etcdserverpb.Compare{{}}, []*etcdserverpb.RequestOp{putReq("k", []byte{})}, nil),
		"LargeValue":  txnRequest(nil, []*etcdserverpb.RequestOp{putReq("k", bytes.Repeat([]byte("v"), 40000))}, nil),
	}
}

// The fast encoder writes what proto reads back as the same request, in as
// many bytes as it sized.
func TestTxnEncoderMatchesProto(t *testing.T) {
	for name, r := range sampleRequests() {
		t.Run(name, func(t *testing.T) {
			checkTxnEncoding(t, r)
		})
	}
}

func checkTxnEncoding(t *testing.T, r *etcdserverpb.TxnRequest) {
	t.Helper()
	if !fastTxnRequest(r) {
		t.Fatalf("the fast encoder refuses %v", r)
	}
	b := appendTxn([]byte("prefix"), r)
	if !bytes.HasPrefix(b, []byte("prefix")) || len(b)-len("prefix") != txnSize(r) {
		t.Fatalf("wrote %d bytes after the prefix, sized %d", len(b)-len("prefix"), txnSize(r))
	}
	if n := proto.Size(r); n != txnSize(r) {
		t.Fatalf("sized %d bytes, proto sizes %d", txnSize(r), n)
	}
	var back etcdserverpb.TxnRequest
	if err := proto.Unmarshal(b[len("prefix"):], &back); err != nil {
		t.Fatalf("proto cannot read the encoding: %v", err)
	}
	if !proto.Equal(&back, r) {
		t.Fatalf("proto reads %v, encoded %v", &back, r)
	}
}

// What the fast encoder does not write goes to proto, through the codec.
func TestTxnEncoderLeavesTheRestToProto(t *testing.T) {
	nested := txnRequest(nil, []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestTxn{RequestTxn: &etcdserverpb.TxnRequest{}}}}, nil)
	withUnknown := txnRequest([]*etcdserverpb.Compare{cmpAbsent([]byte("k"))}, nil, nil)
	withUnknown.Compare[0].ProtoReflect().SetUnknown([]byte{0xf8, 0x07, 0x01}) // field 127, varint 1
	for name, r := range map[string]*etcdserverpb.TxnRequest{
		"NestedTxn":     nested,
		"UnknownFields": withUnknown,
		"NilOp":         txnRequest(nil, []*etcdserverpb.RequestOp{nil}, nil),
		"EmptyOp":       txnRequest(nil, []*etcdserverpb.RequestOp{{}}, nil),
		"NilCompare":    txnRequest([]*etcdserverpb.Compare{nil}, nil, nil),
	} {
		t.Run(name, func(t *testing.T) {
			if fastTxnRequest(r) {
				t.Fatal("the fast encoder takes it")
			}
			if name == "NilOp" || name == "NilCompare" {
				return // proto refuses to encode them as well
			}
			bs, err := requestCodec{}.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			defer bs.Free()
			var back etcdserverpb.TxnRequest
			if err := proto.Unmarshal(bs.Materialize(), &back); err != nil || !proto.Equal(&back, r) {
				t.Fatalf("read back %v (%v), sent %v", &back, err, r)
			}
		})
	}
}

// sampleResponses are the responses etcd gives the store's transactions,
// and shapes the fast decoder leaves to proto.
func sampleResponses() []*etcdserverpb.TxnResponse {
	hdr := func(rev int64) *etcdserverpb.ResponseHeader {
		return &etcdserverpb.ResponseHeader{ClusterId: 1 << 63, MemberId: 7, Revision: rev, RaftTerm: 3}
	}
	kv := &mvccpb.KeyValue{Key: []byte("k"), CreateRevision: 2, ModRevision: 3, Version: 4, Value: []byte(`{"v":1}`), Lease: -1}
	return []*etcdserverpb.TxnResponse{
		{},
		{Header: hdr(42), Succeeded: true, Responses: []*etcdserverpb.ResponseOp{
			{Response: &etcdserverpb.ResponseOp_ResponsePut{ResponsePut: &etcdserverpb.PutResponse{Header: &etcdserverpb.ResponseHeader{}}}},
			{Response: &etcdserverpb.ResponseOp_ResponsePut{ResponsePut: &etcdserverpb.PutResponse{Header: hdr(42), PrevKv: kv}}},
			{Response: &etcdserverpb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: &etcdserverpb.DeleteRangeResponse{Header: hdr(42), Deleted: 2, PrevKvs: []*mvccpb.KeyValue{kv, {}}}}},
		}},
		{Header: hdr(43), Responses: []*etcdserverpb.ResponseOp{
			{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{Header: hdr(43), Kvs: []*mvccpb.KeyValue{kv}, More: true, Count: 9}}},
			{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{Header: hdr(43)}}},
			{},
		}},
		{Header: hdr(44), Responses: []*etcdserverpb.ResponseOp{
			{Response: &etcdserverpb.ResponseOp_ResponseTxn{ResponseTxn: &etcdserverpb.TxnResponse{Succeeded: true}}},
		}},
		{Header: &etcdserverpb.ResponseHeader{Revision: 7}},
	}
}

// checkTxnDecoding holds the fast decoder to proto on b: where it decodes,
// it gives what proto gives; where it does not, the codec's answer (by
// proto) is proto's.
func checkTxnDecoding(t *testing.T, b []byte) (fast bool) {
	t.Helper()
	var want etcdserverpb.TxnResponse
	werr := proto.Unmarshal(b, &want)
	var got etcdserverpb.TxnResponse
	if fast = decodeTxnResponse(b, &got); fast {
		if werr != nil {
			t.Fatalf("decoded %x, which proto refuses: %v", b, werr)
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("decoded %x as %v; proto reads %v", b, &got, &want)
		}
	}
	var viaCodec etcdserverpb.TxnResponse
	err := requestCodec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bytes.Clone(b))}, &viaCodec)
	if (err != nil) != (werr != nil) || err == nil && !proto.Equal(&viaCodec, &want) {
		t.Fatalf("the codec reads %x as %v (%v); proto as %v (%v)", b, &viaCodec, err, &want, werr)
	}
	return fast
}

// oddResponses are encodings that proto reads by merging (two responses one
// after the other, a response whose operation has two results, of one kind
// or of two) and fields of another wire type than their own (which proto
// keeps as unknown fields).
func oddResponses() [][]byte {
	out := [][]byte{{0x12, 0x00}, {0x08, 0x01}, {0x1a, 0x02, 0x10, 0x01}}
	rs := sampleResponses()
	for _, a := range rs {
		for _, b := range rs {
			ab, _ := proto.Marshal(a)
			bb, _ := proto.Marshal(b)
			out = append(out, append(ab, bb...))
		}
	}
	put, _ := proto.Marshal(&etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponsePut{ResponsePut: &etcdserverpb.PutResponse{Header: &etcdserverpb.ResponseHeader{Revision: 5}}}})
	prev, _ := proto.Marshal(&etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponsePut{ResponsePut: &etcdserverpb.PutResponse{PrevKv: &mvccpb.KeyValue{Key: []byte("k")}}}})
	del, _ := proto.Marshal(&etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: &etcdserverpb.DeleteRangeResponse{Deleted: 1}}})
	for _, op := range [][]byte{append(put, prev...), append(put, del...)} {
		out = append(out, protowire.AppendBytes(protowire.AppendTag(nil, fTxnRespOps, protowire.BytesType), op))
	}
	return out
}

func TestTxnDecoderMatchesProto(t *testing.T) {
	for i, r := range sampleResponses() {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		fast := checkTxnDecoding(t, b)
		if nested := i == 3; fast == nested {
			t.Errorf("response %d: decoded fast: %v", i, fast)
		}
	}
	for _, b := range oddResponses() {
		checkTxnDecoding(t, b)
	}
	// What the decoder returns does not alias the transport's buffer.
	b, _ := proto.Marshal(sampleResponses()[1])
	var r etcdserverpb.TxnResponse
	if !decodeTxnResponse(b, &r) {
		t.Fatal("not decoded")
	}
	clear(b)
	if kv := r.Responses[1].GetResponsePut().PrevKv; string(kv.Key) != "k" || string(kv.Value) != `{"v":1}` {
		t.Fatalf("the decoded key and value changed with the buffer: %q, %q", kv.Key, kv.Value)
	}
}

// FuzzTxnResponseDecode gives the decoder arbitrary bytes.
func FuzzTxnResponseDecode(f *testing.F) {
	for _, r := range sampleResponses() {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	for _, b := range oddResponses() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkTxnDecoding(t, b)
	})
}

// FuzzTxnRequestEncode encodes every request proto reads from arbitrary
// bytes that the fast encoder takes.
func FuzzTxnRequestEncode(f *testing.F) {
	for _, r := range sampleRequests() {
		if b, _ := proto.Marshal(r); len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r etcdserverpb.TxnRequest
		if proto.Unmarshal(b, &r) != nil || !fastTxnRequest(&r) {
			return
		}
		checkTxnEncoding(t, &r)
	})
}

// BenchmarkTxnResponseDecode decodes an append's response: the header and
// one result per put.
func BenchmarkTxnResponseDecode(b *testing.B) {
	hdr := &etcdserverpb.ResponseHeader{ClusterId: 1 << 60, MemberId: 1 << 50, Revision: 123456, RaftTerm: 2}
	r := &etcdserverpb.TxnResponse{Header: hdr, Succeeded: true}
	for range 6 {
		r.Responses = append(r.Responses, &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponsePut{ResponsePut: &etcdserverpb.PutResponse{Header: &etcdserverpb.ResponseHeader{}}}})
	}
	enc, _ := proto.Marshal(r)
	b.ReportAllocs()
	for b.Loop() {
		var got etcdserverpb.TxnResponse
		if !decodeTxnResponse(enc, &got) {
			b.Fatal("not decoded")
		}
	}
}

// txnSize returns the encoded size of r, which fastTxnRequest accepted.
func txnSize(r *etcdserverpb.TxnRequest) int {
	n, _ := sizeTxn(r, nil)
	return n
}

// appendTxn appends the encoding of r, which fastTxnRequest accepted, to b.
func appendTxn(b []byte, r *etcdserverpb.TxnRequest) []byte {
	_, e := sizeTxn(r, nil)
	return e.write(b, r)
}
