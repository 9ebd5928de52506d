package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/cairnstore/cairn/internal/server"
	"github.com/cairnstore/cairn/internal/server/servertest"
)

// fuzzFieldBytes bounds the fields FuzzConnectAPI writes: past the small
// request limit, so that both sides of it are tried.
const fuzzFieldBytes = 2*server.SmallRequestBytes + 2

// readSlack is how much more than its procedure's limit a request may be
// and still be decoded: a stream's envelope header.
const readSlack = 5

// FuzzConnectAPI sends cairnd's handler requests of every procedure, in
// the binary and the JSON form of Connect: either raw bytes, or a message of
// the procedure with every string field of one fuzzed size (up to twice the
// small request limit) and every list of a fuzzed length. Every answer must
// be a success or an error with a code other than INTERNAL (which is for
// bugs), and a request over the limit of its procedure must be refused with
// RESOURCE_EXHAUSTED: the server never decodes it (connect-go reads the
// rest of such a body through a fixed buffer and drops it), so what a
// request makes the server hold is bounded by its procedure's limit.
func FuzzConnectAPI(f *testing.F) {
	env := servertest.Start(f, func(c *server.Config) { c.RequestTimeout = 5 * time.Second })
	handler := env.HTTP.Config.Handler
	procs := procedures()
	f.Add(uint8(2), false, uint32(8), uint8('t'), uint8(1), []byte(nil))
	f.Add(uint8(2), true, uint32(server.SmallRequestBytes), uint8(0), uint8(1), []byte(nil))
	f.Add(uint8(3), false, uint32(1025), uint8('a'), uint8(2), []byte(nil))
	f.Add(uint8(5), true, uint32(3), uint8(0xe9), uint8(1), []byte(nil))
	f.Add(uint8(10), false, uint32(1024), uint8(0), uint8(0), []byte(nil))
	f.Add(uint8(16), true, uint32(1), uint8('k'), uint8(1), []byte(nil))
	f.Add(uint8(3), true, uint32(0x7f_ff_ff_10), uint8('x'), uint8(1), []byte(nil))
	f.Add(uint8(13), false, uint32(0x7f_ff_ff_10), uint8('1'), uint8(0), []byte(nil)) // SaveThread, a thread of 2 MiB
	f.Add(uint8(2), false, uint32(0), uint8(0), uint8(0), []byte(`{"threadId":"x","unknown":[1,2]}`))
	f.Add(uint8(3), true, uint32(0), uint8(0), uint8(0), []byte{0x0a, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, which uint8, binaryForm bool, size uint32, fill uint8, lists uint8, raw []byte) {
		p := procs[int(which)%len(procs)]
		body := raw
		if len(raw) == 0 {
			msg := dynamicpb.NewMessage(p.method.Input())
			fillFields(msg, strings.Repeat(string(rune(fill)), int(size%fuzzFieldBytes)), int(lists%3))
			// One string field, picked by the size's high bits, gets a
			// size past etcd's limits (up to 3 MiB): what a buggy or
			// hostile caller sends, in the procedures that admit it.
			if setters := stringSetters(msg); size>>24 != 0 && len(setters) > 0 {
				setters[int(size>>24)%len(setters)](strings.Repeat(string(rune(fill)), int(size>>8)%(3<<20)))
			}
			var err error
			if binaryForm {
				body, err = proto.Marshal(msg)
			} else {
				body, err = protojson.Marshal(msg)
			}
			if err != nil {
				t.Skipf("the message does not encode: %v", err)
			}
		}
		contentType := map[bool]string{true: "application/proto", false: "application/json"}[binaryForm]
		if p.streaming {
			contentType = map[bool]string{true: "application/connect+proto", false: "application/connect+json"}[binaryForm]
			body = append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body))), body...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, p.path, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("Authorization", "Bearer "+servertest.TokenA)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		code := answerCode(t, p.streaming, rec)
		if code == "internal" {
			t.Errorf("%s (%d bytes, %s): answered %s: %.300s", p.path, len(body), contentType, code, rec.Body.String())
		}
		if limit := env.Server.RequestLimit(p.path) + readSlack; len(body) > limit && code != "resource_exhausted" {
			t.Errorf("%s: a request of %d bytes, over its limit of %d, was answered %q, not refused", p.path, len(body), limit, code)
		}
	})
}

// stringSetters returns a setter of each string field of m and of the
// messages in it, lists' elements included.
func stringSetters(m protoreflect.Message) []func(string) {
	var out []func(string)
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		switch {
		case f.IsList() && f.Kind() == protoreflect.MessageKind:
			l := m.Get(f).List()
			for j := range l.Len() {
				out = append(out, stringSetters(l.Get(j).Message())...)
			}
		case f.IsList() || f.IsMap():
		case f.Kind() == protoreflect.StringKind:
			out = append(out, func(s string) { m.Set(f, protoreflect.ValueOfString(s)) })
		case f.Kind() == protoreflect.MessageKind && m.Has(f):
			out = append(out, stringSetters(m.Get(f).Message())...)
		}
	}
	return out
}

// answerCode returns the Connect error code of an answer, "" for a success.
func answerCode(t *testing.T, streaming bool, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var end struct {
		Code  string `json:"code"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if !streaming {
		if rec.Code == http.StatusOK {
			return ""
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &end); err != nil || end.Code == "" {
			t.Fatalf("HTTP %d without a Connect error: %.300q", rec.Code, rec.Body.String())
		}
		return end.Code
	}
	// A stream's messages are enveloped; the last one, flagged 2, ends it
	// and holds the error, if any.
	b := rec.Body.Bytes()
	for len(b) >= 5 {
		flags, n := b[0], binary.BigEndian.Uint32(b[1:5])
		if uint32(len(b)-5) < n {
			break
		}
		msg := b[5 : 5+n]
		b = b[5+n:]
		if flags&2 == 0 {
			continue
		}
		if err := json.Unmarshal(msg, &end); err != nil {
			t.Fatalf("the end of the stream is not JSON: %.300q", msg)
		}
		if end.Error == nil {
			return ""
		}
		return end.Error.Code
	}
	if rec.Code != http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &end); err == nil && end.Code != "" {
			return end.Code
		}
	}
	t.Fatalf("HTTP %d: a stream without its end: %.300q", rec.Code, rec.Body.String())
	return ""
}
