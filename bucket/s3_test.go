package bucket_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/s3test"
)

// TestPutModeDetection checks DetectPutMode and PutModeAuto on servers that
// honour If-None-Match and on one that silently ignores it, and that the
// PutIfAbsent check used by TestBuckets catches the ignoring server.
func TestPutModeDetection(t *testing.T) {
	vgw := s3test.StartVersityGW(t)
	honest := s3test.StartFake(t, s3test.FakeOptions{})
	ignoring := s3test.StartFake(t, s3test.FakeOptions{IgnoreIfNoneMatch: true})
	tests := []struct {
		name string
		srv  *s3test.Server
		want bucket.PutMode
	}{
		{"gofakes3", &honest.Server, bucket.PutModeConditional},
		{"versitygw", vgw, bucket.PutModeConditional},
		{"IgnoresIfNoneMatch", &ignoring.Server, bucket.PutModeHeadThenPut},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newS3(t, configFor(tc.srv))
			got, err := bucket.DetectPutMode(t.Context(), b)
			if err != nil || got != tc.want {
				t.Fatalf("DetectPutMode = %q, %v; want %q", got, err, tc.want)
			}
			cfg := configFor(tc.srv)
			cfg.PutMode = bucket.PutModeAuto
			auto := newS3(t, cfg)
			if auto.PutMode() != tc.want {
				t.Fatalf("PutModeAuto chose %q; want %q", auto.PutMode(), tc.want)
			}
			if err := checkPutIfAbsent(t.Context(), auto, "detect/"+tc.name); err != nil {
				t.Fatalf("in the detected mode: %v", err)
			}
			page, err := b.List(t.Context(), bucket.ProbePrefix, "", 10)
			if err != nil || len(page.Objects) != 0 {
				t.Fatalf("probe objects left behind: %+v, %v", page.Objects, err)
			}
		})
	}
	t.Run("ConditionalOnIgnoringServerIsCaught", func(t *testing.T) {
		cfg := configFor(&ignoring.Server)
		cfg.PutMode = bucket.PutModeConditional
		b := newS3(t, cfg)
		err := checkPutIfAbsent(t.Context(), b, "caught")
		if err == nil || !strings.Contains(err.Error(), "second PutIfAbsent") {
			t.Fatalf("checkPutIfAbsent on a server ignoring If-None-Match = %v; want a failure of the second put", err)
		}
	})
}

// TestUploadTimes checks that listings and heads carry the server's upload
// time, driven by the fake server's clock and by the memory bucket's clock.
func TestUploadTimes(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 250_000_000, time.UTC)
	fake := s3test.StartFake(t, s3test.FakeOptions{Start: t0})
	clock := s3test.NewClock(t0)
	tests := []struct {
		name    string
		b       bucket.Bucket
		advance func(time.Duration)
	}{
		{"memory", bucket.NewMemory(clock.Now), clock.Advance},
		{"gofakes3", newS3(t, configFor(&fake.Server)), fake.Clock.Advance},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.b.PutIfAbsent(t.Context(), "a", []byte("1")); err != nil {
				t.Fatal(err)
			}
			tc.advance(90 * time.Minute)
			if _, err := tc.b.PutIfAbsent(t.Context(), "b", []byte("22")); err != nil {
				t.Fatal(err)
			}
			objs, _ := listAll(t, tc.b, "", 1000)
			want := []bucket.Object{
				{Key: "a", Size: 1, UploadedAt: t0},
				{Key: "b", Size: 2, UploadedAt: t0.Add(90 * time.Minute)},
			}
			if len(objs) != len(want) {
				t.Fatalf("listed %+v; want %+v", objs, want)
			}
			for i := range want {
				if objs[i].Key != want[i].Key || objs[i].Size != want[i].Size || !objs[i].UploadedAt.Equal(want[i].UploadedAt) {
					t.Errorf("listed %+v; want %+v", objs[i], want[i])
				}
			}
			o, err := tc.b.Head(t.Context(), "b")
			if err != nil || o.Size != 2 || !o.UploadedAt.Truncate(time.Second).Equal(want[1].UploadedAt.Truncate(time.Second)) {
				t.Errorf("Head(b) = %+v, %v; want size 2 uploaded at %v (to the second)", o, err, want[1].UploadedAt)
			}
		})
	}
}

// TestProbe checks the start-up probe's verdicts.
func TestProbe(t *testing.T) {
	vgw := s3test.StartVersityGW(t)
	fake := s3test.StartFake(t, s3test.FakeOptions{})
	closedPort := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return "http://" + l.Addr().String()
	}()
	tests := []struct {
		name   string
		mutate func(*bucket.Config)
		srv    *s3test.Server
		want   error
		substr string
	}{
		{"OK/versitygw", func(*bucket.Config) {}, vgw, nil, ""},
		{"OK/gofakes3", func(*bucket.Config) {}, &fake.Server, nil, ""},
		{"MissingBucket/versitygw", func(c *bucket.Config) { c.Bucket = "no-such-bucket" }, vgw, bucket.ErrNoSuchBucket, "does not exist"},
		{"MissingBucket/gofakes3", func(c *bucket.Config) { c.Bucket = "no-such-bucket" }, &fake.Server, bucket.ErrNoSuchBucket, "does not exist"},
		{"WrongSecret", func(c *bucket.Config) { c.SecretAccessKey = "wrong-secret-0123456789" }, vgw, bucket.ErrInvalidCredentials, "rejected"},
		{"UnknownKeyID", func(c *bucket.Config) { c.AccessKeyID = "nobody" }, vgw, bucket.ErrInvalidCredentials, "rejected"},
		{"Unreachable", func(c *bucket.Config) { c.Endpoint = closedPort; c.MaxAttempts = 1 }, vgw, bucket.ErrUnreachable, "cannot reach"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := configFor(tc.srv)
			tc.mutate(&cfg)
			err := newS3(t, cfg).Probe(t.Context())
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Probe: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.substr) {
				t.Fatalf("Probe error = %v; want one matching %v and saying %q", err, tc.want, tc.substr)
			}
			if strings.Contains(err.Error(), cfg.SecretAccessKey) {
				t.Fatalf("Probe error reveals the secret: %v", err)
			}
		})
	}
	t.Run("Memory", func(t *testing.T) {
		if err := bucket.NewMemory(nil).Probe(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDefaultCredentialChain checks that without static keys the SDK's
// default chain supplies credentials (here from the environment), against a
// server that verifies signatures.
func TestDefaultCredentialChain(t *testing.T) {
	vgw := s3test.StartVersityGW(t)
	t.Setenv("AWS_ACCESS_KEY_ID", vgw.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", vgw.SecretAccessKey)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	cfg := configFor(vgw)
	cfg.AccessKeyID, cfg.SecretAccessKey = "", ""
	if err := newS3(t, cfg).Probe(t.Context()); err != nil {
		t.Fatalf("Probe with credentials from the environment: %v", err)
	}
}

// recordingTransport records the headers of every request.
type recordingTransport struct {
	mu      sync.Mutex
	next    http.RoundTripper
	headers []http.Header
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.headers = append(r.headers, req.Header.Clone())
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

// TestChecksumsWhenRequired checks the R2 setting: the client computes request
// checksums and validates response checksums only when an operation requires
// it, so a plain PutObject carries no x-amz-checksum header, and the caller's
// HTTP client is used and left open.
func TestChecksumsWhenRequired(t *testing.T) {
	fake := s3test.StartFake(t, s3test.FakeOptions{})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rec := &recordingTransport{next: tr}
	cfg := configFor(&fake.Server)
	cfg.HTTPClient = &http.Client{Transport: rec}
	b := newS3(t, cfg)
	opts := b.Client().Options()
	if opts.RequestChecksumCalculation != aws.RequestChecksumCalculationWhenRequired ||
		opts.ResponseChecksumValidation != aws.ResponseChecksumValidationWhenRequired {
		t.Fatalf("client checksum options = %v, %v; want WhenRequired for both", opts.RequestChecksumCalculation, opts.ResponseChecksumValidation)
	}
	if _, err := b.PutIfAbsent(t.Context(), "plain", bytes.Repeat([]byte("x"), 1<<16)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(t.Context(), "plain"); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.headers) < 2 {
		t.Fatalf("the caller's HTTP client saw %d requests; want at least 2", len(rec.headers))
	}
	put := rec.headers[0]
	for name := range put {
		if lower := strings.ToLower(name); strings.HasPrefix(lower, "x-amz-checksum-") || lower == "x-amz-sdk-checksum-algorithm" || lower == "x-amz-trailer" {
			t.Errorf("PutObject sent %s: %v; want no checksum header", name, put[name])
		}
	}
	if got := put.Get("If-None-Match"); got != "*" {
		t.Errorf("PutObject If-None-Match = %q; want *", got)
	}
	if got := rec.headers[1].Get("X-Amz-Checksum-Mode"); got != "" {
		t.Errorf("GetObject asked for checksum mode %q; want none", got)
	}
}

// TestConfigValidate checks Config.Validate's verdicts.
func TestConfigValidate(t *testing.T) {
	ok := bucket.Config{Endpoint: bucket.R2Endpoint("acct", ""), Region: "auto", Bucket: "b", AccessKeyID: "id", SecretAccessKey: "secret"}
	tests := []struct {
		name   string
		mutate func(*bucket.Config)
		valid  bool
	}{
		{"R2", func(*bucket.Config) {}, true},
		{"DefaultChain", func(c *bucket.Config) { c.AccessKeyID, c.SecretAccessKey = "", "" }, true},
		{"AWSDefaultEndpoint", func(c *bucket.Config) { c.Endpoint = "" }, true},
		{"SessionToken", func(c *bucket.Config) { c.SessionToken = "tok" }, true},
		{"EveryPutMode", func(c *bucket.Config) { c.PutMode = bucket.PutModeHeadThenPut }, true},
		{"NoBucket", func(c *bucket.Config) { c.Bucket = "" }, false},
		{"EndpointWithoutScheme", func(c *bucket.Config) { c.Endpoint = "127.0.0.1:9000" }, false},
		{"EndpointBadScheme", func(c *bucket.Config) { c.Endpoint = "ftp://host" }, false},
		{"KeyIDWithoutSecret", func(c *bucket.Config) { c.SecretAccessKey = "" }, false},
		{"SecretWithoutKeyID", func(c *bucket.Config) { c.AccessKeyID = "" }, false},
		{"TokenWithoutKeys", func(c *bucket.Config) { c.AccessKeyID, c.SecretAccessKey, c.SessionToken = "", "", "t" }, false},
		{"UnknownPutMode", func(c *bucket.Config) { c.PutMode = "sometimes" }, false},
		{"NegativeAttempts", func(c *bucket.Config) { c.MaxAttempts = -1 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if tc.valid != (err == nil) || (err != nil && !errors.Is(err, bucket.ErrInvalidConfig)) {
				t.Fatalf("Validate() = %v; want valid: %t (errors match ErrInvalidConfig)", err, tc.valid)
			}
			if !tc.valid {
				if _, err := bucket.NewS3(t.Context(), c); !errors.Is(err, bucket.ErrInvalidConfig) {
					t.Fatalf("NewS3 with an invalid config = %v; want ErrInvalidConfig", err)
				}
			}
		})
	}
	if got, want := bucket.R2Endpoint("abc", "eu"), "https://abc.eu.r2.cloudflarestorage.com"; got != want {
		t.Errorf("R2Endpoint(abc, eu) = %q; want %q", got, want)
	}
}

// TestConfigRedactsSecrets checks every way a Config gets printed or logged.
func TestConfigRedactsSecrets(t *testing.T) {
	c := bucket.Config{Endpoint: "https://e", Bucket: "b", AccessKeyID: "AKIDSECRETID", SecretAccessKey: "SUPERSECRETKEY", SessionToken: "SESSIONTOKENVALUE"}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "s3", c)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "s3", c)
	outputs := map[string]string{
		"String": c.String(),
		"%v":     fmt.Sprintf("%v", c),
		"%+v":    fmt.Sprintf("%+v", c),
		"%#v":    fmt.Sprintf("%#v", c),
		//lint:ignore S1025 the %s verb is what this case checks
		"%s":   fmt.Sprintf("%s", c),
		"&%v":  fmt.Sprintf("%v", &c),
		"slog": logged.String(),
	}
	for name, out := range outputs {
		for _, secret := range []string{c.AccessKeyID, c.SecretAccessKey, c.SessionToken} {
			if strings.Contains(out, secret) {
				t.Errorf("%s output reveals %q: %s", name, secret, out)
			}
		}
		if !strings.Contains(out, "redacted") || !strings.Contains(out, "https://e") {
			t.Errorf("%s output = %s; want the endpoint and a redaction marker", name, out)
		}
	}
}

// TestPutsFindExisting: a conditional put finds an existing key by itself,
// a head-then-put put does not.
func TestPutsFindExisting(t *testing.T) {
	cases := []struct {
		mode bucket.PutMode
		want bool
	}{
		{"", true},
		{bucket.PutModeConditional, true},
		{bucket.PutModeHeadThenPut, false},
	}
	for _, tc := range cases {
		t.Run(cmp.Or(string(tc.mode), "default"), func(t *testing.T) {
			b, err := bucket.NewS3(t.Context(), bucket.Config{Endpoint: "http://127.0.0.1:9", Region: "auto", Bucket: "b",
				AccessKeyID: "k", SecretAccessKey: "s", PutMode: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			if got := bucket.PutsFindExisting(b); got != tc.want {
				t.Fatalf("PutsFindExisting = %v, want %v", got, tc.want)
			}
		})
	}
	if !bucket.PutsFindExisting(bucket.NewMemory(nil)) {
		t.Fatal("the memory bucket's put does not find existing keys")
	}
}

// TestDeleteWithSendDeadline checks an S3 delete under a send deadline: in
// time it deletes (over a connection of its own, also with the caller's
// plain client), and with an HTTP client that cannot be fenced it sends
// nothing and fails with ErrCannotFence.
func TestDeleteWithSendDeadline(t *testing.T) {
	fake := s3test.StartFake(t, s3test.FakeOptions{})
	plain := &http.Transport{}
	t.Cleanup(plain.CloseIdleConnections)
	wrapped := &recordingTransport{next: plain}
	cases := []struct {
		name    string
		client  *http.Client
		wantErr error
	}{
		{name: "own client"},
		{name: "caller's transport", client: &http.Client{Transport: plain}},
		{name: "caller's default transport", client: &http.Client{}},
		{name: "caller's wrapped transport", client: &http.Client{Transport: wrapped}, wantErr: bucket.ErrCannotFence},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := configFor(&fake.Server)
			cfg.HTTPClient = tc.client
			b := newS3(t, cfg)
			key := "blobs/sha256/" + strings.Repeat("ab", 32)
			if _, err := b.PutIfAbsent(t.Context(), key, []byte("x")); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := bucket.WithSendDeadline(t.Context(), time.Now().Add(30*time.Second))
			defer cancel()
			res, err := b.Delete(ctx, []string{key})
			_, herr := b.Head(t.Context(), key)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || len(res.Failed) != 1 {
					t.Fatalf("Delete = %+v, %v; want the key failed with %v", res, err, tc.wantErr)
				}
				if herr != nil {
					t.Fatalf("the refused delete removed the object: %v", herr)
				}
				return
			}
			if err != nil || len(res.Deleted) != 1 {
				t.Fatalf("Delete = %+v, %v; want the key deleted", res, err)
			}
			if !errors.Is(herr, bucket.ErrNotFound) {
				t.Fatalf("Head after the delete = %v; want ErrNotFound", herr)
			}
		})
	}
}
