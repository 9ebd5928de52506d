package wire_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/wire"
)

// TestErrorsRoundTrip: every contract error survives ToConnect and
// FromConnect with its code and message, under the Connect code of the
// schema; an unknown outcome stays unknown; other errors are known failures.
func TestErrorsRoundTrip(t *testing.T) {
	for _, c := range []struct {
		code cairn.Code
		want connect.Code
	}{
		{cairn.CodeInvalidID, connect.CodeInvalidArgument},
		{cairn.CodeInvalidEntry, connect.CodeInvalidArgument},
		{cairn.CodeStaleHead, connect.CodeAborted},
		{cairn.CodeParentMismatch, connect.CodeAborted},
		{cairn.CodeWriterConflict, connect.CodeAborted},
		{cairn.CodeNotHead, connect.CodeFailedPrecondition},
		{cairn.CodeWriterLost, connect.CodeFailedPrecondition},
		{cairn.CodeForkSourceThreadMismatch, connect.CodeFailedPrecondition},
		{cairn.CodeDuplicateID, connect.CodeAlreadyExists},
		{cairn.CodeForkDestinationNotEmpty, connect.CodeAlreadyExists},
		{cairn.CodeForkSourceNotFound, connect.CodeNotFound},
		{cairn.CodeCheckpointNotFound, connect.CodeNotFound},
		{cairn.CodeAtomicForkRequired, connect.CodeUnimplemented},
		{cairn.CodeStoreFull, connect.CodeResourceExhausted},
	} {
		t.Run(string(c.code), func(t *testing.T) {
			ce := wire.ToConnect(cairn.NewError(c.code, "what %s", "failed"))
			if ce.Code() != c.want {
				t.Fatalf("Connect code %v, want %v", ce.Code(), c.want)
			}
			for _, write := range []bool{false, true} {
				err, unknown := wire.FromConnect(ce, write)
				if unknown || !errors.Is(err, &cairn.Error{Code: c.code}) || err.(*cairn.Error).Message != "what failed" {
					t.Fatalf("FromConnect(write=%v) = %v, unknown %v", write, err, unknown)
				}
			}
		})
	}
	t.Run("UnknownOutcome", func(t *testing.T) {
		ce := wire.ToConnect(&etcdstore.UnknownOutcomeError{Op: "append", Err: errors.New("etcd timed out")})
		if ce.Code() != connect.CodeUnknown {
			t.Fatalf("Connect code %v", ce.Code())
		}
		if _, unknown := wire.FromConnect(ce, false); !unknown {
			t.Fatal("the unknown outcome was lost")
		}
	})
	t.Run("OtherErrorIsKnownFailure", func(t *testing.T) {
		ce := wire.ToConnect(context.DeadlineExceeded)
		if ce.Code() != connect.CodeDeadlineExceeded {
			t.Fatalf("Connect code %v", ce.Code())
		}
		if _, unknown := wire.FromConnect(ce, true); unknown {
			t.Fatal("an error the server sent with its detail was taken for an unknown outcome")
		}
	})
	t.Run("NoDetailOnWriteIsUnknown", func(t *testing.T) {
		if _, unknown := wire.FromConnect(connect.NewError(connect.CodeUnavailable, errors.New("reset")), true); !unknown {
			t.Fatal("a transport error of a write was taken for a known failure")
		}
	})
}

// TestEtcdErrorsAreCoded: every error of the etcd client gets the Connect
// code of what happened, wrapped or not, and an error that is not etcd's
// stays INTERNAL.
func TestEtcdErrorsAreCoded(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want connect.Code
	}{
		{"RequestTooLarge", rpctypes.ErrRequestTooLarge, connect.CodeResourceExhausted},
		{"RequestTooLargeStatus", rpctypes.ErrGRPCRequestTooLarge, connect.CodeResourceExhausted},
		{"TooManyOps", rpctypes.ErrTooManyOps, connect.CodeResourceExhausted},
		{"ClientSendLimit", status.Error(codes.ResourceExhausted, "trying to send message larger than max (3145742 vs. 2097152)"), connect.CodeResourceExhausted},
		{"WrappedSendLimit", fmt.Errorf("etcdstore: stage: %w", status.Error(codes.ResourceExhausted, "larger than max")), connect.CodeResourceExhausted},
		{"NoLeader", rpctypes.ErrNoLeader, connect.CodeUnavailable},
		{"Timeout", rpctypes.ErrTimeout, connect.CodeUnavailable},
		{"TransportUnavailable", status.Error(codes.Unavailable, "connection refused"), connect.CodeUnavailable},
		{"NoEndpoints", clientv3.ErrNoAvailableEndpoints, connect.CodeUnavailable},
		{"PermissionDenied", rpctypes.ErrPermissionDenied, connect.CodeUnavailable},
		{"Compacted", rpctypes.ErrCompacted, connect.CodeUnavailable},
		{"GRPCDeadline", status.Error(codes.DeadlineExceeded, "deadline"), connect.CodeDeadlineExceeded},
		{"ClosingConnection", status.Error(codes.Canceled, "grpc: the client connection is closing"), connect.CodeCanceled},
		{"MalformedRequest", rpctypes.ErrKeyNotFound, connect.CodeInternal},
		{"NotEtcd", errors.New("etcdstore: corrupt record"), connect.CodeInternal},
	} {
		t.Run(c.name, func(t *testing.T) {
			if ce := wire.ToConnect(c.err); ce.Code() != c.want {
				t.Errorf("ToConnect(%v) has code %v, want %v", c.err, ce.Code(), c.want)
			}
		})
	}
}
