// Package cairnd is the cairnd command: it parses the flags (through
// internal/cli, the etcd and S3 flags shared with the sweeper), connects to
// etcd and the bucket, serves internal/server over HTTP or HTTPS, and drains
// on SIGTERM.
package cairnd

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/buildinfo"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/internal/console"
	"github.com/cairnstore/cairn/internal/devstack"
	"github.com/cairnstore/cairn/internal/server"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// Env is what Main needs from its process.
type Env struct {
	// Args are the command-line arguments, without the program name.
	Args []string
	// Getenv reads the environment; nil reads none.
	Getenv func(string) string
	// Stderr receives the logs and the usage messages; Stdout what
	// hash-token prints.
	Stderr, Stdout io.Writer
	// Signals delivers SIGTERM and SIGINT: the first drains (requests in
	// flight finish, new ones are refused), a second one or the shutdown
	// timeout ends the requests still running.
	Signals <-chan os.Signal
	// Listening, when set, is called with the address once the server
	// listens.
	Listening func(addr string)
}

// Config is cairnd's configuration.
type Config struct {
	Etcd            cli.Etcd
	S3              bucket.Config
	Listen          string
	TokensFile      string
	Tokens          string
	TLSCert         string
	TLSKey          string
	TLSClientCA     string
	RequestTimeout  time.Duration
	MaxRequestBytes int
	ShutdownTimeout time.Duration
	ProbeTimeout    time.Duration
	TestClock       bool
	ServeCollector  bool
	// LocalReads is etcdstore.Options.LocalReads for every tenant.
	LocalReads   bool
	Dev          bool
	DevData      string
	DevEtcdQuota int64
	LogFormat    string
	LogLevel     slog.Level

	set *cli.Set
}

// LogValue is the effective configuration with its sources, secrets
// redacted.
func (c Config) LogValue() slog.Value { return c.set.LogValue() }

// Parse reads the flags, then the CAIRN_ variables.
func Parse(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	c := Config{
		Etcd: cli.DefaultEtcd(), Listen: "127.0.0.1:8080",
		RequestTimeout: server.DefaultRequestTimeout, MaxRequestBytes: server.DefaultMaxRequestBytes,
		ShutdownTimeout: 30 * time.Second, ProbeTimeout: 10 * time.Second,
		LogFormat: "text", LogLevel: slog.LevelInfo,
	}
	s := cli.NewSet("cairnd", out)
	c.set = s
	c.Etcd.Register(s)
	cli.RegisterS3(s, &c.S3)
	s.StringVar(&c.Listen, "listen", c.Listen, "address to serve the API, /healthz, /readyz and /metrics on")
	s.StringVar(&c.TokensFile, "tokens-file", c.TokensFile, `file of tenants, one a line: "<name> <prefix> sha256:<hex of the token's SHA-256>" (cairnd hash-token prints it)`)
	s.StringVar(&c.Tokens, "tokens", c.Tokens, "the tenant list itself, lines separated by newlines or ';' (prefer --tokens-file)")
	s.Secret("tokens")
	s.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM certificate to serve HTTPS with (with --tls-key)")
	s.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM key of --tls-cert")
	s.StringVar(&c.TLSClientCA, "tls-client-ca", c.TLSClientCA, "PEM CA bundle: when set, every client must present a certificate it signed")
	s.Var(cli.Duration{D: &c.RequestTimeout}, "request-timeout", "deadline of every request (a client's shorter deadline wins)")
	s.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "largest request message of the procedures that carry a checkpoint, a transcript or blob keys (the others take at most 64 KiB); the default admits the largest checkpoint etcdstore accepts")
	s.Var(cli.Duration{D: &c.ShutdownTimeout}, "shutdown-timeout", "how long SIGTERM waits for the requests in flight")
	s.Var(cli.Duration{D: &c.ProbeTimeout}, "probe-timeout", "deadline of the start-up checks of etcd and the bucket")
	s.BoolVar(&c.TestClock, "test-clock", c.TestClock, "serve TestClockService: sessions whose clock the client sets (for conformance suites; never in production)")
	s.BoolVar(&c.ServeCollector, "serve-collector", c.ServeCollector, "serve BlobCollectorService, the sweeper's side of the online sweep")
	s.BoolVar(&c.LocalReads, "local-reads", c.LocalReads, "answer Get from the etcd member(s) of --etcd-endpoints without a round trip to the leader when they hold the checkpoint; deletions then wait for every member (docs/regions.md)")
	s.BoolVar(&c.Dev, "dev", c.Dev, "run on an embedded etcd and a local S3 server (internal/devstack) on loopback; prints a token when none is given")
	s.StringVar(&c.DevData, "dev-data", c.DevData, "data directory of --dev (default: a new temporary directory, deleted at exit)")
	s.Int64Var(&c.DevEtcdQuota, "dev-etcd-quota", c.DevEtcdQuota, "space quota in bytes of --dev's etcd (0: etcd's default, 2 GiB); a small one lets tests meet etcd's NOSPACE alarm")
	s.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text or json")
	s.Var(cli.Level{L: &c.LogLevel}, "log-level", "debug, info, warn or error")
	s.Usage = func() {
		fmt.Fprintf(out, `Usage: cairnd --tokens-file=FILE [flags]
       cairnd --dev [flags]
       cairnd hash-token TOKEN

Serves the checkpoint store contract over Connect, one store per tenant.
Every flag falls back to an environment variable: --etcd-endpoints to %s,
and so on.

Flags:
`, cli.EnvName("etcd-endpoints"))
		s.PrintFlags(out)
	}
	if err := s.Parse(args, getenv); err != nil {
		return c, err
	}
	if s.NArg() > 0 {
		return c, cli.Usagef("unexpected arguments %q", s.Args())
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return c, cli.Usagef("--log-format must be text or json, not %q", c.LogFormat)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return c, cli.Usagef("--tls-cert and --tls-key go together")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		return c, cli.Usagef("--tls-client-ca needs --tls-cert and --tls-key")
	}
	if c.TokensFile != "" && c.Tokens != "" {
		return c, cli.Usagef("give --tokens-file or --tokens (%s), not both", cli.EnvName("tokens"))
	}
	if c.DevEtcdQuota < 0 || c.DevEtcdQuota > 0 && !c.Dev {
		return c, cli.Usagef("--dev-etcd-quota must be 0 or more, and goes with --dev only")
	}
	if !c.Dev && c.TokensFile == "" && c.Tokens == "" {
		return c, cli.Usagef("--tokens-file (or %s, or --tokens) is required: the tenants and their tokens", cli.EnvName("tokens-file"))
	}
	if c.MaxRequestBytes <= 0 {
		return c, cli.Usagef("--max-request-bytes must be positive")
	}
	if c.Dev {
		return c, nil
	}
	if err := c.Etcd.Resolve(); err != nil {
		return c, err
	}
	if err := c.Etcd.Validate(); err != nil {
		return c, err
	}
	cli.S3Credentials(getenv, &c.S3)
	if c.S3.Bucket != "" {
		if err := cli.ValidateS3(c.S3); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Tenants reads the tenant list of the configuration.
func (c Config) Tenants() ([]server.Tenant, error) {
	switch {
	case c.TokensFile != "":
		f, err := os.Open(c.TokensFile)
		if err != nil {
			return nil, fmt.Errorf("--tokens-file: %w", err)
		}
		defer f.Close()
		ts, err := server.ParseTokens(f)
		if err != nil {
			return nil, fmt.Errorf("--tokens-file %s: %w", c.TokensFile, err)
		}
		return ts, nil
	default:
		ts, err := server.ParseTokens(strings.NewReader(strings.ReplaceAll(c.Tokens, ";", "\n")))
		if err != nil {
			return nil, fmt.Errorf("--tokens: %w", err)
		}
		return ts, nil
	}
}

// Main runs cairnd and returns its exit code. "cairnd hash-token <token>"
// prints the form of a token that a token list keeps instead.
func Main(e Env) int {
	if e.Stderr == nil {
		e.Stderr = io.Discard
	}
	if e.Stdout == nil {
		e.Stdout = io.Discard
	}
	if e.Getenv == nil {
		e.Getenv = func(string) string { return "" }
	}
	if len(e.Args) > 0 && e.Args[0] == "hash-token" {
		return hashToken(e)
	}
	cfg, err := Parse(e.Args, e.Getenv, e.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(e.Stderr, "cairnd: %v\nRun cairnd --help to see the flags.\n", err)
		return ExitUsage
	}
	log := cli.NewLogger(e.Stderr, cfg.LogFormat, cfg.LogLevel)
	log.Info("cairnd starting", "settings", cfg)
	if err := run(cfg, log, e); err != nil {
		log.Error("cairnd stopped", "error", err)
		return ExitFailure
	}
	return ExitOK
}

// hashToken prints the stored form of the token given as the argument of
// "cairnd hash-token", or of CAIRN_TOKEN when there is none, so that a
// token list can hold hashes only.
func hashToken(e Env) int {
	token := e.Getenv("CAIRN_TOKEN")
	if len(e.Args) == 2 {
		token = e.Args[1]
	}
	if token == "" || len(e.Args) > 2 {
		fmt.Fprintln(e.Stderr, "usage: cairnd hash-token <token>   (or CAIRN_TOKEN=<token> cairnd hash-token)")
		return ExitUsage
	}
	fmt.Fprintln(e.Stdout, server.HashToken(token))
	return ExitOK
}

// run starts everything, serves until a signal, and drains.
func run(cfg Config, log *slog.Logger, e Env) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ProbeTimeout+cfg.Etcd.DialTimeout)
	defer cancel()
	var tenants []server.Tenant
	if cfg.TokensFile != "" || cfg.Tokens != "" {
		ts, err := cfg.Tenants()
		if err != nil {
			return err
		}
		tenants = ts
	}
	if cfg.Dev {
		dir, cleanup, err := devDir(cfg.DevData)
		if err != nil {
			return err
		}
		defer cleanup()
		stack, err := devstack.Start(ctx, devstack.Options{Dir: dir, EtcdQuotaBytes: cfg.DevEtcdQuota})
		if err != nil {
			return fmt.Errorf("--dev: %w", err)
		}
		defer stack.Close()
		cfg.Etcd.Endpoints, cfg.S3 = stack.EtcdEndpoints, stack.S3
		log.Info("--dev: embedded etcd and local S3 started", "etcd", strings.Join(stack.EtcdEndpoints, ","),
			"s3", stack.S3.Endpoint, "bucket", stack.S3.Bucket, "data", dir)
		if tenants == nil {
			token := rand.Text()
			tenants = []server.Tenant{server.NewTenant("dev", stack.Prefix, token)}
			log.Warn("--dev: serving one tenant; pass this bearer token", "tenant", "dev", "prefix", stack.Prefix, "token", token)
		}
	}
	client, err := cli.ConnectEtcd(ctx, cfg.Etcd, tenants[0].Prefix, cfg.ProbeTimeout)
	if err != nil {
		return err
	}
	defer client.Close()
	opts := etcdstore.Options{Logger: log, LocalReads: cfg.LocalReads}
	var consoleBlobs console.Bucket
	if cfg.S3.Bucket != "" {
		blobs, err := cli.OpenBucket(ctx, cfg.S3, cfg.ProbeTimeout)
		if err != nil {
			return err
		}
		defer blobs.Close()
		opts.Objects = blobs
		consoleBlobs = blobs
		if err := bindTenants(ctx, client, tenants, blobs, cfg.ProbeTimeout, log); err != nil {
			return err
		}
	} else {
		log.Warn("no --s3-bucket: checkpoints are kept in etcd only (version 1); a store that holds version-2 checkpoints cannot be read without the bucket")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.Collector("cairnd"))
	srv, err := server.New(server.Config{
		Client: client, Tenants: tenants, Store: opts, Logger: log,
		RequestTimeout: cfg.RequestTimeout, MaxRequestBytes: cfg.MaxRequestBytes,
		TestClock: cfg.TestClock, ServeCollector: cfg.ServeCollector, Registerer: reg,
	})
	if err != nil {
		return err
	}
	if cfg.TestClock {
		log.Warn("--test-clock: clients may open sessions whose clock they set; never use this in production")
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := srv.Close(cctx); err != nil {
			log.Warn("closing the stores", "error", err)
		}
	}()
	con, err := newConsole(srv, consoleBlobs, log)
	if err != nil {
		return err
	}
	defer con.Close()
	return serve(cfg, log, e, srv, con)
}

// newConsole returns the read-only web console over the server's tenants
// and stores.
func newConsole(srv *server.Server, blobs console.Bucket, log *slog.Logger) (*console.Console, error) {
	stores := make([]*etcdstore.Store, len(srv.Tenants()))
	for i := range stores {
		stores[i] = srv.Store(i)
	}
	return console.New(console.Config{Client: srv.Client(), Tenants: srv.Tenants(), Stores: stores, Blobs: blobs, Logger: log})
}

// Handler returns the handler cairnd serves: the console under
// console.Prefix, the server's API and probes everywhere else.
func Handler(srv *server.Server, con *console.Console) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, con.Handler())
	mux.Handle("/", srv.Handler())
	return mux
}

// devDir returns the data directory of --dev and what removes it at exit.
func devDir(dir string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", "cairnd-dev-")
	if err != nil {
		return "", nil, fmt.Errorf("--dev: %w", err)
	}
	return d, func() { _ = os.RemoveAll(d) }, nil
}

// serve listens and serves until the first signal, then drains: /readyz
// fails, the listener closes, and the requests in flight finish within the
// shutdown timeout (or until a second signal).
func serve(cfg Config, log *slog.Logger, e Env, srv *server.Server, con *console.Console) error {
	hs := &http.Server{
		Handler:           Handler(srv, con),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", cfg.Listen, err)
	}
	scheme := "http"
	serveOn := hs.Serve
	if cfg.TLSCert != "" {
		tc, err := tlsConfig(cfg)
		if err != nil {
			_ = l.Close()
			return err
		}
		hs.TLSConfig = tc
		scheme = "https"
		serveOn = func(l net.Listener) error { return hs.ServeTLS(l, "", "") }
	} else {
		// Plain HTTP/2 (h2c, with prior knowledge) too, for gRPC clients
		// without TLS.
		hs.Protocols = new(http.Protocols)
		hs.Protocols.SetHTTP1(true)
		hs.Protocols.SetUnencryptedHTTP2(true)
	}
	done := make(chan error, 1)
	go func() { done <- serveOn(l) }()
	log.Info("serving the Connect API, /healthz, /readyz, /metrics and the console", "address", scheme+"://"+l.Addr().String(),
		"console", scheme+"://"+l.Addr().String()+console.Prefix,
		"tenants", len(srv.Tenants()), "client_certificates", cfg.TLSClientCA != "")
	if e.Listening != nil {
		e.Listening(l.Addr().String())
	}
	select {
	case err := <-done:
		return fmt.Errorf("serving: %w", err)
	case sig := <-e.Signals:
		log.Warn("signal received: draining (requests in flight finish, new ones are refused); a second signal ends them",
			"signal", sig.String(), "shutdown_timeout", cfg.ShutdownTimeout.String())
	}
	srv.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	go func() {
		select {
		case <-e.Signals:
			log.Error("second signal: ending the requests in flight")
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := hs.Shutdown(ctx); err != nil {
		_ = hs.Close()
		log.Warn("drain cut short; requests in flight were ended", "error", err)
		return nil
	}
	log.Info("drained: every request in flight finished")
	return nil
}

func tlsConfig(cfg Config) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-client-ca %s: no PEM certificate in it", cfg.TLSClientCA)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// bindTenants binds every tenant's store to the bucket before cairnd serves
// (bucket.BindStore): clients that claim through cairnd upload blobs to the
// bucket themselves, so the bucket must name each tenant's prefix before the
// first claim. A sweeper that does not cover every tenant then refuses
// (docs/shared-buckets.md). It waits, within timeout, for a running sweep
// that does not cover a tenant to finish.
func bindTenants(ctx context.Context, client *clientv3.Client, tenants []server.Tenant, blobs bucket.Binder, timeout time.Duration, log *slog.Logger) error {
	for _, t := range tenants {
		st, err := etcdstore.New(client, t.Prefix, etcdstore.Options{Logger: log})
		if err != nil {
			return err
		}
		bctx, cancel := context.WithTimeout(ctx, timeout)
		err = bucket.BindStore(bctx, st, blobs)
		cancel()
		st.Close()
		if err != nil {
			return fmt.Errorf("bind tenant %q (prefix %q) to the bucket: %w", t.Name, t.Prefix, err)
		}
	}
	log.Info("tenants bound to the bucket", "tenants", len(tenants))
	return nil
}
