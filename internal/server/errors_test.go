package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/gen/cairn/v1/cairnv1connect"
	"github.com/cairnstore/cairn/internal/server"
	"github.com/cairnstore/cairn/internal/server/servertest"
	"github.com/cairnstore/cairn/keys"
)

// postJSON sends body to procedure in Connect's JSON form and returns the
// status and the decoded answer (the error's code and message on an error).
func postJSON(t *testing.T, env *servertest.Env, procedure string, body []byte) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, env.URL+procedure, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+servertest.TokenA)
	res, err := env.HTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("answer %q is not JSON: %v", raw, err)
	}
	return res.StatusCode, out
}

// TestRequestLimitsPerProcedure: a procedure that takes identifiers only is
// refused a request past SmallRequestBytes with resource_exhausted, and one
// within it but with an identifier past its bound with invalid_argument
// naming the bound; a procedure that takes a checkpoint keeps the server's
// limit. Nothing reaches etcd in any of these.
func TestRequestLimitsPerProcedure(t *testing.T) {
	env := servertest.Start(t, nil)
	ctx := testCtx(t)
	jsonString := func(n int) string { return `"` + strings.Repeat("x", n) + `"` }
	for _, c := range []struct {
		name, procedure, body string
		status                int
		code, message         string
	}{
		{"GetHead20MB", cairnv1connect.CheckpointServiceGetHeadProcedure, `{"threadId":` + jsonString(20<<20) + `}`, http.StatusTooManyRequests, "resource_exhausted", "larger than configured max"},
		{"GetHeadPastSmallLimit", cairnv1connect.CheckpointServiceGetHeadProcedure, `{"threadId":` + jsonString(server.SmallRequestBytes) + `}`, http.StatusTooManyRequests, "resource_exhausted", "larger than configured max"},
		{"GetHeadIDPastBound", cairnv1connect.CheckpointServiceGetHeadProcedure, `{"threadId":` + jsonString(cairn.MaxIDBytes+1) + `}`, http.StatusBadRequest, "invalid_argument", "1024 bytes"},
		{"GetInstanceKeyPastBound", cairnv1connect.InstanceServiceGetInstanceProcedure, `{"key":` + jsonString(cairn.MaxIDBytes+1) + `}`, http.StatusBadRequest, "invalid_argument", "1024 bytes"},
		{"AppendIDPastBound", cairnv1connect.CheckpointServiceAppendProcedure,
			`{"checkpoint":{"id":"c","threadId":` + jsonString(200<<10) + `,"createdAt":1,"reason":"automatic"},"writer":{"threadId":"t","ownerToken":"o","fence":1}}`,
			http.StatusBadRequest, "invalid_argument", "1024 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, out := postJSON(t, env, c.procedure, []byte(c.body))
			msg, _ := out["message"].(string)
			if status != c.status || out["code"] != c.code || !strings.Contains(msg, c.message) {
				t.Errorf("HTTP %d, code %v, message %q; want HTTP %d, %s, a message with %q", status, out["code"], shortText(msg), c.status, c.code, c.message)
			}
		})
	}
	resp, err := env.Etcd.Get(ctx, servertest.PrefixA, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("tenant a has %d keys after the refused requests (%v), want none", resp.Count, err)
	}
}

func shortText(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// rawGetHead calls GetHead of tenant A in Connect's JSON form, without the
// checks of package remote.
func rawGetHead(ctx context.Context, env *servertest.Env, thread string) (*connect.Response[cairnv1.GetHeadResponse], error) {
	client := cairnv1connect.NewCheckpointServiceClient(env.HTTP.Client(), env.URL, connect.WithProtoJSON())
	req := connect.NewRequest(&cairnv1.GetHeadRequest{ThreadId: thread})
	req.Header().Set("Authorization", "Bearer "+servertest.TokenA)
	return client.GetHead(ctx, req)
}

// TestInternalErrorCarriesRequestID: a failure no rule codes (here a thread
// record that is not JSON) is answered INTERNAL with the request's id in the
// message and in Cairn-Request-Id, without the error's text, which the log
// has under the same id. A success carries an id too.
func TestInternalErrorCarriesRequestID(t *testing.T) {
	logs := &servertest.LogBuffer{}
	env := servertest.Start(t, func(c *server.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	ctx := testCtx(t)
	if _, err := env.Etcd.Put(ctx, string(keys.NewLayout(servertest.PrefixA).Thread("broken")), "not json"); err != nil {
		t.Fatal(err)
	}
	res, err := rawGetHead(ctx, env, "fine")
	if err != nil {
		t.Fatal(err)
	}
	if res.Header().Get(server.RequestIDHeader) == "" {
		t.Errorf("a successful answer has no %s header", server.RequestIDHeader)
	}
	_, err = rawGetHead(ctx, env, "broken")
	ce := connectError(t, err)
	id := ce.Meta().Get(server.RequestIDHeader)
	switch {
	case ce.Code() != connect.CodeInternal:
		t.Fatalf("code %v (%v), want internal", ce.Code(), err)
	case id == "" || !strings.Contains(ce.Message(), id):
		t.Errorf("message %q and %s %q: want the id in both", ce.Message(), server.RequestIDHeader, id)
	case strings.Contains(ce.Message(), "corrupt") || strings.Contains(ce.Message(), "not json"):
		t.Errorf("message %q tells the error's text", ce.Message())
	}
	if log := logs.String(); !strings.Contains(log, "request_id="+id) || !strings.Contains(log, "corrupt") {
		t.Errorf("the log does not name the error by its request id %s:\n%s", id, log)
	}
}
