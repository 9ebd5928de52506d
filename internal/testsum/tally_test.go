package main

import (
	"bytes"
	"strings"
	"testing"
)

// ev builds one event line.
func ev(action, pkg, test, output string) string {
	var b strings.Builder
	b.WriteString(`{"Action":"` + action + `","Package":"` + pkg + `"`)
	if test != "" {
		b.WriteString(`,"Test":"` + test + `"`)
	}
	if output != "" {
		b.WriteString(`,"Output":` + quote(output))
	}
	b.WriteString("}\n")
	return b.String()
}

func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}

func TestRead(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Tally
		summary string
		out     []string // lines out must contain
		notOut  []string // lines out must not contain
	}{
		{
			name: "passes and skips",
			in: ev("run", "p", "TestA", "") + ev("output", "p", "TestA", "=== RUN   TestA\n") +
				ev("output", "p", "TestA", "noise of a passing test\n") + ev("pass", "p", "TestA", "") +
				ev("skip", "p", "TestB", "") + ev("output", "p", "", "ok  \tp\t0.1s\n") + ev("pass", "p", "", ""),
			want: Tally{Passed: 1, Skipped: 1}, summary: "1 passed, 0 failed, 1 skipped",
			out: []string{"ok  \tp\t0.1s"}, notOut: []string{"noise of a passing test"},
		},
		{
			name: "a failing subtest shows its output and its parent's",
			in: ev("output", "p", "TestA", "=== RUN   TestA\n") + ev("output", "p", "TestA/x", "    a_test.go:9: got 1, want 2\n") +
				ev("fail", "p", "TestA/x", "") + ev("output", "p", "TestA", "--- FAIL: TestA (0.00s)\n") + ev("fail", "p", "TestA", "") +
				ev("pass", "p", "TestC", "") + ev("output", "p", "", "FAIL\tp\t0.2s\n") + ev("fail", "p", "", ""),
			want: Tally{Passed: 1, Failed: 2}, summary: "1 passed, 2 failed",
			out: []string{"a_test.go:9: got 1, want 2", "--- FAIL: TestA", "FAIL\tp\t0.2s"},
		},
		{
			name: "a package that fails without a failing test counts once",
			in: ev("output", "p", "TestA", "=== RUN   TestA\n") + ev("output", "p", "TestA", "panic: boom\n") +
				ev("output", "p", "", "FAIL\tp\t0.3s\n") + ev("fail", "p", "", "") + ev("pass", "q", "TestQ", "") + ev("pass", "q", "", ""),
			want: Tally{Passed: 1, Failed: 1}, summary: "1 passed, 1 failed",
			out: []string{"panic: boom", "FAIL\tp\t0.3s"},
		},
		{
			name: "build failures and lines that are not events",
			in: "go: downloading example.com/m v1.0.0\n" +
				`{"ImportPath":"p [p.test]","Action":"build-output","Output":"p/a.go:3:1: syntax error\n"}` + "\n" +
				`{"ImportPath":"p [p.test]","Action":"build-fail"}` + "\n" +
				ev("output", "p", "", "FAIL\tp [build failed]\n") + ev("fail", "p", "", ""),
			want: Tally{Failed: 1}, summary: "0 passed, 1 failed",
			out: []string{"go: downloading example.com/m v1.0.0", "p/a.go:3:1: syntax error", "FAIL\tp [build failed]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Tally
			var out, raw bytes.Buffer
			if err := got.Read(strings.NewReader(tt.in), &out, &raw); err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("tally %+v, want %+v", got, tt.want)
			}
			if got.String() != tt.summary {
				t.Errorf("summary %q, want %q", got.String(), tt.summary)
			}
			for _, s := range tt.out {
				if !strings.Contains(out.String(), s) {
					t.Errorf("output lacks %q:\n%s", s, out.String())
				}
			}
			for _, s := range tt.notOut {
				if strings.Contains(out.String(), s) {
					t.Errorf("output has %q:\n%s", s, out.String())
				}
			}
			// The raw copy holds the events only, and reads back to the same tally.
			var again Tally
			if err := again.Read(&raw, &bytes.Buffer{}, nil); err != nil || again != got {
				t.Errorf("raw copy reads back as %+v (%v), want %+v", again, err, got)
			}
			if strings.Contains(raw.String(), "go: downloading") {
				t.Errorf("raw copy has a line that is not an event")
			}
		})
	}
}
