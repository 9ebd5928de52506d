package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output events
}

// Tally counts tests by their result. A package that failed without a
// failing test (it did not build, TestMain or the binary failed) counts as
// one failed test.
type Tally struct {
	Passed, Failed, Skipped int
}

// String is the summary line.
func (t Tally) String() string {
	s := fmt.Sprintf("%d passed, %d failed", t.Passed, t.Failed)
	if t.Skipped > 0 {
		s += fmt.Sprintf(", %d skipped", t.Skipped)
	}
	return s
}

type testKey struct{ pkg, test string }

// Read adds the events of r to t. It writes to out each package's output
// (its result line), build output, lines that are not events, and the
// buffered output of each test that fails, or that was still running when
// its package failed. When raw is not nil, each event line is copied to it.
func (t *Tally) Read(r io.Reader, out, raw io.Writer) error {
	pending := map[testKey]*strings.Builder{} // output of tests still running
	failedIn := map[string]bool{}             // packages with a failed test
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintf(out, "%s\n", line) // not an event: go's own messages
			continue
		}
		if raw != nil {
			if _, err := fmt.Fprintf(raw, "%s\n", line); err != nil {
				return err
			}
		}
		k := testKey{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			io.WriteString(out, e.Output)
		case e.Action == "output" && e.Test == "":
			if e.Output != "PASS\n" { // go test shows only the ok line of a package that passed
				io.WriteString(out, e.Output)
			}
		case e.Action == "output":
			b := pending[k]
			if b == nil {
				b = &strings.Builder{}
				pending[k] = b
			}
			b.WriteString(e.Output)
		case e.Test != "" && (e.Action == "pass" || e.Action == "skip"):
			if e.Action == "pass" {
				t.Passed++
			} else {
				t.Skipped++
			}
			delete(pending, k)
		case e.Test != "" && e.Action == "fail":
			t.Failed++
			failedIn[e.Package] = true
			if b := pending[k]; b != nil {
				io.WriteString(out, b.String())
			}
			delete(pending, k)
		case e.Test == "" && e.Action == "fail":
			// Whatever was still running belongs to the failure.
			var running []testKey
			for pk := range pending {
				if pk.pkg == e.Package {
					running = append(running, pk)
				}
			}
			slices.SortFunc(running, func(a, b testKey) int { return strings.Compare(a.test, b.test) })
			for _, pk := range running {
				io.WriteString(out, pending[pk].String())
				delete(pending, pk)
			}
			if !failedIn[e.Package] {
				t.Failed++
			}
			delete(failedIn, e.Package)
		case e.Test == "" && (e.Action == "pass" || e.Action == "skip"):
			delete(failedIn, e.Package)
		}
	}
	return sc.Err()
}
