package s3test

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
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// VersityGWVersion is the versitygw release the tests run, as pinned in the
// Makefile.
const VersityGWVersion = "v1.8.0"

// versityGWModule is the command go install builds.
const versityGWModule = "github.com/versity/versitygw/cmd/versitygw"

// EnvVersityGW names an environment variable that, when set, is the path of
// the versitygw binary to run.
const EnvVersityGW = "CAIRN_VERSITYGW"

const (
	readyTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
	startTries   = 3
)

// StartVersityGW starts a versitygw server with the posix backend on
// 127.0.0.1, on a free port and in a temporary directory, creates the bucket
// BucketName and stops the server in t.Cleanup. It finds the binary through
// $CAIRN_VERSITYGW, then ./bin/versitygw at the module root (make tools
// builds it), then $PATH, and otherwise builds the pinned version with go
// install into the user cache directory. When no binary can be found or built,
// or the server does not start, the test fails; it is never skipped.
func StartVersityGW(t testing.TB) *Server {
	t.Helper()
	bin, err := versityGWBinary()
	if err != nil {
		t.Fatalf("s3test: no versitygw binary: %v (run `make tools`, or set %s)", err, EnvVersityGW)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatalf("s3test: %v", err)
	}
	args := []string{"--access", AccessKeyID, "--secret", SecretAccessKey, "--region", Region, "--quiet"}
	backend := []string{"posix"}
	if !supportsUserXattrs(dir) {
		// The posix backend keeps metadata in extended attributes; without
		// them it needs a sidecar directory.
		meta := filepath.Join(dir, "meta")
		if err := os.Mkdir(meta, 0o755); err != nil {
			t.Fatalf("s3test: %v", err)
		}
		backend = append(backend, "--sidecar", meta)
	}
	backend = append(backend, root)

	var lastErr error
	for try := 0; try < startTries; try++ {
		addr, err := freeAddr()
		if err != nil {
			t.Fatalf("s3test: find a free port: %v", err)
		}
		p, err := startProcess(bin, append(append(append([]string{}, args...), "--port", addr), backend...))
		if err != nil {
			t.Fatalf("s3test: start %s: %v", bin, err)
		}
		t.Cleanup(p.stop)
		endpoint := "http://" + addr
		if err := p.waitReady(endpoint); err != nil {
			p.stop()
			lastErr = err
			continue // most likely the port was taken in between; try another
		}
		srv := &Server{Endpoint: endpoint, Region: Region, Bucket: BucketName, AccessKeyID: AccessKeyID, SecretAccessKey: SecretAccessKey, pid: p.cmd.Process.Pid}
		if err := createBucket(t.Context(), srv); err != nil {
			t.Fatalf("s3test: create bucket %q on versitygw: %v\nserver output:\n%s", BucketName, err, p.output())
		}
		return srv
	}
	t.Fatalf("s3test: versitygw did not start after %d tries: %v", startTries, lastErr)
	return nil
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
	cmd.Stdout = out
	cmd.Stderr = out
	// Kill the server if the test binary dies without running its cleanups.
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop ends the process, politely first, and waits for it. It is idempotent.
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
// process exits, or readyTimeout passes.
func (p *process) waitReady(endpoint string) error {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("versitygw exited before it was ready (%v); output:\n%s", p.err, p.output())
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
		time.Sleep(50 * time.Millisecond)
	}
}

// createBucket creates srv.Bucket with a short-lived S3 client.
func createBucket(ctx context.Context, srv *Server) error {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := s3.New(s3.Options{
		BaseEndpoint:               aws.String(srv.Endpoint),
		Region:                     srv.Region,
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(srv.AccessKeyID, srv.SecretAccessKey, ""),
		HTTPClient:                 &http.Client{Transport: tr},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(srv.Bucket)})
	return err
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

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// versityGWBinary finds or builds the versitygw binary, once per process.
func versityGWBinary() (string, error) {
	binOnce.Do(func() { binPath, binErr = findOrBuildVersityGW() })
	return binPath, binErr
}

func findOrBuildVersityGW() (string, error) {
	if p := os.Getenv(EnvVersityGW); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvVersityGW, p, err)
		}
		return p, nil
	}
	if root, err := moduleRoot(); err == nil {
		p := filepath.Join(root, "bin", "versitygw")
		if isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return buildVersityGW()
}

// buildVersityGW installs the pinned versitygw into the user cache directory,
// or reuses an earlier install there. Concurrent test processes may build at
// the same time; each installs into a directory of its own and renames the
// binary into place, so none sees a half-written file.
func buildVersityGW() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "cairn", "versitygw-"+VersityGWVersion)
	final := filepath.Join(dir, "versitygw")
	if isExecutable(final) {
		return final, nil
	}
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
	cmd := exec.CommandContext(ctx, goBin, "install", versityGWModule+"@"+VersityGWVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w\n%s", versityGWModule, VersityGWVersion, err, out)
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
