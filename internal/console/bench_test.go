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
	ctx := context.Background()
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

	// A session, through the handler.
	h := f.con.Handler()
	req := httptest.NewRequest(http.MethodPost, "/console/login", strings.NewReader(url.Values{"token": {tokenA}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	cookie := rec.Result().Cookies()[0]

	for _, page := range []struct{ name, path string }{
		{"checkpoint", "/console/checkpoints/big-2"},
		{"checkpoint-dir", "/console/checkpoints/big-2?dir=dir100"},
		{"thread", "/console/threads/long"},
		{"threads", "/console/"},
	} {
		b.Run(page.name, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				req := httptest.NewRequestWithContext(ctx, http.MethodGet, page.path, nil)
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
