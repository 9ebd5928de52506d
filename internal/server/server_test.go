package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/gen/cairn/v1/cairnv1connect"
	"github.com/cairnstore/cairn/internal/server"
	"github.com/cairnstore/cairn/internal/server/servertest"
	"github.com/cairnstore/cairn/internal/wire"
	"github.com/cairnstore/cairn/remote"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func fileKey(i int) string { return fmt.Sprintf("sandbox-files/sha256/%064x", i) }

// appendOne appends a root checkpoint with one file to thread and returns
// its lease, released at the test's end.
func appendOne(t *testing.T, ctx context.Context, s cairn.Store, thread, id string, conv string) *cairn.Lease {
	t.Helper()
	l, err := s.AcquireWriter(ctx, thread)
	if err != nil {
		t.Fatalf("AcquireWriter(%q): %v", thread, err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	c := cairn.Checkpoint{
		ID: id, ThreadID: thread, CreatedAt: 1, Reason: cairn.ReasonAutomatic,
		Files:        []cairn.Entry{{Path: "a.txt", Kind: cairn.KindFile, BlobKey: fileKey(1), Size: 3}},
		Conversation: []byte(conv),
	}
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: l.Writer}); err != nil {
		t.Fatalf("Append(%q): %v", id, err)
	}
	return l
}

// connectError returns err's *connect.Error, failing the test without one.
func connectError(t *testing.T, err error) *connect.Error {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a Connect error", err, err)
	}
	return ce
}

func TestAuthentication(t *testing.T) {
	env := servertest.Start(t, nil)
	ctx := testCtx(t)
	for _, c := range []struct {
		name, header, want string
	}{
		{"NoHeader", "", "missing"},
		{"NotBearer", "Basic " + servertest.TokenA, `must be "Bearer <token>"`},
		{"EmptyToken", "Bearer ", `must be "Bearer <token>"`},
		{"WrongToken", "Bearer not-a-token", "not valid"},
		{"TokenOfNobody", "Bearer " + servertest.TokenA + "x", "not valid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := cairnv1connect.NewCheckpointServiceClient(http.DefaultClient, env.URL)
			req := connect.NewRequest(&cairnv1.GetHeadRequest{ThreadId: "t"})
			if c.header != "" {
				req.Header().Set("Authorization", c.header)
			}
			_, err := client.GetHead(ctx, req)
			ce := connectError(t, err)
			if ce.Code() != connect.CodeUnauthenticated || !strings.Contains(ce.Message(), c.want) {
				t.Fatalf("got %v, want unauthenticated saying %q", err, c.want)
			}
			if d := wire.Detail(ce); d == nil || d.Code != "" || d.UnknownOutcome {
				t.Fatalf("detail %v: want one without upstream code or unknown outcome", d)
			}
		})
	}
	t.Run("ValidToken", func(t *testing.T) {
		s := remote.New(env.URL, remote.Options{Token: servertest.TokenA})
		if _, err := s.GetHead(ctx, "t"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestTenantIsolation: what tenant A writes, tenant B can neither read nor
// change, and A's writer lease and test session are nothing to B.
func TestTenantIsolation(t *testing.T) {
	env := servertest.Start(t, nil)
	ctx := testCtx(t)
	a := remote.New(env.URL, remote.Options{Token: servertest.TokenA})
	b := remote.New(env.URL, remote.Options{Token: servertest.TokenB})
	la := appendOne(t, ctx, a, "thread", "ckpt", `{"secret":"of a"}`)
	if err := a.Instances().Upsert(ctx, cairn.InstanceRecord{Key: "k", Provider: "p", ThreadID: "thread"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Transcripts().SaveThread(ctx, "thread", []byte(`["of a"]`)); err != nil {
		t.Fatal(err)
	}

	reads := []struct {
		name string
		read func() (any, error)
		want string
	}{
		{"Get", func() (any, error) { c, err := b.Get(ctx, "ckpt"); return c == nil, err }, "true"},
		{"List", func() (any, error) { cs, err := b.List(ctx, "thread"); return len(cs), err }, "0"},
		{"GetHead", func() (any, error) { return b.GetHead(ctx, "thread") }, ""},
		{"ListThreads", func() (any, error) { ts, err := b.ListThreads(ctx, "", 0); return len(ts), err }, "0"},
		{"ListBlobReferences", func() (any, error) { rs, err := b.ListBlobReferences(ctx); return len(rs), err }, "0"},
		{"LoadThread", func() (any, error) { m, err := b.Transcripts().LoadThread(ctx, "thread"); return string(m), err }, "[]"},
		{"GetInstance", func() (any, error) { r, err := b.Instances().Get(ctx, "k"); return r == nil, err }, "true"},
	}
	for _, r := range reads {
		t.Run("B"+r.name, func(t *testing.T) {
			got, err := r.read()
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != r.want {
				t.Fatalf("tenant B sees %v, want %v", got, r.want)
			}
		})
	}

	t.Run("BWritesWithLeaseOfA", func(t *testing.T) {
		c := cairn.Checkpoint{ID: "ckpt-2", ThreadID: "thread", ParentCheckpointID: "ckpt", CreatedAt: 2, Reason: cairn.ReasonAutomatic}
		_, err := b.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: "ckpt", Writer: la.Writer})
		if !errors.Is(err, cairn.ErrWriterLost) {
			t.Fatalf("Append by B with A's lease: %v, want WRITER_LOST", err)
		}
		err = b.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "thread", CheckpointID: "ckpt", Writer: la.Writer})
		if !errors.Is(err, cairn.ErrWriterLost) {
			t.Fatalf("DeleteHead by B with A's lease: %v, want WRITER_LOST", err)
		}
		if head, err := a.GetHead(ctx, "thread"); err != nil || head != "ckpt" {
			t.Fatalf("A's head after B's attempts: %q, %v; want ckpt", head, err)
		}
	})

	t.Run("BUsesSessionOfA", func(t *testing.T) {
		sa, err := remote.OpenTestSession(ctx, env.URL, remote.Options{Token: servertest.TokenA}, cairn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sa.Close(context.Background()) })
		client := cairnv1connect.NewCheckpointServiceClient(http.DefaultClient, env.URL)
		req := connect.NewRequest(&cairnv1.GetHeadRequest{ThreadId: "t"})
		req.Header().Set("Authorization", "Bearer "+servertest.TokenB)
		req.Header().Set(server.HeaderTestSession, sessionID(t, ctx, env))
		_, err = client.GetHead(ctx, req)
		if ce := connectError(t, err); ce.Code() != connect.CodeNotFound {
			t.Fatalf("B naming A's session: %v, want not_found", err)
		}
	})
}

// sessionID opens a test session of tenant A with the raw client.
func sessionID(t *testing.T, ctx context.Context, env *servertest.Env) string {
	t.Helper()
	tc := cairnv1connect.NewTestClockServiceClient(http.DefaultClient, env.URL)
	req := connect.NewRequest(&cairnv1.OpenTestSessionRequest{})
	req.Header().Set("Authorization", "Bearer "+servertest.TokenA)
	res, err := tc.OpenTestSession(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.SessionId
}

func TestRequestSizeLimit(t *testing.T) {
	const limit = 1 << 20
	env := servertest.Start(t, func(c *server.Config) { c.MaxRequestBytes = limit })
	ctx := testCtx(t)
	s := remote.New(env.URL, remote.Options{Token: servertest.TokenA})
	for _, c := range []struct {
		name string
		size int
		ok   bool
	}{
		{"Under", limit / 2, true},
		{"Over", limit + 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			thread := "thread-" + c.name
			l, err := s.AcquireWriter(ctx, thread)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			conv := `"` + strings.Repeat("x", c.size) + `"`
			in := cairn.AppendInput{Writer: l.Writer, Checkpoint: cairn.Checkpoint{ID: "c-" + c.name, ThreadID: thread, CreatedAt: 1, Reason: "automatic", Conversation: []byte(conv)}}
			_, err = s.Append(ctx, in)
			if c.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			ce := connectError(t, err)
			if ce.Code() != connect.CodeResourceExhausted || !strings.Contains(ce.Message(), "larger than configured max") {
				t.Fatalf("oversize Append: %v, want resource_exhausted saying the size is over the limit", err)
			}
			var uo *remote.UnknownOutcomeError
			if errors.As(err, &uo) {
				t.Fatalf("oversize Append reported an unknown outcome: %v", err)
			}
			if head, err := s.GetHead(ctx, thread); err != nil || head != "" {
				t.Fatalf("head after the refused Append: %q, %v; want none", head, err)
			}
		})
	}
}

// TestLargestCheckpointAdmitted: the default request limit admits an Append
// of the largest checkpoint etcdstore accepts, in the binary and the JSON
// form, for the two shapes that grow most on the wire: one large
// conversation (base64 in JSON), and many directory entries with one-byte
// paths. etcdstore's codec stores such an entry in 8 bytes (a length-prefixed
// path, kind and empty blob key, and a varint size), so MaxCheckpointBytes
// holds MaxCheckpointBytes/8 of them; the wire's bytes per entry are
// measured. The sizes are computed, not sent: sending 48 MiB takes minutes
// under the race detector (TestLargeCheckpointThroughTheWire sends 8 MiB).
func TestLargestCheckpointAdmitted(t *testing.T) {
	const etcdBytesPerDir = 8
	conv := `"` + strings.Repeat("y", etcdstore.MaxCheckpointBytes-1024) + `"`
	dirs := func(n int) *cairnv1.AppendRequest {
		c := cairn.Checkpoint{ID: "big", ThreadID: "t", CreatedAt: 1, Reason: "automatic", Files: make([]cairn.Entry, n)}
		for i := range c.Files {
			c.Files[i] = cairn.Entry{Path: "d", Kind: cairn.KindDir}
		}
		return &cairnv1.AppendRequest{Checkpoint: wire.ToCheckpoint(&c), Writer: &cairnv1.Writer{ThreadId: "t", OwnerToken: "o", Fence: 1}}
	}
	big := &cairnv1.AppendRequest{
		Checkpoint: &cairnv1.Checkpoint{Id: "big", ThreadId: "t", CreatedAt: 1, Reason: "automatic", Conversation: []byte(conv)},
		Writer:     &cairnv1.Writer{ThreadId: "t", OwnerToken: "o", Fence: 1},
	}
	for _, c := range []struct {
		name string
		size func(m proto.Message) int
	}{
		{"Binary", func(m proto.Message) int { return proto.Size(m) }},
		{"JSON", func(m proto.Message) int {
			b, err := protojson.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			return len(b)
		}},
	} {
		t.Run(c.name+"/Conversation", func(t *testing.T) {
			if n := c.size(big); n > server.DefaultMaxRequestBytes {
				t.Fatalf("%d bytes, over the limit of %d", n, server.DefaultMaxRequestBytes)
			}
		})
		t.Run(c.name+"/Directories", func(t *testing.T) {
			const k = 1000
			perEntry := float64(c.size(dirs(2*k))-c.size(dirs(k))) / k
			fixed := float64(c.size(dirs(k))) - k*perEntry
			n := fixed + perEntry*etcdstore.MaxCheckpointBytes/etcdBytesPerDir
			if n > server.DefaultMaxRequestBytes {
				t.Fatalf("%.0f bytes (%.1f per entry), over the limit of %d", n, perEntry, server.DefaultMaxRequestBytes)
			}
		})
	}
}

// TestLargeCheckpointThroughTheWire: an 8 MiB checkpoint, which etcdstore
// stages in chunks, goes through the wire and back byte for byte.
func TestLargeCheckpointThroughTheWire(t *testing.T) {
	env := servertest.Start(t, nil)
	ctx := testCtx(t)
	s := remote.New(env.URL, remote.Options{Token: servertest.TokenA})
	conv := `"` + strings.Repeat("y", 8<<20) + `"`
	appendOne(t, ctx, s, "big", "big-1", conv)
	c, err := s.Get(ctx, "big-1")
	if err != nil || c == nil || string(c.Conversation) != conv {
		t.Fatalf("Get of the large checkpoint: %v, %v", c != nil, err)
	}
}

func TestTestClockDisabled(t *testing.T) {
	env := servertest.Start(t, func(c *server.Config) { c.TestClock = false })
	ctx := testCtx(t)
	_, err := remote.OpenTestSession(ctx, env.URL, remote.Options{Token: servertest.TokenA}, cairn.Options{})
	if ce := connectError(t, err); ce.Code() != connect.CodeFailedPrecondition || !strings.Contains(ce.Message(), "--test-clock") {
		t.Fatalf("OpenTestSession without --test-clock: %v", err)
	}
	client := cairnv1connect.NewCheckpointServiceClient(http.DefaultClient, env.URL)
	req := connect.NewRequest(&cairnv1.GetHeadRequest{ThreadId: "t"})
	req.Header().Set("Authorization", "Bearer "+servertest.TokenA)
	req.Header().Set(server.HeaderTestSession, "anything")
	req.Header().Set(server.HeaderTestNow, "5")
	_, err = client.GetHead(ctx, req)
	if ce := connectError(t, err); ce.Code() != connect.CodeFailedPrecondition {
		t.Fatalf("a request naming a test session without --test-clock: %v", err)
	}
}

func TestCollectorDisabled(t *testing.T) {
	env := servertest.Start(t, func(c *server.Config) { c.ServeCollector = false })
	ctx := testCtx(t)
	s := remote.New(env.URL, remote.Options{Token: servertest.TokenA})
	_, err := s.MarkBlobs(ctx, []string{fileKey(1)}, 1)
	if ce := connectError(t, err); ce.Code() != connect.CodePermissionDenied {
		t.Fatalf("MarkBlobs without --serve-collector: %v", err)
	}
}

// TestMetrics: every request is counted by procedure and code, and contract
// errors by upstream code.
func TestMetrics(t *testing.T) {
	env := servertest.Start(t, nil)
	ctx := testCtx(t)
	s := remote.New(env.URL, remote.Options{Token: servertest.TokenA})
	if _, err := s.GetHead(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	// Package remote checks identifiers itself: the invalid one goes
	// without it.
	if _, err := rawGetHead(ctx, env, ""); wire.Detail(connectError(t, err)).GetCode() != string(cairn.CodeInvalidID) {
		t.Fatalf("GetHead(\"\"): %v", err)
	}
	fams, err := env.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.Metric {
			got[f.GetName()+labels(m)] += value(m)
		}
	}
	const proc = "/cairn.v1.CheckpointService/GetHead"
	for _, k := range []string{
		"cairnd_requests_total{code=ok,procedure=" + proc + "}",
		"cairnd_requests_total{code=invalid_argument,procedure=" + proc + "}",
		"cairnd_contract_errors_total{procedure=" + proc + ",upstream_code=SANDBOX_SNAPSHOT_INVALID_ID}",
		"cairnd_request_duration_seconds{procedure=" + proc + "}",
	} {
		if want := map[bool]float64{true: 2, false: 1}[strings.HasPrefix(k, "cairnd_request_duration")]; got[k] != want {
			t.Errorf("%s = %v, want %v (have %v)", k, got[k], want, got)
		}
	}
}

func labels(m *dto.Metric) string {
	var parts []string
	for _, l := range m.Label {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}
