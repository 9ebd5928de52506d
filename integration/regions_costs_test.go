package integration

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/integration/internal/harness"
	"github.com/cairnstore/cairn/snapshot"
)

// regionSamples is how many times TestRegions/Costs measures each figure;
// make bench-regions takes more.
var regionSamples = flag.Int("regions.samples", 7, "samples per figure of TestRegions/Costs")

// leaderCounter counts the unary requests of a client that reach the
// leader: every write, lease request and linearizable read. Serializable
// reads and member status requests are answered by the member they are sent
// to. lastTxn is the size of the last transaction that writes.
type leaderCounter struct {
	n       atomic.Int64
	lastTxn atomic.Int64
	// grants counts the lease grants among n: the store grants them in the
	// background, ahead of the acquires that take them.
	grants atomic.Int64
}

func (lc *leaderCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !answeredLocally(req) {
		lc.n.Add(1)
	}
	if _, ok := req.(*etcdserverpb.LeaseGrantRequest); ok {
		lc.grants.Add(1)
	}
	if txn, ok := req.(*etcdserverpb.TxnRequest); ok && !readOnly(txn) {
		lc.lastTxn.Store(int64(proto.Size(txn)))
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func answeredLocally(req any) bool {
	switch r := req.(type) {
	case *etcdserverpb.RangeRequest:
		return r.Serializable
	case *etcdserverpb.StatusRequest:
		return true
	case *etcdserverpb.TxnRequest:
		for _, ops := range [][]*etcdserverpb.RequestOp{r.Success, r.Failure} {
			for _, op := range ops {
				if rr := op.GetRequestRange(); rr == nil || !rr.Serializable {
					return false
				}
			}
		}
		return len(r.Compare) == 0
	}
	return false
}

func readOnly(txn *etcdserverpb.TxnRequest) bool {
	for _, ops := range [][]*etcdserverpb.RequestOp{txn.Success, txn.Failure} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

// regionCosts measures rows B12 to B15 from each region, each against a
// baseline measured in the same run, and prints them:
//   - B12: p50 of a 200-entry append / p50 of a bare etcd transaction of the
//     same bytes from the same region (target <= 1.15), leader in A, then
//     in C;
//   - B13: p50 of a Get of a committed checkpoint from C, with local reads,
//     against a serializable read of C's member (target: within 5 ms);
//   - B14: snapshot.Save of an unchanged 2,000-file workspace from C (stat
//     cache warm): wall time and requests that reach the leader (target <= 4);
//   - B15: reading the head and restoring it from C: wall time and requests
//     that reach the leader (target <= 1).
//
// The request counts are checked; the times are printed with their targets,
// never asserted.
func regionCosts(t *testing.T, c *harness.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n := max(3, *regionSamples)
	_, el := harness.RegionTimers(harness.ThreeRegions)
	lease := 3 * harness.MinLeaseTTL(el)
	opts := etcdstore.Options{Options: cairn.Options{LeaseDuration: lease, RenewAfter: lease / 3}, LocalReads: true}
	type region struct {
		cli   *clientv3.Client
		count *leaderCounter
	}
	regions := map[string]region{}
	for _, name := range []string{"A", "B", "C"} {
		lc := &leaderCounter{}
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: []string{c.RegionOf(name).RegionURL}, DialTimeout: 5 * time.Second, TLS: c.ClientTLS(), Logger: zap.NewNop(),
			DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(lc.intercept)},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		regions[name] = region{cli, lc}
	}
	newStore := func(r region, prefix string) *etcdstore.Store {
		t.Helper()
		s, err := etcdstore.New(r.cli, prefix, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	var rows []string
	row := func(format string, args ...any) {
		rows = append(rows, fmt.Sprintf(format, args...))
	}

	// B12, leader in A then in C.
	for _, leader := range []string{"A", "C"} {
		moveLeaderTo(t, ctx, c, c.RegionOf(leader))
		from := []string{"A", "B", "C"}
		if leader == "C" {
			from = []string{"A", "C"}
		}
		for _, name := range from {
			r := regions[name]
			s := newStore(r, fmt.Sprintf("costs-b12-%s-%s/", leader, name))
			l, err := s.AcquireWriter(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			prev, i := "", 0
			appendOne := func() error {
				id := fmt.Sprintf("c%d", i)
				i++
				cp := cairn.Checkpoint{ID: id, ThreadID: "t", ParentCheckpointID: prev, CreatedAt: float64(i), Reason: cairn.ReasonAutomatic, Conversation: []byte(`[]`)}
				for f := range 200 {
					cp.Files = append(cp.Files, cairn.Entry{Path: fmt.Sprintf("src/f%03d.go", f), Kind: cairn.KindFile, BlobKey: fileKey(fmt.Sprintf("%d-%d", f, i%3)), Size: 100})
				}
				if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: cp, Writer: l.Writer, ExpectedHeadID: prev}); err != nil {
					return err
				}
				prev = id
				return nil
			}
			if err := appendOne(); err != nil { // warm the thread cache
				t.Fatal(err)
			}
			app := median(t, n, appendOne)
			size := int(r.count.lastTxn.Load())
			key := fmt.Sprintf("costs-bare-%s-%s", leader, name)
			put, err := r.cli.Put(ctx, key, "")
			if err != nil {
				t.Fatal(err)
			}
			rev := put.Header.Revision
			value := strings.Repeat("x", size)
			bare := median(t, n, func() error {
				resp, err := r.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, value)).Commit()
				if err == nil && !resp.Succeeded {
					err = fmt.Errorf("bare transaction lost its comparison")
				}
				if err == nil {
					rev = resp.Header.Revision
				}
				return err
			})
			ratio := float64(app) / float64(bare)
			row("B12 append, 200 entries (%d B), leader %s, from %s: p50 %v, bare txn %v, ratio %.2f (target <= 1.15: %s)",
				size, leader, name, app.Round(time.Millisecond), bare.Round(time.Millisecond), ratio, met(ratio <= 1.15))
		}
	}
	moveLeaderTo(t, ctx, c, c.RegionOf("A"))

	// B13: Get from C.
	{
		w := newStore(regions["A"], "costs-b13/")
		l, err := w.AcquireWriter(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Append(ctx, cairn.AppendInput{Writer: l.Writer, Checkpoint: cairn.Checkpoint{
			ID: "x", ThreadID: "t", CreatedAt: 1, Reason: cairn.ReasonAutomatic, Conversation: []byte(`[]`)}}); err != nil {
			t.Fatal(err)
		}
		r := regions["C"]
		s := newStore(r, "costs-b13/")
		get := func() error {
			cp, err := s.Get(ctx, "x")
			if err == nil && cp == nil {
				err = fmt.Errorf("Get(x) = nil")
			}
			return err
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if err := get(); err != nil {
				t.Fatal(err)
			}
			if served, _ := s.LocalReadCounts(); served > 0 || time.Now().After(deadline) {
				break
			}
		}
		before := r.count.n.Load()
		got := median(t, n, get)
		leaderReqs := r.count.n.Load() - before
		local := median(t, n, func() error { _, err := r.cli.Get(ctx, "costs-bare", clientv3.WithSerializable()); return err })
		row("B13 get of a checkpoint from C: p50 %v, local round trip %v (target <= +5 ms: %s); requests to the leader in %d Gets: %d",
			got.Round(time.Microsecond*100), local.Round(time.Microsecond*100), met(got <= local+5*time.Millisecond), n, leaderReqs)
		if leaderReqs != 0 {
			t.Errorf("B13: %d Gets of a committed checkpoint from C sent %d requests to the leader", n, leaderReqs)
		}
	}

	// B14 and B15 from C.
	{
		r := regions["C"]
		s := newStore(r, "costs-b14/")
		bkt := bucket.NewMemory(nil)
		if err := bucket.BindStore(ctx, s, bkt); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		for i := range 2000 {
			p := filepath.Join(dir, fmt.Sprintf("d%02d", i%40), fmt.Sprintf("f%04d.txt", i))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cache := filepath.Join(t.TempDir(), "stat.cache")
		// save returns the capture's time, the requests that reached the
		// leader on its path, and the lease grants made in the background
		// to replace the spare lease its acquire took.
		save := func() (time.Duration, int64, int64) {
			t.Helper()
			before, grants, start := r.count.n.Load(), r.count.grants.Load(), time.Now()
			if _, err := snapshot.Save(ctx, s, bkt, snapshot.SaveInput{ThreadID: "t", Dir: dir, Conversation: []byte(`[]`),
				Options: snapshot.Options{StatCache: cache}}); err != nil {
				t.Fatal(err)
			}
			wall := time.Since(start)
			time.Sleep(200 * time.Millisecond) // the background grant, if any, is counted apart
			g := r.count.grants.Load() - grants
			return wall, r.count.n.Load() - before - g, g
		}
		save() // the first capture uploads and fills the stat cache
		var walls []time.Duration
		var reqs, grants int64
		for range n {
			d, k, g := save()
			walls, reqs, grants = append(walls, d), max(reqs, k), max(grants, g)
		}
		row("B14 capture of an unchanged 2,000-file workspace from C: p50 %v, requests to the leader on its path %d (target <= 4: %s), plus %d lease grant in the background",
			medianOf(walls).Round(time.Millisecond), reqs, met(reqs <= 4), grants)
		if reqs > 4 {
			t.Errorf("B14: a capture of an unchanged workspace from C sent %d requests to the leader, want at most 4", reqs)
		}
		walls, reqs = walls[:0], 0
		for i := range n {
			before, start := r.count.n.Load(), time.Now()
			head, err := s.GetHead(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			cp, err := s.Get(ctx, head)
			if err != nil || cp == nil {
				t.Fatalf("Get(head %q) = %v, %v", head, cp, err)
			}
			if _, err := snapshot.Restore(ctx, bkt, cp, filepath.Join(t.TempDir(), fmt.Sprint(i)), nil); err != nil {
				t.Fatal(err)
			}
			walls, reqs = append(walls, time.Since(start)), max(reqs, r.count.n.Load()-before)
		}
		row("B15 restore of the head (2,000 files) from C: p50 %v, requests to the leader %d (target <= 1: %s)",
			medianOf(walls).Round(time.Millisecond), reqs, met(reqs <= 1))
		if reqs > 1 {
			t.Errorf("B15: a restore from C sent %d requests to the leader, want at most 1", reqs)
		}
	}
	t.Logf("costs on the three-region test bed (round trips A-B 70 ms, A-C 140 ms, B-C 100 ms; %d samples a figure; the bucket is in-process, so B14 and B15 show etcd's part):\n%s",
		n, strings.Join(rows, "\n"))
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// medianOf returns the median of ds.
func medianOf(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// fileKey returns a file blob key derived from s.
func fileKey(s string) string {
	return fmt.Sprintf("sandbox-files/sha256/%x", sha256.Sum256([]byte(s)))
}
