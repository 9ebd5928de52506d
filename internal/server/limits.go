package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"

	"connectrpc.com/connect"

	"github.com/cairnstore/cairn/gen/cairn/v1/cairnv1connect"
	"github.com/cairnstore/cairn/internal/wire"
)

// SmallRequestBytes bounds the request of every procedure whose message
// holds only identifiers, names and numbers (all but those in
// largeProcedures): a GetHead needs a few KiB, not the largest checkpoint.
// It admits the largest such message within the bounds of package cairn in
// either encoding: a ForkFromCheckpoint or an UpsertInstance of six fields
// of 1 KiB, each a JSON string of NUL bytes that JSON escapes to six bytes
// apiece, is about 37 KiB (TestSmallRequestsAtEveryBound). A larger request
// is refused with RESOURCE_EXHAUSTED before it is decoded.
const SmallRequestBytes = 64 << 10

// largeProcedures are the procedures whose requests carry a checkpoint, a
// transcript or lists of blob keys; Config.MaxRequestBytes bounds them.
var largeProcedures = []string{
	cairnv1connect.CheckpointServiceAppendProcedure,
	cairnv1connect.CheckpointServiceSaveThreadProcedure,
	cairnv1connect.CheckpointServiceClaimBlobsProcedure,
	cairnv1connect.CheckpointServiceWaitBlobsProcedure,
	cairnv1connect.BlobCollectorServiceMarkBlobsProcedure,
	cairnv1connect.BlobCollectorServiceBeginBlobDeletesProcedure,
	cairnv1connect.BlobCollectorServiceEndBlobDeletesProcedure,
	cairnv1connect.BlobCollectorServiceDropBlobRecordsProcedure,
}

// LargeProcedure reports whether procedure (as "/cairn.v1.Service/Method")
// is one whose request Config.MaxRequestBytes bounds; every other
// procedure's is bounded by SmallRequestBytes.
func LargeProcedure(procedure string) bool { return slices.Contains(largeProcedures, procedure) }

// RequestLimit returns the largest request of procedure the server reads.
func (srv *Server) RequestLimit(procedure string) int {
	if LargeProcedure(procedure) {
		return srv.maxBytes
	}
	return SmallRequestBytes
}

// mountServices mounts every service on mux twice over: under the service's
// path with a read limit of SmallRequestBytes, and under the path of each of
// largeProcedures (which the mux prefers, being longer) with the server's
// limit.
func (srv *Server) mountServices(mux *http.ServeMux, opts []connect.HandlerOption) {
	services := func(limit int) []func() (string, http.Handler) {
		o := append(append([]connect.HandlerOption(nil), opts...), connect.WithReadMaxBytes(limit))
		return []func() (string, http.Handler){
			func() (string, http.Handler) {
				return cairnv1connect.NewCheckpointServiceHandler(&checkpoints{srv}, o...)
			},
			func() (string, http.Handler) { return cairnv1connect.NewInstanceServiceHandler(&instances{srv}, o...) },
			func() (string, http.Handler) {
				return cairnv1connect.NewBlobCollectorServiceHandler(&collector{srv}, o...)
			},
			func() (string, http.Handler) { return cairnv1connect.NewTestClockServiceHandler(&testClock{srv}, o...) },
		}
	}
	for _, mount := range services(SmallRequestBytes) {
		mux.Handle(mount())
	}
	large := map[string]http.Handler{}
	for _, mount := range services(srv.maxBytes) {
		path, h := mount()
		large[path] = h
	}
	for _, p := range largeProcedures {
		for path, h := range large {
			if len(p) > len(path) && p[:len(path)] == path {
				mux.Handle(p, h)
			}
		}
	}
}

// RequestIDHeader is the response header (and, on an error, the metadata)
// that carries the id cairnd gives each request. Its log names the request
// by the same id.
const RequestIDHeader = "Cairn-Request-Id"

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// requestIDs gives each request an id, answers it in RequestIDHeader, and
// turns every error into the answer the client gets (see answer).
type requestIDs struct{ srv *Server }

// requestIDKey is the context key of the request's id.
type requestIDKey struct{}

func (r requestIDs) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		id := newRequestID()
		ctx = context.WithValue(ctx, requestIDKey{}, id)
		res, err := next(ctx, req)
		if err != nil {
			return nil, r.srv.answer(ctx, id, req.Spec().Procedure, err)
		}
		res.Header().Set(RequestIDHeader, id)
		return res, nil
	}
}

func (r requestIDs) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (r requestIDs) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		id := newRequestID()
		ctx = context.WithValue(ctx, requestIDKey{}, id)
		conn.ResponseHeader().Set(RequestIDHeader, id)
		if err := next(ctx, conn); err != nil {
			return r.srv.answer(ctx, id, conn.Spec().Procedure, err)
		}
		return nil
	}
}

// answer returns the error the client gets for err, which carries the
// request's id in RequestIDHeader. INTERNAL is a bug of cairnd (an error no
// rule codes): it is logged with the id, and the answer says only that it
// happened and under which id, never the text of the error, which may be a
// transport's. Errors of etcd's availability are logged as warnings.
func (srv *Server) answer(ctx context.Context, id, procedure string, err error) error {
	ce := wire.ToConnect(err)
	switch ce.Code() {
	case connect.CodeInternal, connect.CodeUnknown:
		if ce.Code() == connect.CodeUnknown && wire.Detail(ce) != nil && wire.Detail(ce).UnknownOutcome {
			srv.log.WarnContext(ctx, "write outcome unknown", "request_id", id, "procedure", procedure, "err", err)
			break
		}
		srv.log.ErrorContext(ctx, "internal error", "request_id", id, "procedure", procedure, "err", err)
		ce = wire.NewError(connect.CodeInternal, fmt.Sprintf("cairnd: internal error; its log names it by request id %s", id))
	case connect.CodeUnavailable, connect.CodeResourceExhausted, connect.CodeDeadlineExceeded:
		srv.log.WarnContext(ctx, "request failed", "request_id", id, "procedure", procedure, "code", ce.Code().String(), "err", err)
	}
	ce.Meta().Set(RequestIDHeader, id)
	return ce
}

// recovered is the answer to a handler's panic: an error that answer turns
// into INTERNAL with the request's id, once the stack is logged.
func (srv *Server) recovered(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
	id, _ := ctx.Value(requestIDKey{}).(string)
	srv.log.ErrorContext(ctx, "panic", slog.String("request_id", id), slog.String("procedure", spec.Procedure),
		slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
	return connect.NewError(connect.CodeInternal, fmt.Errorf("panic: %v", p))
}
