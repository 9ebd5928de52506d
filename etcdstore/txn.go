package etcdstore

import (
	"context"
	"reflect"
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The publish of a checkpoint (append, fork) builds etcd's own request,
// etcdserverpb.TxnRequest, rather than clientv3.Op values: clientv3.OpPut takes its
// value as a string and copies it into a []byte, which for a checkpoint
// record means a copy of the whole body on every attempt. Built directly, a
// put's value is the encoded record itself, and the request is marshalled
// once, by gRPC.

// putReq is a put of value at key. The request keeps value, not a copy.
func putReq(key string, value []byte) *etcdserverpb.RequestOp { return putReqBytes([]byte(key), value) }

// putReqBytes is putReq of a key built as bytes; the request keeps both.
// Each request and the messages inside it are one allocation.
func putReqBytes(key, value []byte) *etcdserverpb.RequestOp {
	r := new(struct {
		op  etcdserverpb.RequestOp
		one etcdserverpb.RequestOp_RequestPut
		put etcdserverpb.PutRequest
	})
	r.put.Key, r.put.Value = key, value
	r.one.RequestPut = &r.put
	r.op.Request = &r.one
	return &r.op
}

// detachReq keeps the value of key and drops its lease (see stage). The
// request keeps key.
func detachReq(key []byte) *etcdserverpb.RequestOp {
	r := putReqBytes(key, nil)
	r.GetRequestPut().IgnoreValue = true
	return r
}

// deleteReq deletes key.
func deleteReq(key string) *etcdserverpb.RequestOp {
	r := new(struct {
		op  etcdserverpb.RequestOp
		one etcdserverpb.RequestOp_RequestDeleteRange
		del etcdserverpb.DeleteRangeRequest
	})
	r.del.Key = []byte(key)
	r.one.RequestDeleteRange = &r.del
	r.op.Request = &r.one
	return &r.op
}

// getReq reads key.
func getReq(key string) *etcdserverpb.RequestOp { return getReqBytes([]byte(key)) }

// getReqBytes is getReq of a key built as bytes, which the request keeps.
func getReqBytes(key []byte) *etcdserverpb.RequestOp {
	r := new(struct {
		op  etcdserverpb.RequestOp
		one etcdserverpb.RequestOp_RequestRange
		get etcdserverpb.RangeRequest
	})
	r.get.Key = key
	r.one.RequestRange = &r.get
	r.op.Request = &r.one
	return &r.op
}

// rawKV sends built requests on a client's connection with the call options
// its own KV uses. direct is false when the client's KV is not its own (a
// namespace, or another wrapper the caller installed): requests then go
// through that KV, as clientv3.Op values.
type rawKV struct {
	client *clientv3.Client
	remote etcdserverpb.KVClient
	opts   []grpc.CallOption
	direct bool
}

func newRawKV(c *clientv3.Client) *rawKV {
	own := clientv3.NewKV(c)
	r := &rawKV{client: c, direct: reflect.TypeOf(c.KV) == reflect.TypeOf(own)}
	if r.direct {
		// The call options of the client's KV are unexported: a KV on a
		// remote that records them, with no I/O, learns them.
		rec := &optsRecorder{}
		_, _ = clientv3.NewKVFromKVClient(rec, c).Txn(context.Background()).Commit()
		r.remote, r.opts = clientv3.RetryKVClient(c), append(slices.Clip(rec.opts), requestCodecOption)
	}
	return r
}

// optsRecorder is a etcdserverpb.KVClient whose Txn records its call options and
// answers without sending anything.
type optsRecorder struct {
	etcdserverpb.KVClient
	opts []grpc.CallOption
}

func (o *optsRecorder) Txn(_ context.Context, _ *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	o.opts = opts
	return &etcdserverpb.TxnResponse{Header: &etcdserverpb.ResponseHeader{}}, nil
}

// txn commits one transaction: If cmps, Then then, Else els. Its errors are
// those of clientv3's Txn.Commit. The request keeps cmps, then and els.
func (r *rawKV) txn(ctx context.Context, cmps []*etcdserverpb.Compare, then, els []*etcdserverpb.RequestOp) (*clientv3.TxnResponse, error) {
	if !r.direct {
		cs := make([]clientv3.Cmp, len(cmps))
		for i, c := range cmps {
			cs[i] = clientv3.FromCompare(c)
		}
		return r.client.Txn(ctx).If(cs...).Then(clientOps(then)...).Else(clientOps(els)...).Commit()
	}
	resp, err := r.remote.Txn(ctx, txnRequest(cmps, then, els), r.opts...)
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	return (*clientv3.TxnResponse)(resp), nil
}

// txnRequest builds the request of a transaction.
func txnRequest(cmps []*etcdserverpb.Compare, then, els []*etcdserverpb.RequestOp) *etcdserverpb.TxnRequest {
	return &etcdserverpb.TxnRequest{Compare: cmps, Success: then, Failure: els}
}

// The comparisons of a built request. clientv3.Compare copies each
// comparison it makes by reflection (proto.Clone); these are built directly.

// cmpAbsent holds when key does not exist. The comparison keeps key.
func cmpAbsent(key []byte) *etcdserverpb.Compare {
	return &etcdserverpb.Compare{Result: etcdserverpb.Compare_EQUAL, Target: etcdserverpb.Compare_CREATE, Key: key,
		TargetUnion: &etcdserverpb.Compare_CreateRevision{}}
}

// cmpModRev holds when key was last written at revision rev. The comparison
// keeps key.
func cmpModRev(key []byte, rev int64) *etcdserverpb.Compare {
	return &etcdserverpb.Compare{Result: etcdserverpb.Compare_EQUAL, Target: etcdserverpb.Compare_MOD, Key: key,
		TargetUnion: &etcdserverpb.Compare_ModRevision{ModRevision: rev}}
}

// cmpState holds when key was last written at revision rev, or, with rev 0,
// when key does not exist.
func cmpState(key []byte, rev int64) *etcdserverpb.Compare {
	if rev == 0 {
		return cmpAbsent(key)
	}
	return cmpModRev(key, rev)
}

// withRawGuards appends the store's guards to a write's comparisons, each a
// copy of its fields: a guard is shared by concurrent writes, and clientv3
// copies the comparisons of every request (by reflection) for that reason.
// The key and the target are never changed once built, so the copies share
// them.
func (s *Store) withRawGuards(cmps []*etcdserverpb.Compare) []*etcdserverpb.Compare {
	for i := range s.guards {
		g := s.guards[i].GetCompare()
		cmps = append(cmps, &etcdserverpb.Compare{Result: g.Result, Target: g.Target, Key: g.Key, TargetUnion: g.TargetUnion, RangeEnd: g.RangeEnd})
	}
	return cmps
}

// clientOps turns built requests into clientv3.Op values, for a client whose
// KV is not its own.
func clientOps(reqs []*etcdserverpb.RequestOp) []clientv3.Op {
	ops := make([]clientv3.Op, len(reqs))
	for i, r := range reqs {
		switch q := r.Request.(type) {
		case *etcdserverpb.RequestOp_RequestPut:
			if q.RequestPut.IgnoreValue {
				ops[i] = clientv3.OpPut(string(q.RequestPut.Key), "", clientv3.WithIgnoreValue())
			} else {
				ops[i] = clientv3.OpPut(string(q.RequestPut.Key), string(q.RequestPut.Value))
			}
		case *etcdserverpb.RequestOp_RequestDeleteRange:
			ops[i] = clientv3.OpDelete(string(q.RequestDeleteRange.Key))
		case *etcdserverpb.RequestOp_RequestRange:
			ops[i] = clientv3.OpGet(string(q.RequestRange.Key))
		}
	}
	return ops
}
