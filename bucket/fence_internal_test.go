package bucket

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is an HTTP server on 127.0.0.1 that counts the requests it
// received.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// pauseBeforeWrite makes the first write on a fenced connection sleep for d
// before it decides, as a process stopped between its last check and the
// write would, until the test ends.
func pauseBeforeWrite(t *testing.T, d time.Duration) {
	t.Helper()
	var once atomic.Bool
	testBeforeWrite = func() {
		if once.CompareAndSwap(false, true) {
			time.Sleep(d)
		}
	}
	t.Cleanup(func() { testBeforeWrite = nil })
}

// TestFencedClient sends requests through a fenced client with a context
// that never ends, as a client that did not notice its deadline would: what
// stops a late request is the connection alone.
func TestFencedClient(t *testing.T) {
	cases := []struct {
		name string
		// in is how long after the start the deadline falls; pause is how
		// long the sender stops after dialling.
		in, pause time.Duration
		want      int64
	}{
		{name: "in time", in: 10 * time.Second, want: 1},
		{name: "paused past the deadline before writing", in: 200 * time.Millisecond, pause: 400 * time.Millisecond, want: 0},
		{name: "deadline passed before dialling", in: -time.Millisecond, want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, n := countingServer(t)
			if tc.pause > 0 {
				pauseBeforeWrite(t, tc.pause)
			}
			client, tr, err := fencedClient(http.DefaultTransport.(*http.Transport), nil, time.Now().Add(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(tr.CloseIdleConnections)
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/bucket?delete", strings.NewReader("<Delete/>"))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			// The refused write, or the connection's deadline that the
			// response's read meets first, fails the request.
			if tc.want == 0 && err == nil {
				t.Errorf("Do sent the request; want it refused")
			}
			if tc.want > 0 && err != nil {
				t.Errorf("Do = %v; want it sent", err)
			}
			srv.Close() // waits for the request being served, if any
			if got := n.Load(); got != tc.want {
				t.Errorf("the server received %d requests; want %d", got, tc.want)
			}
		})
	}
}

// TestFencedClientBroken shows that TestFencedClient catches a fence that
// does not fence: with plain connections the paused request reaches the
// server after its deadline.
func TestFencedClientBroken(t *testing.T) {
	testUnfenced = true
	t.Cleanup(func() { testUnfenced = false })
	srv, n := countingServer(t)
	pauseBeforeWrite(t, 400*time.Millisecond)
	client, tr, err := fencedClient(http.DefaultTransport.(*http.Transport), nil, time.Now().Add(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL, strings.NewReader("<Delete/>"))
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
	}
	srv.Close()
	if n.Load() != 1 {
		t.Fatalf("the broken fence's late request reached the server %d times; want 1 (else the fence's test proves nothing)", n.Load())
	}
}

// TestFencedClientRefused checks the transports a fence cannot be built on.
func TestFencedClientRefused(t *testing.T) {
	tlsDialer := http.DefaultTransport.(*http.Transport).Clone()
	tlsDialer.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nil, errors.New("not used")
	}
	for name, base := range map[string]*http.Transport{"none": nil, "own TLS dialer": tlsDialer} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := fencedClient(base, nil, time.Now().Add(time.Minute)); !errors.Is(err, ErrCannotFence) {
				t.Fatalf("fencedClient = %v; want ErrCannotFence", err)
			}
		})
	}
}
