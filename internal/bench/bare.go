package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// bareTxn sends the baseline of B1 and B2: a bare etcd transaction with one
// comparison (the key does not exist yet) and one put of a new key, whose
// value is sized so that the request etcd receives is exactly as large as
// the store's append transaction.
type bareTxn struct {
	cli    *clientv3.Client
	prefix string
	next   atomic.Int64
	value  string
	size   int // the request size reached
}

// newBareTxn sizes the value by sending transactions under a tally that
// records request sizes, until a request has reqSize bytes (or one byte more,
// when a length prefix makes reqSize itself unreachable).
func newBareTxn(ctx context.Context, cli *clientv3.Client, prefix string, reqSize int) (*bareTxn, error) {
	b := &bareTxn{cli: cli, prefix: prefix}
	n := reqSize
	for try := range 12 {
		b.value = strings.Repeat("v", n)
		tctx, t := withTally(ctx, true)
		if err := b.do(tctx); err != nil {
			return nil, err
		}
		got := t.snapshot()[0].req
		b.size = got
		if got == reqSize || try >= 6 && got == reqSize+1 {
			return b, nil
		}
		n = max(0, n+reqSize-got)
	}
	return nil, fmt.Errorf("cannot size a bare transaction to %d bytes (reached %d)", reqSize, b.size)
}

func (b *bareTxn) do(ctx context.Context) error {
	k := fmt.Sprintf("%s%012d", b.prefix, b.next.Add(1))
	resp, err := b.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, b.value)).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("bare transaction on %q: the comparison failed", k)
	}
	return nil
}

// writeTxnSize returns the median request size of the write transactions in
// calls, and how many there were.
func writeTxnSize(calls []call) (size, n int) {
	var sizes []int
	for _, c := range calls {
		if c.write && c.method == "Txn" {
			sizes = append(sizes, c.req)
		}
	}
	if len(sizes) == 0 {
		return 0, 0
	}
	slices.Sort(sizes)
	return sizes[len(sizes)/2], len(sizes)
}

// shapeTxn replays the shape of a transaction the store sent, with bare
// etcd: as many comparisons (each that a new key does not exist yet) and as
// many puts of the same key and value sizes, to new keys. Against bareTxn it
// shows what etcd itself charges for the store's layout, apart from the
// store's own work on the client.
type shapeTxn struct {
	cli    *clientv3.Client
	prefix string
	next   atomic.Int64
	cmps   []string
	puts   [][2]string
}

// newShapeTxn takes the shape of req, a transaction of the store under
// storePrefix.
func newShapeTxn(cli *clientv3.Client, prefix, storePrefix string, req *etcdserverpb.TxnRequest) *shapeTxn {
	s := &shapeTxn{cli: cli, prefix: prefix}
	strip := func(k []byte) string { return strings.TrimPrefix(string(k), storePrefix) }
	for _, c := range req.Compare {
		s.cmps = append(s.cmps, strip(c.Key))
	}
	for _, op := range req.Success {
		if p := op.GetRequestPut(); p != nil {
			s.puts = append(s.puts, [2]string{strip(p.Key), string(p.Value)})
		}
	}
	return s
}

func (s *shapeTxn) do(ctx context.Context) error {
	p := fmt.Sprintf("%s%010d/", s.prefix, s.next.Add(1))
	cmps := make([]clientv3.Cmp, len(s.cmps))
	for i, k := range s.cmps {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(p+k), "=", 0)
	}
	ops := make([]clientv3.Op, len(s.puts))
	for i, kv := range s.puts {
		ops[i] = clientv3.OpPut(p+kv[0], kv[1])
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("shape transaction under %q: a comparison failed", p)
	}
	return nil
}

// lastWriteTxn returns the last write transaction among calls, which must
// have been kept.
func lastWriteTxn(calls []call) *etcdserverpb.TxnRequest {
	for i := len(calls) - 1; i >= 0; i-- {
		if txn, ok := calls[i].msg.(*etcdserverpb.TxnRequest); ok && calls[i].write {
			return txn
		}
	}
	return nil
}
