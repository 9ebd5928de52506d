package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// TestPanicAnswer: a handler's panic is logged with its stack under the
// request's id, and answered INTERNAL with that id and without the panic's
// text.
func TestPanicAnswer(t *testing.T) {
	var logs bytes.Buffer
	srv := &Server{log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx := context.WithValue(context.Background(), requestIDKey{}, "id-1")
	spec := connect.Spec{Procedure: "/cairn.v1.CheckpointService/GetHead"}
	err := srv.answer(ctx, "id-1", spec.Procedure, srv.recovered(ctx, spec, nil, "secret panic text"))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInternal || !strings.Contains(ce.Message(), "id-1") || strings.Contains(ce.Message(), "secret") {
		t.Errorf("answer %v: want INTERNAL naming id-1 without the panic's text", err)
	}
	if ce != nil && ce.Meta().Get(RequestIDHeader) != "id-1" {
		t.Errorf("%s = %q, want id-1", RequestIDHeader, ce.Meta().Get(RequestIDHeader))
	}
	if l := logs.String(); strings.Count(l, "request_id=id-1") != 2 || !strings.Contains(l, "secret panic text") || !strings.Contains(l, "stack=") {
		t.Errorf("the log does not have the panic and its stack under request id id-1:\n%s", l)
	}
}
