package lincheck

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// History records operations as porcupine needs them: call and return times
// from the monotonic clock, one operation in flight per client id.
type History struct {
	mu     sync.Mutex
	base   time.Time
	ops    []porcupine.Operation
	client int
}

// NewHistory returns an empty history whose times count from now.
func NewHistory() *History { return &History{base: time.Now()} }

// NewClient returns a fresh client id. A logical client must take a new id
// after an operation of unknown outcome, since that operation may still take
// effect while the client goes on.
func (h *History) NewClient() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.client
	h.client++
	return id
}

// Now returns the time since the history began, in nanoseconds of the
// monotonic clock.
func (h *History) Now() int64 { return int64(time.Since(h.base)) }

// Add records an operation called at call and returned at ret. An operation
// of unknown outcome gets an infinite return time.
func (h *History) Add(client int, in Input, call, ret int64, out Output) {
	if out.Unknown {
		ret = math.MaxInt64
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// Operations returns a copy of the recorded operations.
func (h *History) Operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// Summary counts the operations by kind and outcome.
func Summary(ops []porcupine.Operation) string {
	counts := map[string]int{}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		res := "ok"
		switch {
		case out.Unknown:
			res = "unknown"
		case out.Err != "":
			res = out.Err[len("SANDBOX_SNAPSHOT_"):]
		}
		counts[in.Kind.String()+":"+res]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for _, k := range keys {
		s += fmt.Sprintf(" %s=%d", k, counts[k])
	}
	return s
}

// Result is the outcome of Check.
type Result struct {
	Verdict porcupine.CheckResult
	// Visualization is the path of porcupine's HTML visualization, written
	// when the verdict is not Ok.
	Visualization string
	// VisualizationErr is set when the visualization could not be written.
	VisualizationErr error
}

// Check checks ops against the model within timeout. When the history is
// not linearizable, or the check times out, it writes porcupine's
// visualization to dir/name.html (creating dir) and returns its path.
func Check(model porcupine.Model, ops []porcupine.Operation, timeout time.Duration, dir, name string) Result {
	verdict, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	r := Result{Verdict: verdict}
	if verdict == porcupine.Ok {
		return r
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.VisualizationErr = err
		return r
	}
	r.Visualization = filepath.Join(dir, name+".html")
	r.VisualizationErr = porcupine.VisualizePath(model, info, r.Visualization)
	return r
}
