package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// health is what /healthz and /readyz report.
type health struct {
	// ready is set once the start-up checks passed, and cleared when the
	// process begins to stop.
	ready atomic.Bool
	// reason says why the process is not ready.
	reason atomic.Value
}

func (h *health) setReady(ready bool, reason string) {
	h.reason.Store(reason)
	h.ready.Store(ready)
}

// handler serves /metrics, /healthz and /readyz.
func (h *health) handler(m *Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !h.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			reason, _ := h.reason.Load().(string)
			fmt.Fprintln(w, "not ready:", reason)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// httpServer is the running HTTP endpoint.
type httpServer struct {
	srv  *http.Server
	addr net.Addr
	done chan struct{}
}

// serveHTTP listens on addr and serves the handler until shutdown.
func serveHTTP(addr string, h http.Handler, log *slog.Logger) (*httpServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", addr, err)
	}
	s := &httpServer{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		addr: l.Addr(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("the HTTP server stopped", "error", err)
		}
	}()
	return s, nil
}

// shutdown stops the server, letting requests in flight finish briefly.
func (s *httpServer) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}
