package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/goleak"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/childproc"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/s3test"
	"github.com/cairnstore/cairn/internal/sidecar"
	"github.com/cairnstore/cairn/keys"
	"github.com/cairnstore/cairn/sweep"
)

func TestMain(m *testing.M) {
	// The goroutine that starts helper servers lives as long as the process.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(childproc.Spawner))
}

// world is what the end-to-end tests share: the sweeper binary, an embedded
// etcd and a versitygw process. Each test uses a prefix and a bucket of its
// own.
type world struct {
	bin    string
	etcd   *embedetcd.Server
	client *clientv3.Client
	s3     *s3test.Server
	admin  *s3.Client
	n      atomic.Int64
}

// newWorld builds the sweeper into t.TempDir() and starts etcd and
// versitygw for the duration of t.
func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{bin: filepath.Join(t.TempDir(), "sweeper")}
	build := exec.Command("go", "build", "-o", w.bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	w.etcd, w.client = embedetcd.ForTest(t)
	w.s3 = s3test.StartVersityGW(t)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	w.admin = s3.New(s3.Options{
		BaseEndpoint:               aws.String(w.s3.Endpoint),
		Region:                     w.s3.Region,
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(w.s3.AccessKeyID, w.s3.SecretAccessKey, ""),
		HTTPClient:                 &http.Client{Transport: tr},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	return w
}

// tenant is one test's prefix, bucket and store.
type tenant struct {
	w      *world
	prefix string
	bucket string
	blobs  *bucket.S3
	store  *etcdstore.Store
}

// newTenant creates a bucket and a store prefix of the test's own.
func (w *world) newTenant(t *testing.T) *tenant {
	t.Helper()
	n := w.n.Add(1)
	tn := &tenant{w: w, prefix: fmt.Sprintf("tenant-%d/", n), bucket: fmt.Sprintf("sweeper-e2e-%d", n)}
	if _, err := w.admin.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(tn.bucket)}); err != nil {
		t.Fatalf("create bucket %s: %v", tn.bucket, err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	var err error
	tn.blobs, err = bucket.NewS3(t.Context(), bucket.Config{
		Endpoint: w.s3.Endpoint, Region: w.s3.Region, Bucket: tn.bucket, PathStyle: true,
		AccessKeyID: w.s3.AccessKeyID, SecretAccessKey: w.s3.SecretAccessKey,
		HTTPClient: &http.Client{Transport: tr},
	})
	if err != nil {
		t.Fatal(err)
	}
	tn.store, err = etcdstore.New(w.client, tn.prefix, etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tn.store.Close() })
	// Writers bind the store to its bucket before their first upload
	// (bucket.UploadBlobs does); seed uploads with bucket.PutBlobs.
	if err := bucket.BindStore(t.Context(), tn.store, tn.blobs); err != nil {
		t.Fatal(err)
	}
	return tn
}

// seeded is what seed put in a tenant, and what a sweep should do with it.
type seeded struct {
	// orphans are blobs no checkpoint ever referenced.
	orphans []string
	// prunedOnly are blobs that only the checkpoints --keep 1 removes use.
	prunedOnly []string
	// kept are blobs the newest checkpoint of each thread uses.
	kept []string
}

// seed captures checkpoints on two threads, as a capture does (blobs first,
// then the checkpoint), and uploads orphans. With --keep 1, the two oldest
// checkpoints of thread alpha go, and with them the blobs only they use.
func (tn *tenant) seed(t *testing.T) seeded {
	t.Helper()
	var s seeded
	capture := func(thread, id string, files map[string]string, artifact string) {
		t.Helper()
		ctx := t.Context()
		var blobs []bucket.Blob
		cp := cairn.Checkpoint{ID: id, ThreadID: thread, Reason: cairn.ReasonAutomatic, Conversation: json.RawMessage(`[]`)}
		paths := make([]string, 0, len(files))
		for p := range files {
			paths = append(paths, p)
		}
		slices.Sort(paths)
		for _, p := range paths {
			b := bucket.FileBlob([]byte(files[p]))
			blobs = append(blobs, b)
			cp.Files = append(cp.Files, cairn.Entry{Path: p, Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(b.Data))})
		}
		if artifact != "" {
			b := bucket.ArtifactBlob([]byte(artifact))
			blobs = append(blobs, b)
			cp.Artifacts = append(cp.Artifacts, cairn.Artifact{ArtifactID: id + "-log", Name: "log", MimeType: "text/plain", Size: int64(len(b.Data)), BlobKey: b.Key})
		}
		if _, err := bucket.PutBlobs(ctx, tn.blobs, blobs); err != nil {
			t.Fatal(err)
		}
		lease, err := tn.store.AcquireWriter(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.WithoutCancel(ctx))
		head, err := tn.store.GetHead(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		cp.ParentCheckpointID = head
		cp.CreatedAt = float64(time.Now().UnixMilli())
		if _, err := tn.store.Append(ctx, cairn.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: lease.Writer}); err != nil {
			t.Fatal(err)
		}
	}
	capture("alpha", "alpha-1", map[string]string{"main.go": "package main // v1", "go.mod": "module demo"}, "")
	capture("alpha", "alpha-2", map[string]string{"main.go": "package main // v2", "go.mod": "module demo"}, "build log 2")
	capture("alpha", "alpha-3", map[string]string{"main.go": "package main // v3", "go.mod": "module demo"}, "build log 3")
	capture("beta", "beta-1", map[string]string{"README.md": "# beta", "go.mod": "module demo"}, "")
	s.prunedOnly = []string{
		bucket.FileKey([]byte("package main // v1")), bucket.FileKey([]byte("package main // v2")),
		bucket.ArtifactKey([]byte("build log 2")),
	}
	s.kept = []string{
		bucket.FileKey([]byte("package main // v3")), bucket.FileKey([]byte("module demo")),
		bucket.ArtifactKey([]byte("build log 3")), bucket.FileKey([]byte("# beta")),
	}
	for i := range 3 {
		b := bucket.FileBlob(fmt.Appendf(nil, "orphan %d: a capture that never appended", i))
		if _, err := bucket.PutBlobs(t.Context(), tn.blobs, []bucket.Blob{b}); err != nil {
			t.Fatal(err)
		}
		s.orphans = append(s.orphans, b.Key)
	}
	return s
}

// keys lists the content keys of the tenant's bucket (under the prefixes a
// sweep lists, not the binding registry's), sorted.
func (tn *tenant) keys(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, prefix := range sweep.Prefixes {
		for o, err := range bucket.Objects(t.Context(), tn.blobs, prefix, 0) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, o.Key)
		}
	}
	slices.Sort(out)
	return out
}

// checkpoints counts the checkpoints of a thread.
func (tn *tenant) checkpoints(t *testing.T, thread string) int {
	t.Helper()
	list, err := tn.store.List(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// args returns the flags that point the sweeper at the tenant, then extra.
func (tn *tenant) args(extra ...string) []string {
	return append([]string{
		"--etcd-endpoints=" + strings.Join(tn.w.etcd.Endpoints(), ","),
		"--prefix=" + tn.prefix,
		"--s3-endpoint=" + tn.w.s3.Endpoint,
		"--s3-region=" + tn.w.s3.Region,
		"--s3-bucket=" + tn.bucket,
		"--s3-path-style",
		"--probe-timeout=5s",
	}, extra...)
}

// dropFlag returns args without the flag name.
func dropFlag(args []string, name string) []string {
	var out []string
	for _, a := range args {
		if a != name && !strings.HasPrefix(a, name+"=") {
			out = append(out, a)
		}
	}
	return out
}

// creds returns the environment that gives the sweeper the S3 credentials.
func (tn *tenant) creds() []string {
	return []string{
		cli.EnvS3AccessKeyID + "=" + tn.w.s3.AccessKeyID,
		cli.EnvS3SecretAccessKey + "=" + tn.w.s3.SecretAccessKey,
	}
}

// lockKey is the key prefix of the sweeper lock of the tenant's store.
func (tn *tenant) lockKey() string {
	return string(keys.NewLayout(tn.prefix).Locks()) + sidecar.LockName
}

// holdLock takes the sweeper lock as another sweeper would, and returns a
// function that releases it.
func (tn *tenant) holdLock(t *testing.T) (release func()) {
	t.Helper()
	s, err := concurrency.NewSession(tn.w.client, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	m := concurrency.NewMutex(s, tn.lockKey())
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = m.Unlock(context.Background())
			_ = s.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// baseEnv is the environment of every sweeper process: nothing from the test's
// own environment, a home of its own, and no instance metadata lookups.
func baseEnv(t *testing.T) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=" + filepath.Join(t.TempDir(), "none"),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(t.TempDir(), "none"),
	}
}

// proc is a running sweeper process.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	done chan struct{}
	code int

	mu     sync.Mutex
	stderr bytes.Buffer
	lines  []map[string]any
	notify chan struct{} // receives a value whenever a line arrives
}

// start starts the sweeper with args and env (added to baseEnv).
func (w *world) start(t *testing.T, args, env []string) *proc {
	t.Helper()
	p := &proc{t: t, done: make(chan struct{}), notify: make(chan struct{}, 1)}
	p.cmd = exec.Command(w.bin, args...)
	p.cmd.Env = append(baseEnv(t), env...)
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.read(pipe)
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.stderr.WriteString(line + "\n")
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			p.lines = append(p.lines, rec)
		}
		p.mu.Unlock()
		select {
		case p.notify <- struct{}{}:
		default:
		}
	}
	err := p.cmd.Wait()
	p.code = 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		p.code = exit.ExitCode()
	} else if err != nil {
		p.code = -1
	}
	close(p.done)
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("the sweeper did not exit within 60s; its output:\n%s", p.output())
		return -1
	}
}

// output returns what the process wrote to stderr so far.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// record returns the first log record whose msg starts with prefix.
func (p *proc) record(prefix string) (map[string]any, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rec := range p.lines {
		if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, prefix) {
			return rec, true
		}
	}
	return nil, false
}

// waitFor waits until a log record's msg starts with prefix, and returns it.
func (p *proc) waitFor(prefix string) map[string]any {
	p.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		if rec, ok := p.record(prefix); ok {
			return rec
		}
		select {
		case <-p.notify:
		case <-p.done:
			if rec, ok := p.record(prefix); ok {
				return rec
			}
			p.t.Fatalf("the sweeper exited (code %d) without logging %q; its output:\n%s", p.code, prefix, p.output())
		case <-deadline:
			p.t.Fatalf("the sweeper did not log %q within 60s; its output:\n%s", prefix, p.output())
		}
	}
}

// signal sends sig to the process.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// run runs the sweeper to its end and returns it.
func (w *world) run(t *testing.T, args, env []string) *proc {
	t.Helper()
	p := w.start(t, args, env)
	p.wait()
	return p
}

// gate is an S3 proxy that holds DeleteObjects requests until released, so a
// test can act while a delete batch is in flight.
type gate struct {
	srv      *httptest.Server
	inFlight chan struct{} // receives a value when a delete request arrives
	release  chan struct{} // closing it lets every held request through
	deletes  atomic.Int64
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{inFlight: make(chan struct{}, 16), release: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(u)
	tr := &http.Transport{}
	proxy.Transport = tr
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The client signed the request for the proxy's host; keep it.
		if r.Method == http.MethodPost && r.URL.Query().Has("delete") {
			g.deletes.Add(1)
			g.inFlight <- struct{}{}
			<-g.release
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		g.open()
		g.srv.Close()
		tr.CloseIdleConnections()
	})
	return g
}

// open lets the held requests, and every later one, through.
func (g *gate) open() {
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}

// httpGet returns the status and body of a GET.
func httpGet(t *testing.T, u string) (int, string) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// metric returns the value of the sample whose line starts with series in a
// Prometheus text exposition, or fails.
func metric(t *testing.T, exposition, series string) string {
	t.Helper()
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	t.Fatalf("no sample %s in the metrics:\n%s", series, exposition)
	return ""
}

// without returns keys minus drop.
func without(keys []string, drop ...[]string) []string {
	var out []string
	for _, k := range keys {
		gone := false
		for _, d := range drop {
			gone = gone || slices.Contains(d, k)
		}
		if !gone {
			out = append(out, k)
		}
	}
	return out
}

// sorted returns a sorted copy of the concatenated lists.
func sorted(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return out
}

// equal fails the test when got and want differ.
func equal[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v; want %v", what, got, want)
	}
}
