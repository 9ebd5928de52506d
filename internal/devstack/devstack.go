// Package devstack runs a local development store in the process: an
// embedded single-member etcd and an S3 server (gofakes3 over a bbolt file)
// on 127.0.0.1, both keeping their data in one directory, so that a restart on
// the same directory finds every checkpoint and blob again. `cairn dev` and
// `cairnd --dev` run it; Env gives the CAIRN_ variables that point the cairn
// command, the sweeper and an application at it.
//
// Both servers run in the process, so nothing but the Go module has to be
// built or installed: versitygw (the integration tests' S3 server) would be a
// second binary to compile, and s3mem would lose the bucket at every stop.
// gofakes3 over bbolt keeps it in one file, and supports the conditional put
// (If-None-Match) the bucket package uses by default. A start on a directory
// that holds data takes about half a second (BenchmarkStart).
//
// The S3 server checks no credentials and no signature: it is for a
// developer's machine, never for anything reachable from elsewhere, which is
// why Start refuses addresses that are not loopback.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3bolt"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// What the stack serves. The credentials are fixed: the server accepts any.
const (
	Bucket          = "cairn"
	Region          = "us-east-1"
	Prefix          = "dev/"
	AccessKeyID     = "cairn-dev"
	SecretAccessKey = "cairn-dev-secret"
)

// The addresses `cairn dev` listens on unless told otherwise: etcd's usual
// client port, so that the sweeper's and etcdctl's defaults reach it, and the
// port local S3 servers usually take.
const (
	DefaultEtcdAddr = "127.0.0.1:2379"
	DefaultS3Addr   = "127.0.0.1:9000"
)

// ErrOptions is matched by the errors of Start about its Options.
var ErrOptions = errors.New("devstack: bad options")

// Options configure Start.
type Options struct {
	// Dir holds the data: etcd/ for etcd and s3.db for the bucket. It is
	// created when missing. Required.
	Dir string
	// EtcdAddr and S3Addr are the loopback host:port to listen on; ""
	// selects a free port on 127.0.0.1.
	EtcdAddr string
	S3Addr   string
	// NoFsync skips etcd's fsync, as tests do: data survives a clean Close
	// but not a power loss.
	NoFsync bool
	// EtcdQuotaBytes is etcd's space quota; 0 selects etcd's default.
	EtcdQuotaBytes int64
}

// Stack is a running development store. Its fields say how to reach it.
type Stack struct {
	// EtcdEndpoints are the etcd client addresses, host:port.
	EtcdEndpoints []string
	// S3 reaches the bucket, credentials included.
	S3 bucket.Config
	// Prefix is the etcdstore prefix the stack's Env selects.
	Prefix string
	// Dir is the data directory, absolute.
	Dir string
	// Took is how long Start took, both servers up.
	Took time.Duration

	etcd *embedetcd.Server
	db   *bolt.DB
	srv  *http.Server
	done chan error
}

// DefaultDir returns the data directory `cairn dev` uses without --data: cairn/dev
// under the user's cache directory.
func DefaultDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("devstack: no user cache directory (give a data directory): %w", err)
	}
	return filepath.Join(cache, "cairn", "dev"), nil
}

// Start starts etcd and the S3 server and returns once both serve, or with an
// error that names the address or file at fault, having stopped whatever it
// started. Errors about opts match ErrOptions; ctx bounds the start only.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	began := time.Now()
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: a data directory is required", ErrOptions)
	}
	for _, a := range []struct{ name, addr string }{{"etcd", opts.EtcdAddr}, {"S3", opts.S3Addr}} {
		if err := checkLoopback(a.addr); err != nil {
			return nil, fmt.Errorf("%w: %s address: %w", ErrOptions, a.name, err)
		}
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("devstack: data directory: %w", err)
	}
	if abs, err := filepath.Abs(opts.Dir); err == nil {
		opts.Dir = abs
	}
	s := &Stack{Dir: opts.Dir, Prefix: Prefix, done: make(chan error, 1)}

	// The bucket first: bbolt's file lock tells at once that another stack
	// runs on the directory, before etcd would wait for its own.
	dbPath := filepath.Join(opts.Dir, "s3.db")
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("devstack: %s is in use: is another cairn dev running on %s?", dbPath, opts.Dir)
		}
		return nil, fmt.Errorf("devstack: open %s: %w", dbPath, err)
	}
	s.db = db
	backend := s3bolt.New(db)
	exists, err := backend.BucketExists(Bucket)
	if err == nil && !exists {
		err = backend.CreateBucket(Bucket)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("devstack: create bucket %q in %s: %w", Bucket, dbPath, err)
	}
	s3Addr := opts.S3Addr
	if s3Addr == "" {
		s3Addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", s3Addr)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("devstack: S3 server: %w (choose another address)", err)
	}
	faker := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	s.srv = &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second}
	go func() { s.done <- s.srv.Serve(ln) }()
	s.S3 = bucket.Config{
		Endpoint:        "http://" + ln.Addr().String(),
		Region:          Region,
		Bucket:          Bucket,
		PathStyle:       true,
		AccessKeyID:     AccessKeyID,
		SecretAccessKey: SecretAccessKey,
	}

	etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: filepath.Join(opts.Dir, "etcd"), NoFsync: opts.NoFsync, ClientAddr: opts.EtcdAddr,
		QuotaBackendBytes: opts.EtcdQuotaBytes})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("devstack: etcd on %s: %w", orFree(opts.EtcdAddr), err)
	}
	s.etcd = etcd
	s.EtcdEndpoints = etcd.Endpoints()
	s.Took = time.Since(began)
	return s, nil
}

// orFree names an address for a message.
func orFree(addr string) string {
	if addr == "" {
		return "a free port of 127.0.0.1"
	}
	return addr
}

// checkLoopback accepts "" and a host:port whose host is a loopback IP or
// localhost.
func checkLoopback(addr string) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" {
		return fmt.Errorf("%q is not on a loopback address such as 127.0.0.1 (the dev S3 server checks no credentials)", addr)
	}
	return nil
}

// Env returns the CAIRN_ variables, as NAME=value, that point the cairn
// command, the sweeper and an application at the stack.
func (s *Stack) Env() []string {
	return env(strings.Join(s.EtcdEndpoints, ","), s.S3.Endpoint)
}

// EnvFor returns what Env would return for a stack started with these
// addresses, which must name a port: the variables of a running stack for
// another shell. It returns an error matching ErrOptions for an address that
// Start would refuse or that leaves the port to choose.
func EnvFor(etcdAddr, s3Addr string) ([]string, error) {
	for _, a := range []struct{ name, addr string }{{"etcd", etcdAddr}, {"S3", s3Addr}} {
		err := checkLoopback(a.addr)
		if err == nil {
			if _, port, _ := net.SplitHostPort(a.addr); port == "" || port == "0" {
				err = fmt.Errorf("%q leaves the port to choose, so only the running stack knows it", a.addr)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s address: %w", ErrOptions, a.name, err)
		}
	}
	return env(etcdAddr, "http://"+s3Addr), nil
}

func env(etcdEndpoints, s3Endpoint string) []string {
	return []string{
		cli.EnvName("etcd-endpoints") + "=" + etcdEndpoints,
		cli.EnvName("prefix") + "=" + Prefix,
		cli.EnvName("s3-endpoint") + "=" + s3Endpoint,
		cli.EnvName("s3-bucket") + "=" + Bucket,
		cli.EnvName("s3-region") + "=" + Region,
		cli.EnvName("s3-path-style") + "=true",
		cli.EnvS3AccessKeyID + "=" + AccessKeyID,
		cli.EnvS3SecretAccessKey + "=" + SecretAccessKey,
	}
}

// Close stops both servers and waits for them, then closes the data files.
// Data written before Close is on disk when it returns. It returns the first
// error of a server that had failed while running.
func (s *Stack) Close() error {
	var errs []error
	if s.etcd != nil {
		s.etcd.Close()
		s.etcd = nil
	}
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.srv.Shutdown(ctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("devstack: stop the S3 server: %w", err))
			_ = s.srv.Close()
		}
		if err := <-s.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("devstack: S3 server: %w", err))
		}
		s.srv = nil
	}
	if s.db != nil {
		if err := s.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("devstack: close %s: %w", s.db.Path(), err))
		}
		s.db = nil
	}
	return errors.Join(errs...)
}
