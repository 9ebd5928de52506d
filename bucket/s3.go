package bucket

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/logging"
)

// S3 is a Bucket on an S3-compatible service: Cloudflare R2, AWS S3, or a
// local server such as versitygw. It is safe for concurrent use.
type S3 struct {
	client   *s3.Client
	name     string
	endpoint string
	mode     PutMode
	// ownHTTP is the transport NewS3 built, closed by Close; nil when the
	// caller supplied the HTTP client.
	ownHTTP *http.Transport
	// fenceBase is the transport that requests with a send deadline are
	// sent through clones of (WithSendDeadline), with redirect as their
	// client's CheckRedirect; nil when the HTTP client's transport is not an
	// *http.Transport.
	fenceBase *http.Transport
	redirect  func(*http.Request, []*http.Request) error
}

var _ Bucket = (*S3)(nil)

// conflictRetries bounds PutIfAbsent's retries after ErrConflict.
const conflictRetries = 3

// NewS3 returns a bucket for cfg. It validates cfg (errors match
// ErrInvalidConfig) and loads the SDK configuration, which reads the
// environment and shared config files but sends no request, unless cfg.PutMode
// is PutModeAuto: then it runs DetectPutMode and returns its error.
//
// Both request-checksum calculation and response-checksum validation are set
// to "when required", on the loaded config and on the client, because R2 and
// several S3-compatible servers reject the checksums newer SDKs send by
// default.
func NewS3(ctx context.Context, cfg Config) (*S3, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &S3{name: cfg.Bucket, endpoint: cfg.Endpoint, mode: cfg.PutMode}
	if b.mode == "" {
		b.mode = PutModeConditional
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	opts = append(opts, config.WithLogger(sdkLogger{cfg.Logger}))
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	if cfg.MaxAttempts > 0 {
		opts = append(opts, config.WithRetryMaxAttempts(cfg.MaxAttempts))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("bucket: load the AWS SDK configuration: %w", err)
	}
	if cfg.HTTPClient != nil {
		awsCfg.HTTPClient = cfg.HTTPClient
		b.redirect = cfg.HTTPClient.CheckRedirect
		switch tr := cfg.HTTPClient.Transport.(type) {
		case nil:
			b.fenceBase = http.DefaultTransport.(*http.Transport)
		case *http.Transport:
			b.fenceBase = tr
		}
	} else {
		// Take over the transport the SDK prepared (it carries AWS_CA_BUNDLE
		// when that is set) so that Close can release its connections.
		b.ownHTTP = sdkTransport(awsCfg.HTTPClient)
		b.ownHTTP.MaxIdleConnsPerHost = max(b.ownHTTP.MaxIdleConnsPerHost, MaxIdleConnsPerHost)
		// Hand redirects back to the SDK, as its own client does.
		b.redirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		b.fenceBase = b.ownHTTP
		awsCfg.HTTPClient = &http.Client{Transport: b.ownHTTP, CheckRedirect: b.redirect}
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "auto"
	}
	b.client = s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	if b.mode == PutModeAuto {
		mode, err := DetectPutMode(ctx, b)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.mode = mode
	}
	return b, nil
}

// sdkLogger hands the AWS SDK's messages to a slog.Logger: warnings as
// warnings, the rest at debug level.
type sdkLogger struct{ l *slog.Logger }

func (s sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	if s.l == nil {
		return
	}
	level := slog.LevelDebug
	if c == logging.Warn {
		level = slog.LevelWarn
	}
	s.l.Log(context.Background(), level, "AWS SDK: "+fmt.Sprintf(format, v...), "component", "aws-sdk")
}

// MaxIdleConnsPerHost is how many idle connections to the endpoint the
// client of NewS3 keeps open (unless Config.HTTPClient is set). The SDK's
// default keeps 10, fewer than a capture (16) or the object layout (32)
// sends at once: the connections above 10 were closed after each response
// and the next request paid a new connection (and, over TLS, a handshake).
const MaxIdleConnsPerHost = 64

// sdkTransport returns a transport of its own with the settings of the SDK's
// HTTP client, or a clone of http.DefaultTransport when that client is not
// the SDK's buildable one.
func sdkTransport(c aws.HTTPClient) *http.Transport {
	if bc, ok := c.(*awshttp.BuildableClient); ok {
		return bc.GetTransport()
	}
	return http.DefaultTransport.(*http.Transport).Clone()
}

// Client returns the underlying S3 client, for operations this package does
// not wrap.
func (b *S3) Client() *s3.Client { return b.client }

// Name returns the bucket's name.
func (b *S3) Name() string { return b.name }

// PutMode returns the mode PutIfAbsent uses: PutModeConditional or
// PutModeHeadThenPut, after any detection.
func (b *S3) PutMode() PutMode { return b.mode }

// Close releases the idle connections of the HTTP client NewS3 built. It never
// fails and leaves a caller-supplied HTTP client alone. The bucket remains
// usable: later requests open new connections.
func (b *S3) Close() error {
	if b.ownHTTP != nil {
		b.ownHTTP.CloseIdleConnections()
	}
	return nil
}

// Get implements Reader. It reads the whole object into memory.
func (b *S3) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey("GetObject", key); err != nil {
		return nil, err
	}
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.name, Key: &key})
	if err != nil {
		return nil, classify("GetObject", key, false, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, classify("GetObject", key, false, err)
	}
	return data, nil
}

// GetRange implements RangeReader with one GetObject with a Range header.
func (b *S3) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := checkKey("GetObject", key); err != nil {
		return nil, err
	}
	if off < 0 || n < 1 {
		return nil, &Error{Op: "GetObject", Key: key, Code: "InvalidRange", Kind: ErrInvalidRange}
	}
	rng := fmt.Sprintf("bytes=%d-%d", off, off+n-1)
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.name, Key: &key, Range: &rng})
	if err != nil {
		return nil, classify("GetObject", key, false, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(io.LimitReader(out.Body, n+1))
	if err != nil {
		return nil, classify("GetObject", key, false, err)
	}
	if int64(len(data)) != n {
		return nil, &Error{Op: "GetObject", Key: key, Code: "InvalidRange", Kind: ErrInvalidRange}
	}
	return data, nil
}

// Head implements Reader.
func (b *S3) Head(ctx context.Context, key string) (Object, error) {
	if err := checkKey("HeadObject", key); err != nil {
		return Object{}, err
	}
	out, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.name, Key: &key})
	if err != nil {
		return Object{}, classify("HeadObject", key, false, err)
	}
	return Object{Key: key, Size: aws.ToInt64(out.ContentLength), UploadedAt: aws.ToTime(out.LastModified)}, nil
}

// PutIfAbsent implements Putter in the bucket's PutMode. In PutModeConditional
// a conflicting concurrent conditional write (ErrConflict) is retried a few
// times before its error is returned.
func (b *S3) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	if err := checkKey("PutObject", key); err != nil {
		return false, err
	}
	return b.putIfAbsent(ctx, key, func(ifAbsent bool) error { return b.put(ctx, key, data, ifAbsent) })
}

// putIfAbsent runs the put-if-absent protocol of the bucket's PutMode with
// put sending one PutObject (with If-None-Match: * when ifAbsent).
func (b *S3) putIfAbsent(ctx context.Context, key string, put func(ifAbsent bool) error) (bool, error) {
	if b.mode == PutModeHeadThenPut {
		_, err := b.Head(ctx, key)
		switch {
		case err == nil:
			return false, nil
		case !errors.Is(err, ErrNotFound):
			return false, err
		}
		return true, put(false)
	}
	for attempt := 0; ; attempt++ {
		err := put(true)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, ErrPreconditionFailed):
			return false, nil
		case errors.Is(err, ErrConflict) && attempt < conflictRetries:
			if err := sleep(ctx, time.Duration(attempt+1)*50*time.Millisecond); err != nil {
				return false, err
			}
			continue
		}
		return false, err
	}
}

// put sends one PutObject, with If-None-Match: * when ifAbsent.
func (b *S3) put(ctx context.Context, key string, data []byte, ifAbsent bool) error {
	in := &s3.PutObjectInput{
		Bucket:        &b.name,
		Key:           &key,
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		ContentType:   aws.String("application/octet-stream"),
	}
	if ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	_, err := b.client.PutObject(ctx, in)
	return classify("PutObject", key, false, err)
}

// List implements Lister with ListObjectsV2. A truncated page without a
// continuation token is an error, so a listing never ends early unnoticed.
func (b *S3) List(ctx context.Context, prefix, token string, limit int) (Page, error) {
	in := &s3.ListObjectsV2Input{Bucket: &b.name, Prefix: &prefix, MaxKeys: aws.Int32(int32(pageLimit(limit)))}
	if token != "" {
		in.ContinuationToken = &token
	}
	out, err := b.client.ListObjectsV2(ctx, in)
	if err != nil {
		return Page{}, classify("ListObjectsV2", "", true, err)
	}
	page := Page{Objects: make([]Object, 0, len(out.Contents))}
	for _, o := range out.Contents {
		key := aws.ToString(o.Key)
		if !strings.HasPrefix(key, prefix) {
			return Page{}, &Error{Op: "ListObjectsV2", Key: key, Err: fmt.Errorf("the server listed a key outside the prefix %q", prefix)}
		}
		page.Objects = append(page.Objects, Object{Key: key, Size: aws.ToInt64(o.Size), UploadedAt: aws.ToTime(o.LastModified)})
	}
	if aws.ToBool(out.IsTruncated) {
		page.NextToken = aws.ToString(out.NextContinuationToken)
		if page.NextToken == "" {
			return Page{}, &Error{Op: "ListObjectsV2", Err: errString("the server marked the page truncated but sent no continuation token")}
		}
	}
	return page, nil
}

// fenced returns the per-request options that send a request of ctx
// through a fenced connection when ctx has a send deadline
// (WithSendDeadline), and a func that releases it; none when ctx has none.
// It fails with ErrCannotFence when the HTTP client cannot be fenced.
func (b *S3) fenced(ctx context.Context, op string) ([]func(*s3.Options), func(), error) {
	by, ok := sendDeadline(ctx)
	if !ok {
		return nil, func() {}, nil
	}
	client, tr, err := fencedClient(b.fenceBase, b.redirect, by)
	if err != nil {
		return nil, nil, &Error{Op: op, Err: err}
	}
	opt := func(o *s3.Options) { o.HTTPClient = client }
	return []func(*s3.Options){opt}, tr.CloseIdleConnections, nil
}

// Delete implements Deleter with DeleteObjects. With a send deadline on ctx
// (WithSendDeadline), each request goes over a connection that writes
// nothing after it; a request stopped by it fails with an error matching
// ErrSendDeadline (its outcome unknown), and a client that cannot be fenced
// fails every request with ErrCannotFence, sending nothing.
func (b *S3) Delete(ctx context.Context, keys []string) (DeleteResult, error) {
	return deleteInBatches(ctx, keys, b.deleteBatch)
}

// deleteBatch sends one DeleteObjects request for 1..MaxDeleteKeys valid,
// distinct keys. It returns the request's error, or the per-key outcome.
func (b *S3) deleteBatch(ctx context.Context, keys []string) (deleted []string, failed []KeyError, err error) {
	objs := make([]types.ObjectIdentifier, len(keys))
	for i := range keys {
		objs[i] = types.ObjectIdentifier{Key: aws.String(keys[i])}
	}
	fenced, done, err := b.fenced(ctx, "DeleteObjects")
	if err != nil {
		return nil, nil, err
	}
	defer done()
	out, err := b.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
		Bucket: &b.name,
		// Not quiet: the server then confirms every deleted key, and a key it
		// does not mention is reported as unconfirmed rather than assumed gone.
		Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(false)},
	}, fenced...)
	if err != nil {
		return nil, nil, classify("DeleteObjects", "", true, err)
	}
	outcome := make(map[string]error, len(keys))
	for _, d := range out.Deleted {
		outcome[aws.ToString(d.Key)] = nil
	}
	for _, e := range out.Errors {
		key, code := aws.ToString(e.Key), aws.ToString(e.Code)
		if code == "NoSuchKey" {
			outcome[key] = nil // already gone, as S3 itself treats it
			continue
		}
		outcome[key] = &Error{Op: "DeleteObjects", Key: key, Code: code, Kind: kindOfCode(code), Err: errString(aws.ToString(e.Message))}
	}
	for _, k := range keys {
		kerr, seen := outcome[k]
		switch {
		case !seen:
			failed = append(failed, KeyError{Key: k, Err: &Error{Op: "DeleteObjects", Key: k, Err: errString("the server did not confirm the deletion")}})
		case kerr != nil:
			failed = append(failed, KeyError{Key: k, Err: kerr})
		default:
			deleted = append(deleted, k)
		}
	}
	return deleted, failed, nil
}

// ProbePrefix is where DetectPutMode writes its probe object. It is outside
// the blob prefixes, so a sweep never touches it.
const ProbePrefix = "cairn-probe/"

// Probe checks that the bucket exists and that the credentials may list it,
// with one ListObjectsV2 request of one key, for a start-up check. Its error
// says which of these failed and matches ErrNoSuchBucket, ErrInvalidCredentials,
// ErrAccessDenied or ErrUnreachable when one of them is the cause.
func (b *S3) Probe(ctx context.Context) error {
	_, err := b.List(ctx, "sandbox-", "", 1)
	if err == nil {
		return nil
	}
	where := b.endpoint
	if where == "" {
		where = "the default S3 endpoint"
	}
	switch {
	case errors.Is(err, ErrNoSuchBucket):
		return fmt.Errorf("bucket %q does not exist at %s: %w", b.name, where, err)
	case errors.Is(err, ErrInvalidCredentials):
		return fmt.Errorf("the credentials for bucket %q were rejected by %s (check the access key id and secret): %w", b.name, where, err)
	case errors.Is(err, ErrAccessDenied):
		return fmt.Errorf("the credentials may not list bucket %q at %s: %w", b.name, where, err)
	case errors.Is(err, ErrUnreachable):
		return fmt.Errorf("cannot reach %s for bucket %q: %w", where, b.name, err)
	}
	return fmt.Errorf("probe of bucket %q at %s failed: %w", b.name, where, err)
}

// DetectPutMode finds out whether the server honours If-None-Match: * on
// PutObject. It puts a probe object under ProbePrefix, puts other bytes to the
// same key with the condition, reads the object back and deletes it. It
// returns PutModeConditional when the second put was refused and the first
// bytes remain, and PutModeHeadThenPut when the server rejected the header or
// ignored it and overwrote the object. It returns the error of any other
// failed request.
func DetectPutMode(ctx context.Context, b *S3) (PutMode, error) {
	key := ProbePrefix + rand.Text()
	first, second := []byte("first"), []byte("second")
	defer func() {
		// Clean up even when ctx has ended, but bounded.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = b.Delete(dctx, []string{key})
	}()
	err := b.put(ctx, key, first, true)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && (e.Code == "NotImplemented" || e.Code == "InvalidArgument" || httpStatus(err) == http.StatusNotImplemented) {
			return PutModeHeadThenPut, nil
		}
		return "", fmt.Errorf("bucket: detect put mode: %w", err)
	}
	err = b.put(ctx, key, second, true)
	switch {
	case errors.Is(err, ErrPreconditionFailed):
	case err == nil:
		return PutModeHeadThenPut, nil
	default:
		return "", fmt.Errorf("bucket: detect put mode: %w", err)
	}
	got, err := b.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("bucket: detect put mode: %w", err)
	}
	if !bytes.Equal(got, first) {
		return PutModeHeadThenPut, nil
	}
	return PutModeConditional, nil
}

// sleep waits for d or until ctx ends, and returns ctx's error in that case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
