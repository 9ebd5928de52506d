package console_test

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/console"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLogin(t *testing.T) {
	f := newFixture(t)
	t.Run("no session", func(t *testing.T) {
		c := f.browser(t)
		code, _, h := f.get(t, c, "/console/")
		if code != http.StatusSeeOther || h.Get("Location") != "/console/login?why=none" {
			t.Fatalf("GET /console/ without a session: %d to %q, want 303 to the login page", code, h.Get("Location"))
		}
	})
	t.Run("wrong token", func(t *testing.T) {
		c := f.browser(t)
		resp := f.login(t, c, "not-a-token")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("login with a wrong token: %d, want 401", resp.StatusCode)
		}
		if len(resp.Cookies()) != 0 {
			t.Fatalf("login with a wrong token set cookies %v", resp.Cookies())
		}
		if code, _, _ := f.get(t, c, "/console/"); code != http.StatusSeeOther {
			t.Fatalf("after a failed login GET /console/ answers %d, want 303", code)
		}
	})
	t.Run("cookie flags", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			tls    bool
			secure bool
		}{{"plain", false, false}, {"tls", true, true}} {
			t.Run(tc.name, func(t *testing.T) {
				req := httptest.NewRequest(http.MethodPost, "/console/login", strings.NewReader(url.Values{"token": {tokenA}}.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				if tc.tls {
					req.TLS = &tls.ConnectionState{}
				}
				rec := httptest.NewRecorder()
				f.con.Handler().ServeHTTP(rec, req)
				cs := rec.Result().Cookies()
				if rec.Code != http.StatusSeeOther || len(cs) != 1 {
					t.Fatalf("login: %d with cookies %v, want 303 and one cookie", rec.Code, cs)
				}
				ck := cs[0]
				if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure != tc.secure || ck.Path != "/console/" {
					t.Fatalf("cookie %+v: want HttpOnly, SameSite=Strict, Secure=%v, Path /console/", ck, tc.secure)
				}
			})
		}
	})
	t.Run("logout", func(t *testing.T) {
		c := f.browser(t)
		f.login(t, c, tokenA)
		resp, err := c.PostForm(f.http.URL+"/console/logout", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if code, _, _ := f.get(t, c, "/console/"); code != http.StatusSeeOther {
			t.Fatalf("after logout GET /console/ answers %d, want 303", code)
		}
	})
}

func TestExpiredSession(t *testing.T) {
	f := newFixture(t)
	c := f.browser(t)
	if resp := f.login(t, c, tokenA); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	if code, _, _ := f.get(t, c, "/console/"); code != http.StatusOK {
		t.Fatalf("fresh session: %d, want 200", code)
	}
	f.advance(59 * time.Minute)
	if code, _, _ := f.get(t, c, "/console/"); code != http.StatusOK {
		t.Fatalf("session before its expiry: %d, want 200", code)
	}
	f.advance(time.Minute)
	code, _, h := f.get(t, c, "/console/")
	if code != http.StatusSeeOther || h.Get("Location") != "/console/login?why=expired" {
		t.Fatalf("expired session: %d to %q, want 303 to /console/login?why=expired", code, h.Get("Location"))
	}
	_, body, _ := f.get(t, c, "/console/login?why=expired")
	if !strings.Contains(body, "Your session expired") {
		t.Fatal("the login page does not say the session expired")
	}
	// The session is gone, not just refused once.
	f.advance(-time.Hour)
	if code, _, _ := f.get(t, c, "/console/"); code != http.StatusSeeOther {
		t.Fatalf("an expired session came back when the clock went back: %d", code)
	}
}

func TestTenantIsolation(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	a, b := f.browser(t), f.browser(t)
	f.login(t, a, tokenA)
	f.login(t, b, tokenB)
	for _, tc := range []struct {
		name string
		c    *http.Client
		path string
		want int
	}{
		{"a reads its checkpoint", a, "/console/checkpoints/m1", 200},
		{"a cannot read b's checkpoint", a, "/console/checkpoints/secret-cp", 404},
		{"a cannot read b's thread", a, "/console/threads/secret-thread", 404},
		{"a cannot download b's file", a, "/console/checkpoints/secret-cp/file?path=secret.txt", 404},
		{"a cannot download b's tree", a, "/console/checkpoints/secret-cp/tar", 404},
		{"b reads its checkpoint", b, "/console/checkpoints/secret-cp", 200},
		{"b cannot read a's checkpoint", b, "/console/checkpoints/m1", 404},
		{"b cannot read a's thread", b, "/console/threads/main", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := f.get(t, tc.c, tc.path)
			if code != tc.want {
				t.Fatalf("GET %s: %d, want %d", tc.path, code, tc.want)
			}
			if tc.want == 404 && (strings.Contains(body, "bravo&#39;s secret") || strings.Contains(body, "fix the bug")) {
				t.Fatal("a 404 page shows the other tenant's data")
			}
		})
	}
	for _, tc := range []struct {
		name     string
		c        *http.Client
		path     string
		mustNot  []string
		mustHave []string
	}{
		{"a's threads", a, "/console/", []string{"secret-thread", "bravo-only"}, []string{"main", "fork-1", "pruned"}},
		{"a's search", a, "/console/?q=sec", []string{"secret-thread"}, nil},
		{"a's storage", a, "/console/storage", []string{"secret-thread"}, []string{"main"}},
		{"b's threads", b, "/console/", []string{">main<", "fork-1"}, []string{"secret-thread"}},
		{"b's storage", b, "/console/storage", []string{">main<", "fork-1"}, []string{"secret-thread"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := f.get(t, tc.c, tc.path)
			if code != 200 {
				t.Fatalf("GET %s: %d", tc.path, code)
			}
			for _, s := range tc.mustNot {
				if strings.Contains(body, s) {
					t.Errorf("GET %s shows %q of the other tenant", tc.path, s)
				}
			}
			for _, s := range tc.mustHave {
				if !strings.Contains(body, s) {
					t.Errorf("GET %s does not show %q", tc.path, s)
				}
			}
		})
	}
}

func TestNotFoundPages(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	c := f.browser(t)
	f.login(t, c, tokenA)
	for _, tc := range []struct{ name, path, says string }{
		{"unknown checkpoint", "/console/checkpoints/no-such-checkpoint", `There is no checkpoint &#34;no-such-checkpoint&#34;`},
		{"invalid checkpoint id", "/console/checkpoints/" + url.PathEscape(strings.Repeat("x", 5000)), "not a valid id"},
		{"unknown thread", "/console/threads/no-such-thread", `There is no thread &#34;no-such-thread&#34;`},
		{"unknown file", "/console/checkpoints/m1/file?path=nope", `has no file &#34;nope&#34;`},
		{"unknown diff", "/console/checkpoints/m1?diff=nope", `There is no file &#34;nope&#34;`},
		{"unknown page", "/console/nothing-here", "There is no console page"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, h := f.get(t, c, tc.path)
			if code != http.StatusNotFound {
				t.Fatalf("GET %s: %d, want 404", tc.path, code)
			}
			if !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(body, "<h1>404") {
				t.Fatalf("GET %s: not an HTML error page: %q", tc.path, h.Get("Content-Type"))
			}
			if !strings.Contains(body, tc.says) {
				t.Fatalf("GET %s does not say %q:\n%s", tc.path, tc.says, body)
			}
			for _, bad := range []string{"goroutine", "panic", ".go:"} {
				if strings.Contains(body, bad) {
					t.Fatalf("GET %s shows %q", tc.path, bad)
				}
			}
		})
	}
}

func TestHostileContentInert(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	c := f.browser(t)
	f.login(t, c, tokenA)
	hostileName := url.QueryEscape(`<script>alert("file")</script>.txt`)
	for _, path := range []string{"/console/checkpoints/m3", "/console/checkpoints/m3?diff=" + hostileName, "/console/threads/main", "/console/"} {
		t.Run(path, func(t *testing.T) {
			code, body, h := f.get(t, c, path)
			if code != 200 {
				t.Fatalf("GET %s: %d", path, code)
			}
			if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("no script-src 'self' in the CSP %q", csp)
			}
			for _, raw := range []string{"<script>alert", "<img src=x", "<svg onload", "<b>bold</b>"} {
				if strings.Contains(body, raw) {
					t.Errorf("GET %s holds %q unescaped", path, raw)
				}
			}
		})
	}
	// Ids with a slash, a question mark and markup round-trip through
	// the links.
	odd := f.writer(t, 0, `odd/thread?<i>x</i>`)
	odd.add(`odd/cp#<i>1</i>`, 1.7e12, cairn.ReasonAutomatic, "", nil, "")
	_, list, _ := f.get(t, c, "/console/?q=odd")
	for _, want := range []string{`href="/console/threads/odd%2Fthread%3F%3Ci%3Ex%3C%2Fi%3E"`, `href="/console/checkpoints/odd%2Fcp%23%3Ci%3E1%3C%2Fi%3E"`} {
		if !strings.Contains(list, want) {
			t.Fatalf("the thread list does not link %s:\n%s", want, list)
		}
	}
	for _, p := range []string{"/console/threads/odd%2Fthread%3F%3Ci%3Ex%3C%2Fi%3E", "/console/checkpoints/odd%2Fcp%23%3Ci%3E1%3C%2Fi%3E"} {
		if code, body, _ := f.get(t, c, p); code != 200 || strings.Contains(body, "<i>x</i>") {
			t.Fatalf("GET %s: %d (or markup unescaped)", p, code)
		}
	}

	_, body, _ := f.get(t, c, "/console/checkpoints/m3")
	for _, escaped := range []string{"&lt;script&gt;alert(&#34;file&#34;)&lt;/script&gt;.txt", "&lt;script&gt;alert(&#39;conv&#39;)&lt;/script&gt;", "v1 &lt;b&gt;bold&lt;/b&gt;"} {
		if !strings.Contains(body, escaped) {
			t.Errorf("the checkpoint page does not show %q as text", escaped)
		}
	}
	// A download is an attachment of octet-stream, never rendered.
	resp, err := c.Get(f.http.URL + "/console/checkpoints/m3/file?path=" + hostileName)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct, cd := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"); ct != "application/octet-stream" || !strings.HasPrefix(cd, "attachment") {
		t.Fatalf("download of a hostile file: Content-Type %q, Content-Disposition %q", ct, cd)
	}
}

func TestPages(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	c := f.browser(t)
	f.login(t, c, tokenA)
	for _, tc := range []struct {
		name string
		path string
		want []string
	}{
		{"threads by activity", "/console/", []string{`href="/console/threads/pruned"`, `href="/console/checkpoints/m3"`, "named", "v1 &lt;b&gt;"}},
		{"thread with a fork out", "/console/threads/main", []string{`data-fork="fork-1"`, "was forked into thread", `<span class="add">+1</span> <span class="chg">~1</span> <span class="del">−1</span>`}},
		{"forked thread", "/console/threads/fork-1", []string{"was forked from", `href="/console/checkpoints/m2"`, "fork root"}},
		{"pruned chain", "/console/threads/pruned", []string{"parent p2 pruned", `class="pruned"`}},
		{"checkpoint marks", "/console/checkpoints/m2", []string{`class="mark added">added`, `class="mark removed">removed`, `class="mark changed">changed`, "<summary>tool-call (bash)</summary>"}},
		{"text diff", "/console/checkpoints/m2?diff=a.txt", []string{`<tr class="d-changed"><td class="ln">2</td><td class="old"><pre>world</pre></td><td class="ln">2</td><td class="new"><pre>there</pre>`}},
		{"binary diff", "/console/checkpoints/m2?diff=b.bin", []string{"Binary file: compared by size and digest", "sha256"}},
		{"directory", "/console/checkpoints/m2?dir=src", []string{"x.go", `aria-label="Directory"`}},
		{"storage", "/console/storage", []string{"Largest threads", "etcd"}},
		{"sweeper", "/console/sweeper", []string{"The next run (dry run)", "Last run", "<dt>Phase</dt><dd>done: success</dd>", "<dt>Pruned</dt>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := f.get(t, c, tc.path)
			if code != 200 {
				t.Fatalf("GET %s: %d\n%s", tc.path, code, body)
			}
			for _, s := range tc.want {
				if !strings.Contains(body, s) {
					t.Errorf("GET %s does not show %q", tc.path, s)
				}
			}
		})
	}
	t.Run("sweeper plan", func(t *testing.T) {
		sum := sha256.Sum256([]byte("unreferenced garbage\n"))
		garbage := "sandbox-files/sha256/" + hex.EncodeToString(sum[:])
		_, body, _ := f.get(t, c, "/console/sweeper")
		if !strings.Contains(body, "<code>"+garbage+"</code>") {
			t.Fatalf("the plan does not list the unreferenced key %s", garbage)
		}
		if strings.Contains(body, "<code>"+f.put(t, "hello\nthere\nline three\n")+"</code>") {
			t.Fatal("the plan lists a referenced key")
		}
	})
	t.Run("tar", func(t *testing.T) {
		resp, err := c.Get(f.http.URL + "/console/checkpoints/m2/tar")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		tr := tar.NewReader(resp.Body)
		got := map[string]string{}
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			got[h.Name] = string(b)
		}
		want := map[string]string{"a.txt": "hello\nthere\nline three\n", "c.txt": "new file\n", "src/": "", "src/x.go": "package x\n"}
		if len(got) != len(want) {
			t.Fatalf("tar holds %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("tar entry %q = %q, want %q", k, got[k], v)
			}
		}
	})
}

// TestReadOnly visits every page and download and checks that etcd's
// revision and the bucket's keys did not change, and that other methods
// are refused.
func TestReadOnly(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	c := f.browser(t)
	f.login(t, c, tokenA)
	ctx := context.Background()
	rev := func() int64 {
		resp, err := f.client.Get(ctx, "any")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	objects := func() []string {
		var out []string
		page, err := f.blobs.List(ctx, "", "", bucket.MaxPageSize)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			out = append(out, o.Key)
		}
		return out
	}
	before, beforeObjects := rev(), objects()
	for _, p := range []string{"/console/", "/console/?q=ma", "/console/threads/main", "/console/threads/fork-1", "/console/threads/pruned",
		"/console/checkpoints/m1", "/console/checkpoints/m2?diff=a.txt", "/console/checkpoints/m3?dir=src",
		"/console/checkpoints/m2/file?path=a.txt", "/console/checkpoints/m2/tar", "/console/storage", "/console/sweeper",
		"/console/checkpoints/nope"} {
		if code, _, _ := f.get(t, c, p); code >= 500 {
			t.Fatalf("GET %s: %d", p, code)
		}
	}
	if after := rev(); after != before {
		t.Fatalf("etcd's revision went from %d to %d while the console was read", before, after)
	}
	if after := objects(); !slices.Equal(after, beforeObjects) {
		t.Fatalf("the bucket changed while the console was read: %v, then %v", beforeObjects, after)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		req, _ := http.NewRequest(m, f.http.URL+"/console/checkpoints/m1", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s of a checkpoint: %d, want 405", m, resp.StatusCode)
		}
	}
}

// TestThreadsPaging walks the thread list page by page, in the activity
// order and in a prefix search, and checks that every thread shows exactly
// once, in order.
func TestThreadsPaging(t *testing.T) {
	f := newFixture(t)
	const n = 120
	for i := range n {
		w := f.writer(t, 0, fmt.Sprintf("th-%03d", i))
		w.add(fmt.Sprintf("cp-%03d", i), 1.7e12, cairn.ReasonAutomatic, "", nil, "")
		w.lease.Release(context.Background())
	}
	// Touch a thread in the middle: it becomes the newest.
	w := f.writer(t, 0, "th-050")
	w.add("cp-050-b", 1.7e12+1, cairn.ReasonAutomatic, "", nil, "")
	other := f.writer(t, 0, "other")
	other.add("cp-other", 1.7e12, cairn.ReasonAutomatic, "", nil, "")

	c := f.browser(t)
	f.login(t, c, tokenA)
	row := regexp.MustCompile(`<th scope="row"><a href="/console/threads/([^"]+)">`)
	next := regexp.MustCompile(`<a rel="next" href="/console/\?([^"]+)">`)
	walk := func(first string) []string {
		var ids []string
		path := first
		for pages := 0; path != ""; pages++ {
			if pages > n {
				t.Fatalf("the pages do not end: %s, %v", path, ids[len(ids)-5:])
			}
			code, body, _ := f.get(t, c, path)
			if code != 200 {
				t.Fatalf("GET %s: %d", path, code)
			}
			for _, m := range row.FindAllStringSubmatch(body, -1) {
				ids = append(ids, m[1])
			}
			path = ""
			if m := next.FindStringSubmatch(body); m != nil {
				path = "/console/?" + html.UnescapeString(m[1])
			}
		}
		return ids
	}
	var want []string
	want = append(want, "other", "th-050")
	for i := n - 1; i >= 0; i-- {
		if i != 50 {
			want = append(want, fmt.Sprintf("th-%03d", i))
		}
	}
	if got := walk("/console/"); !slices.Equal(got, want) {
		t.Fatalf("activity order over the pages:\n got %v\nwant %v", got, want)
	}
	var search []string
	for i := range n {
		search = append(search, fmt.Sprintf("th-%03d", i))
	}
	if got := walk("/console/?q=th-"); !slices.Equal(got, search) {
		t.Fatalf("search th- over the pages:\n got %v\nwant %v", got, search)
	}
	if got := walk("/console/?q=th-05"); !slices.Equal(got, search[50:60]) {
		t.Fatalf("search th-05: got %v, want %v", got, search[50:60])
	}

	// A write after the list was built moves its thread to the top once
	// the console's watch has seen it; the thread shows once.
	w10 := f.writer(t, 0, "th-010")
	w10.add("cp-010-b", 1.7e12+2, cairn.ReasonAutomatic, "", nil, "")
	want = append([]string{"th-010"}, slices.DeleteFunc(want, func(s string) bool { return s == "th-010" })...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := walk("/console/")
		if slices.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a write, the activity order is\n got %v\nwant %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countingBucket counts the console's reads of objects.
type countingBucket struct {
	*bucket.Memory
	mu   sync.Mutex
	gets []string
}

func (c *countingBucket) Get(ctx context.Context, key string) ([]byte, error) {
	c.mu.Lock()
	c.gets = append(c.gets, key)
	c.mu.Unlock()
	return c.Memory.Get(ctx, key)
}

func (c *countingBucket) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gets
	c.gets = nil
	return g
}

// TestReadsOnlyWhatItShows: the checkpoint page reads no file bytes from
// the bucket, its diff the two versions of the one file, a download that
// file, the tar every non-empty file once.
func TestReadsOnlyWhatItShows(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	blobs := &countingBucket{Memory: f.blobs}
	con, err := console.New(console.Config{Client: f.client, Tenants: f.srv.Tenants(), Stores: f.stores, Blobs: blobs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(con.Close)
	h := con.Handler()
	req := httptest.NewRequest(http.MethodPost, "/console/login", strings.NewReader(url.Values{"token": {tokenA}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	cookie := rec.Result().Cookies()[0]
	aOld, aNew := f.put(t, "hello\nworld\nline three\n"), f.put(t, "hello\nthere\nline three\n")
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/console/checkpoints/m2", nil},
		{"/console/checkpoints/m2?dir=src", nil},
		{"/console/checkpoints/m2?diff=a.txt", []string{aOld, aNew}},
		{"/console/checkpoints/m2/file?path=a.txt", []string{aNew}},
		{"/console/checkpoints/m2/tar", []string{aNew, f.put(t, "new file\n"), f.put(t, "package x\n")}},
		{"/console/threads/main", nil},
		{"/console/", nil},
	} {
		t.Run(tc.path, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			req.AddCookie(cookie)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != 200 {
				t.Fatalf("GET %s: %d", tc.path, rec.Code)
			}
			got := blobs.take()
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("GET %s read %v from the bucket, want %v", tc.path, got, want)
			}
		})
	}
}
