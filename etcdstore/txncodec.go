package etcdstore

import (
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The transactions the store builds (see rawKV) are encoded, and their
// responses decoded, by the functions of this file rather than by package
// proto, which walks every message by reflection: an append's transaction
// holds a dozen small messages around its values, and its response one per
// operation, and on two cores proto's walk of them cost the client more CPU
// than the append's own encoding. The functions cover the messages and
// fields that etcd's KV transactions have; a message with anything else (a
// nested transaction, unknown fields) is left to package proto, and tests
// hold both to the same result (txncodec_test.go).

// Field numbers of etcd's rpc.proto and kv.proto.
const (
	fTxnCompare, fTxnSuccess, fTxnFailure           = 1, 2, 3
	fCmpResult, fCmpTarget, fCmpKey                 = 1, 2, 3
	fCmpVersion, fCmpCreate, fCmpMod, fCmpValue     = 4, 5, 6, 7
	fCmpLease, fCmpRangeEnd                         = 8, 64
	fOpRange, fOpPut, fOpDelete                     = 1, 2, 3
	fPutKey, fPutValue, fPutLease, fPutPrevKV       = 1, 2, 3, 4
	fPutIgnoreValue, fPutIgnoreLease                = 5, 6
	fDelKey, fDelRangeEnd, fDelPrevKV               = 1, 2, 3
	fTxnRespHeader, fTxnRespSucceeded, fTxnRespOps  = 1, 2, 3
	fHdrCluster, fHdrMember, fHdrRevision, fHdrTerm = 1, 2, 3, 4
	fRangeRespHeader, fRangeRespKVs                 = 1, 2
	fRangeRespMore, fRangeRespCount                 = 3, 4
	fPutRespHeader, fPutRespPrevKV                  = 1, 2
	fDelRespHeader, fDelRespDeleted, fDelRespPrev   = 1, 2, 3
	fKVKey, fKVCreate, fKVMod, fKVVersion           = 1, 2, 3, 4
	fKVValue, fKVLease                              = 5, 6
)

// txnEncoder sizes and writes a TxnRequest, in two walks that share the
// field logic: the sizing walk (size set) counts the bytes (n) and records
// the size of each nested message, in the order the messages begin, in
// sizes; the writing walk appends to b and takes each nested message's size
// from sizes (next is the next one to take), so that no message is sized
// twice.
type txnEncoder struct {
	b     []byte
	n     int
	size  bool
	sizes []int
	next  int
}

func (e *txnEncoder) tag(num protowire.Number, typ protowire.Type) {
	if e.size {
		e.n += protowire.SizeTag(num)
		return
	}
	e.b = protowire.AppendTag(e.b, num, typ)
}

func (e *txnEncoder) varint(v uint64) {
	if e.size {
		e.n += protowire.SizeVarint(v)
		return
	}
	e.b = protowire.AppendVarint(e.b, v)
}

// uintField writes a scalar field, omitted when zero as proto3 does unless
// always (a member of a oneof).
func (e *txnEncoder) uintField(num protowire.Number, v uint64, always bool) {
	if v != 0 || always {
		e.tag(num, protowire.VarintType)
		e.varint(v)
	}
}

func (e *txnEncoder) intField(num protowire.Number, v int64) { e.uintField(num, uint64(v), false) }

func (e *txnEncoder) boolField(num protowire.Number, v bool) {
	if v {
		e.uintField(num, 1, false)
	}
}

// bytesField writes a bytes field, omitted when empty unless always.
func (e *txnEncoder) bytesField(num protowire.Number, v []byte, always bool) {
	if len(v) == 0 && !always {
		return
	}
	e.tag(num, protowire.BytesType)
	e.varint(uint64(len(v)))
	if e.size {
		e.n += len(v)
	} else {
		e.b = append(e.b, v...)
	}
}

// msg is a nested message to write: one of its fields is set.
type msg struct {
	cmp *etcdserverpb.Compare
	op  *etcdserverpb.RequestOp
	put *etcdserverpb.PutRequest
	del *etcdserverpb.DeleteRangeRequest
	rng *etcdserverpb.RangeRequest
}

// message writes a length-delimited message field holding m.
func (e *txnEncoder) message(num protowire.Number, m msg) {
	if e.size {
		slot := len(e.sizes)
		e.sizes = append(e.sizes, 0)
		start := e.n
		e.body(m)
		n := e.n - start
		e.sizes[slot] = n
		e.n = start + protowire.SizeTag(num) + protowire.SizeVarint(uint64(n)) + n
		return
	}
	n := e.sizes[e.next]
	e.next++
	e.tag(num, protowire.BytesType)
	e.varint(uint64(n))
	e.body(m)
}

func (e *txnEncoder) body(m msg) {
	switch {
	case m.cmp != nil:
		e.compare(m.cmp)
	case m.op != nil:
		e.requestOp(m.op)
	case m.put != nil:
		p := m.put
		e.bytesField(fPutKey, p.Key, false)
		e.bytesField(fPutValue, p.Value, false)
		e.intField(fPutLease, p.Lease)
		e.boolField(fPutPrevKV, p.PrevKv)
		e.boolField(fPutIgnoreValue, p.IgnoreValue)
		e.boolField(fPutIgnoreLease, p.IgnoreLease)
	case m.del != nil:
		d := m.del
		e.bytesField(fDelKey, d.Key, false)
		e.bytesField(fDelRangeEnd, d.RangeEnd, false)
		e.boolField(fDelPrevKV, d.PrevKv)
	case m.rng != nil:
		e.rangeRequest(m.rng)
	}
}

// fastTxnRequest reports whether the fast encoder writes every field of r.
func fastTxnRequest(r *etcdserverpb.TxnRequest) bool {
	if unknown(r) {
		return false
	}
	for _, c := range r.Compare {
		if c == nil || unknown(c) {
			return false
		}
		switch c.TargetUnion.(type) {
		case nil, *etcdserverpb.Compare_Version, *etcdserverpb.Compare_CreateRevision, *etcdserverpb.Compare_ModRevision,
			*etcdserverpb.Compare_Value, *etcdserverpb.Compare_Lease:
		default:
			return false
		}
	}
	for _, ops := range [][]*etcdserverpb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if op == nil || unknown(op) {
				return false
			}
			switch q := op.Request.(type) {
			case *etcdserverpb.RequestOp_RequestPut:
				if q.RequestPut == nil || unknown(q.RequestPut) {
					return false
				}
			case *etcdserverpb.RequestOp_RequestDeleteRange:
				if q.RequestDeleteRange == nil || unknown(q.RequestDeleteRange) {
					return false
				}
			case *etcdserverpb.RequestOp_RequestRange:
				if q.RequestRange == nil || unknown(q.RequestRange) {
					return false
				}
			default: // a nested transaction, or no request
				return false
			}
		}
	}
	return true
}

func unknown(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) > 0 }

// txn writes the fields of r, which fastTxnRequest accepted.
func (e *txnEncoder) txn(r *etcdserverpb.TxnRequest) {
	for _, c := range r.Compare {
		e.message(fTxnCompare, msg{cmp: c})
	}
	for _, op := range r.Success {
		e.message(fTxnSuccess, msg{op: op})
	}
	for _, op := range r.Failure {
		e.message(fTxnFailure, msg{op: op})
	}
}

func (e *txnEncoder) compare(c *etcdserverpb.Compare) {
	e.intField(fCmpResult, int64(c.Result))
	e.intField(fCmpTarget, int64(c.Target))
	e.bytesField(fCmpKey, c.Key, false)
	switch u := c.TargetUnion.(type) {
	case *etcdserverpb.Compare_Version:
		e.uintField(fCmpVersion, uint64(u.Version), true)
	case *etcdserverpb.Compare_CreateRevision:
		e.uintField(fCmpCreate, uint64(u.CreateRevision), true)
	case *etcdserverpb.Compare_ModRevision:
		e.uintField(fCmpMod, uint64(u.ModRevision), true)
	case *etcdserverpb.Compare_Value:
		e.bytesField(fCmpValue, u.Value, true)
	case *etcdserverpb.Compare_Lease:
		e.uintField(fCmpLease, uint64(u.Lease), true)
	}
	e.bytesField(fCmpRangeEnd, c.RangeEnd, false)
}

func (e *txnEncoder) requestOp(op *etcdserverpb.RequestOp) {
	switch q := op.Request.(type) {
	case *etcdserverpb.RequestOp_RequestRange:
		e.message(fOpRange, msg{rng: q.RequestRange})
	case *etcdserverpb.RequestOp_RequestPut:
		e.message(fOpPut, msg{put: q.RequestPut})
	case *etcdserverpb.RequestOp_RequestDeleteRange:
		e.message(fOpDelete, msg{del: q.RequestDeleteRange})
	}
}

func (e *txnEncoder) rangeRequest(r *etcdserverpb.RangeRequest) {
	e.bytesField(1, r.Key, false)
	e.bytesField(2, r.RangeEnd, false)
	e.intField(3, r.Limit)
	e.intField(4, r.Revision)
	e.intField(5, int64(r.SortOrder))
	e.intField(6, int64(r.SortTarget))
	e.boolField(7, r.Serializable)
	e.boolField(8, r.KeysOnly)
	e.boolField(9, r.CountOnly)
	e.intField(10, r.MinModRevision)
	e.intField(11, r.MaxModRevision)
	e.intField(12, r.MinCreateRevision)
	e.intField(13, r.MaxCreateRevision)
}

// sizeTxn runs the sizing walk of r, which fastTxnRequest accepted: it
// returns r's size and the encoder whose write appends r.
func sizeTxn(r *etcdserverpb.TxnRequest, sizes []int) (int, txnEncoder) {
	e := txnEncoder{size: true, sizes: sizes[:0]}
	e.txn(r)
	return e.n, txnEncoder{sizes: e.sizes}
}

// write appends r, the request sizeTxn sized, to b.
func (e txnEncoder) write(b []byte, r *etcdserverpb.TxnRequest) []byte {
	e.b, e.next = b, 0
	e.txn(r)
	return e.b
}

// decodeTxnResponse decodes b into r, which must be empty, and reports
// whether it could: false for a response with a nested transaction's
// response, a field etcd does not send, a repeated singular message, or
// bytes that are not a valid encoding. r's contents are then unspecified,
// and the caller resets it and leaves b to proto.
func decodeTxnResponse(b []byte, r *etcdserverpb.TxnResponse) bool {
	d := txnDecoder{b: b, ok: true}
	for d.more() {
		num, typ := d.tag()
		switch {
		case num == fTxnRespHeader && typ == protowire.BytesType && r.Header == nil:
			r.Header = d.header(d.bytes())
		case num == fTxnRespSucceeded && typ == protowire.VarintType:
			r.Succeeded = d.varint() != 0
		case num == fTxnRespOps && typ == protowire.BytesType:
			r.Responses = append(r.Responses, d.responseOp(d.bytes()))
		default:
			d.fail()
		}
	}
	return d.ok
}

// txnDecoder reads protobuf fields from b; the first problem clears ok, and
// every read after it returns zero values. A nested message is read by a
// decoder of its own whose problem is then its parent's (see nested).
type txnDecoder struct {
	b  []byte
	ok bool
}

func (d *txnDecoder) more() bool { return d.ok && len(d.b) > 0 }

func (d *txnDecoder) fail() { d.ok, d.b = false, nil }

// nested returns the decoder of a nested message's bytes.
func (d *txnDecoder) nested(b []byte) txnDecoder { return txnDecoder{b: b, ok: d.ok} }

// done takes the outcome of a nested message's decoder.
func (d *txnDecoder) done(sub *txnDecoder) {
	if !sub.ok {
		d.fail()
	}
}

func (d *txnDecoder) tag() (protowire.Number, protowire.Type) {
	num, typ, n := protowire.ConsumeTag(d.b)
	if n < 0 {
		d.fail()
		return 0, 0
	}
	d.b = d.b[n:]
	return num, typ
}

func (d *txnDecoder) varint() uint64 {
	v, n := protowire.ConsumeVarint(d.b)
	if n < 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns the next length-delimited field, which aliases the input.
func (d *txnDecoder) bytes() []byte {
	v, n := protowire.ConsumeBytes(d.b)
	if n < 0 {
		d.fail()
		return nil
	}
	d.b = d.b[n:]
	return v
}

// copied returns a copy of a bytes field that does not alias the input (the
// transport reuses its buffers), non-nil even when empty, as proto's.
func copied(v []byte) []byte { return append([]byte{}, v...) }

func (d *txnDecoder) header(b []byte) *etcdserverpb.ResponseHeader {
	h := &etcdserverpb.ResponseHeader{}
	d.headerInto(b, h)
	return h
}

func (d *txnDecoder) headerInto(b []byte, h *etcdserverpb.ResponseHeader) {
	s := d.nested(b)
	for s.more() {
		num, typ := s.tag()
		if typ != protowire.VarintType {
			s.fail()
			break
		}
		switch v := s.varint(); num {
		case fHdrCluster:
			h.ClusterId = v
		case fHdrMember:
			h.MemberId = v
		case fHdrRevision:
			h.Revision = int64(v)
		case fHdrTerm:
			h.RaftTerm = v
		default:
			s.fail()
		}
	}
	d.done(&s)
}

func (d *txnDecoder) responseOp(b []byte) *etcdserverpb.ResponseOp {
	s := d.nested(b)
	var op *etcdserverpb.ResponseOp
	for s.more() {
		num, typ := s.tag()
		if typ != protowire.BytesType || op != nil {
			s.fail() // another type, or a oneof set twice (proto merges)
			break
		}
		switch body := s.bytes(); num {
		case fOpRange:
			op = &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: s.rangeResponse(body)}}
		case fOpPut:
			op = s.putResponse(body)
		case fOpDelete:
			op = &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: s.deleteResponse(body)}}
		default: // a nested transaction's response
			s.fail()
		}
	}
	d.done(&s)
	if op == nil {
		op = &etcdserverpb.ResponseOp{}
	}
	return op
}

func (d *txnDecoder) rangeResponse(b []byte) *etcdserverpb.RangeResponse {
	r := &etcdserverpb.RangeResponse{}
	s := d.nested(b)
	for s.more() {
		num, typ := s.tag()
		switch {
		case num == fRangeRespHeader && typ == protowire.BytesType && r.Header == nil:
			r.Header = s.header(s.bytes())
		case num == fRangeRespKVs && typ == protowire.BytesType:
			r.Kvs = append(r.Kvs, s.keyValue(s.bytes()))
		case num == fRangeRespMore && typ == protowire.VarintType:
			r.More = s.varint() != 0
		case num == fRangeRespCount && typ == protowire.VarintType:
			r.Count = int64(s.varint())
		default:
			s.fail()
		}
	}
	d.done(&s)
	return r
}

// putResponse returns the operation result of a put: the messages of the
// common case (a result with a header) are one allocation.
func (d *txnDecoder) putResponse(b []byte) *etcdserverpb.ResponseOp {
	m := new(struct {
		op  etcdserverpb.ResponseOp
		one etcdserverpb.ResponseOp_ResponsePut
		put etcdserverpb.PutResponse
		hdr etcdserverpb.ResponseHeader
	})
	m.one.ResponsePut = &m.put
	m.op.Response = &m.one
	r := &m.put
	s := d.nested(b)
	for s.more() {
		num, typ := s.tag()
		switch {
		case num == fPutRespHeader && typ == protowire.BytesType && r.Header == nil:
			r.Header = &m.hdr
			s.headerInto(s.bytes(), r.Header)
		case num == fPutRespPrevKV && typ == protowire.BytesType && r.PrevKv == nil:
			r.PrevKv = s.keyValue(s.bytes())
		default:
			s.fail()
		}
	}
	d.done(&s)
	return &m.op
}

func (d *txnDecoder) deleteResponse(b []byte) *etcdserverpb.DeleteRangeResponse {
	r := &etcdserverpb.DeleteRangeResponse{}
	s := d.nested(b)
	for s.more() {
		num, typ := s.tag()
		switch {
		case num == fDelRespHeader && typ == protowire.BytesType && r.Header == nil:
			r.Header = s.header(s.bytes())
		case num == fDelRespDeleted && typ == protowire.VarintType:
			r.Deleted = int64(s.varint())
		case num == fDelRespPrev && typ == protowire.BytesType:
			r.PrevKvs = append(r.PrevKvs, s.keyValue(s.bytes()))
		default:
			s.fail()
		}
	}
	d.done(&s)
	return r
}

func (d *txnDecoder) keyValue(b []byte) *mvccpb.KeyValue {
	kv := &mvccpb.KeyValue{}
	s := d.nested(b)
	for s.more() {
		num, typ := s.tag()
		switch {
		case num == fKVKey && typ == protowire.BytesType:
			kv.Key = copied(s.bytes())
		case num == fKVValue && typ == protowire.BytesType:
			kv.Value = copied(s.bytes())
		case typ == protowire.VarintType && num >= fKVCreate && num <= fKVLease && num != fKVValue:
			v := int64(s.varint())
			switch num {
			case fKVCreate:
				kv.CreateRevision = v
			case fKVMod:
				kv.ModRevision = v
			case fKVVersion:
				kv.Version = v
			case fKVLease:
				kv.Lease = v
			}
		default:
			s.fail()
		}
	}
	d.done(&s)
	return kv
}
