package bench

import (
	"context"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// The meter watches the requests a client sends from outside the store: a
// gRPC interceptor attributes each unary call to the tally carried by the
// call's context, if any. The store's code is not changed or wrapped; what it
// sends to etcd is what the meter sees.

type tallyKey struct{}

// call is one unary request as the meter saw it.
type call struct {
	method string
	write  bool // the request may write (a read-only Txn or a Range does not)
	req    int  // proto.Size of the request, when the tally records sizes
	resp   int  // proto.Size of the response, when recorded and successful
	failed bool
	msg    proto.Message // a copy of the request, when the tally keeps them
}

// tally collects the calls made under one context. It is safe for
// concurrent use.
type tally struct {
	sizes  bool   // also record request and response sizes
	keep   bool   // also keep a copy of each request
	parent *tally // the tally of the enclosing context, which sees the calls too

	mu      sync.Mutex
	calls   []call
	streams int
	// recv is the proto.Size of the messages received on the streams opened
	// under the tally (a watch's responses), when it records sizes.
	recv int64
}

// withTally returns a context whose etcd calls are recorded in a new tally,
// and in the tallies of the enclosing contexts. With sizes, each call's
// request and response sizes are computed too (that costs a walk of each
// message, so timed runs leave it off).
func withTally(ctx context.Context, sizes bool) (context.Context, *tally) {
	t := &tally{sizes: sizes}
	t.parent, _ = ctx.Value(tallyKey{}).(*tally)
	return context.WithValue(ctx, tallyKey{}, t), t
}

func (t *tally) snapshot() []call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]call(nil), t.calls...)
}

// writes counts the calls that may write.
func (t *tally) writes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.calls {
		if c.write {
			n++
		}
	}
	return n
}

// count is the number of unary calls.
func (t *tally) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.calls)
}

func (t *tally) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = t.calls[:0]
	t.streams = 0
	t.recv = 0
}

// received returns the bytes the calls answered (responses of unary calls
// and messages of streams), when the tally records sizes.
func (t *tally) received() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.recv
	for _, c := range t.calls {
		n += int64(c.resp)
	}
	return n
}

// sent returns the bytes of the requests that may write, when the tally
// records sizes.
func (t *tally) sentWrites() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var n int64
	for _, c := range t.calls {
		if c.write {
			n += int64(c.req)
		}
	}
	return n
}

func meterUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	t, _ := ctx.Value(tallyKey{}).(*tally)
	if t == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	c := call{method: method[strings.LastIndexByte(method, '/')+1:], write: mayWrite(req), failed: err != nil}
	sizes, keep := false, false
	for p := t; p != nil; p = p.parent {
		sizes, keep = sizes || p.sizes, keep || p.keep
	}
	if sizes {
		if m, ok := req.(proto.Message); ok {
			c.req = proto.Size(m)
			if keep {
				c.msg = proto.Clone(m)
			}
		}
		if m, ok := reply.(proto.Message); ok && err == nil {
			c.resp = proto.Size(m)
		}
	}
	for p := t; p != nil; p = p.parent {
		p.mu.Lock()
		p.calls = append(p.calls, c)
		p.mu.Unlock()
	}
	return err
}

func meterStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	t, _ := ctx.Value(tallyKey{}).(*tally)
	sizes := false
	for p := t; p != nil; p = p.parent {
		p.mu.Lock()
		p.streams++
		p.mu.Unlock()
		sizes = sizes || p.sizes
	}
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || !sizes {
		return s, err
	}
	return &meteredStream{ClientStream: s, t: t}, nil
}

// meteredStream adds the size of each message it receives to its tallies.
type meteredStream struct {
	grpc.ClientStream
	t *tally
}

func (s *meteredStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if pm, ok := m.(proto.Message); ok && err == nil {
		n := int64(proto.Size(pm))
		for p := s.t; p != nil; p = p.parent {
			p.mu.Lock()
			p.recv += n
			p.mu.Unlock()
		}
	}
	return err
}

// mayWrite reports whether an etcd request may change the store: anything
// but a Range or a Txn whose branches only read.
func mayWrite(req any) bool {
	switch r := req.(type) {
	case *etcdserverpb.RangeRequest:
		return false
	case *etcdserverpb.TxnRequest:
		for _, ops := range [][]*etcdserverpb.RequestOp{r.Success, r.Failure} {
			for _, op := range ops {
				if op.GetRequestRange() == nil {
					return true
				}
			}
		}
		return false
	}
	return true
}
