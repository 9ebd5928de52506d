package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/keys"
)

// txnAudit records the size of every transaction a client sends.
type txnAudit struct {
	mu    sync.Mutex
	txns  int
	lists int // the longest compare, success or failure list, at any depth
	total int // every comparison and operation of one request, all depths
	bytes int // the largest marshalled request
	last  txnShape
}

// txnShape is the size of one transaction's lists, nested ones not counted.
type txnShape struct{ cmps, then, els, nested int }

func (a *txnAudit) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.txns, a.lists, a.total, a.bytes, a.last = 0, 0, 0, 0, txnShape{}
}

func (a *txnAudit) get() (txns, lists, total, bytes int, last txnShape) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.txns, a.lists, a.total, a.bytes, a.last
}

// measure returns the longest list and the number of comparisons and
// operations of t, nested transactions included.
func measure(t *etcdserverpb.TxnRequest) (lists, total int) {
	lists = max(len(t.Compare), len(t.Success), len(t.Failure))
	total = len(t.Compare) + len(t.Success) + len(t.Failure)
	for _, ops := range [][]*etcdserverpb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			if n := op.GetRequestTxn(); n != nil {
				l, tt := measure(n)
				lists, total = max(lists, l), total+tt
			}
		}
	}
	return lists, total
}

func (a *txnAudit) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if t, ok := req.(*etcdserverpb.TxnRequest); ok {
		lists, total := measure(t)
		nested := 0
		for _, op := range append(slices.Clone(t.Success), t.Failure...) {
			if op.GetRequestTxn() != nil {
				nested++
			}
		}
		a.mu.Lock()
		a.txns++
		a.lists, a.total, a.bytes = max(a.lists, lists), max(a.total, total), max(a.bytes, proto.Size(t))
		a.last = txnShape{len(t.Compare), len(t.Success), len(t.Failure), nested}
		a.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func auditedClient(t testing.TB, srv *embedetcd.Server, a *txnAudit) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   srv.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(a.intercept)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// claimKeys returns the store's claim keys, each with its lease.
func claimKeys(t *testing.T, cli *clientv3.Client, s *etcdstore.Store) map[string]int64 {
	t.Helper()
	resp, err := cli.Get(testContext(t), string(s.Layout().Claims()), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.Lease
	}
	return out
}

func manyKeys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fileKey(fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

func mustClaim(t *testing.T, s *etcdstore.Store, w cairn.Writer, ks ...string) {
	t.Helper()
	busy, err := s.ClaimBlobs(testContext(t), w, ks)
	if err != nil || busy != nil {
		t.Fatalf("claim: busy %v, %v", busy, err)
	}
}

func readGC(t *testing.T, s *etcdstore.Store) cairn.BlobGCView {
	t.Helper()
	v, err := s.ReadBlobGC(testContext(t), func(cairn.BlobReference) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestClaimKeysEndWithTheLease follows the claim keys themselves: attached
// to the session lease, deleted by the append (in its transaction), by a
// release, by a renew that finds the lease lost, and reaped by the sweeper
// once expired.
func TestClaimKeysEndWithTheLease(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	clk := &clock{ms: 1000}
	s := newStore(t, cli, "claimkeys/", etcdstore.Options{Options: cairn.Options{Now: clk.Now}})
	ks := manyKeys("k", 5)
	check := func(when string, want int) {
		t.Helper()
		got := claimKeys(t, cli, s)
		if len(got) != want {
			t.Fatalf("%s: %d claim keys, want %d", when, len(got), want)
		}
		for k, lease := range got {
			if lease == 0 {
				t.Fatalf("%s: claim key %q is not attached to a lease", when, k)
			}
		}
	}
	l, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, l.Writer, ks...)
	mustClaim(t, s, l.Writer, ks[:2]...) // twice is harmless
	check("after claims", 5)
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("c1", "t", "", "k-0"), Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	check("after append", 0)

	mustClaim(t, s, l.Writer, ks...)
	l.Release(ctx)
	check("after release", 0)

	l, err = s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, l.Writer, ks...)
	clk.Add(cairn.Millis(cairn.DefaultLeaseDuration))
	check("after expiry", 5)
	// Expired by the store's clock, but nobody took the lease over: its
	// holder may still append by its own clock, so its claims protect.
	if v := readGC(t, s); len(v.Claimed) != 5 {
		t.Fatalf("claims of an expired lease that nobody took over count as dead: %v live", v.Claimed)
	}
	recs, err := s.MarkBlobs(ctx, ks[:3], 1)
	if err != nil || len(recs) != 0 {
		t.Fatalf("mark of keys claimed by an expired, untaken lease: %v, %v", recs, err)
	}
	// A renew that finds the lease expired fails, but the record is still
	// the lease's: the claims stay.
	if _, err := l.Renew(ctx); !errors.Is(err, cairn.ErrWriterLost) {
		t.Fatalf("renew: %v", err)
	}
	check("after a renew found the lease expired", 5)
	// A takeover replaces the record: the claims are dead, and a mark reaps
	// those that hold its keys back.
	if l, err = s.AcquireWriter(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.MarkBlobs(ctx, ks[:3], 1); err != nil || len(recs) != 3 {
		t.Fatalf("mark after a takeover: %v, %v", recs, err)
	}
	check("after the takeover and the mark", 0)

	// A new lease of the thread ends what the store remembers of the old.
	mustClaim(t, s, l.Writer, ks[3:]...)
	clk.Add(cairn.Millis(cairn.DefaultLeaseDuration))
	if _, err := s.AcquireWriter(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	check("after takeover", 0)
}

// TestDeadClaimsOfALiveProcessAreReaped: a process whose lease was taken over
// keeps running, so its session keeps its claims in etcd; they protect
// nothing, and the sweeper reaps them when they alone hold a key back.
func TestDeadClaimsOfALiveProcessAreReaped(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	clk := &clock{ms: 1000}
	opts := etcdstore.Options{Options: cairn.Options{Now: clk.Now}}
	writer := newStore(t, cli, "reap/", opts)
	other := newStore(t, cli, "reap/", opts)
	sweeper := newStore(t, cli, "reap/", opts)
	old, err := writer.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	ks := manyKeys("k", 4)
	mustClaim(t, writer, old.Writer, ks...)
	clk.Add(cairn.Millis(cairn.DefaultLeaseDuration))
	taken, err := other.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	mustClaim(t, other, taken.Writer, ks[3])
	if n := len(claimKeys(t, cli, writer)); n != 5 {
		t.Fatalf("%d claim keys, want the 4 dead and 1 live", n)
	}
	if v := readGC(t, sweeper); !slices.Equal(v.Claimed, []string{ks[3]}) {
		t.Fatalf("claimed %v, want only the live claim", v.Claimed)
	}
	recs, err := sweeper.MarkBlobs(ctx, ks, 5)
	if err != nil {
		t.Fatal(err)
	}
	want := cairn.SortedKeys(ks[:3])
	var got []string
	for _, r := range recs {
		got = append(got, r.Key)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("marked %v, want %v", got, want)
	}
	if n := len(claimKeys(t, cli, writer)); n != 2 {
		t.Fatalf("%d claim keys after the mark, want 2 (the live one, and the dead one of the claimed key)", n)
	}

	// A dead claim that appears next to a candidate (here written by hand:
	// the protocol itself never leaves one) is reaped by the begin.
	b, _ := keys.ParseBlob(recs[0].Key)
	ghost := string(sweeper.Layout().Claim(b, "ghost", 1))
	if _, err := cli.Put(ctx, ghost, "nobody"); err != nil {
		t.Fatal(err)
	}
	moved, err := sweeper.BeginBlobDeletes(ctx, recs)
	if err != nil || len(moved) != len(recs) {
		t.Fatalf("begin: %v, %v", moved, err)
	}
	if _, ok := claimKeys(t, cli, writer)[ghost]; ok {
		t.Fatal("the dead claim was not reaped")
	}
	// A live claim next to a candidate stops its begin.
	recs, err = sweeper.MarkBlobs(ctx, manyKeys("x", 1), 5)
	if err != nil || len(recs) != 1 {
		t.Fatal(recs, err)
	}
	b, _ = keys.ParseBlob(recs[0].Key)
	if _, err := cli.Put(ctx, string(sweeper.Layout().Claim(b, "t", uint64(taken.Fence))), taken.OwnerToken); err != nil {
		t.Fatal(err)
	}
	if moved, err := sweeper.BeginBlobDeletes(ctx, recs); err != nil || len(moved) != 0 {
		t.Fatalf("begin beside a live claim: %v, %v", moved, err)
	}
}

// TestWaitBlobs: WaitBlobs returns at once when nothing is deleting, waits
// while a key is, and returns when the delete ends either way, or with the
// context's error.
func TestWaitBlobs(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	s := newStore(t, cli, "wait/", etcdstore.Options{})
	ks := manyKeys("k", 3)
	if err := s.WaitBlobs(ctx, ks); err != nil {
		t.Fatal(err)
	}
	for _, deleted := range []bool{true, false} {
		t.Run(fmt.Sprintf("Deleted=%v", deleted), func(t *testing.T) {
			recs, err := s.MarkBlobs(ctx, ks[1:2], 1)
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.BeginBlobDeletes(ctx, recs)
			if err != nil || len(d) != 1 {
				t.Fatal(d, err)
			}
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if err := s.WaitBlobs(short, ks); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("wait on a deleting key: %v", err)
			}
			done := make(chan error, 1)
			go func() { done <- s.WaitBlobs(ctx, ks) }()
			select {
			case err := <-done:
				t.Fatalf("wait returned while the key was deleting: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
			start := time.Now()
			if err := s.EndBlobDeletes(ctx, d, deleted); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("wait returned %v after the end", time.Since(start))
			case <-time.After(10 * time.Second):
				t.Fatal("wait did not return after the end")
			}
			if !deleted {
				v := readGC(t, s)
				if err := s.DropBlobRecords(ctx, v.Records); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestClaim20000 claims 20,000 keys through a client that measures every
// transaction: all stay within etcd's default limits, and every key is
// claimed. Then the append ends them all.
func TestClaim20000(t *testing.T) {
	srv, _ := embedetcd.ForTest(t)
	a := &txnAudit{}
	cli := auditedClient(t, srv, a)
	ctx := testContext(t)
	s := newStore(t, cli, "claim20k/", etcdstore.Options{})
	l, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	ks := manyKeys("big", 20000)
	// A few of them are candidates: the claim ends their candidacy.
	if _, err := s.MarkBlobs(ctx, ks[:50], 1); err != nil {
		t.Fatal(err)
	}
	a.reset()
	start := time.Now()
	mustClaim(t, s, l.Writer, ks...)
	took := time.Since(start)
	txns, lists, total, bytes, _ := a.get()
	t.Logf("claiming 20,000 keys took %v: %d transactions, at most %d operations in a list (%d in all), largest request %d bytes", took, txns, lists, total, bytes)
	if lists > etcdstore.MaxTxnOps || bytes > 1<<20 {
		t.Fatalf("a claim transaction exceeds the limits: %d operations, %d bytes", lists, bytes)
	}
	v := readGC(t, s)
	if len(v.Claimed) != len(ks) || len(v.Records) != 0 {
		t.Fatalf("%d keys claimed, %d records; want %d and 0", len(v.Claimed), len(v.Records), len(ks))
	}
	if n := len(claimKeys(t, cli, s)); n != len(ks) {
		t.Fatalf("%d claim keys", n)
	}
	c := largeCheckpoint("c1", "t", "", 100, 1000)
	a.reset()
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	txns, lists, _, _, _ = a.get()
	t.Logf("the append, with 20,000 claims to end, took %d transactions (at most %d operations in a list)", txns, lists)
	if n := len(claimKeys(t, cli, s)); n != 0 || lists > etcdstore.MaxTxnOps {
		t.Fatalf("%d claim keys after the append", n)
	}
}

// TestAppendWithClaimsIsOneTransaction: a turn's claims, about 20 keys, end
// in the append's own transaction.
func TestAppendWithClaimsIsOneTransaction(t *testing.T) {
	srv, _ := embedetcd.ForTest(t)
	a := &txnAudit{}
	cli := auditedClient(t, srv, a)
	ctx := testContext(t)
	s := newStore(t, cli, "onetxn/", etcdstore.Options{})
	l, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 20, 100} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("n%d-%d", n, i)
		}
		ks := make([]string, n)
		for i, nm := range names {
			ks[i] = fileKey(nm)
		}
		mustClaim(t, s, l.Writer, ks...)
		head, _ := s.GetHead(ctx, "t")
		c := smallCheckpoint(fmt.Sprintf("c%d", n), "t", head, names...)
		a.reset()
		if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: head, Writer: l.Writer}); err != nil {
			t.Fatal(err)
		}
		txns, lists, _, bytes, last := a.get()
		t.Logf("append of %d files with %d claims: %d transaction, %d comparisons, %d operations, %d bytes", n, n, txns, last.cmps, last.then, bytes)
		if txns != 1 || lists > etcdstore.MaxTxnOps {
			t.Fatalf("%d claims: %d transactions", n, txns)
		}
		if left := len(claimKeys(t, cli, s)); left != 0 {
			t.Fatalf("%d claim keys left", left)
		}
	}
	// More claims than fit: deleted right after the append, in batches.
	ks := manyKeys("many", 300)
	mustClaim(t, s, l.Writer, ks...)
	head, _ := s.GetHead(ctx, "t")
	a.reset()
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("many", "t", head, "many-0"), ExpectedHeadID: head, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	txns, _, _, _, _ := a.get()
	t.Logf("append with 300 claims: %d transactions", txns)
	if left := len(claimKeys(t, cli, s)); left != 0 || txns != 1+3 {
		t.Fatalf("%d claim keys left after %d transactions", left, txns)
	}
	// A staged append deletes them after its publish.
	mustClaim(t, s, l.Writer, manyKeys("staged", 20)...)
	big := largeCheckpoint("big", "t", "many", 3000, 2<<20)
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: big, ExpectedHeadID: "many", Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	if left := len(claimKeys(t, cli, s)); left != 0 {
		t.Fatalf("%d claim keys left after a staged append", left)
	}
}

// TestAppendOutcomeUnknownEndsClaims: the append's answer is lost after etcd
// applied it; once the store finds that it landed, the claims are gone.
func TestAppendOutcomeUnknownEndsClaims(t *testing.T) {
	x := newOutcomeFixture(t)
	ctx := testContext(t)
	mustClaim(t, x.s, x.lease.Writer, manyKeys("u", 3)...)
	for _, applied := range []bool{true, false} {
		x.failNext(applied, nil)
		id := fmt.Sprintf("c-%v", applied)
		head, _ := x.s.GetHead(ctx, "t")
		if _, err := x.s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint(id, "t", head, "u-0"), ExpectedHeadID: head, Writer: x.lease.Writer}); err != nil {
			t.Fatal(err)
		}
		x.f.reset()
		if v := readGC(t, x.s); len(v.Claimed) != 0 {
			t.Fatalf("applied=%v: claims %v remain", applied, v.Claimed)
		}
		mustClaim(t, x.s, x.lease.Writer, manyKeys("u", 3)...)
	}
}

// TestGuardedGCWritesChangeNothing: a view whose guard fails changes nothing
// and says so.
func TestGuardedGCWritesChangeNothing(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	s := newStore(t, cli, "guard/", etcdstore.Options{})
	l, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	ks := manyKeys("g", 4)
	mustClaim(t, s, l.Writer, ks[0])
	cand, err := s.MarkBlobs(ctx, ks[1:3], 1)
	if err != nil {
		t.Fatal(err)
	}
	del, err := s.BeginBlobDeletes(ctx, cand[1:])
	if err != nil || len(del) != 1 {
		t.Fatal(del, err)
	}
	bad := s.Guarded(clientv3.Compare(clientv3.CreateRevision("guard-that-does-not-exist"), ">", 0))
	before := visibleKeys(t, cli, s)
	leased := claimKeys(t, cli, s)
	for name, op := range map[string]func() error{
		"Claim": func() error { _, err := bad.ClaimBlobs(ctx, l.Writer, ks); return err },
		"Mark":  func() error { _, err := bad.MarkBlobs(ctx, ks, 2); return err },
		"Begin": func() error { _, err := bad.BeginBlobDeletes(ctx, cand); return err },
		"End":   func() error { return bad.EndBlobDeletes(ctx, del, true) },
		"Drop":  func() error { return bad.DropBlobRecords(ctx, cand) },
	} {
		if err := op(); !errors.Is(err, etcdstore.ErrGuardFailed) {
			t.Errorf("%s: %v, want ErrGuardFailed", name, err)
		}
	}
	if after := visibleKeys(t, cli, s); !mapsEqual(before, after) {
		t.Fatalf("a failed guard changed keys: %v -> %v", before, after)
	}
	if after := claimKeys(t, cli, s); len(after) != len(leased) {
		t.Fatalf("a failed guard changed claims: %d -> %d", len(leased), len(after))
	}
	// The same view with a guard that holds works.
	good := s.Guarded(clientv3.Compare(clientv3.CreateRevision(string(s.Layout().Thread("nobody"))), "=", 0))
	if err := good.EndBlobDeletes(ctx, del, true); err != nil {
		t.Fatal(err)
	}
	if v := readGC(t, s); len(v.Records) != 1 {
		t.Fatalf("records %v", v.Records)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestReadBlobGCOneRevision: the references, claims and records come from one
// revision; a compaction of it fails the read cleanly, and an error of fn
// stops it.
func TestReadBlobGCOneRevision(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	s := newStore(t, cli, "onerev/", etcdstore.Options{})
	l, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	// References in two shards (artifacts sort first), a claim, a record.
	c := smallCheckpoint("c1", "t", "", "r1", "r2")
	c.Artifacts = []cairn.Artifact{{ArtifactID: "a", Name: "a", MimeType: "text/plain", Size: 1, BlobKey: artifactKey("art"), CreatedAt: 1}}
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, l.Writer, fileKey("claimed"))
	if _, err := s.MarkBlobs(ctx, []string{fileKey("marked")}, 1); err != nil {
		t.Fatal(err)
	}
	var refs []string
	v, err := s.ReadBlobGC(ctx, func(r cairn.BlobReference) error {
		refs = append(refs, r.Key)
		// Writes after the read began are not seen.
		if len(refs) == 1 {
			mustClaim(t, s, l.Writer, fileKey("later"))
			if _, err := s.MarkBlobs(ctx, []string{fileKey("later-mark")}, 1); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := s.ListBlobReferences(ctx)
	if len(refs) != len(want) || len(refs) != 3 || !slices.IsSorted(refs) {
		t.Fatalf("refs %v, want %v", refs, want)
	}
	if !slices.Equal(v.Claimed, []string{fileKey("claimed")}) || len(v.Records) != 1 || v.Records[0].Key != fileKey("marked") {
		t.Fatalf("view %+v", v)
	}
	stop := errors.New("stop")
	if _, err := s.ReadBlobGC(ctx, func(cairn.BlobReference) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("fn's error: %v", err)
	}
	_, err = s.ReadBlobGC(ctx, func(cairn.BlobReference) error {
		resp, err := cli.Get(ctx, "x")
		if err != nil {
			return err
		}
		_, err = cli.Compact(ctx, resp.Header.Revision)
		return err
	})
	if !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("read across a compaction: %v", err)
	}
}

// TestVerifyMalformedSweepKeys: GC records and claims that do not decode are
// problems, stop the sweep's read, and Repair deletes them.
func TestVerifyMalformedSweepKeys(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	s := newStore(t, cli, "malformed/", etcdstore.Options{})
	l, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, l.Writer, manyKeys("ok", 2)...)
	if _, err := s.MarkBlobs(ctx, manyKeys("rec", 2), 1); err != nil {
		t.Fatal(err)
	}
	b, _ := keys.ParseBlob(fileKey("bad"))
	lay := s.Layout()
	for k, v := range map[string]string{
		string(lay.GCRecord(b)):                      "x",                    // bad value
		string(lay.GCRecords()) + "short":            gcValueOf('c'),         // bad key
		string(lay.Claims()) + "nonsense":            "token",                // bad key
		string(lay.BlobClaims(b)) + "\x00":           "token",                // truncated
		string(lay.GCRecord(keys.Blob{NS: 1})) + "x": strings.Repeat("c", 9), // trailing byte
	} {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Verify(ctx, etcdstore.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(r.Problems); !slices.Equal(got, []string{"malformed-claim", "malformed-gc-record"}) || len(r.Problems) != 5 {
		t.Fatalf("problems %v", r.Problems)
	}
	if r.GCRecords != 5 || r.Claims != 4 {
		t.Fatalf("counted %d records and %d claims", r.GCRecords, r.Claims)
	}
	if _, err := s.ReadBlobGC(ctx, func(cairn.BlobReference) error { return nil }); err == nil {
		t.Fatal("the sweep's read accepted malformed keys")
	}
	if _, err := s.MarkBlobs(ctx, []string{fileKey("bad")}, 1); err != nil {
		t.Fatal(err)
	}
	r, err = s.Verify(ctx, etcdstore.VerifyOptions{Repair: true})
	if err != nil || r.Repaired != 5 {
		t.Fatalf("repair: %d, %v", r.Repaired, err)
	}
	r, err = s.Verify(ctx, etcdstore.VerifyOptions{})
	if err != nil || !r.OK() || r.GCRecords != 2 || r.Claims != 2 {
		t.Fatalf("after repair: %+v, %v", r, err)
	}
	if v := readGC(t, s); len(v.Claimed) != 2 || len(v.Records) != 2 {
		t.Fatalf("view after repair %+v", v)
	}
}

func gcValueOf(state byte) string { return string(state) + strings.Repeat("\x00", 8) }

// BenchmarkClaim20000 measures claiming 20,000 keys for one lease.
func BenchmarkClaim20000(b *testing.B) {
	_, cli := embedetcd.ForTest(b)
	s, err := etcdstore.New(cli, "bench-claim/", etcdstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	ks := manyKeys("bench", 20000)
	i := 0
	for b.Loop() {
		b.StopTimer()
		l, err := s.AcquireWriter(ctx, fmt.Sprintf("t%d", i))
		if err != nil {
			b.Fatal(err)
		}
		i++
		b.StartTimer()
		start := time.Now()
		if busy, err := s.ClaimBlobs(ctx, l.Writer, ks); err != nil || busy != nil {
			b.Fatal(busy, err)
		}
		b.Logf("claimed 20,000 keys in %v", time.Since(start))
		b.StopTimer()
		l.Release(ctx)
		b.StartTimer()
	}
}

// TestGCUnknownOutcomes loses the answer of the first write of each call,
// after etcd applied it, or fails it before: the store sends it again, and
// the effect is the same as without the fault.
func TestGCUnknownOutcomes(t *testing.T) {
	srv, _ := embedetcd.ForTest(t)
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("Applied=%v", applied), func(t *testing.T) {
			x := newOutcomeFixtureOn(t, srv, fmt.Sprintf("gc-outcome-%v/", applied))
			ctx := testContext(t)
			ks := manyKeys("u", 3)
			x.failNext(applied, nil)
			mustClaim(t, x.s, x.lease.Writer, ks[0])
			x.failNext(applied, nil)
			recs, err := x.s.MarkBlobs(ctx, ks[1:], 1)
			if err != nil {
				t.Fatal(err)
			}
			// Records created by the attempt whose answer was lost are not
			// reported; the next read shows them.
			if want := map[bool]int{true: 0, false: 2}[applied]; len(recs) != want {
				t.Fatalf("mark: %v", recs)
			}
			v := readGC(t, x.s)
			if len(v.Records) != 2 || !slices.Equal(v.Claimed, ks[:1]) {
				t.Fatalf("after mark: %+v", v)
			}
			x.failNext(applied, nil)
			moved, err := x.s.BeginBlobDeletes(ctx, v.Records)
			if err != nil || len(moved) != 2 || moved[0].State != cairn.GCDeleting {
				t.Fatalf("begin: %v, %v", moved, err)
			}
			x.failNext(applied, nil)
			if err := x.s.EndBlobDeletes(ctx, moved[:1], false); err != nil {
				t.Fatal(err)
			}
			v = readGC(t, x.s)
			x.failNext(applied, nil)
			if err := x.s.DropBlobRecords(ctx, v.Records[:1]); err != nil {
				t.Fatal(err)
			}
			x.failNext(applied, nil)
			if err := x.s.EndBlobDeletes(ctx, moved[1:], true); err != nil {
				t.Fatal(err)
			}
			x.f.reset()
			if v := readGC(t, x.s); len(v.Records) != 0 || len(v.Claimed) != 1 {
				t.Fatalf("at the end: %+v", v)
			}
		})
	}
}
