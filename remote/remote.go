// Package remote is a Go client of cairnd: a cairn.Store, with every
// optional capability of the contract (Pruner, Forker, ThreadLister,
// BlobReferenceWalker, BlobClaimer, BlobCollector), a cairn.InstanceStore and
// a cairn.TranscriptStore, over cairnd's Connect API (proto/cairn/v1).
//
// Errors: a contract error of the server comes back as a *cairn.Error with
// the server's code, so errors.Is(err, cairn.ErrStaleHead) works as against
// a store in process. A write whose outcome is unknown (the server said so,
// or the request failed on the way, after it may have been applied) returns
// an *UnknownOutcomeError; any other error means the call changed nothing.
// Context errors are returned unchanged when ctx ends before the call
// completes without effect.
package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"connectrpc.com/connect"

	"github.com/cairnstore/cairn"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/gen/cairn/v1/cairnv1connect"
	"github.com/cairnstore/cairn/internal/wire"
)

// The headers of a test session, as cairnd reads them.
const (
	HeaderTestSession = "Cairn-Test-Session"
	HeaderTestNow     = "Cairn-Test-Now"
)

// Options configure a Store.
type Options struct {
	// Token is the bearer token that selects the tenant.
	Token string
	// HTTPClient sends the requests; nil selects a client shared by the
	// stores of this package, on a NewTransport. For gRPC
	// (connect.WithGRPC) it must speak HTTP/2.
	HTTPClient connect.HTTPClient
	// ClientOptions are passed to every Connect client, e.g.
	// connect.WithGRPC() or connect.WithProtoJSON(). The default is the
	// Connect protocol with binary protobuf.
	ClientOptions []connect.ClientOption
}

// UnknownOutcomeError is the error of a write that may or may not have been
// applied: the server reported an unknown outcome, or the request failed in
// transit. Read the store to find out, or repeat the write with the same
// ids: the contract's checks then report whether it landed (for example
// cairn.ErrDuplicateID for an Append that did).
type UnknownOutcomeError struct {
	// Op is the write, e.g. "append".
	Op string
	// Err is what ended the call: a *cairn.Error, a context error or a
	// *connect.Error, possibly joined.
	Err error
}

// Error describes the write and what ended it.
func (e *UnknownOutcomeError) Error() string {
	return fmt.Sprintf("remote: outcome of %s unknown: %v", e.Op, e.Err)
}

// Unwrap returns the errors met.
func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// Store is a cairn.Store served by cairnd. It is safe for concurrent use.
type Store struct {
	cp      cairnv1connect.CheckpointServiceClient
	inst    cairnv1connect.InstanceServiceClient
	gc      cairnv1connect.BlobCollectorServiceClient
	tc      cairnv1connect.TestClockServiceClient
	session string
}

var (
	_ cairn.Store               = (*Store)(nil)
	_ cairn.Pruner              = (*Store)(nil)
	_ cairn.Forker              = (*Store)(nil)
	_ cairn.ThreadLister        = (*Store)(nil)
	_ cairn.BlobReferenceWalker = (*Store)(nil)
	_ cairn.BlobClaimer         = (*Store)(nil)
	_ cairn.BlobCollector       = (*Store)(nil)
)

// New returns a store that calls cairnd at baseURL (e.g.
// "https://cairnd.internal:8443"). It does no I/O.
func New(baseURL string, opts Options) *Store {
	return newStore(baseURL, opts, &headers{token: opts.Token})
}

// NewTransport returns an HTTP transport for cairnd: http.DefaultTransport's
// settings (proxies from the environment, dial and TLS timeouts, HTTP/2 over
// TLS) with 64 KiB read and write buffers instead of 4 KiB, so that a
// checkpoint of tens of KiB is written in one system call instead of one per
// 4 KiB, and 64 idle connections per host instead of 2, so that concurrent
// calls reuse their connections. Set its TLSClientConfig for client
// certificates or a private CA.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.WriteBufferSize = 64 << 10
	t.ReadBufferSize = 64 << 10
	t.MaxIdleConnsPerHost = 64
	return t
}

// defaultClient is the HTTP client of stores whose Options name none.
var defaultClient = sync.OnceValue(func() *http.Client { return &http.Client{Transport: NewTransport()} })

func newStore(baseURL string, opts Options, h *headers) *Store {
	hc := opts.HTTPClient
	if hc == nil {
		hc = defaultClient()
	}
	// wire.Codec encodes and decodes exactly as Connect's own binary codec,
	// without its per-entry cost on the messages that carry a checkpoint.
	co := append([]connect.ClientOption{connect.WithInterceptors(h), connect.WithCodec(wire.Codec{})}, opts.ClientOptions...)
	return &Store{
		cp:   cairnv1connect.NewCheckpointServiceClient(hc, baseURL, co...),
		inst: cairnv1connect.NewInstanceServiceClient(hc, baseURL, co...),
		gc:   cairnv1connect.NewBlobCollectorServiceClient(hc, baseURL, co...),
		tc:   cairnv1connect.NewTestClockServiceClient(hc, baseURL, co...),
	}
}

// OpenTestSession opens a test session on a cairnd started with
// --test-clock and returns a store on it: an empty store whose clock is
// o.Now (sent with every request; nil selects the system clock) and whose
// lease timings are o's. Close the store to delete the session. It returns
// an error with connect.CodeFailedPrecondition when the server has no test
// clock.
func OpenTestSession(ctx context.Context, baseURL string, opts Options, o cairn.Options) (*Store, error) {
	if o.Now == nil {
		o.Now = cairn.SystemClock
	}
	h := &headers{token: opts.Token, now: o.Now}
	s := newStore(baseURL, opts, h)
	now := o.Now()
	res, err := s.tc.OpenTestSession(ctx, connect.NewRequest(&cairnv1.OpenTestSessionRequest{
		Now: &now, LeaseDurationMs: cairn.Millis(o.LeaseDuration), RenewAfterMs: cairn.Millis(o.RenewAfter),
	}))
	if err != nil {
		out, _ := wire.FromConnect(err, false)
		return nil, out
	}
	s.session = res.Msg.SessionId
	h.session = s.session
	return s, nil
}

// Close deletes the test session of a store from OpenTestSession, and does
// nothing for a store from New.
func (s *Store) Close(ctx context.Context) error {
	if s.session == "" {
		return nil
	}
	_, err := s.tc.CloseTestSession(ctx, connect.NewRequest(&cairnv1.CloseTestSessionRequest{SessionId: s.session}))
	if err != nil {
		out, _ := wire.FromConnect(err, false)
		return out
	}
	return nil
}

// headers is the interceptor that authenticates every request and names
// the test session, if any, with the session's clock.
type headers struct {
	token   string
	session string
	now     func() float64
}

func (h *headers) set(hd http.Header) {
	if h.token != "" {
		hd.Set("Authorization", "Bearer "+h.token)
	}
	if h.session != "" {
		hd.Set(HeaderTestSession, h.session)
		hd.Set(HeaderTestNow, strconv.FormatFloat(h.now(), 'g', -1, 64))
	}
}

func (h *headers) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		h.set(req.Header())
		return next(ctx, req)
	}
}

func (h *headers) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		h.set(conn.RequestHeader())
		return conn
	}
}

func (h *headers) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// fail converts the error of a call. A write's error is an
// *UnknownOutcomeError unless the server says that nothing changed; when
// nothing changed and ctx has ended, ctx's error is returned unchanged.
func fail(ctx context.Context, op string, write bool, err error) error {
	out, unknown := wire.FromConnect(err, write)
	if unknown {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(out, ctxErr) {
			out = errors.Join(ctxErr, out)
		}
		return &UnknownOutcomeError{Op: op, Err: out}
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return out
}

// call runs a unary call: ctx's error at once when it has ended, and the
// call's error converted by fail.
func call[Req, Res any](ctx context.Context, op string, write bool, fn func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), req *Req) (*Res, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res, err := fn(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, fail(ctx, op, write, err)
	}
	return res.Msg, nil
}
