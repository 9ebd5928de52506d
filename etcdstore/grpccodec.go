package etcdstore

import (
	"fmt"
	"math/bits"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// requestCodec is the gRPC codec of the store's built transactions (see
// rawKV): a transaction and its response are encoded and decoded by
// txncodec.go, anything else by package proto. Requests are marshalled into
// buffers of requestPool. gRPC's default pool has a tier of 32 KiB and the
// next of 1 MiB, and clears the whole of a buffer it hands out, so that a
// request just over 32 KiB (a publish of a few hundred entries) cost a 1 MiB
// clear, or a 1 MiB allocation, every time. requestPool's tiers are every
// power of two, and their buffers are not cleared: the request is marshalled
// over the whole length handed out, and only that length is sent.
type requestCodec struct{}

var _ encoding.CodecV2 = requestCodec{}

// requestCodecOption makes a call marshal its request with requestCodec.
var requestCodecOption = grpc.ForceCodecV2(requestCodec{})

func (requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*etcdserverpb.TxnRequest); ok && fastTxnRequest(r) {
		var sizes [64]int // an append's transaction has about 20 messages
		size, enc := sizeTxn(r, sizes[:])
		buf := requestPool.Get(size)
		if b := enc.write((*buf)[:0], r); len(b) != size {
			requestPool.Put(buf)
			return nil, fmt.Errorf("etcdstore: marshal %T: %d bytes, sized %d", v, len(b), size)
		}
		return mem.BufferSlice{mem.NewBuffer(buf, requestPool)}, nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("etcdstore: marshal %T: not a proto message", v)
	}
	// The size is computed once: UseCachedSize lets the marshal reuse it, as
	// gRPC's codec does; the request is not changed while it is sent.
	size := proto.Size(m)
	buf := requestPool.Get(size)
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], m)
	if err != nil || len(b) != size {
		requestPool.Put(buf)
		if err == nil {
			err = fmt.Errorf("etcdstore: marshal %T: %d bytes, sized %d", v, len(b), size)
		}
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, requestPool)}, nil
}

func (requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*etcdserverpb.TxnResponse)
	if !ok {
		return encoding.GetCodecV2(grpcproto.Name).Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	r.Reset()
	if decodeTxnResponse(buf.ReadOnlyData(), r) {
		return nil
	}
	r.Reset()
	return proto.Unmarshal(buf.ReadOnlyData(), r)
}

func (requestCodec) Name() string { return grpcproto.Name }

// powerPool is a mem.BufferPool with a tier for every power of two up to
// 1<<maxTier, whose buffers are handed out as they were given back.
type powerPool struct {
	tiers [maxTier + 1]sync.Pool
}

const maxTier = 22 // 4 MiB, above etcd's request limit

var requestPool = &powerPool{}

var _ mem.BufferPool = requestPool

// Get returns a buffer of length n; its bytes are not cleared.
func (p *powerPool) Get(n int) *[]byte {
	k := bits.Len(uint(max(n, 1) - 1))
	if k > maxTier {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[k].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<k)
	return &b
}

// Put keeps b for a later Get if its capacity is one of the tiers.
func (p *powerPool) Put(b *[]byte) {
	c := cap(*b)
	k := bits.Len(uint(c)) - 1
	if c == 0 || c != 1<<k || k > maxTier {
		return
	}
	p.tiers[k].Put(b)
}
