// Package versitygw runs the versitygw S3 server, with its posix backend, as
// a local process on 127.0.0.1: for the tests, the quickstart and the
// benchmarks. It finds the pinned binary, or builds it with go install, starts
// it on a free port, waits until it answers and creates a bucket.
package versitygw

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnstore/cairn/internal/childproc"
)

// Version is the versitygw release cairn runs, as pinned in the Makefile.
const Version = "v1.8.0"

// module is the command go install builds.
const module = "github.com/versity/versitygw/cmd/versitygw"

// EnvBinary names an environment variable that, when set, is the path of the
// versitygw binary to run.
const EnvBinary = "CAIRN_VERSITYGW"

const (
	readyTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
	startTries   = 3
)

// Config says how to run a server.
type Config struct {
	// Binary is the versitygw binary; "" runs FindOrBuild's.
	Binary string
	// Dir holds the server's data; required.
	Dir string
	// Bucket is created once the server answers.
	Bucket string
	// Region and the static credentials the server accepts.
	Region, AccessKeyID, SecretAccessKey string
}

// Server is a running versitygw.
type Server struct {
	Endpoint string // http://127.0.0.1:port
	// Root is the posix backend's directory: the bucket is the directory
	// Root/Bucket, and an object the file of its key below it.
	Root                         string
	Bucket, Region               string
	AccessKeyID, SecretAccessKey string
	proc                         *process
}

// Start starts a server as cfg says, on a free loopback port, and creates the
// bucket. It tries other ports if the one it picked was taken meanwhile. ctx
// bounds the start only; Close stops the server.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	bin := cfg.Binary
	if bin == "" {
		var err error
		if bin, err = FindOrBuild(); err != nil {
			return nil, err
		}
	}
	root := filepath.Join(cfg.Dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	// Keep-alive, as S3 and R2 keep connections open: without it versitygw
	// closes each connection after one response, and every request of a
	// client pays a new TCP connection.
	args := []string{"--access", cfg.AccessKeyID, "--secret", cfg.SecretAccessKey, "--region", cfg.Region, "--quiet", "--keep-alive"}
	backend := []string{"posix"}
	if !supportsUserXattrs(cfg.Dir) {
		// The posix backend keeps metadata in extended attributes; without
		// them it needs a sidecar directory.
		meta := filepath.Join(cfg.Dir, "meta")
		if err := os.MkdirAll(meta, 0o755); err != nil {
			return nil, err
		}
		backend = append(backend, "--sidecar", meta)
	}
	backend = append(backend, root)
	var lastErr error
	for range startTries {
		addr, err := freeAddr()
		if err != nil {
			return nil, fmt.Errorf("versitygw: find a free port: %w", err)
		}
		p, err := startProcess(bin, append(append(append([]string{}, args...), "--port", addr), backend...))
		if err != nil {
			return nil, fmt.Errorf("versitygw: start %s: %w", bin, err)
		}
		srv := &Server{Endpoint: "http://" + addr, Root: root, Bucket: cfg.Bucket, Region: cfg.Region,
			AccessKeyID: cfg.AccessKeyID, SecretAccessKey: cfg.SecretAccessKey, proc: p}
		if err := p.waitReady(ctx, srv.Endpoint); err != nil {
			p.stop()
			if ctx.Err() != nil {
				return nil, err
			}
			lastErr = err
			continue // most likely the port was taken in between; try another
		}
		if err := srv.createBucket(ctx); err != nil {
			p.stop()
			return nil, fmt.Errorf("versitygw: create bucket %q: %w\nserver output:\n%s", cfg.Bucket, err, p.output())
		}
		return srv, nil
	}
	return nil, fmt.Errorf("versitygw: did not start after %d tries: %w", startTries, lastErr)
}

// Close stops the server, politely first, and waits for it. It is
// idempotent.
func (s *Server) Close() { s.proc.stop() }

// PID returns the server's process id.
func (s *Server) PID() int { return s.proc.cmd.Process.Pid }

// Output returns what the server has printed so far.
func (s *Server) Output() string { return s.proc.output() }

func (s *Server) createBucket(ctx context.Context) error {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := s3.New(s3.Options{
		BaseEndpoint:               aws.String(s.Endpoint),
		Region:                     s.Region,
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKeyID, s.SecretAccessKey, ""),
		HTTPClient:                 &http.Client{Transport: tr},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)})
	return err
}

// process is a running server process.
type process struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, set before done is closed

	stopOnce sync.Once
}

func startProcess(bin string, args []string) (*process, error) {
	out := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := childproc.Start(cmd); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) stop() {
	p.stopOnce.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

func (p *process) output() string { return p.out.String() }

// waitReady polls endpoint until the server answers any HTTP request, the
// process exits, ctx ends or readyTimeout passes.
func (p *process) waitReady(ctx context.Context, endpoint string) error {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("versitygw exited before it was ready (%v); output:\n%s", p.err, p.output())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := client.Get(endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw did not answer at %s within %v: %v; output:\n%s", endpoint, readyTimeout, err, p.output())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// Find returns the versitygw binary without building it: $CAIRN_VERSITYGW,
// then ./bin/versitygw at the module root above the working directory (make
// tools builds it), then $PATH, then an earlier FindOrBuild's copy in the
// user cache directory.
func Find() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBinary, p, err)
		}
		return p, nil
	}
	if root, err := moduleRoot(); err == nil {
		if p := filepath.Join(root, "bin", "versitygw"); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	if p := cachedBinary(); isExecutable(p) {
		return p, nil
	}
	return "", fmt.Errorf("no versitygw binary: run `make tools`, or set %s", EnvBinary)
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// FindOrBuild returns Find's binary or, when there is none, installs the
// pinned versitygw with go install into the user cache directory, once per
// process.
func FindOrBuild() (string, error) {
	if p, err := Find(); err == nil {
		return p, nil
	}
	buildOnce.Do(func() { buildPath, buildErr = build() })
	return buildPath, buildErr
}

func cachedBinary() string {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "cairn", "versitygw-"+Version, "versitygw")
}

// build installs the pinned versitygw next to cachedBinary. Concurrent
// processes may build at the same time; each installs into a directory of its
// own and renames the binary into place, so none sees a half-written file.
func build() (string, error) {
	final := cachedBinary()
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("cannot build versitygw: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "install", module+"@"+Version)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w\n%s", module, Version, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, "versitygw"), final); err != nil {
		return "", err
	}
	return final, nil
}

// moduleRoot returns the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// syncBuffer collects a process's output for error messages.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(b.buf.String())
}
