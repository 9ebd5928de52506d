package cairnd_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/cairnstore/cairn"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/internal/cairnd"
	"github.com/cairnstore/cairn/internal/childproc"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/server/servertest"
	"github.com/cairnstore/cairn/remote"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(childproc.Spawner)) }

func started(t *testing.T, extra ...string) (addr string, sigs chan os.Signal, code chan int, log *servertest.LogBuffer) {
	t.Helper()
	etcd, _ := embedetcd.ForTest(t)
	return startedOn(t, etcd, nil, append([]string{"--tokens", "a tenant-a/ token-a"}, extra...)...)
}

// startedOn is started on the etcd member etcd, with the environment getenv.
func startedOn(t *testing.T, etcd *embedetcd.Server, getenv func(string) string, extra ...string) (addr string, sigs chan os.Signal, code chan int, log *servertest.LogBuffer) {
	t.Helper()
	sigs = make(chan os.Signal, 2)
	code = make(chan int, 1)
	listening := make(chan string, 1)
	log = &servertest.LogBuffer{}
	args := append([]string{
		"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--listen", "127.0.0.1:0",
	}, extra...)
	go func() {
		code <- cairnd.Main(cairnd.Env{Args: args, Getenv: getenv, Stderr: log, Signals: sigs, Listening: func(a string) { listening <- a }})
	}()
	select {
	case addr = <-listening:
	case c := <-code:
		t.Fatalf("cairnd exited with %d before listening:\n%s", c, log)
	}
	t.Cleanup(func() {
		select {
		case sigs <- syscall.SIGTERM:
		default:
		}
		select {
		case <-code:
		case <-time.After(time.Minute):
			t.Errorf("cairnd did not stop:\n%s", log)
		}
	})
	return addr, sigs, code, log
}

// TestDrainOnSIGTERM: a request in flight when SIGTERM arrives finishes and
// lands; new connections are refused; Main returns 0.
func TestDrainOnSIGTERM(t *testing.T) {
	addr, sigs, code, log := started(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := "http://" + addr
	s := remote.New(base, remote.Options{Token: "token-a"})
	lease, err := s.AcquireWriter(ctx, "thread")
	if err != nil {
		t.Fatal(err)
	}
	body, err := proto.Marshal(&cairnv1.AppendRequest{
		Checkpoint: &cairnv1.Checkpoint{Id: "c1", ThreadId: "thread", CreatedAt: 1, Reason: "automatic", Conversation: []byte(`"` + strings.Repeat("f", 16<<20) + `"`)},
		Writer:     &cairnv1.Writer{ThreadId: lease.ThreadID, OwnerToken: lease.OwnerToken, Fence: lease.Fence},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The request body arrives in two parts. The first, 8 MiB, is more than
	// the socket buffers hold, so the pipe's Write returns only once the
	// server's handler reads the body: the request is in flight when the
	// signal comes. The second part follows the signal.
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/cairn.v1.CheckpointService/Append", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Authorization", "Bearer token-a")
	req.ContentLength = int64(len(body))
	type result struct {
		status int
		body   string
		err    error
	}
	// A connection of its own: an idle pooled one could be closed by the
	// drain before the server read the request from it.
	inflight := &http.Client{Transport: &http.Transport{}}
	defer inflight.CloseIdleConnections()
	done := make(chan result, 1)
	go func() {
		res, err := inflight.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		done <- result{status: res.StatusCode, body: string(b)}
	}()
	half := len(body) / 2
	if _, err := pw.Write(body[:half]); err != nil {
		t.Fatal(err)
	}
	sigs <- syscall.SIGTERM
	waitFor(t, log, "signal received: draining")
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if _, err := fresh.Get(base + "/healthz"); err == nil {
		t.Error("a new connection was accepted while draining")
	}
	if _, err := pw.Write(body[half:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	r := <-done
	if r.err != nil || r.status != http.StatusOK {
		t.Fatalf("the request in flight: status %d, %q, %v; want 200\n%s", r.status, r.body, r.err, log)
	}
	if c := <-code; c != cairnd.ExitOK {
		t.Fatalf("exit code %d, want 0:\n%s", c, log)
	}
	code <- 0 // for the cleanup
	if !strings.Contains(log.String(), "drained: every request in flight finished") {
		t.Errorf("the log does not say the drain finished:\n%s", log)
	}
}

// waitFor waits until the log contains s.
func waitFor(t *testing.T, log *servertest.LogBuffer, s string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(log.String(), s) {
			return
		}
	}
	t.Fatalf("the log never said %q:\n%s", s, log)
}

func TestUsage(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"NoTokens", nil, "--tokens-file"},
		{"BothTokenSources", []string{"--tokens", "a p/ t", "--tokens-file", "x"}, "not both"},
		{"TLSCertWithoutKey", []string{"--tokens", "a p/ t", "--tls-cert", "c.pem"}, "go together"},
		{"ClientCAWithoutTLS", []string{"--tokens", "a p/ t", "--tls-client-ca", "ca.pem"}, "needs --tls-cert"},
		{"BadLogFormat", []string{"--tokens", "a p/ t", "--log-format", "xml"}, "text or json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			if got := cairnd.Main(cairnd.Env{Args: c.args, Stderr: &out}); got != cairnd.ExitUsage || !strings.Contains(out.String(), c.want) {
				t.Fatalf("exit %d, output %q; want %d saying %q", got, out.String(), cairnd.ExitUsage, c.want)
			}
		})
	}
}

func TestBadTokenList(t *testing.T) {
	addrs := []string{"--listen", "127.0.0.1:0", "--etcd-endpoints", "127.0.0.1:1"}
	for _, c := range []struct{ name, tokens, want string }{
		{"Fields", "a p/", "want"},
		{"Hash", "a p/ sha256:xyz", "64 hex digits"},
		{"SameName", "a p/ t1; a q/ t2", "listed twice"},
		{"Overlap", "a p/ t1; b p/q/ t2", "overlap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			if got := cairnd.Main(cairnd.Env{Args: append([]string{"--tokens", c.tokens}, addrs...), Stderr: &out}); got != cairnd.ExitFailure || !strings.Contains(out.String(), c.want) {
				t.Fatalf("exit %d, output %q; want %d saying %q", got, out.String(), cairnd.ExitFailure, c.want)
			}
		})
	}
}

func TestHashToken(t *testing.T) {
	var out bytes.Buffer
	if got := cairnd.Main(cairnd.Env{Args: []string{"hash-token", "secret"}, Stdout: &out}); got != cairnd.ExitOK {
		t.Fatalf("exit %d", got)
	}
	// The SHA-256 of "secret".
	if want := "sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\n"; out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

// TestTenantFromHashedToken: a token list that holds only the hash admits
// the token.
func TestTenantFromHashedToken(t *testing.T) {
	var hash bytes.Buffer
	cairnd.Main(cairnd.Env{Args: []string{"hash-token", "token-b"}, Stdout: &hash})
	addr, _, _, _ := started(t, "--tokens", "", "--tokens", fmt.Sprintf("b tenant-b/ %s", strings.TrimSpace(hash.String())))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := remote.New("http://"+addr, remote.Options{Token: "token-b"}).GetHead(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	_, err := remote.New("http://"+addr, remote.Options{Token: "token-a"}).GetHead(ctx, "t")
	if cairn.CodeOf(err) != "" || err == nil || !strings.Contains(err.Error(), "not valid") {
		t.Fatalf("the token of no tenant: %v", err)
	}
}
