package bucket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/aws/smithy-go"
)

// The kinds of bucket errors. Match them with errors.Is; an *Error unwraps to
// its kind and to its cause.
var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("not found")
	// ErrNoSuchBucket: the bucket does not exist.
	ErrNoSuchBucket = errors.New("no such bucket")
	// ErrAccessDenied: the credentials are valid but lack a permission.
	ErrAccessDenied = errors.New("access denied")
	// ErrInvalidCredentials: the server rejected the credentials (unknown key
	// id, wrong secret, expired token), or none could be found.
	ErrInvalidCredentials = errors.New("invalid credentials")
	// ErrPreconditionFailed: a conditional request's condition did not hold.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrConflict: a concurrent conditional write on the same key won; the
	// request may be retried.
	ErrConflict = errors.New("conflicting concurrent write")
	// ErrUnreachable: the endpoint could not be reached.
	ErrUnreachable = errors.New("endpoint unreachable")
	// ErrInvalidKey: the key cannot be stored (empty, too long, invalid UTF-8,
	// or, for content-addressed reads and uploads, not a blob key of the
	// expected form).
	ErrInvalidKey = errors.New("invalid key")
	// ErrNotAttempted: Delete did not send the key's request because an
	// earlier request failed as a whole.
	ErrNotAttempted = errors.New("not attempted")
	// ErrPartialDelete: Delete deleted some keys but not others; its result
	// lists which.
	ErrPartialDelete = errors.New("some keys were not deleted")
	// ErrInvalidRange: a range read asked for bytes the object does not
	// hold (RangeReader).
	ErrInvalidRange = errors.New("range not satisfiable")
)

// Error describes a failed bucket operation.
type Error struct {
	// Op is the operation, e.g. "GetObject".
	Op string
	// Key is the object key, or "" for an operation on the bucket.
	Key string
	// Code is the error code the server sent, e.g. "NoSuchKey", if any.
	Code string
	// Kind is one of the package's sentinel errors, or nil when the error
	// fits none of them.
	Kind error
	// Err is the underlying cause.
	Err error
}

// Error describes the failure: the operation, the key, the kind, the
// server's code and the cause.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("bucket: ")
	b.WriteString(e.Op)
	if e.Key != "" {
		fmt.Fprintf(&b, " %q", e.Key)
	}
	if e.Kind != nil {
		b.WriteString(": ")
		b.WriteString(e.Kind.Error())
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (%s)", e.Code)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the error's kind and its cause, so that errors.Is matches the
// kind and errors.As reaches the cause.
func (e *Error) Unwrap() []error {
	var out []error
	if e.Kind != nil {
		out = append(out, e.Kind)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// classify turns an error of the S3 client into an *Error. It is the only
// place that interprets S3 error codes and HTTP statuses. nil stays nil, and
// context errors are returned as they are.
//
// bucketOp says that op addresses the bucket rather than an object, so that a
// bare 404 means a missing bucket.
func classify(op, key string, bucketOp bool, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return context.Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	e := &Error{Op: op, Key: key, Err: err}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		e.Code = apiErr.ErrorCode()
		e.Kind = kindOfCode(e.Code)
	}
	if e.Kind == nil {
		e.Kind = kindOfStatus(httpStatus(err))
	}
	if e.Kind == ErrNotFound && bucketOp {
		e.Kind = ErrNoSuchBucket
	}
	// The credential check comes first: failing to fetch credentials from a
	// metadata service is also a network error, but the fix is credentials.
	if e.Kind == nil && isMissingCredentials(err) {
		e.Kind = ErrInvalidCredentials
	}
	if e.Kind == nil && isUnreachable(err) {
		e.Kind = ErrUnreachable
	}
	return e
}

// kindOfCode maps an S3 error code onto a kind, or nil.
func kindOfCode(code string) error {
	switch code {
	case "NoSuchKey", "NotFound":
		return ErrNotFound
	case "NoSuchBucket":
		return ErrNoSuchBucket
	case "AccessDenied", "Forbidden", "AllAccessDisabled", "AccountProblem":
		return ErrAccessDenied
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken",
		"TokenRefreshRequired", "InvalidSecurity", "Unauthorized", "AuthorizationHeaderMalformed",
		"XAdminUserNotFound": // versitygw's answer (with a 404) to an unknown access key id
		return ErrInvalidCredentials
	case "PreconditionFailed":
		return ErrPreconditionFailed
	case "ConditionalRequestConflict", "OperationAborted":
		return ErrConflict
	case "KeyTooLongError", "InvalidKey", "InvalidObjectName":
		return ErrInvalidKey
	}
	return nil
}

// kindOfStatus maps an HTTP status onto a kind, for responses without a
// usable code (HEAD responses have no body).
func kindOfStatus(status int) error {
	switch status {
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusForbidden:
		return ErrAccessDenied
	case http.StatusUnauthorized:
		return ErrInvalidCredentials
	case http.StatusPreconditionFailed:
		return ErrPreconditionFailed
	case http.StatusConflict:
		return ErrConflict
	}
	return nil
}

// httpStatus returns the HTTP status of the response behind err, or 0.
func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// isUnreachable reports whether err is a failure to connect or to get an
// answer from the endpoint.
func isUnreachable(err error) bool {
	var netErr net.Error
	var opErr *net.OpError
	var dnsErr *net.DNSError
	return errors.As(err, &opErr) || errors.As(err, &dnsErr) || errors.As(err, &netErr)
}

// isMissingCredentials reports whether the SDK found no credentials to sign
// with.
func isMissingCredentials(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "get identity: ") ||
		strings.Contains(msg, "failed to retrieve credentials") ||
		strings.Contains(msg, "failed to refresh cached credentials")
}
