package demo

import (
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
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// The S3 servers the demo can run, chosen by Options.S3.
const (
	// S3Auto runs versitygw when its binary can be found, else gofakes3.
	S3Auto = "auto"
	// S3VersityGW runs a versitygw process (make tools builds ./bin/versitygw).
	S3VersityGW = "versitygw"
	// S3GoFakeS3 runs a gofakes3 server inside the process.
	S3GoFakeS3 = "gofakes3"
)

// EnvVersityGW names the variable that, when set, is the path of the
// versitygw binary, as for the tests.
const EnvVersityGW = "CAIRN_VERSITYGW"

// The demo bucket and the local servers' credentials.
const (
	bucketName   = "cairn-demo"
	region       = "us-east-1"
	accessKeyID  = "cairndemokey"
	secretAccess = "cairndemosecret0123456789"
)

// s3Server is a local S3 endpoint with the demo bucket.
type s3Server struct {
	// Name says what the server is, for the report.
	Name     string
	Endpoint string
	close    func()
}

// startS3 starts the server that kind selects, under dir.
func startS3(ctx context.Context, kind, dir string) (*s3Server, error) {
	switch kind {
	case S3GoFakeS3:
		return startGoFakeS3()
	case S3VersityGW, S3Auto, "":
		bin, err := findVersityGW()
		if err != nil {
			if kind == S3VersityGW {
				return nil, fmt.Errorf("no versitygw binary (run make tools, or set %s): %w", EnvVersityGW, err)
			}
			srv, ferr := startGoFakeS3()
			if ferr == nil {
				srv.Name += " (versitygw not found: make tools builds it)"
			}
			return srv, ferr
		}
		return startVersityGW(ctx, bin, dir)
	}
	return nil, fmt.Errorf("unknown S3 server %q: want %s, %s or %s", kind, S3Auto, S3VersityGW, S3GoFakeS3)
}

// findVersityGW looks for the binary in $CAIRN_VERSITYGW, then in bin/ at the
// module root above the working directory, then on $PATH.
func findVersityGW() (string, error) {
	if p := os.Getenv(EnvVersityGW); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvVersityGW, p, err)
		}
		return p, nil
	}
	if dir, err := os.Getwd(); err == nil {
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				p := filepath.Join(dir, "bin", "versitygw")
				if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
					return p, nil
				}
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return exec.LookPath("versitygw")
}

// startVersityGW runs versitygw with its posix backend in dir, on a free
// loopback port, and creates the demo bucket.
func startVersityGW(ctx context.Context, bin, dir string) (*s3Server, error) {
	root, meta := filepath.Join(dir, "root"), filepath.Join(dir, "meta")
	for _, d := range []string{root, meta} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	var lastErr error
	for range 3 {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		out := &lockedBuffer{}
		cmd := exec.Command(bin, "--access", accessKeyID, "--secret", secretAccess, "--region", region, "--quiet",
			"--port", addr, "posix", "--sidecar", meta, root)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = childProcAttr()
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", bin, err)
		}
		exited := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		endpoint := "http://" + addr
		if err := waitReady(ctx, endpoint, exited); err != nil {
			stop()
			lastErr = fmt.Errorf("%w; its output: %s", err, out.String())
			continue
		}
		if err := createBucket(ctx, endpoint); err != nil {
			stop()
			return nil, fmt.Errorf("create the demo bucket on versitygw: %w", err)
		}
		return &s3Server{Name: "versitygw (a local process, posix backend)", Endpoint: endpoint, close: stop}, nil
	}
	return nil, fmt.Errorf("versitygw did not start: %w", lastErr)
}

// waitReady polls the endpoint until it answers, the process exits, or 20s
// pass.
func waitReady(ctx context.Context, endpoint string, exited <-chan struct{}) error {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			return errors.New("versitygw exited before it answered")
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
			return fmt.Errorf("versitygw did not answer at %s: %w", endpoint, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// createBucket creates the demo bucket with a short-lived client.
func createBucket(ctx context.Context, endpoint string) error {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := s3.New(s3.Options{
		BaseEndpoint:               aws.String(endpoint),
		Region:                     region,
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(accessKeyID, secretAccess, ""),
		HTTPClient:                 &http.Client{Transport: tr},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucketName)})
	return err
}

// startGoFakeS3 serves an in-memory gofakes3 on a loopback port.
func startGoFakeS3() (*s3Server, error) {
	backend := s3mem.New()
	if err := backend.CreateBucket(bucketName); err != nil {
		return nil, err
	}
	faker := gofakes3.New(backend, gofakes3.WithoutVersioning())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	return &s3Server{
		Name:     "gofakes3 (in memory, inside this process)",
		Endpoint: "http://" + l.Addr().String(),
		close: func() {
			_ = srv.Close()
			<-done
		},
	}, nil
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// lockedBuffer collects a process's output for error messages.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(b.b.String())
}
