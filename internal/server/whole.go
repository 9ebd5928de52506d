package server

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// wholeMaxBytes is the largest response wholeResponses sends in one piece;
// a larger one goes out in chunks as it is written.
const wholeMaxBytes = 1 << 20

// wholeResponses sends the response of a unary call of the Connect protocol
// over HTTP/1.x (Content-Type application/proto or application/json) in one
// write with a Content-Length, instead of in HTTP chunks: Connect writes a
// unary response without announcing its length, and net/http then chunks
// anything over 2 KiB, which costs a checkpoint's response three writes and
// the client three reads where one does. Streams, gRPC and HTTP/2 pass
// through untouched.
func wholeResponses(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 1 || !unaryConnect(r) {
			next.ServeHTTP(w, r)
			return
		}
		ww := wholePool.Get().(*wholeWriter)
		ww.ResponseWriter = w
		// A handler that panics leaves its writer to the garbage collector
		// and its held-back bytes unsent: net/http closes the connection.
		next.ServeHTTP(ww, r)
		ww.finish()
		ww.reset()
		wholePool.Put(ww)
	})
}

// unaryConnect reports whether r is a unary call of the Connect protocol:
// a POST of a message, or a GET with the message in the query.
func unaryConnect(r *http.Request) bool {
	if r.Method == http.MethodGet {
		return r.URL.Query().Get("connect") == "v1"
	}
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/proto") || strings.HasPrefix(ct, "application/json")
}

var wholePool = sync.Pool{New: func() any { return new(wholeWriter) }}

// wholeWriter holds back the status and body of a response until the
// handler returns, or until the body passes wholeMaxBytes or the handler
// flushes; from then on it writes through.
type wholeWriter struct {
	http.ResponseWriter
	buf     []byte
	status  int
	through bool
}

func (w *wholeWriter) WriteHeader(code int) {
	if w.through {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if w.status == 0 {
		w.status = code
	}
}

func (w *wholeWriter) Write(p []byte) (int, error) {
	if !w.through && len(w.buf)+len(p) > wholeMaxBytes {
		if err := w.writeThrough(); err != nil {
			return 0, err
		}
	}
	if w.through {
		return w.ResponseWriter.Write(p)
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// Flush sends what is held back and flushes: a handler that flushes wants
// its bytes on their way.
func (w *wholeWriter) Flush() {
	if err := w.writeThrough(); err != nil {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *wholeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeThrough sends the held-back status and body, without a length, and
// switches to writing through.
func (w *wholeWriter) writeThrough() error {
	if w.through {
		return nil
	}
	w.through = true
	if w.status != 0 {
		w.ResponseWriter.WriteHeader(w.status)
	}
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.ResponseWriter.Write(w.buf)
	return err
}

// finish sends a held-back response with its length.
func (w *wholeWriter) finish() {
	if w.through {
		return
	}
	if w.status == 0 && len(w.buf) == 0 {
		return // nothing written: net/http sends its empty 200
	}
	if w.status != http.StatusNotModified && w.status != http.StatusNoContent {
		w.Header().Set("Content-Length", strconv.Itoa(len(w.buf)))
	}
	w.through = true
	if w.status != 0 {
		w.ResponseWriter.WriteHeader(w.status)
	}
	if len(w.buf) > 0 {
		_, _ = w.ResponseWriter.Write(w.buf)
	}
}

func (w *wholeWriter) reset() {
	w.ResponseWriter = nil
	if cap(w.buf) > 64<<10 {
		w.buf = nil // do not keep a large buffer in the pool
	}
	w.buf, w.status, w.through = w.buf[:0], 0, false
}
