package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// etcdRequestLimit is etcd's default --max-request-bytes.
const etcdRequestLimit = 3 << 19 // 1.5 MiB

// requestMeter is a gRPC stats handler that keeps the largest message the
// client sent.
type requestMeter struct {
	mu     sync.Mutex
	max    int
	method string
}

func (m *requestMeter) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, methodKey{}, info.FullMethodName)
}
func (m *requestMeter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.OutPayload); ok && p.Client {
		m.mu.Lock()
		defer m.mu.Unlock()
		if p.Length > m.max {
			m.max, m.method = p.Length, fmt.Sprint(ctx.Value(methodKey{}))
		}
	}
}
func (m *requestMeter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (m *requestMeter) HandleConn(context.Context, stats.ConnStats)                       {}

type methodKey struct{}

func (m *requestMeter) largest() (int, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.max, m.method
}

// idAt returns a valid identifier of n bytes that begins with tag and is
// padded with NUL bytes, which the keys escape to two bytes each.
func idAt(tag string, n int) string { return tag + strings.Repeat("\x00", n-len(tag)) }

// nameAt returns a name of n bytes of NUL bytes after tag: JSON escapes each
// to six bytes, the most a name can grow in a record.
func nameAt(tag string, n int) string { return idAt(tag, n) }

// boundCheckpoint is a checkpoint of thread with every identifier, name and
// path at its bound, files blob keys of its own (spread over every shard),
// one artifact and a conversation of about conv bytes.
func boundCheckpoint(id, parent, thread string, files, conv int) cairn.Checkpoint {
	c := largeCheckpoint(id, thread, parent, files, conv)
	c.CreatedAt = 1
	c.Reason = nameAt("r", cairn.MaxNameBytes)
	c.Label = nameAt("l", cairn.MaxNameBytes)
	c.SourceRunID = nameAt("s", cairn.MaxNameBytes)
	c.Files[0].Path = strings.Repeat("d/", cairn.MaxPathBytes/2-1) + "zz"
	a := &c.Artifacts[0]
	a.ArtifactID, a.Name, a.MimeType = nameAt("a", cairn.MaxNameBytes), nameAt("n", cairn.MaxNameBytes), nameAt("m", cairn.MaxNameBytes)
	return c
}

// TestWorstCaseWritesFitDefaultLimits runs every write of the store with
// every identifier, name and path at its bound (NUL bytes, which the keys and
// the records escape the most), on a member with etcd's default limits, in
// both layouts: appends whose publish is just under and just over the inline
// budget, staged appends with many chunks and reference records, a fork into
// a thread and id at the bound, a prune, DeleteHead, DeleteThread, leases
// and instance records. Each must succeed, and the largest request the
// client sent must be within etcd's default request limit; the test logs it
// (docs/limits.md quotes it).
func TestWorstCaseWritesFitDefaultLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("writes tens of MiB to etcd")
	}
	srv, _ := embedetcd.ForTest(t)
	for _, layout := range []struct {
		name string
		opts func() etcdstore.Options
	}{
		{"Default", func() etcdstore.Options { return etcdstore.Options{} }},
		{"Capacity", func() etcdstore.Options { return etcdstore.Options{Objects: bucket.NewMemory(nil)} }},
	} {
		t.Run(layout.name, func(t *testing.T) {
			meter := &requestMeter{}
			cli, err := clientv3.New(clientv3.Config{
				Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
				DialOptions: []grpc.DialOption{grpc.WithStatsHandler(meter)},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cli.Close() })
			ctx := testContext(t)
			s := newStore(t, cli, layout.name+strings.Repeat("/", etcdstore.MaxPrefixBytes-len(layout.name)), layout.opts())
			thread := idAt("t", cairn.MaxIDBytes)
			lease, err := s.AcquireWriter(ctx, thread)
			if err != nil {
				t.Fatalf("AcquireWriter: %v", shorten(err))
			}
			if _, err := lease.Renew(ctx); err != nil {
				t.Fatalf("Renew: %v", shorten(err))
			}
			// Conversations around the inline budget (900 KiB), then two
			// staged checkpoints: one of many chunks, one of many blob keys.
			shapes := []struct{ files, conv int }{
				{1, 860 << 10}, {1, 880 << 10}, {1, 900 << 10}, {1, 920 << 10},
				{50, 12 << 20}, {6000, 1 << 20},
			}
			var ids []string
			head := ""
			for i, sh := range shapes {
				id := idAt(fmt.Sprintf("c%d", i), cairn.MaxIDBytes)
				c := boundCheckpoint(id, head, thread, sh.files, sh.conv)
				if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: head, Writer: lease.Writer}); err != nil {
					t.Fatalf("Append %d (%d files, %d bytes of conversation): %v", i, sh.files, sh.conv, shorten(err))
				}
				ids, head = append(ids, id), id
			}
			// Forks of an inline and of a staged checkpoint, into threads
			// and ids at the bound.
			var dests []*cairn.Lease
			for i, src := range []string{ids[3], ids[4]} {
				dest := idAt(fmt.Sprintf("u%d", i), cairn.MaxIDBytes)
				l, err := s.AcquireWriter(ctx, dest)
				if err != nil {
					t.Fatalf("AcquireWriter(dest %d): %v", i, shorten(err))
				}
				dests = append(dests, l)
				if _, err := s.ForkFromCheckpoint(ctx, cairn.ForkInput{SourceThreadID: thread, SourceCheckpointID: src,
					DestinationThreadID: dest, DestinationCheckpointID: idAt(fmt.Sprintf("f%d", i), cairn.MaxIDBytes), CreatedAt: 2, Writer: l.Writer}); err != nil {
					t.Fatalf("fork %d: %v", i, shorten(err))
				}
			}
			if err := s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: thread, CheckpointID: head, Writer: lease.Writer}); err != nil {
				t.Fatalf("DeleteHead: %v", shorten(err))
			}
			if removed, err := s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: thread, Keep: 1, Writer: lease.Writer}); err != nil || len(removed) != len(ids)-2 {
				t.Fatalf("DeleteCheckpoints: %d removed, %v", len(removed), err)
			}
			for i, l := range dests {
				if _, err := s.DeleteThread(ctx, cairn.DeleteThreadInput{ThreadID: l.Writer.ThreadID, Writer: l.Writer}); err != nil {
					t.Fatalf("DeleteThread %d: %v", i, shorten(err))
				}
			}
			lease.Release(ctx)
			inst := cairn.InstanceRecord{Key: idAt("k", cairn.MaxIDBytes), Provider: nameAt("p", cairn.MaxNameBytes),
				ProviderSandboxID: nameAt("s", cairn.MaxNameBytes), LatestSnapshotID: nameAt("n", cairn.MaxNameBytes),
				ThreadID: nameAt("t", cairn.MaxNameBytes), LatestRunID: nameAt("r", cairn.MaxNameBytes), UpdatedAt: 1}
			if err := s.Instances().Upsert(ctx, inst); err != nil {
				t.Fatalf("Upsert: %v", shorten(err))
			}
			n, method := meter.largest()
			t.Logf("largest request: %d bytes (%s), etcd's default limit %d", n, method, etcdRequestLimit)
			if n > etcdRequestLimit {
				t.Errorf("the largest request is %d bytes (%s), more than etcd's default limit of %d", n, method, etcdRequestLimit)
			}
		})
	}
}

// TestOversizeInputsGetCodedErrors sends what a buggy or hostile caller
// sends, identifiers and tokens of megabytes, and checks that each call
// fails with the contract's code, not with a transport error of etcd's.
func TestOversizeInputsGetCodedErrors(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	s := newStore(t, cli, "oversize/", etcdstore.Options{})
	lease, err := s.AcquireWriter(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	c := largeCheckpoint("c1", "main", "", 1, 10)
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: lease.Writer}); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{200 << 10, 3 << 20} {
		huge := strings.Repeat("x", size)
		badToken := lease.Writer
		badToken.OwnerToken = huge
		for _, tc := range []struct {
			name string
			want error
			op   func() error
		}{
			{"GetHead", cairn.ErrInvalidID, func() error { _, err := s.GetHead(ctx, huge); return err }},
			{"Get", cairn.ErrInvalidID, func() error { _, err := s.Get(ctx, huge); return err }},
			{"List", cairn.ErrInvalidID, func() error { _, err := s.List(ctx, huge); return err }},
			{"AcquireWriter", cairn.ErrInvalidID, func() error { _, err := s.AcquireWriter(ctx, huge); return err }},
			{"AppendID", cairn.ErrInvalidID, func() error {
				_, err := s.Append(ctx, cairn.AppendInput{Checkpoint: largeCheckpoint(huge, "main", "c1", 1, 10), ExpectedHeadID: "c1", Writer: lease.Writer})
				return err
			}},
			{"AppendToken", cairn.ErrWriterLost, func() error {
				_, err := s.Append(ctx, cairn.AppendInput{Checkpoint: largeCheckpoint("c2", "main", "c1", 1, 10), ExpectedHeadID: "c1", Writer: badToken})
				return err
			}},
			{"DeleteHeadToken", cairn.ErrWriterLost, func() error {
				return s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "main", CheckpointID: "c1", Writer: badToken})
			}},
			{"DeleteCheckpointsToken", cairn.ErrWriterLost, func() error {
				_, err := s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "main", Keep: 1, Writer: badToken})
				return err
			}},
			{"DeleteThreadToken", cairn.ErrWriterLost, func() error {
				_, err := s.DeleteThread(ctx, cairn.DeleteThreadInput{ThreadID: "main", Writer: badToken})
				return err
			}},
			{"ClaimBlobsToken", cairn.ErrWriterLost, func() error {
				_, err := s.ClaimBlobs(ctx, badToken, []string{fileKey("k")})
				return err
			}},
			{"InstanceKey", cairn.ErrInvalidID, func() error { _, err := s.Instances().Get(ctx, huge); return err }},
			{"InstanceField", cairn.ErrInvalidEntry, func() error {
				return s.Instances().Upsert(ctx, cairn.InstanceRecord{Key: "k", Provider: huge})
			}},
		} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, size), func(t *testing.T) {
				if err := tc.op(); !errors.Is(err, tc.want) {
					t.Errorf("got %v, want %v", shorten(err), cairn.CodeOf(tc.want))
				}
			})
		}
	}
	// A cursor of any length lists the threads after it.
	for _, c := range []struct {
		after string
		want  int
	}{{strings.Repeat("m", 3<<20), 0}, {"m" + strings.Repeat("\x00", 3<<20), 1}, {strings.Repeat("l", 3<<20), 1}} {
		if got, err := s.ListThreads(ctx, c.after, 0); err != nil || len(got) != c.want {
			t.Errorf("ListThreads after %.8q… of %d bytes = %q, %v; want %d threads", c.after, len(c.after), got, shorten(err), c.want)
		}
	}
	if h, err := s.GetHead(ctx, "main"); err != nil || h != "c1" {
		t.Errorf("GetHead(main) = %q, %v after the refused calls, want c1", h, err)
	}
}

// shorten returns err's text cut to a readable length.
func shorten(err error) string {
	if err == nil {
		return "no error"
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
