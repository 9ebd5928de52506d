package console_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/cairnd"
	"github.com/cairnstore/cairn/internal/console"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/server"
	"github.com/cairnstore/cairn/internal/sidecar"
)

// The tenants of the fixture.
const (
	tokenA  = "token-of-acme"
	tokenB  = "token-of-bravo"
	prefixA = "acme/"
	prefixB = "bravo/"
)

// fixture is a cairnd (server and console on one handler) over an
// embedded etcd and a memory bucket, with a clock the test moves.
type fixture struct {
	client *clientv3.Client
	blobs  *bucket.Memory
	srv    *server.Server
	con    *console.Console
	http   *httptest.Server
	stores []*etcdstore.Store

	mu  sync.Mutex
	now time.Time
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	_, client := embedetcd.ForTest(t)
	f := &fixture{client: client, blobs: bucket.NewMemory(nil), now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	srv, err := server.New(server.Config{
		Client:  client,
		Tenants: []server.Tenant{server.NewTenant("acme", prefixA, tokenA), server.NewTenant("bravo", prefixB, tokenB)},
		Store:   etcdstore.Options{Objects: f.blobs},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	for i := range srv.Tenants() {
		f.stores = append(f.stores, srv.Store(i))
	}
	for _, st := range f.stores {
		if err := bucket.BindStore(context.Background(), st, f.blobs); err != nil {
			t.Fatal(err)
		}
	}
	f.con, err = console.New(console.Config{Client: client, Tenants: srv.Tenants(), Stores: f.stores, Blobs: f.blobs,
		SessionTTL: time.Hour, Now: f.clock, SweepOlderThan: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	f.http = httptest.NewServer(cairnd.Handler(srv, f.con))
	t.Cleanup(func() {
		f.http.Close()
		f.con.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("closing the server: %v", err)
		}
	})
	return f
}

// put stores data in the bucket and returns its blob key.
func (f *fixture) put(t testing.TB, data string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(data))
	key := "sandbox-files/sha256/" + hex.EncodeToString(sum[:])
	if err := f.blobs.Put(context.Background(), key, []byte(data)); err != nil {
		t.Fatal(err)
	}
	return key
}

// file returns the entry of a file with the given contents, put in the
// bucket.
func (f *fixture) file(t testing.TB, path, data string) cairn.Entry {
	return cairn.Entry{Path: path, Kind: cairn.KindFile, BlobKey: f.put(t, data), Size: int64(len(data))}
}

// writer appends checkpoints to one thread.
type writer struct {
	t      testing.TB
	st     *etcdstore.Store
	lease  *cairn.Lease
	thread string
	head   string
}

func (f *fixture) writer(t testing.TB, tenant int, thread string) *writer {
	t.Helper()
	st := f.stores[tenant]
	l, err := st.AcquireWriter(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	head, err := st.GetHead(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	return &writer{t: t, st: st, lease: l, thread: thread, head: head}
}

// add appends a checkpoint whose parent is the head.
func (w *writer) add(id string, createdAt float64, reason, label string, files []cairn.Entry, conv string) {
	w.t.Helper()
	cp := cairn.Checkpoint{ID: id, ThreadID: w.thread, ParentCheckpointID: w.head, CreatedAt: createdAt,
		Reason: reason, Label: label, Files: files, Conversation: []byte(conv)}
	if conv == "" {
		cp.Conversation = []byte("[]")
	}
	if _, err := w.st.Append(context.Background(), cairn.AppendInput{Checkpoint: cp, ExpectedHeadID: w.head, Writer: w.lease.Writer}); err != nil {
		w.t.Fatalf("append %s: %v", id, err)
	}
	w.head = id
}

// seed writes the data the tests look at into tenant acme:
//
//   - thread "main": m1 (root), m2 (a.txt changed, c.txt added, b.bin
//     removed), m3 (named "v1"), with a hostile file name and conversation;
//   - thread "fork-1": forked from m2;
//   - thread "pruned": p1..p4 pruned to the last two;
//
// and into tenant bravo a thread "secret-thread" with checkpoint
// "secret-cp".
func (f *fixture) seed(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	w := f.writer(t, 0, "main")
	binary := "\x00\x01\x02binary\xff"
	w.add("m1", 1.7e12, cairn.ReasonAutomatic, "", []cairn.Entry{
		f.file(t, "a.txt", "hello\nworld\nline three\n"),
		f.file(t, "b.bin", binary),
		{Path: "src", Kind: cairn.KindDir},
		f.file(t, "src/x.go", "package x\n"),
	}, `[{"role":"user","content":"fix the bug"}]`)
	w.add("m2", 1.7e12+60000, cairn.ReasonAutomatic, "", []cairn.Entry{
		f.file(t, "a.txt", "hello\nthere\nline three\n"),
		f.file(t, "c.txt", "new file\n"),
		{Path: "src", Kind: cairn.KindDir},
		f.file(t, "src/x.go", "package x\n"),
	}, `[{"role":"user","content":"fix the bug"},{"role":"assistant","content":[{"type":"text","text":"Looking."},{"type":"tool-call","toolName":"bash","input":{"cmd":"ls"}}]}]`)
	hostileName := `<script>alert("file")</script>.txt`
	w.add("m3", 1.7e12+120000, cairn.ReasonNamed, `v1 <b>bold</b>`, []cairn.Entry{
		f.file(t, "a.txt", "hello\nthere\nline three\n"),
		f.file(t, "c.txt", "new file\n"),
		f.file(t, hostileName, "<img src=x onerror=alert(1)>\n"),
		{Path: "src", Kind: cairn.KindDir},
		f.file(t, "src/x.go", "package x\n"),
	}, `[{"role":"user","content":"<script>alert('conv')</script>"},{"role":"assistant","content":"<img src=x onerror=alert(2)>","toolCalls":[{"name":"<svg onload=alert(3)>","args":{}}]}]`)

	fl, err := f.stores[0].AcquireWriter(ctx, "fork-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.stores[0].ForkFromCheckpoint(ctx, cairn.ForkInput{SourceThreadID: "main", SourceCheckpointID: "m2",
		DestinationThreadID: "fork-1", DestinationCheckpointID: "f1", CreatedAt: 1.7e12 + 90000, Writer: fl.Writer}); err != nil {
		t.Fatal(err)
	}
	fl.Release(ctx)

	pw := f.writer(t, 0, "pruned")
	for i := 1; i <= 4; i++ {
		pw.add(fmt.Sprintf("p%d", i), 1.7e12+float64(i)*1000, cairn.ReasonAutomatic, "",
			[]cairn.Entry{f.file(t, "n.txt", fmt.Sprintf("version %d\n", i))}, "")
	}
	if _, err := f.stores[0].DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "pruned", Keep: 2, Writer: pw.lease.Writer}); err != nil {
		t.Fatal(err)
	}

	bw := f.writer(t, 1, "secret-thread")
	bw.add("secret-cp", 1.7e12, cairn.ReasonNamed, "bravo-only", []cairn.Entry{f.file(t, "secret.txt", "bravo's secret\n")}, "")

	// Garbage: a blob no checkpoint references, marked by a run of the
	// sweeper (which leaves its status record), so that the next run's plan
	// deletes it.
	f.put(t, "unreferenced garbage\n")
	sw := sidecar.NewSweeper(f.client, f.stores[0], f.blobs, sidecar.RunOptions{OlderThan: time.Nanosecond,
		Others: []sidecar.OtherTarget{{Store: f.stores[1]}}}, nil, nil)
	defer sw.Close()
	if _, err := sw.Run(ctx, ctx, sidecar.LockMode{}); err != nil {
		t.Fatal(err)
	}
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects.
func (f *fixture) browser(t testing.TB) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// login posts token and returns the answer.
func (f *fixture) login(t testing.TB, c *http.Client, token string) *http.Response {
	t.Helper()
	resp, err := c.PostForm(f.http.URL+"/console/login", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// get returns the status and body of a page.
func (f *fixture) get(t testing.TB, c *http.Client, path string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(f.http.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String(), resp.Header
}
