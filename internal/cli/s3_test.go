package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn/bucket"
)

// s3Error answers every request with an S3 error document.
func s3Error(status int, code, message string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, message)
	}
}

// noAWSEnvironment keeps the AWS SDK from finding credentials or a region
// of this machine, and from asking an instance metadata service.
func noAWSEnvironment(t *testing.T) {
	t.Helper()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials", "AWS_CONFIG_FILE": "/nonexistent/config",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_REGION": "", "AWS_DEFAULT_REGION": "",
	} {
		t.Setenv(k, v)
	}
}

func TestOpenBucketMessages(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		creds   bool
		region  string
		want    []string
		notWant string
	}{
		{
			name:    "WrongRegion",
			handler: s3Error(400, "AuthorizationHeaderMalformed", "The authorization header is malformed; the region 'auto' is wrong; expecting 'us-east-1'"),
			creds:   true, region: "auto",
			want:    []string{"wants requests signed for another region than --s3-region=auto", "CAIRN_S3_REGION", "expecting 'us-east-1'"},
			notWant: "rejected",
		},
		{
			name:    "RejectedCredentials",
			handler: s3Error(403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."),
			creds:   true, region: "auto",
			want:    []string{"credentials for bucket \"b\" were rejected"},
			notWant: "region",
		},
		{
			name:    "MissingCredentials",
			handler: s3Error(500, "InternalError", "no request should arrive"),
			region:  "auto",
			want:    []string{"no S3 credentials found for bucket \"b\"", EnvS3AccessKeyID, EnvS3SecretAccessKey},
			notWant: "rejected",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			noAWSEnvironment(t)
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			c := bucket.Config{Endpoint: srv.URL, Region: tc.region, Bucket: "b", PathStyle: true, MaxAttempts: 1}
			if tc.creds {
				c.AccessKeyID, c.SecretAccessKey = "AKID", "secret"
			}
			b, err := OpenBucket(t.Context(), c, 5*time.Second)
			if err == nil {
				b.Close()
				t.Fatal("OpenBucket succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) {
				t.Errorf("error %q contains %q", err, tc.notWant)
			}
		})
	}
}

// TestSDKMessagesGoToTheLog makes the AWS SDK warn (its IMDSv1 fallback,
// against a metadata service on 127.0.0.1 that refuses tokens) and checks
// that the warning is a record of the JSON log, not a line of its own.
func TestSDKMessagesGoToTheLog(t *testing.T) {
	noAWSEnvironment(t)
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusForbidden) // no IMDSv2: the SDK falls back and warns
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(imds.Close)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.URL)
	s3srv := httptest.NewServer(s3Error(500, "InternalError", "no request should arrive"))
	t.Cleanup(s3srv.Close)

	var logs bytes.Buffer
	log := NewLogger(&logs, "json", slog.LevelDebug)
	c := bucket.Config{Endpoint: s3srv.URL, Region: "auto", Bucket: "b", PathStyle: true, MaxAttempts: 1, Logger: log}
	if b, err := OpenBucket(t.Context(), c, 5*time.Second); err == nil {
		b.Close()
		t.Fatal("OpenBucket succeeded without credentials")
	}
	sdk := 0
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a log line is not JSON: %q", line)
			continue
		}
		if rec["component"] == "aws-sdk" {
			sdk++
		}
	}
	if sdk == 0 {
		t.Errorf("no AWS SDK record in the log:\n%s", logs.String())
	}
}
