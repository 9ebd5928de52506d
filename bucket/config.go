package bucket

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
)

// PutMode selects how PutIfAbsent keeps an existing object.
type PutMode string

// The put modes.
const (
	// PutModeConditional sends PutObject with If-None-Match: *, so the server
	// refuses to replace an existing object atomically. Cloudflare R2 and AWS
	// S3 support it. It is the default.
	PutModeConditional PutMode = "conditional"
	// PutModeHeadThenPut heads the key and puts only when the head finds
	// nothing, as the upstream capture does. Two writers may both put the
	// same key, which is harmless for content-addressed keys.
	PutModeHeadThenPut PutMode = "head-then-put"
	// PutModeAuto makes NewS3 probe the server with DetectPutMode and use
	// the mode it finds. The probe writes and deletes one object under
	// ProbePrefix.
	PutModeAuto PutMode = "auto"
)

// PutsFindExisting reports whether the PutIfAbsent (and PutIfAbsentFrom) of b
// finds out by itself, in the one request that would store the bytes,
// whether the key exists: a bucket.S3 in PutModeConditional and the memory
// bucket do; a bucket.S3 in PutModeHeadThenPut heads the key first, and a
// bucket of unknown kind (a wrapper, say) is taken not to. A caller that
// would head a key before putting it can then skip the head when sending
// the bytes again costs less than the round trip.
func PutsFindExisting(b any) bool {
	switch b := b.(type) {
	case *Memory:
		return true
	case interface{ PutMode() PutMode }:
		return b.PutMode() == PutModeConditional
	}
	return false
}

// Config says how to reach an S3-compatible bucket. Its fields map one to one
// onto command-line flags. The zero value of every optional field selects a
// default.
//
// Config's String, GoString and LogValue methods redact the credentials, so a
// Config can be printed and logged safely.
type Config struct {
	// Endpoint is the service's base URL, with scheme, e.g.
	// https://<account>.r2.cloudflarestorage.com (see R2Endpoint) or
	// http://127.0.0.1:7070. Empty selects the SDK's endpoint resolution
	// (AWS S3, or AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL when set).
	Endpoint string
	// Region signs the requests. Empty selects the SDK's default chain
	// (AWS_REGION, shared config), and "auto" when that has none. R2 uses
	// "auto".
	Region string
	// Bucket is the bucket's name. Required.
	Bucket string
	// PathStyle addresses the bucket in the URL path instead of the host
	// name. Most local S3 servers need it; R2 accepts both.
	PathStyle bool
	// AccessKeyID and SecretAccessKey are static credentials. Give both or
	// neither; neither selects the SDK's default credential chain
	// (environment, shared files, container and instance roles).
	AccessKeyID     string
	SecretAccessKey string
	// SessionToken goes with temporary static credentials. Optional.
	SessionToken string
	// PutMode selects how PutIfAbsent keeps existing objects. Empty selects
	// PutModeConditional.
	PutMode PutMode
	// MaxAttempts bounds the attempts of each request, retries included.
	// Zero selects the SDK's default (3).
	MaxAttempts int
	// HTTPClient sends the requests, used as it is: AWS_CA_BUNDLE is not
	// applied to it. Nil selects a client that the bucket owns, built with
	// the SDK's transport settings (AWS_CA_BUNDLE included), whose idle
	// connections Close closes.
	HTTPClient *http.Client
	// Logger receives the AWS SDK's own messages (such as its fallback to
	// IMDSv1 while it looks for credentials) as records of this logger, so
	// that a JSON log stays JSON. Nil discards them.
	Logger *slog.Logger
}

// R2Endpoint returns the S3 endpoint of a Cloudflare account's R2 buckets.
// jurisdiction is "" for the default, or "eu" or "fedramp" for buckets created
// in that jurisdiction, which only its own endpoint can reach.
func R2Endpoint(accountID, jurisdiction string) string {
	if jurisdiction == "" {
		return "https://" + accountID + ".r2.cloudflarestorage.com"
	}
	return "https://" + accountID + "." + jurisdiction + ".r2.cloudflarestorage.com"
}

// ErrInvalidConfig is matched by every error of Config.Validate.
var ErrInvalidConfig = errors.New("bucket: invalid config")

// Validate checks the config without any I/O. Its errors match
// ErrInvalidConfig and name the offending field, never a secret.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if c.Bucket == "" {
		return bad("Bucket is required")
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("Endpoint %q must be an http or https URL", c.Endpoint)
		}
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return bad("AccessKeyID and SecretAccessKey go together: give both or neither")
	}
	if c.SessionToken != "" && c.AccessKeyID == "" {
		return bad("SessionToken needs AccessKeyID and SecretAccessKey")
	}
	switch c.PutMode {
	case "", PutModeConditional, PutModeHeadThenPut, PutModeAuto:
	default:
		return bad("PutMode %q is not one of %q, %q, %q", c.PutMode, PutModeConditional, PutModeHeadThenPut, PutModeAuto)
	}
	if c.MaxAttempts < 0 {
		return bad("MaxAttempts must not be negative")
	}
	return nil
}

// redacted stands in for a secret that is set.
const redacted = "[redacted]"

func redact(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

// String describes the config with its credentials redacted.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bucket.Config{Endpoint:%q Region:%q Bucket:%q PathStyle:%t", c.Endpoint, c.Region, c.Bucket, c.PathStyle)
	fmt.Fprintf(&b, " AccessKeyID:%q SecretAccessKey:%q SessionToken:%q", redact(c.AccessKeyID), redact(c.SecretAccessKey), redact(c.SessionToken))
	fmt.Fprintf(&b, " PutMode:%q MaxAttempts:%d}", c.PutMode, c.MaxAttempts)
	return b.String()
}

// GoString is String, so that %#v redacts the credentials too.
func (c Config) GoString() string { return c.String() }

// LogValue logs the config as a group with its credentials redacted.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("endpoint", c.Endpoint),
		slog.String("region", c.Region),
		slog.String("bucket", c.Bucket),
		slog.Bool("path_style", c.PathStyle),
		slog.String("access_key_id", redact(c.AccessKeyID)),
		slog.String("secret_access_key", redact(c.SecretAccessKey)),
		slog.String("session_token", redact(c.SessionToken)),
		slog.String("put_mode", string(c.PutMode)),
		slog.Int("max_attempts", c.MaxAttempts),
	)
}
