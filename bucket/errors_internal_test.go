package bucket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// responseError builds the error the SDK returns for an HTTP error response,
// with an optional decoded API error inside.
func responseError(status int, apiErr error) error {
	if apiErr == nil {
		apiErr = errors.New("http error")
	}
	return &smithy.OperationError{ServiceID: "S3", OperationName: "Op", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: apiErr},
	}}
}

func apiError(code string) error { return &smithy.GenericAPIError{Code: code, Message: "m"} }

func TestClassify(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		bucketOp bool
		want     error
		code     string
	}{
		{"NoSuchKey", responseError(404, apiError("NoSuchKey")), false, ErrNotFound, "NoSuchKey"},
		{"HeadNotFound", responseError(404, apiError("NotFound")), false, ErrNotFound, "NotFound"},
		{"BareStatus404", responseError(404, nil), false, ErrNotFound, ""},
		{"BucketOp404", responseError(404, nil), true, ErrNoSuchBucket, ""},
		{"NoSuchBucket", responseError(404, apiError("NoSuchBucket")), false, ErrNoSuchBucket, "NoSuchBucket"},
		{"AccessDenied", responseError(403, apiError("AccessDenied")), false, ErrAccessDenied, "AccessDenied"},
		{"Bare403", responseError(403, nil), false, ErrAccessDenied, ""},
		{"InvalidAccessKeyId", responseError(403, apiError("InvalidAccessKeyId")), false, ErrInvalidCredentials, "InvalidAccessKeyId"},
		{"SignatureDoesNotMatch", responseError(403, apiError("SignatureDoesNotMatch")), false, ErrInvalidCredentials, "SignatureDoesNotMatch"},
		{"ExpiredToken", responseError(400, apiError("ExpiredToken")), false, ErrInvalidCredentials, "ExpiredToken"},
		{"PreconditionFailed", responseError(412, apiError("PreconditionFailed")), false, ErrPreconditionFailed, "PreconditionFailed"},
		{"Bare412", responseError(412, nil), false, ErrPreconditionFailed, ""},
		{"ConditionalRequestConflict", responseError(409, apiError("ConditionalRequestConflict")), false, ErrConflict, "ConditionalRequestConflict"},
		{"KeyTooLong", responseError(400, apiError("KeyTooLongError")), false, ErrInvalidKey, "KeyTooLongError"},
		{"ConnectionRefused", fmt.Errorf("send: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), false, ErrUnreachable, ""},
		{"DNS", fmt.Errorf("send: %w", &net.DNSError{Err: "no such host", Name: "x.invalid"}), false, ErrUnreachable, ""},
		{"NoCredentials", errors.New("get identity: failed to refresh cached credentials, no EC2 IMDS role found, dial tcp: connection refused"), false, ErrInvalidCredentials, ""},
		{"Unclassified", responseError(500, apiError("InternalError")), false, nil, "InternalError"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := classify("Op", "k", tc.bucketOp, tc.err)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("classify = %T %v; want an *Error", err, err)
			}
			if e.Kind != tc.want || e.Code != tc.code || e.Op != "Op" || e.Key != "k" {
				t.Fatalf("classify = %+v; want kind %v, code %q", e, tc.want, tc.code)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.want)
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("the cause is not reachable through %v", err)
			}
		})
	}
	t.Run("Nil", func(t *testing.T) {
		if err := classify("Op", "", false, nil); err != nil {
			t.Fatalf("classify(nil) = %v", err)
		}
	})
	t.Run("ContextErrorsUnwrapped", func(t *testing.T) {
		for _, ce := range []error{context.Canceled, context.DeadlineExceeded} {
			in := &smithy.OperationError{ServiceID: "S3", OperationName: "Op", Err: fmt.Errorf("send: %w", ce)}
			if got := classify("Op", "", false, in); got != ce {
				t.Errorf("classify(%v) = %v; want %v itself", in, got, ce)
			}
		}
	})
	t.Run("Message", func(t *testing.T) {
		got := classify("GetObject", "a/b", false, responseError(404, apiError("NoSuchKey"))).Error()
		for _, want := range []string{"bucket: GetObject", `"a/b"`, "not found", "NoSuchKey"} {
			if !strings.Contains(got, want) {
				t.Errorf("message %q lacks %q", got, want)
			}
		}
	})
}

// stuckLister returns a non-empty token that never changes.
type stuckLister struct{}

func (stuckLister) List(context.Context, string, string, int) (Page, error) {
	return Page{Objects: []Object{{Key: "a"}}, NextToken: "same"}, nil
}

func TestObjectsStopsOnAStuckListing(t *testing.T) {
	var n int
	var last error
	for _, err := range Objects(t.Context(), stuckLister{}, "", 0) {
		if err != nil {
			last = err
			break
		}
		n++
		if n > 10 {
			t.Fatal("Objects kept going on a listing that does not advance")
		}
	}
	if last == nil || !strings.Contains(last.Error(), "did not advance") {
		t.Fatalf("Objects ended with %v; want an error about the listing not advancing", last)
	}
}

// TestTransportKeepsIdleConnections: the client of NewS3 keeps as many idle
// connections as a capture and the object layout send requests at once.
func TestTransportKeepsIdleConnections(t *testing.T) {
	b, err := NewS3(t.Context(), Config{Endpoint: "http://127.0.0.1:9", Region: "auto", Bucket: "b", AccessKeyID: "k", SecretAccessKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := b.ownHTTP.MaxIdleConnsPerHost; got < MaxIdleConnsPerHost {
		t.Fatalf("MaxIdleConnsPerHost %d, want at least %d", got, MaxIdleConnsPerHost)
	}
}
