package console_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// chromiumNames are the names the browser tests look for on PATH.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// repoRoot returns the module's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// violation is what the test keeps of an axe-core violation.
type violation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  int    `json:"nodes"`
	Target string `json:"target"`
}

// TestBrowser loads every page of the console in headless Chromium against
// a cairnd with seeded data, checks what a person would check on each,
// saves a screenshot of each under bin/console-screenshots/, and runs
// axe-core on each, failing on a serious or critical violation. It skips
// only when no Chromium is installed.
func TestBrowser(t *testing.T) {
	var chromium string
	for _, n := range chromiumNames {
		if p, err := exec.LookPath(n); err == nil {
			chromium = p
			break
		}
	}
	if chromium == "" {
		t.Skipf("no Chromium found on PATH (looked for %s): the console's browser tests need it (apt-get install -y chromium)", strings.Join(chromiumNames, ", "))
	}
	root := repoRoot(t)
	axePath := os.Getenv("CAIRN_AXE_JS")
	if axePath == "" {
		axePath = filepath.Join(root, "bin", "axe.min.js")
	}
	axe, err := os.ReadFile(axePath)
	if err != nil {
		t.Fatalf("axe-core's axe.min.js is needed to check accessibility: %v (make tools fetches it into bin/)", err)
	}
	shots := filepath.Join(root, "bin", "console-screenshots")
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	f := newFixture(t)
	f.seed(t)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer tcancel()
	var dialogs atomic.Int32
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
			go func() {
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			}()
		}
	}); err != nil {
		t.Fatalf("start Chromium (%s): %v", chromium, err)
	}

	base := f.http.URL
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/console/login"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), tokenA),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#threads")),
	); err != nil {
		t.Fatalf("log in: %v", err)
	}

	sum := sha256.Sum256([]byte("unreferenced garbage\n"))
	garbage := "sandbox-files/sha256/" + hex.EncodeToString(sum[:])
	for _, pg := range []struct {
		name, path string
		// check is a JavaScript expression that is true when the page shows
		// what a person would look for.
		check, what string
	}{
		{"login", "/console/login", "true", "the login form"},
		{"threads", "/console/", `[...document.querySelectorAll("#threads th a")].map(a => a.textContent).join(",") === "pruned,fork-1,main"`,
			"the threads, newest activity first"},
		{"search", "/console/?q=fo", `document.querySelectorAll("#threads tbody tr").length === 1 && document.querySelector("#threads th a").textContent === "fork-1"`,
			"the search finds fork-1 only"},
		{"thread", "/console/threads/main", `document.querySelector('#graph a[data-fork="fork-1"] rect') !== null && document.querySelectorAll("#graph circle").length === 3 && document.querySelector("#forks").textContent.includes("forked into thread fork-1")`,
			"the graph has the fork into fork-1"},
		{"thread-fork", "/console/threads/fork-1", `document.querySelector("#forks").textContent.includes("forked from m2")`,
			"the fork's source m2"},
		{"thread-pruned", "/console/threads/pruned", `document.querySelectorAll("#graph line.pruned").length === 1 && document.body.textContent.includes("parent p2 pruned")`,
			"the pruned ancestors"},
		{"checkpoint", "/console/checkpoints/m2", `document.querySelectorAll("#tree .mark.added").length === 1 && document.querySelectorAll("#tree .mark.removed").length === 1 && document.querySelector("details summary").textContent.includes("bash")`,
			"the marks against the parent and the folded tool call"},
		{"diff", "/console/checkpoints/m2?diff=a.txt", `(() => { const r = document.querySelector("table.diff tr.d-changed"); return r !== null && r.querySelector(".old").textContent === "world" && r.querySelector(".new").textContent === "there"; })()`,
			"the changed line side by side"},
		{"hostile", "/console/checkpoints/m3", `document.querySelectorAll("script").length === 1 && document.querySelectorAll("main img, main svg[onload], main b").length === 0 && document.body.textContent.includes('<script>alert("file")</script>.txt')`,
			"hostile names and messages shown as text"},
		{"storage", "/console/storage", `document.querySelectorAll("#largest tbody tr").length === 3`,
			"the largest threads"},
		{"sweeper", "/console/sweeper", `document.querySelector("#plan-keys").textContent.includes(` + jsString(garbage) + `) && document.querySelector("#last-h + dl").textContent.includes("done: success")`,
			"the last run and the dry run's key"},
		{"not-found", "/console/checkpoints/no-such-checkpoint", `document.querySelector("h1").textContent.startsWith("404") && document.body.textContent.includes("There is no checkpoint")`,
			"a clear 404 page"},
	} {
		t.Run(pg.name, func(t *testing.T) {
			if err := chromedp.Do(ctx, chromedp.Navigate(base+pg.path), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
				t.Fatalf("load %s: %v", pg.path, err)
			}
			ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](pg.check))
			if err != nil {
				t.Fatalf("check %s: %v", pg.path, err)
			}
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatalf("screenshot of %s: %v", pg.path, err)
			}
			if err := os.WriteFile(filepath.Join(shots, pg.name+".png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
			if !ok {
				t.Errorf("%s does not show %s", pg.path, pg.what)
			}
			checkAxe(t, ctx, string(axe), pg.path)
		})
	}
	t.Run("narrow", func(t *testing.T) {
		for _, p := range []string{"/console/", "/console/threads/main", "/console/checkpoints/m2?diff=a.txt", "/console/sweeper"} {
			if err := chromedp.Do(ctx, chromedp.EmulateViewport(375, 740), chromedp.Navigate(base+p), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
				t.Fatal(err)
			}
			fits, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth + 1`))
			if err != nil {
				t.Fatal(err)
			}
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatal(err)
			}
			name := strings.Trim(strings.NewReplacer("/console/", "", "/", "-", "?", "-", "=", "-").Replace(p), "-")
			if name == "" {
				name = "threads"
			}
			name = "narrow-" + name
			if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
			if !fits {
				t.Errorf("%s is wider than a 375-pixel screen", p)
			}
		}
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("keyboard", func(t *testing.T) {
		focused := chromedp.Evaluate[string](`document.activeElement.textContent`)
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/console/"), chromedp.WaitReady(chromedp.CSS("main")), chromedp.KeyEvent("\t")); err != nil {
			t.Fatal(err)
		}
		first, err := chromedp.Run(ctx, focused)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`document.activeElement.blur()`)); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.KeyEvent("j")); err != nil {
			t.Fatal(err)
		}
		afterJ, err := chromedp.Run(ctx, focused)
		if err != nil {
			t.Fatal(err)
		}
		if first != "Skip to content" {
			t.Errorf("the first Tab focuses %q, want the skip link", first)
		}
		if afterJ != "pruned" {
			t.Errorf("j focuses %q, want the first thread", afterJ)
		}
	})
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened: hostile content ran", n)
	}
}

// checkAxe runs axe-core on the loaded page and fails on serious or
// critical violations; it logs the others.
func checkAxe(t *testing.T, ctx context.Context, axe, path string) {
	t.Helper()
	run := `axe.run(document, {resultTypes: ["violations"]}).then(r => JSON.stringify(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.length, target: v.nodes.length ? String(v.nodes[0].target) : ""}))))`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](axe)); err != nil {
		t.Fatalf("inject axe-core into %s: %v", path, err)
	}
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](run, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("axe-core on %s: %v", path, err)
	}
	var vs []violation
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		t.Fatalf("axe-core's answer on %s: %v", path, err)
	}
	for _, v := range vs {
		msg := fmt.Sprintf("axe-core on %s: %s (%s): %s, %d nodes, first %s", path, v.ID, v.Impact, v.Help, v.Nodes, v.Target)
		if v.Impact == "serious" || v.Impact == "critical" {
			t.Error(msg)
		} else {
			t.Log(msg)
		}
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
