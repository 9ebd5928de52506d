package demo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/cairnstore/cairn/internal/versitygw"
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
const EnvVersityGW = versitygw.EnvBinary

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
		bin, err := versitygw.Find()
		if err != nil {
			if kind == S3VersityGW {
				return nil, err
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

// startVersityGW runs versitygw with its posix backend in dir, on a free
// loopback port, and creates the demo bucket.
func startVersityGW(ctx context.Context, bin, dir string) (*s3Server, error) {
	gw, err := versitygw.Start(ctx, versitygw.Config{Binary: bin, Dir: dir, Bucket: bucketName,
		Region: region, AccessKeyID: accessKeyID, SecretAccessKey: secretAccess})
	if err != nil {
		return nil, err
	}
	return &s3Server{Name: "versitygw (a local process, posix backend)", Endpoint: gw.Endpoint, close: gw.Close}, nil
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
