// Package server is cairnd's Connect service: the checkpoint store contract
// of etcdstore over the API in proto/cairn/v1, one store per tenant, with
// bearer-token authentication, per-request deadlines, a request-size limit,
// Prometheus metrics per procedure, /healthz and /readyz.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/wire"
)

// Defaults of Config.
const (
	DefaultRequestTimeout = 60 * time.Second
	// DefaultMaxRequestBytes admits the largest checkpoint etcdstore accepts
	// (etcdstore.MaxCheckpointBytes, measured in its own encoding) in the
	// binary and the JSON form of an Append, whose entries take more bytes
	// on the wire than in etcd (TestRequestLimitAdmitsLargestCheckpoint).
	DefaultMaxRequestBytes = 4*etcdstore.MaxCheckpointBytes + 1<<20
)

// compressMinBytes is the smallest response the server compresses.
const compressMinBytes = 64 << 10

// Config configures a Server.
type Config struct {
	// Client reaches etcd; the caller owns it.
	Client *clientv3.Client
	// Tenants are the holders of tokens, each with a store under its prefix.
	Tenants []Tenant
	// Store configures every tenant's store (the clock and lease timings are
	// the defaults; Objects is the bucket of the capacity layout).
	Store etcdstore.Options
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// RequestTimeout bounds every request; a client's shorter deadline wins.
	// Zero selects DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxRequestBytes bounds the request message of the procedures that
	// carry a checkpoint, a transcript or lists of blob keys; every other
	// procedure's is bounded by SmallRequestBytes. A larger one is refused
	// with RESOURCE_EXHAUSTED before anything runs. Zero selects
	// DefaultMaxRequestBytes.
	MaxRequestBytes int
	// TestClock enables TestClockService. Never in production: a session's
	// clock is the client's to move.
	TestClock bool
	// ServeCollector enables BlobCollectorService (the sweeper's side of the
	// online sweep) for every tenant.
	ServeCollector bool
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Server serves the API. Create it with New, mount Handler, and Close it
// after the HTTP server has stopped.
type Server struct {
	client         *clientv3.Client
	tenants        []Tenant
	stores         []*store
	storeOptions   etcdstore.Options
	log            *slog.Logger
	timeout        time.Duration
	maxBytes       int
	testClock      bool
	serveCollector bool
	metrics        *metrics
	sessions       sessions
	draining       atomic.Bool
	gatherer       prometheus.Gatherer
}

// New returns a server with one store per tenant. It does no I/O.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("server: an etcd client is required")
	}
	if err := checkTenants(cfg.Tenants); err != nil {
		return nil, err
	}
	srv := &Server{
		client: cfg.Client, tenants: cfg.Tenants, storeOptions: cfg.Store,
		log: cfg.Logger, timeout: cfg.RequestTimeout, maxBytes: cfg.MaxRequestBytes,
		testClock: cfg.TestClock, serveCollector: cfg.ServeCollector,
		sessions: sessions{m: map[string]*session{}},
	}
	if srv.log == nil {
		srv.log = slog.New(slog.DiscardHandler)
	}
	if srv.storeOptions.Logger == nil {
		srv.storeOptions.Logger = srv.log
	}
	if srv.timeout <= 0 {
		srv.timeout = DefaultRequestTimeout
	}
	if srv.maxBytes <= 0 {
		srv.maxBytes = DefaultMaxRequestBytes
	}
	for _, t := range cfg.Tenants {
		st, err := etcdstore.New(cfg.Client, t.Prefix, srv.storeOptions)
		if err != nil {
			_ = srv.closeAll(context.Background())
			return nil, fmt.Errorf("server: store of tenant %q: %w", t.Name, err)
		}
		now := srv.storeOptions.Now
		if now == nil {
			now = cairn.SystemClock
		}
		srv.stores = append(srv.stores, newStore(st, now))
	}
	srv.metrics = newMetrics(cfg.Registerer)
	if g, ok := cfg.Registerer.(prometheus.Gatherer); ok {
		srv.gatherer = g
	}
	return srv, nil
}

// Handler returns the API's handler together with /healthz, /readyz and,
// when the registerer is also a gatherer, /metrics.
func (srv *Server) Handler() http.Handler {
	opts := []connect.HandlerOption{
		// requestIDs is outermost, so that every answer of a handler
		// carries the request's id; the recovery of a handler's panic is
		// innermost, so that its error is answered like any other.
		connect.WithInterceptors(requestIDs{srv}, srv.metrics, &authInterceptor{srv: srv}),
		connect.WithRecover(srv.recovered),
		// Compressing a small response costs more time than it saves on
		// a local network; large ones (a big checkpoint, a page of
		// references) are still compressed for clients that accept gzip.
		connect.WithCompressMinBytes(compressMinBytes),
		// The binary codec of package proto, without its per-entry cost
		// on the messages that carry a checkpoint.
		connect.WithCodec(wire.Codec{}),
	}
	mux := http.NewServeMux()
	srv.mountServices(mux, opts)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", srv.ready)
	if srv.gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(srv.gatherer, promhttp.HandlerOpts{}))
	}
	return wholeResponses(mux)
}

// readyTimeout bounds the etcd read of /readyz.
const readyTimeout = 3 * time.Second

// ready answers 200 when etcd answers a read, and 503 saying why otherwise
// or while the server drains.
func (srv *Server) ready(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if srv.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready: draining")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	key := srv.tenants[0].Prefix
	if _, err := srv.client.Get(ctx, key, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithLimit(1)); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready: etcd does not answer:", err)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Tenants returns the tenants the server serves.
func (srv *Server) Tenants() []Tenant { return srv.tenants }

// Store returns the store of tenant i (an index into Tenants), for the
// console's reads.
func (srv *Server) Store(i int) *etcdstore.Store { return srv.stores[i].Store }

// Client returns the etcd client the server reads and writes with.
func (srv *Server) Client() *clientv3.Client { return srv.client }

// Drain makes /readyz fail, so that load balancers stop sending requests;
// the caller then shuts the HTTP server down, which waits for the requests
// in flight.
func (srv *Server) Drain() { srv.draining.Store(true) }

// Close ends every writer lease the server holds and the test sessions
// (deleting their keys). Call it after the HTTP server stopped.
func (srv *Server) Close(ctx context.Context) error { return srv.closeAll(ctx) }

type tenantKey struct{}

func tenantOf(ctx context.Context) (int, bool) {
	t, ok := ctx.Value(tenantKey{}).(int)
	return t, ok
}

// authInterceptor authenticates every request by its bearer token, puts the
// tenant into the context, and bounds the request by the server's timeout.
type authInterceptor struct{ srv *Server }

func (a *authInterceptor) auth(ctx context.Context, h http.Header) (context.Context, context.CancelFunc, error) {
	v := h.Get("Authorization")
	token, ok := strings.CutPrefix(v, "Bearer ")
	if v == "" {
		return nil, nil, wire.NewError(connect.CodeUnauthenticated, `missing "Authorization: Bearer <token>" header`)
	}
	if !ok || token == "" {
		return nil, nil, wire.NewError(connect.CodeUnauthenticated, `the Authorization header must be "Bearer <token>"`)
	}
	t := authenticate(a.srv.tenants, token)
	if t < 0 {
		return nil, nil, wire.NewError(connect.CodeUnauthenticated, "the bearer token is not valid")
	}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, tenantKey{}, t), a.srv.timeout)
	return ctx, cancel, nil
}

func (a *authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, cancel, err := a.auth(ctx, req.Header())
		if err != nil {
			return nil, err
		}
		defer cancel()
		return next(ctx, req)
	}
}

func (a *authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a *authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, cancel, err := a.auth(ctx, conn.RequestHeader())
		if err != nil {
			return err
		}
		defer cancel()
		return next(ctx, conn)
	}
}
