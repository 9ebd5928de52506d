// Package servertest runs cairnd's server in process for tests: an embedded
// etcd member, the server with two tenants, and an httptest server.
package servertest

import (
	"bytes"
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/server"
)

// The tenants of every Env: A and B, with tokens TokenA and TokenB.
const (
	TokenA  = "token-of-tenant-a"
	TokenB  = "token-of-tenant-b"
	PrefixA = "tenant-a/"
	PrefixB = "tenant-b/"
)

// Env is a running server.
type Env struct {
	// URL is the server's base URL.
	URL string
	// Server is the API server; HTTP is the httptest server that serves it.
	Server *server.Server
	HTTP   *httptest.Server
	// Etcd is a client of the server's etcd member.
	Etcd *clientv3.Client
	// Registry holds the server's metrics.
	Registry *prometheus.Registry
}

// Start runs a server with the test clock and the collector enabled and a
// memory bucket as the store's object store, after configure changed the
// configuration. Everything stops at the test's cleanup.
func Start(t testing.TB, configure func(*server.Config)) *Env {
	t.Helper()
	_, cli := embedetcd.ForTest(t)
	return start(t, cli, configure)
}

// StartReplica runs a second server on env's etcd member with the same
// tenants: another replica of the same service.
func StartReplica(t testing.TB, env *Env, configure func(*server.Config)) *Env {
	t.Helper()
	return start(t, env.Etcd, configure)
}

func start(t testing.TB, cli *clientv3.Client, configure func(*server.Config)) *Env {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := server.Config{
		Client:         cli,
		Tenants:        []server.Tenant{server.NewTenant("a", PrefixA, TokenA), server.NewTenant("b", PrefixB, TokenB)},
		TestClock:      true,
		ServeCollector: true,
		Registerer:     reg,
	}
	cfg.Store.Objects = bucket.NewMemory(nil)
	if configure != nil {
		configure(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.EnableHTTP2 = true
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("closing the server: %v", err)
		}
	})
	return &Env{URL: hs.URL, Server: srv, HTTP: hs, Etcd: cli, Registry: reg}
}

// LogBuffer is a log sink that tests read while the server's goroutines
// write to it.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
