package etcdstore

import (
	"bytes"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// requestCodec marshals as proto.Marshal does, into reused buffers that are
// not cleared, at every size around the pool's tiers.
func TestRequestCodec(t *testing.T) {
	for _, n := range []int{0, 1, 100, 4090, 4096, 32 << 10, 32<<10 + 700, 1 << 20, 1<<20 + 1} {
		for range 3 {
			req := &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{putReq("k", bytes.Repeat([]byte{byte(n)}, n))}}
			want, err := proto.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			data, err := requestCodec{}.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := data.Materialize(); !bytes.Equal(got, want) {
				t.Fatalf("value of %d bytes: marshalled to %d bytes, want %d", n, len(got), len(want))
			}
			var back etcdserverpb.TxnRequest
			if err := (requestCodec{}).Unmarshal(data, &back); err != nil || !proto.Equal(&back, req) {
				t.Fatalf("value of %d bytes: unmarshalled %v, %v", n, err, &back)
			}
			data.Free()
		}
	}
}

func TestPowerPool(t *testing.T) {
	p := &powerPool{}
	for _, n := range []int{0, 1, 2, 3, 1000, 1 << 15, 1<<15 + 1, 1 << maxTier, 1<<maxTier + 1} {
		b := p.Get(n)
		if len(*b) != n || cap(*b) < n {
			t.Fatalf("Get(%d): len %d, cap %d", n, len(*b), cap(*b))
		}
		p.Put(b)
	}
	odd := make([]byte, 10, 12)
	p.Put(&odd) // not a tier: dropped
	if b := p.Get(12); cap(*b) != 16 {
		t.Fatalf("Get(12) after a Put of capacity 12: cap %d", cap(*b))
	}
}
