package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestWholeWriter: what a handler writes reaches the client unchanged
// whether it is held back (with its length), flushed on the way (without),
// or too large to hold back (without); the status comes first either way.
func TestWholeWriter(t *testing.T) {
	big := bytes.Repeat([]byte("b"), wholeMaxBytes)
	for _, c := range []struct {
		name       string
		handler    func(w http.ResponseWriter)
		body       []byte
		withLength bool
		flushed    bool
	}{
		{"Held", func(w http.ResponseWriter) { w.WriteHeader(201); w.Write([]byte("ab")); w.Write([]byte("c")) }, []byte("abc"), true, false},
		{"Flushed", func(w http.ResponseWriter) {
			w.WriteHeader(201)
			w.Write([]byte("ab"))
			w.(http.Flusher).Flush()
			w.Write([]byte("c"))
		}, []byte("abc"), false, true},
		{"TooLarge", func(w http.ResponseWriter) { w.WriteHeader(201); w.Write([]byte("a")); w.Write(big) }, append([]byte("a"), big...), false, false},
		{"StatusOnly", func(w http.ResponseWriter) { w.WriteHeader(201) }, nil, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := wholeResponses(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { c.handler(w) }))
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/cairn.v1.CheckpointService/GetCheckpoint", nil)
			req.Header.Set("Content-Type", "application/proto")
			h.ServeHTTP(rec, req)
			if rec.Code != 201 || !bytes.Equal(rec.Body.Bytes(), c.body) || rec.Flushed != c.flushed {
				t.Fatalf("status %d, %d bytes, flushed %v", rec.Code, rec.Body.Len(), rec.Flushed)
			}
			if got := rec.Header().Get("Content-Length") != ""; got != c.withLength {
				t.Fatalf("Content-Length %q, want one: %v", rec.Header().Get("Content-Length"), c.withLength)
			}
		})
	}
}
