package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/keys"
)

// Env is what Main needs from its process.
type Env struct {
	// Args are the command-line arguments, without the program name.
	Args []string
	// Getenv reads the environment; nil reads none.
	Getenv func(string) string
	// Stderr receives the logs and the usage messages.
	Stderr io.Writer
	// Signals delivers SIGTERM and SIGINT. The first one stops the sweeper at
	// the next safe point; the second one stops it at once.
	Signals <-chan os.Signal
	// Exit, when set, is called with ExitInterrupted on the second signal (the
	// command passes os.Exit). When nil, the second signal cancels every
	// request in flight and Main returns ExitInterrupted.
	Exit func(code int)
	// Listening, when set, is called with the HTTP address once --listen
	// serves.
	Listening func(addr string)
}

// Main runs the sweeper and returns its exit code.
func Main(e Env) int {
	if e.Stderr == nil {
		e.Stderr = io.Discard
	}
	cfg, err := Parse(e.Args, e.Getenv, e.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(e.Stderr, "sweeper: %v\nRun sweeper --help to see the flags.\n", err)
		return ExitUsage
	}
	log := NewLogger(e.Stderr, cfg.LogFormat, cfg.LogLevel)
	log.Info("sweeper starting", "settings", cfg)

	// stop ends at the first signal, hard at the second one or when the
	// shutdown timeout runs out after the first.
	hard, cancelHard := context.WithCancel(context.Background())
	defer cancelHard()
	stop, cancelStop := context.WithCancel(hard)
	defer cancelStop()
	h := &health{}
	h.setReady(false, "starting")
	var forced atomic.Bool
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		var sig os.Signal
		select {
		case sig = <-e.Signals:
		case <-quit:
			return
		}
		log.Warn("signal received: finishing the delete batch in flight, then exiting; a second signal exits at once",
			"signal", sig.String(), "shutdown_timeout", cfg.ShutdownTimeout.String())
		h.setReady(false, "stopping")
		cancelStop()
		timer := time.NewTimer(cfg.ShutdownTimeout)
		defer timer.Stop()
		select {
		case sig = <-e.Signals:
			log.Error("second signal: exiting at once", "signal", sig.String())
			forced.Store(true)
			if e.Exit != nil {
				e.Exit(ExitInterrupted)
			}
		case <-timer.C:
			log.Error("the shutdown timeout ran out: abandoning the requests in flight", "shutdown_timeout", cfg.ShutdownTimeout.String())
		case <-quit:
			return
		}
		cancelHard()
	}()

	code := run(hard, stop, cfg, log, h, e.Listening)
	if forced.Load() {
		return ExitInterrupted
	}
	return code
}

// run connects, checks and runs in the configured mode.
func run(hard, stop context.Context, cfg Config, log *slog.Logger, h *health, listening func(string)) int {
	metrics := NewMetrics(cfg.DryRun)
	if cfg.Listen != "" {
		srv, err := serveHTTP(cfg.Listen, h.handler(metrics), log)
		if err != nil {
			log.Error("cannot serve HTTP", "error", err)
			return ExitFailure
		}
		defer srv.shutdown()
		log.Info("serving /metrics, /healthz and /readyz", "address", srv.addr.String())
		if listening != nil {
			listening(srv.addr.String())
		}
	}
	failed := func(msg string, err error) int {
		if stop.Err() != nil {
			log.Warn("interrupted during start-up", "error", err)
			return ExitInterrupted
		}
		log.Error(msg, "error", err)
		return ExitFailure
	}

	client, err := ConnectEtcd(stop, cfg)
	if err != nil {
		return failed("etcd check failed; nothing was done", err)
	}
	defer client.Close()
	log.Info("etcd answers", "endpoints", strings.Join(cfg.EtcdEndpoints, ","))

	blobs, err := OpenBucket(stop, cfg)
	if err != nil {
		return failed("bucket check failed; nothing was done", err)
	}
	defer blobs.Close()
	log.Info("bucket answers", "bucket", cfg.S3.Bucket, "endpoint", redactURLs(cfg.S3.Endpoint))

	// The bucket also holds the bodies of version-2 checkpoints, which the
	// sweep must read to count their references and keep their objects.
	store, err := etcdstore.New(client, cfg.Prefix, etcdstore.Options{Logger: log, Objects: blobs})
	if err != nil {
		return failed("cannot open the store", err)
	}
	defer store.Close()
	sw := NewSweeper(client, store, blobs, RunOptions{
		Keep:            cfg.Keep,
		OlderThan:       cfg.OlderThan,
		DryRun:          cfg.DryRun,
		MaxDeletes:      cfg.MaxDeletes,
		BatchSize:       cfg.BatchSize,
		Verify:          cfg.Verify,
		Repair:          cfg.Repair,
		AllowEmptyStore: cfg.AllowEmptyStore,
		LockTTL:         cfg.LockTTL,
		RequestTimeout:  cfg.EtcdRequestTimeout,
	}, log, metrics)
	defer sw.Close()
	h.setReady(true, "")

	if cfg.Once {
		_, err := sw.Run(hard, stop, LockMode{Timeout: cfg.LockTimeout})
		code := ExitCode(err)
		log.Info("sweeper exiting", "exit_code", code)
		return code
	}
	for {
		_, _ = sw.Run(hard, stop, LockMode{Wait: true})
		if stop.Err() != nil {
			break
		}
		log.Debug("next run scheduled", "in", cfg.Interval.String())
		timer := time.NewTimer(cfg.Interval)
		select {
		case <-stop.Done():
			timer.Stop()
		case <-timer.C:
		}
		if stop.Err() != nil {
			break
		}
	}
	log.Info("sweeper stopped", "exit_code", ExitOK)
	return ExitOK
}

// NewLogger returns the sweeper's logger: JSON or text records at level and
// above, to w.
func NewLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// ConnectEtcd returns a client of the configured etcd, after checking within
// --probe-timeout that etcd answers a read under the prefix. Its errors say
// whether etcd is unreachable, rejected the credentials, or refused the read.
func ConnectEtcd(ctx context.Context, cfg Config) (*clientv3.Client, error) {
	cc := clientv3.Config{
		Endpoints:   cfg.EtcdEndpoints,
		DialTimeout: cfg.EtcdDialTimeout,
		Username:    cfg.EtcdUser,
		Password:    cfg.EtcdPassword,
		Logger:      zap.NewNop(),
	}
	if cfg.EtcdCACert != "" || cfg.EtcdCert != "" {
		tlsInfo := transport.TLSInfo{CertFile: cfg.EtcdCert, KeyFile: cfg.EtcdKey, TrustedCAFile: cfg.EtcdCACert}
		tc, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd TLS settings (--etcd-cacert, --etcd-cert, --etcd-key): %w", err)
		}
		cc.TLS = tc
	}
	where := strings.Join(cfg.EtcdEndpoints, ",")
	client, err := clientv3.New(cc)
	if err != nil {
		return nil, describeEtcdError(err, where, cfg)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.ProbeTimeout)
	defer cancel()
	root := keys.NewLayout(cfg.Prefix).Root()
	_, err = client.Get(pctx, string(root), clientv3.WithRange(string(keys.PrefixEnd(root))), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil {
		client.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, describeEtcdError(err, where, cfg)
	}
	return client, nil
}

// describeEtcdError says what a failed connection or probe means.
func describeEtcdError(err error, where string, cfg Config) error {
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrInvalidAuthToken), errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("etcd at %s rejected the user name or password (--etcd-user %q): %w", where, cfg.EtcdUser, err)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("etcd user %q may not read the keys of --prefix %q at %s: %w", cfg.EtcdUser, cfg.Prefix, where, err)
	case errors.Is(err, rpctypes.ErrAuthNotEnabled):
		return fmt.Errorf("etcd at %s has authentication off: drop --etcd-user: %w", where, err)
	case errors.Is(err, context.DeadlineExceeded), status.Code(err) == codes.DeadlineExceeded, status.Code(err) == codes.Unavailable:
		return fmt.Errorf("cannot reach etcd at %s within %v (is it running, and are --etcd-endpoints and the TLS settings right?): %w",
			where, cfg.ProbeTimeout, err)
	}
	return fmt.Errorf("etcd at %s: %w", where, err)
}

// OpenBucket returns the configured bucket, after checking within
// --probe-timeout that the bucket exists and the credentials may list it.
// Its errors say which of these failed, or that the endpoint is unreachable.
func OpenBucket(ctx context.Context, cfg Config) (*bucket.S3, error) {
	pctx, cancel := context.WithTimeout(ctx, cfg.ProbeTimeout)
	defer cancel()
	b, err := bucket.NewS3(pctx, cfg.S3)
	if err != nil {
		return nil, err
	}
	if err := b.Probe(pctx); err != nil {
		b.Close()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, fmt.Errorf("bucket %q at %s did not answer within %v: %w", cfg.S3.Bucket, redactURLs(cfg.S3.Endpoint), cfg.ProbeTimeout, err)
		}
		return nil, err
	}
	return b, nil
}
