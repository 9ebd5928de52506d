package s3test

import (
	"context"
	"testing"
	"time"

	"github.com/cairnstore/cairn/internal/versitygw"
)

// VersityGWVersion is the versitygw release the tests run, as pinned in the
// Makefile.
const VersityGWVersion = versitygw.Version

// EnvVersityGW names an environment variable that, when set, is the path of
// the versitygw binary to run.
const EnvVersityGW = versitygw.EnvBinary

// StartVersityGW starts a versitygw server with the posix backend on
// 127.0.0.1, on a free port and in a temporary directory, creates the bucket
// BucketName and stops the server in t.Cleanup. It finds the binary through
// $CAIRN_VERSITYGW, then ./bin/versitygw at the module root (make tools
// builds it), then $PATH, and otherwise builds the pinned version with go
// install into the user cache directory. When no binary can be found or built,
// or the server does not start, the test fails; it is never skipped.
func StartVersityGW(t testing.TB) *Server {
	t.Helper()
	bin, err := versitygw.FindOrBuild()
	if err != nil {
		t.Fatalf("s3test: no versitygw binary: %v (run `make tools`, or set %s)", err, EnvVersityGW)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw, err := versitygw.Start(ctx, versitygw.Config{Binary: bin, Dir: t.TempDir(), Bucket: BucketName,
		Region: Region, AccessKeyID: AccessKeyID, SecretAccessKey: SecretAccessKey})
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	t.Cleanup(gw.Close)
	return &Server{Endpoint: gw.Endpoint, Region: gw.Region, Bucket: gw.Bucket,
		AccessKeyID: gw.AccessKeyID, SecretAccessKey: gw.SecretAccessKey, pid: gw.PID()}
}
