package bench

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
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The versitygw server of B5: credentials and names of a throwaway server on
// 127.0.0.1.
const (
	gwBucket = "cairn-bench"
	gwRegion = "us-east-1"
	gwAccess = "cairnbenchkey"
	gwSecret = "cairnbenchsecret0123456789"
)

// gateway is a running versitygw with the posix backend.
type gateway struct {
	endpoint string
	// root is the posix backend's directory: the bucket is the directory
	// root/gwBucket, and each object the file of its key below it.
	root string
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
}

// findVersityGW returns the versitygw binary: the configured one, then
// $CAIRN_VERSITYGW, then ./bin/versitygw above the working directory (make
// tools builds it), then $PATH, then the copy the S3 test harness builds in
// the user cache directory.
func findVersityGW(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if p := os.Getenv("CAIRN_VERSITYGW"); p != "" {
		return p, nil
	}
	if dir, err := os.Getwd(); err == nil {
		for {
			p := filepath.Join(dir, "bin", "versitygw")
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
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
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	if cache, err := os.UserCacheDir(); err == nil {
		p := filepath.Join(cache, "cairn", "versitygw-v1.8.0", "versitygw")
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("no versitygw binary: run `make tools`, or set CAIRN_VERSITYGW")
}

// startGateway starts versitygw on a free loopback port with its data in
// dir, and creates the bucket.
func startGateway(ctx context.Context, bin, dir string) (*gateway, error) {
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	backend := []string{"posix"}
	if !supportsUserXattrs(dir) {
		meta := filepath.Join(dir, "meta")
		if err := os.MkdirAll(meta, 0o755); err != nil {
			return nil, err
		}
		backend = append(backend, "--sidecar", meta)
	}
	backend = append(backend, root)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	args := append([]string{"--access", gwAccess, "--secret", gwSecret, "--region", gwRegion, "--quiet", "--port", addr}, backend...)
	g := &gateway{endpoint: "http://" + addr, root: root, cmd: exec.Command(bin, args...), out: &bytes.Buffer{}, done: make(chan struct{})}
	g.cmd.Stdout, g.cmd.Stderr = g.out, g.out
	g.cmd.SysProcAttr = childProcAttr()
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = g.cmd.Wait()
		close(g.done)
	}()
	if err := g.waitReady(ctx); err != nil {
		g.stop()
		return nil, err
	}
	cli, err := g.client(ctx)
	if err != nil {
		g.stop()
		return nil, err
	}
	if _, err := cli.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(gwBucket)}); err != nil {
		g.stop()
		return nil, fmt.Errorf("create bucket: %w", err)
	}
	return g, nil
}

func (g *gateway) waitReady(ctx context.Context) error {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-g.done:
			return fmt.Errorf("versitygw exited before it was ready: %s", g.out)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if resp, err := hc.Get(g.endpoint + "/"); err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw did not answer at %s: %s", g.endpoint, g.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (g *gateway) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
}

// client returns a bare S3 client of the gateway, configured as the bucket
// package configures its own: path-style, static credentials, checksums only
// where required, the SDK's default retries and HTTP transport.
func (g *gateway) client(ctx context.Context) (*s3.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithRegion(gwRegion),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(gwAccess, gwSecret, "")),
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	)
	if err != nil {
		return nil, err
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(g.endpoint)
		o.UsePathStyle = true
	}), nil
}

// writeObjects stores each key as a file of the posix backend, which is how
// versitygw keeps an object: the file root/bucket/key holding its bytes.
// versitygw lists such files as objects (with a default ETag, since no
// metadata was recorded) and deletes them like any other; writing them
// directly loads a hundred thousand objects in seconds instead of minutes.
func (g *gateway) writeObjects(keys []string) error {
	dirs := map[string]bool{}
	for _, k := range keys {
		dirs[filepath.Dir(filepath.Join(g.root, gwBucket, k))] = true
	}
	for d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	const workers = 8
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				if err := os.WriteFile(filepath.Join(g.root, gwBucket, keys[i]), []byte(keys[i]), 0o644); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
