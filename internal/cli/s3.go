package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cairnstore/cairn/bucket"
)

// Environment variables without a flag: static S3 credentials, which never go
// on a command line. Without them the AWS SDK's default chain applies
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, shared files, roles).
const (
	EnvS3AccessKeyID     = "CAIRN_S3_ACCESS_KEY_ID"
	EnvS3SecretAccessKey = "CAIRN_S3_SECRET_ACCESS_KEY"
	EnvS3SessionToken    = "CAIRN_S3_SESSION_TOKEN"
)

// RegisterS3 adds the --s3-* flags, bound to c, which holds the defaults,
// and makes the set's LogValue say which credential variables are set.
func RegisterS3(s *Set, c *bucket.Config) {
	s.StringVar(&c.Endpoint, "s3-endpoint", c.Endpoint, "S3 endpoint URL, e.g. https://<account>.r2.cloudflarestorage.com (empty: the SDK's default)")
	s.StringVar(&c.Region, "s3-region", c.Region, "S3 signing region; R2 uses auto (empty: the SDK's default chain, else auto)")
	s.StringVar(&c.Bucket, "s3-bucket", c.Bucket, "bucket holding the blobs (required)")
	s.BoolVar(&c.PathStyle, "s3-path-style", c.PathStyle, "address the bucket in the URL path (most local S3 servers need it)")
	s.redact("s3-endpoint", RedactURLs)
	s.s3Creds = true
}

// S3Credentials sets c's static credentials from the CAIRN_S3_* variables
// that getenv reports set.
func S3Credentials(getenv func(string) string, c *bucket.Config) {
	c.AccessKeyID, _ = Lookup(getenv, EnvS3AccessKeyID)
	c.SecretAccessKey, _ = Lookup(getenv, EnvS3SecretAccessKey)
	c.SessionToken, _ = Lookup(getenv, EnvS3SessionToken)
}

// ValidateS3 checks the S3 settings without I/O: a bucket is given and the
// configuration is one the client accepts. Its errors match ErrUsage.
func ValidateS3(c bucket.Config) error {
	if c.Bucket == "" {
		return Usagef("--s3-bucket (or %s) is required", EnvName("s3-bucket"))
	}
	if err := c.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), bucket.ErrInvalidConfig.Error()+": ")
		return Usagef("S3 settings: %s", msg)
	}
	return nil
}

// OpenBucket returns the bucket that c describes, after checking within
// probe that the bucket exists and the credentials may list it. Its errors
// say which of these failed, or that the endpoint did not answer.
func OpenBucket(ctx context.Context, c bucket.Config, probe time.Duration) (*bucket.S3, error) {
	pctx, cancel := context.WithTimeout(ctx, probe)
	defer cancel()
	b, err := bucket.NewS3(pctx, c)
	if err != nil {
		return nil, err
	}
	if err := b.Probe(pctx); err != nil {
		b.Close()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, fmt.Errorf("bucket %q at %s did not answer within %v: %w", c.Bucket, RedactURLs(c.Endpoint), probe, err)
		}
		return nil, describeS3(c, err)
	}
	return b, nil
}

// describeS3 tells apart the failures that S3 servers report as bad
// credentials: a request signed for the wrong region, and no credentials
// at all.
func describeS3(c bucket.Config, err error) error {
	var be *bucket.Error
	region := c.Region
	if region == "" {
		region = "the default"
	}
	switch {
	case errors.As(err, &be) && (be.Code == "AuthorizationHeaderMalformed" || strings.Contains(strings.ToLower(be.Error()), "region")) &&
		be.Code != "InvalidAccessKeyId" && be.Code != "SignatureDoesNotMatch":
		return fmt.Errorf("bucket %q at %s wants requests signed for another region than --s3-region=%s; "+
			"set --s3-region (or %s) to the bucket's region (R2 takes auto); the credentials were not checked: %w",
			c.Bucket, RedactURLs(c.Endpoint), region, EnvName("s3-region"), be)
	case errors.As(err, &be) && errors.Is(err, bucket.ErrInvalidCredentials) && missingCredentials(err):
		return fmt.Errorf("no S3 credentials found for bucket %q: set %s and %s, "+
			"or give the AWS SDK its own (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a shared credentials file, a role): %w",
			c.Bucket, EnvS3AccessKeyID, EnvS3SecretAccessKey, be)
	}
	return err
}

// missingCredentials reports whether the SDK failed to find credentials, as
// opposed to the server rejecting them.
func missingCredentials(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "failed to retrieve credentials") || strings.Contains(msg, "get identity: ") ||
		strings.Contains(msg, "failed to refresh cached credentials")
}
