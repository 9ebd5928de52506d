// Package embedetcd starts a single-member etcd server inside the process, on
// free loopback ports and a data directory of the caller's choice, with etcd's
// DEFAULT limits (128 operations per transaction, 1.5 MiB per request). The
// tests and the quickstart use it; nothing here raises a server limit, so what
// works against it works against a shared cluster with default settings.
package embedetcd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config configures Start.
type Config struct {
	// Dir is the data directory. Required.
	Dir string
	// NoFsync skips fsync on the write-ahead log and the backend, as etcd's
	// own tests do. Data survives a clean Close but not a power loss. Leave it
	// false when measuring write latency.
	NoFsync bool
	// Name is the member name; "" selects "default".
	Name string
	// ClientAddr is the host:port clients connect to; "" selects a free
	// port on 127.0.0.1.
	ClientAddr string
	// ClusterToken is the initial cluster token; "" selects etcd's default.
	// etcd derives the cluster id from it and the peer URLs, which are the
	// same for every member started here, so members that must be told
	// apart as clusters (a store's cairn.Binding names the cluster id) need
	// distinct tokens.
	ClusterToken string
	// QuotaBackendBytes is the space quota of the member's database; 0
	// selects etcd's default (2 GiB). A small quota lets tests fill the
	// member and meet its NOSPACE alarm.
	QuotaBackendBytes int64
}

// Server is a running embedded etcd member.
type Server struct {
	e         *embed.Etcd
	endpoints []string
}

// Start starts the member and waits until it serves clients or ctx ends.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedetcd: Config.Dir is required")
	}
	ec := embed.NewConfig()
	ec.Dir = cfg.Dir
	if cfg.Name != "" {
		ec.Name = cfg.Name
	}
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	client := loopback
	if cfg.ClientAddr != "" {
		client.Host = cfg.ClientAddr
	} else {
		// The member advertises the address it listens on (a store that
		// waits for every member to apply a revision dials the advertised
		// URLs), so it is a real port, not ":0".
		addr, err := freeLoopback()
		if err != nil {
			return nil, err
		}
		client.Host = addr
	}
	ec.ListenClientUrls = []url.URL{client}
	ec.AdvertiseClientUrls = []url.URL{client}
	ec.ListenPeerUrls = []url.URL{loopback}
	ec.AdvertisePeerUrls = []url.URL{loopback}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	if cfg.ClusterToken != "" {
		ec.InitialClusterToken = cfg.ClusterToken
	}
	ec.UnsafeNoFsync = cfg.NoFsync
	ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(ec)
	for try := 1; err != nil && cfg.ClientAddr == "" && strings.Contains(err.Error(), "address already in use") && try < 5; try++ {
		// Another process took the free port in the meantime: pick another.
		addr, ferr := freeLoopback()
		if ferr != nil {
			return nil, ferr
		}
		client.Host = addr
		ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		e, err = embed.StartEtcd(ec)
	}
	if err != nil {
		return nil, fmt.Errorf("embedetcd: start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedetcd: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	s := &Server{e: e}
	for _, l := range e.Clients {
		s.endpoints = append(s.endpoints, l.Addr().String())
	}
	return s, nil
}

// freeLoopback returns a loopback address whose port was free a moment ago.
func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("embedetcd: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Endpoints returns the client addresses, as host:port.
func (s *Server) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// Etcd returns the underlying embedded server.
func (s *Server) Etcd() *embed.Etcd { return s.e }

// NewClient returns a client of the member whose own logging is discarded.
// The caller closes it.
func (s *Server) NewClient() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   s.endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// Close stops the member and waits for it to exit.
func (s *Server) Close() { s.e.Close() }

// ForTest starts a member in a temporary directory for the duration of the
// test, with fsync off and a cluster token of its own (so a cluster id of
// its own), and returns it with a client. Both are closed by t.Cleanup.
func ForTest(t testing.TB) (*Server, *clientv3.Client) {
	t.Helper()
	return ForTestWith(t, Config{})
}

// ForTestWith is ForTest with cfg's QuotaBackendBytes and Name; the other
// fields are ForTest's.
func ForTestWith(t testing.TB, cfg Config) (*Server, *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var token [8]byte
	_, _ = rand.Read(token[:])
	s, err := Start(ctx, Config{Dir: t.TempDir(), NoFsync: true, ClusterToken: "test-" + hex.EncodeToString(token[:]),
		Name: cfg.Name, QuotaBackendBytes: cfg.QuotaBackendBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := s.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return s, c
}
