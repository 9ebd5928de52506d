package wire

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
)

// connectCodes maps the upstream codes onto Connect codes (see ErrorDetail
// in proto/cairn/v1/cairn.proto).
var connectCodes = map[cairn.Code]connect.Code{
	cairn.CodeInvalidID:                connect.CodeInvalidArgument,
	cairn.CodeInvalidEntry:             connect.CodeInvalidArgument,
	cairn.CodeStaleHead:                connect.CodeAborted,
	cairn.CodeParentMismatch:           connect.CodeAborted,
	cairn.CodeWriterConflict:           connect.CodeAborted,
	cairn.CodeNotHead:                  connect.CodeFailedPrecondition,
	cairn.CodeWriterLost:               connect.CodeFailedPrecondition,
	cairn.CodeForkSourceThreadMismatch: connect.CodeFailedPrecondition,
	cairn.CodeDuplicateID:              connect.CodeAlreadyExists,
	cairn.CodeForkDestinationNotEmpty:  connect.CodeAlreadyExists,
	cairn.CodeForkSourceNotFound:       connect.CodeNotFound,
	cairn.CodeCheckpointNotFound:       connect.CodeNotFound,
	cairn.CodeAtomicForkRequired:       connect.CodeUnimplemented,
	cairn.CodeStoreFull:                connect.CodeResourceExhausted,
}

// ConnectCode returns the Connect code of an upstream code, and
// CodeUnknown for a code the contract does not define.
func ConnectCode(c cairn.Code) connect.Code {
	if cc, ok := connectCodes[c]; ok {
		return cc
	}
	return connect.CodeUnknown
}

// NewError returns a Connect error with code and an ErrorDetail carrying
// message and no upstream code: a failure outside the contract (a refused
// token, an oversize request) whose outcome is known, since nothing ran.
func NewError(code connect.Code, message string) *connect.Error {
	return withDetail(connect.NewError(code, errors.New(message)), &cairnv1.ErrorDetail{Message: message})
}

func withDetail(ce *connect.Error, d *cairnv1.ErrorDetail) *connect.Error {
	if det, err := connect.NewErrorDetail(d); err == nil {
		ce.AddDetail(det)
	}
	return ce
}

// ToConnect converts an error of a store into the error the server sends.
// Every error carries an ErrorDetail, so that a client can tell the errors
// of the server from those of the network: a contract error its upstream
// code, an unknown outcome (etcdstore.UnknownOutcomeError) unknown_outcome
// and the operation, any other error its message only, which says that the
// write failed without effect.
func ToConnect(err error) *connect.Error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	msg := err.Error()
	var uo *etcdstore.UnknownOutcomeError
	if errors.As(err, &uo) {
		return withDetail(connect.NewError(connect.CodeUnknown, err),
			&cairnv1.ErrorDetail{Code: string(cairn.CodeOf(uo.Err)), Message: msg, UnknownOutcome: true, Operation: uo.Op})
	}
	var e *cairn.Error
	if errors.As(err, &e) {
		return withDetail(connect.NewError(ConnectCode(e.Code), err),
			&cairnv1.ErrorDetail{Code: string(e.Code), Message: e.Message})
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, cairn.ErrUnsupported):
		code = connect.CodeUnimplemented
	default:
		if c, ok := EtcdCode(err); ok {
			code = c
		}
	}
	return withDetail(connect.NewError(code, err), &cairnv1.ErrorDetail{Message: msg})
}

// EtcdCode returns the Connect code of an error of the etcd client, and
// false for any other error:
//
//   - a request etcd refuses for its size or its operations
//     (ErrRequestTooLarge, ErrTooManyOps, or gRPC's RESOURCE_EXHAUSTED when
//     the client would send or receive more than gRPC allows):
//     RESOURCE_EXHAUSTED;
//   - another INVALID_ARGUMENT of etcd: INTERNAL, since it is a request the
//     store built wrong;
//   - DEADLINE_EXCEEDED and CANCELED: the same;
//   - every other gRPC status, and an etcd client without endpoints:
//     UNAVAILABLE, since etcd did not serve the request (no leader, a lost
//     connection, refused credentials, a compacted revision).
func EtcdCode(err error) (connect.Code, bool) {
	if errors.Is(err, clientv3.ErrNoAvailableEndpoints) {
		return connect.CodeUnavailable, true
	}
	var code codes.Code
	var desc string
	var ee rpctypes.EtcdError
	var gs interface{ GRPCStatus() *status.Status }
	switch {
	case errors.As(err, &ee):
		code, desc = ee.Code(), ee.Error()
	case errors.As(err, &gs):
		st := gs.GRPCStatus()
		code, desc = st.Code(), st.Message()
	default:
		return 0, false
	}
	switch {
	case code == codes.ResourceExhausted,
		desc == rpctypes.ErrRequestTooLarge.Error(), desc == rpctypes.ErrTooManyOps.Error():
		return connect.CodeResourceExhausted, true
	case code == codes.InvalidArgument:
		return connect.CodeInternal, true
	case code == codes.DeadlineExceeded:
		return connect.CodeDeadlineExceeded, true
	case code == codes.Canceled:
		return connect.CodeCanceled, true
	case code == codes.OK:
		return 0, false
	}
	return connect.CodeUnavailable, true
}

// Detail returns the ErrorDetail of a Connect error, or nil when it has none
// (the error did not come from a cairnd handler: a transport failure, a
// proxy, a deadline that ended on the client).
func Detail(ce *connect.Error) *cairnv1.ErrorDetail {
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			continue
		}
		if det, ok := v.(*cairnv1.ErrorDetail); ok {
			return det
		}
	}
	return nil
}

// refusedUnread reports whether ce is an error that the server (or a proxy)
// sends only for a request it refused before any handler ran: connect-go's
// read limit (RESOURCE_EXHAUSTED), a codec or procedure it does not serve,
// a message it cannot decode, or an HTTP 401 or 403 of a proxy.
func refusedUnread(ce *connect.Error) bool {
	if !connect.IsWireError(ce) {
		return false
	}
	switch ce.Code() {
	case connect.CodeResourceExhausted, connect.CodeUnimplemented, connect.CodeInvalidArgument,
		connect.CodeUnauthenticated, connect.CodePermissionDenied:
		return true
	}
	return false
}

// FromConnect converts an error of a call into the error a client returns.
// A contract error becomes a *cairn.Error with its code and message (the
// Connect error is its cause), so errors.Is(err, cairn.ErrStaleHead) works.
// unknown reports that the outcome of a write is unknown: the server said
// so, or, for a write (write true), the error did not come from the server's
// handler, so the request may have been applied.
func FromConnect(err error, write bool) (out error, unknown bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err, write
	}
	d := Detail(ce)
	if d == nil {
		return err, write && !refusedUnread(ce)
	}
	out = err
	if d.Code != "" {
		out = &cairn.Error{Code: cairn.Code(d.Code), Message: d.Message, Err: err}
	}
	return out, d.UnknownOutcome
}
