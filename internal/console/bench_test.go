package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
)

// benchKey is a blob key that names no object: the pages that B19 times
// read manifests, not file bytes.
func benchKey(i int) string { return fmt.Sprintf("sandbox-files/sha256/%064x", i) }

// BenchmarkB19 is row B19: the server time of the console's pages, from
// the request to the last byte of the answer, on the handler (no network),
// over an embedded etcd and an in-process bucket with the capacity layout:
//
//   - checkpoint: the page of a 20,000-entry checkpoint (200 directories
//     of 100 files) whose parent differs in 200 files, the root directory
//     shown;
//   - checkpoint-dir: the same checkpoint, one directory of 100 files;
//   - thread: the page of a thread of 200 checkpoints of 50 files each,
//     one file changed a turn;
//   - threads: the first page of the thread list (201 threads).
//
// It reports p50 and p95 per page in ms; the target is p50 <= 50 ms.
func BenchmarkB19(b *testing.B) {
	f := newFixture(b)
	big := func(turn int) []cairn.Entry {
		files := make([]cairn.Entry, 0, 20000)
		for d := range 200 {
			for i := range 100 {
				n := d*100 + i
				key := n
				if turn > 0 && i == 7 {
					key = 1_000_000 + n // one file a directory changed
				}
				files = append(files, cairn.Entry{Path: fmt.Sprintf("dir%03d/file%03d.go", d, i), Kind: cairn.KindFile, BlobKey: benchKey(key), Size: int64(100 + n%1000)})
			}
		}
		return files
	}
	w := f.writer(b, 0, "big")
	w.add("big-1", 1.7e12, cairn.ReasonAutomatic, "", big(0), `[{"role":"user","content":"start"}]`)
	w.add("big-2", 1.7e12+1000, cairn.ReasonNamed, "turn 2", big(1), `[{"role":"user","content":"start"},{"role":"assistant","content":"done"}]`)

	long := f.writer(b, 0, "long")
	files := make([]cairn.Entry, 50)
	for i := range files {
		files[i] = cairn.Entry{Path: fmt.Sprintf("src/f%02d.go", i), Kind: cairn.KindFile, BlobKey: benchKey(2_000_000 + i), Size: 1000}
	}
	for turn := range 200 {
		files = slices.Clone(files)
		files[turn%50].BlobKey = benchKey(3_000_000 + turn)
		long.add(fmt.Sprintf("long-%03d", turn), 1.7e12+float64(turn)*1000, cairn.ReasonAutomatic, "", files, "[]")
	}
	for i := range 199 {
		w := f.writer(b, 0, fmt.Sprintf("t%03d", i))
		w.add(fmt.Sprintf("t%03d-1", i), 1.7e12, cairn.ReasonAutomatic, "", files[:1], "[]")
	}

	timePages(b, f, []benchPage{
		{"checkpoint", "/console/checkpoints/big-2"},
		{"checkpoint-dir", "/console/checkpoints/big-2?dir=dir100"},
		{"thread", "/console/threads/long"},
		{"threads", "/console/"},
	})
}

type benchPage struct{ name, path string }

// benchSession logs in as tenant acme through the console's handler.
func benchSession(b *testing.B, h http.Handler) *http.Cookie {
	b.Helper()
	req := httptest.NewRequest(http.MethodPost, "/console/login", strings.NewReader(url.Values{"token": {tokenA}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result().Cookies()[0]
}

// timePages runs one sub-benchmark a page, timing each request on the
// handler, and reports and prints p50 and p95.
func timePages(b *testing.B, f *fixture, pages []benchPage) {
	h := f.con.Handler()
	cookie := benchSession(b, h)
	for _, page := range pages {
		b.Run(page.name, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, page.path, nil)
				req.AddCookie(cookie)
				rec := httptest.NewRecorder()
				t0 := time.Now()
				h.ServeHTTP(rec, req)
				took = append(took, time.Since(t0))
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d", page.path, rec.Code)
				}
			}
			slices.Sort(took)
			p50 := took[len(took)/2]
			p95 := took[min(len(took)-1, len(took)*95/100)]
			b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(p95.Microseconds())/1000, "p95-ms")
			b.Logf("B19 %s: p50 %v, p95 %v over %d requests (target p50 <= 50ms)", page.name, p50.Round(time.Microsecond), p95.Round(time.Microsecond), len(took))
		})
	}
}

// BenchmarkB19Threads100k times the thread list over 100,000 threads: the
// first page, and the page after 50,000 threads (by activity, the cursor
// of a real walk) and a prefix search. The thread records are copies of
// one real record (its head is a real checkpoint), put straight into etcd
// so that seeding takes seconds.
func BenchmarkB19Threads100k(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	w := f.writer(b, 0, "seed")
	w.add("seed-1", 1.7e12, cairn.ReasonNamed, "seed", nil, "[]")
	layout := f.stores[0].Layout()
	resp, err := f.client.Get(ctx, string(layout.Thread("seed")))
	if err != nil || len(resp.Kvs) != 1 {
		b.Fatalf("read the seed's thread record: %v", err)
	}
	rec := string(resp.Kvs[0].Value)
	const n = 100_000
	for i := 0; i < n; i += 128 {
		var ops []clientv3.Op
		for j := i; j < min(i+128, n); j++ {
			ops = append(ops, clientv3.OpPut(string(layout.Thread(fmt.Sprintf("thread-%06d", j))), rec))
		}
		if _, err := f.client.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	// The cursor of the page after 50,000 threads by activity: the mod
	// revision of the 50,000th newest record.
	deep, err := f.client.Get(ctx, string(layout.Threads()), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(50_000))
	if err != nil {
		b.Fatal(err)
	}
	after := deep.Kvs[len(deep.Kvs)-1].ModRevision
	// The first request builds the tenant's activity index.
	h := f.con.Handler()
	first := httptest.NewRequestWithContext(ctx, http.MethodGet, "/console/", nil)
	first.AddCookie(benchSession(b, h))
	t0 := time.Now()
	h.ServeHTTP(httptest.NewRecorder(), first)
	b.Logf("B19 threads of 100,000: the first request, which builds the activity index, took %v", time.Since(t0).Round(time.Microsecond))
	timePages(b, f, []benchPage{
		{"100k-first", "/console/"},
		{"100k-after-50000", fmt.Sprintf("/console/?after=%d", after)},
		{"100k-search", "/console/?q=thread-0777"},
		{"100k-search-deep", "/console/?q=thread-&after=thread-077777"},
	})
}
