package server_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/gen/cairn/v1/cairnv1connect"
	"github.com/cairnstore/cairn/internal/server/servertest"
	"github.com/cairnstore/cairn/remote"
)

// TestWholeResponses: a unary response goes out with its length in one
// piece up to 1 MiB, and in chunks beyond; its status, headers and body are
// those the handler wrote, in the binary and the JSON encoding; streams stay
// chunked.
func TestWholeResponses(t *testing.T) {
	env := servertest.Start(t, nil)
	ctx := testCtx(t)
	s := remote.New(env.URL, remote.Options{Token: servertest.TokenA})
	// 16 KiB: more than net/http sends with a length of its own accord.
	mid := `"` + strings.Repeat("m", 16<<10) + `"`
	appendOne(t, ctx, s, "mid", "mid-1", mid)
	appendOne(t, ctx, s, "big", "big-1", `"`+strings.Repeat("y", 2<<20)+`"`)
	get := env.URL + cairnv1connect.CheckpointServiceGetCheckpointProcedure
	post := func(t *testing.T, url, contentType, token string, body []byte) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		got, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, got
	}
	bin := func(id string) []byte {
		b, _ := proto.Marshal(&cairnv1.GetCheckpointRequest{Id: id})
		return b
	}
	checkpointOf := func(t *testing.T, body []byte) *cairnv1.Checkpoint {
		t.Helper()
		var m cairnv1.GetCheckpointResponse
		if err := proto.Unmarshal(body, &m); err != nil || m.Checkpoint == nil {
			t.Fatalf("response %q: %v", body[:min(len(body), 64)], err)
		}
		return m.Checkpoint
	}
	t.Run("Binary", func(t *testing.T) {
		res, body := post(t, get, "application/proto", servertest.TokenA, bin("mid-1"))
		if res.StatusCode != 200 || res.ContentLength != int64(len(body)) || len(res.TransferEncoding) != 0 {
			t.Fatalf("status %d, length %d of %d bytes, transfer encoding %v: want 200 with the length", res.StatusCode, res.ContentLength, len(body), res.TransferEncoding)
		}
		if c := checkpointOf(t, body); c.Id != "mid-1" || string(c.Conversation) != mid {
			t.Fatalf("got %v", c)
		}
	})
	t.Run("JSON", func(t *testing.T) {
		res, body := post(t, get, "application/json", servertest.TokenA, []byte(`{"id":"mid-1"}`))
		if res.StatusCode != 200 || res.ContentLength != int64(len(body)) || !bytes.Contains(body, []byte(`"mid-1"`)) {
			t.Fatalf("status %d, length %d, body %s", res.StatusCode, res.ContentLength, body)
		}
	})
	t.Run("Error", func(t *testing.T) {
		res, body := post(t, get, "application/json", "not-a-token", []byte(`{"id":"mid-1"}`))
		if res.StatusCode != http.StatusUnauthorized || res.ContentLength != int64(len(body)) || !bytes.Contains(body, []byte("unauthenticated")) {
			t.Fatalf("status %d, length %d, body %s: want 401 with its length", res.StatusCode, res.ContentLength, body)
		}
	})
	t.Run("OverOneMiB", func(t *testing.T) {
		res, body := post(t, get, "application/proto", servertest.TokenA, bin("big-1"))
		if res.StatusCode != 200 || res.ContentLength != -1 || len(body) < 2<<20 {
			t.Fatalf("status %d, length %d of %d bytes: want 200 in chunks", res.StatusCode, res.ContentLength, len(body))
		}
		if c := checkpointOf(t, body); len(c.Conversation) != 2<<20+2 {
			t.Fatalf("conversation of %d bytes", len(c.Conversation))
		}
	})
	t.Run("Stream", func(t *testing.T) {
		req, _ := proto.Marshal(&cairnv1.ListCheckpointsRequest{ThreadId: "mid"})
		frame := append([]byte{0, 0, 0, 0, byte(len(req))}, req...)
		res, body := post(t, env.URL+cairnv1connect.CheckpointServiceListCheckpointsProcedure, "application/connect+proto", servertest.TokenA, frame)
		if res.StatusCode != 200 || res.ContentLength != -1 || len(body) == 0 {
			t.Fatalf("status %d, length %d of %d bytes: want a stream in chunks", res.StatusCode, res.ContentLength, len(body))
		}
	})
}
