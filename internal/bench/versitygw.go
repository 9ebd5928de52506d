package bench

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/versitygw"
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
	*versitygw.Server
}

// findVersityGW returns the versitygw binary: the configured one, else what
// versitygw.Find finds.
func findVersityGW(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	return versitygw.Find()
}

// startGateway starts versitygw on a free loopback port with its data in
// dir, and creates the bucket.
func startGateway(ctx context.Context, bin, dir string) (*gateway, error) {
	srv, err := versitygw.Start(ctx, versitygw.Config{Binary: bin, Dir: dir, Bucket: gwBucket,
		Region: gwRegion, AccessKeyID: gwAccess, SecretAccessKey: gwSecret})
	if err != nil {
		return nil, err
	}
	return &gateway{srv}, nil
}

func (g *gateway) stop() { g.Close() }

// client returns a bare S3 client of the gateway, configured as the bucket
// package configures its own: path-style, static credentials, checksums only
// where required, the SDK's default retries and HTTP transport.
func (g *gateway) client(ctx context.Context) (*s3.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithRegion(gwRegion),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(gwAccess, gwSecret, "")),
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
		// As many idle connections as bucket.S3 keeps, so that both sides
		// of a comparison reuse their connections alike.
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConnsPerHost = bucket.MaxIdleConnsPerHost
		})),
	)
	if err != nil {
		return nil, err
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(g.Endpoint)
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
		dirs[filepath.Dir(filepath.Join(g.Root, gwBucket, k))] = true
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
				if err := os.WriteFile(filepath.Join(g.Root, gwBucket, keys[i]), []byte(keys[i]), 0o644); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
