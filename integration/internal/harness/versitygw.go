package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3 is a running versitygw server (posix backend) with one bucket.
type S3 struct {
	Endpoint        string
	Region          string
	Bucket          string
	AccessKeyID     string
	SecretAccessKey string
	LogPath         string
	proc            *Process
}

// S3Config configures StartS3.
type S3Config struct {
	Dir             string // data and log directory; required
	Bucket          string
	Region          string
	AccessKeyID     string
	SecretAccessKey string
}

// StartS3 starts versitygw on a free loopback port, waits until it answers
// and creates the bucket.
func StartS3(ctx context.Context, cfg S3Config) (*S3, error) {
	bin, err := VersityGWBinary()
	if err != nil {
		return nil, err
	}
	root := filepath.Join(cfg.Dir, "s3-root")
	meta := filepath.Join(cfg.Dir, "s3-meta")
	for _, d := range []string{root, meta} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	ps, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ps[0])
	s := &S3{
		Endpoint: "http://" + addr, Region: cfg.Region, Bucket: cfg.Bucket,
		AccessKeyID: cfg.AccessKeyID, SecretAccessKey: cfg.SecretAccessKey,
		LogPath: filepath.Join(cfg.Dir, "versitygw.log"),
	}
	// The credentials go in the environment, not on the command line.
	env := append(os.Environ(), "ROOT_ACCESS_KEY="+cfg.AccessKeyID, "ROOT_SECRET_KEY="+cfg.SecretAccessKey)
	args := []string{"--port", addr, "--region", cfg.Region, "--quiet", "posix", "--sidecar", meta, root}
	if s.proc, err = StartProcess("versitygw", bin, args, s.LogPath, env); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.createBucket(ctx); err != nil {
		s.Stop()
		return nil, fmt.Errorf("create bucket %q: %w", cfg.Bucket, err)
	}
	return s, nil
}

func (s *S3) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if exited, err := s.proc.Exited(); exited {
			return fmt.Errorf("versitygw exited (%v); log %s:\n%s", err, s.LogPath, Tail(s.LogPath, 20))
		}
		resp, err := client.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("versitygw did not answer at %s: %w", s.Endpoint, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *S3) createBucket(ctx context.Context) error {
	client := s3.New(s3.Options{
		BaseEndpoint: aws.String(s.Endpoint), Region: s.Region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(s.AccessKeyID, s.SecretAccessKey, ""),
	})
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)})
	return err
}

// Stop stops the server.
func (s *S3) Stop() { s.proc.Stop() }
