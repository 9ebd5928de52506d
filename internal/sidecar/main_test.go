package sidecar

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMainUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"Help", []string{"--help"}, ExitOK, "Exit codes:"},
		{"BadFlag", []string{"--prefix=p", "--s3-bucket=b", "--once", "--older-than=-5m"}, ExitUsage, "sweeper: usage error: --older-than must not be negative"},
		{"NoMode", []string{"--prefix=p", "--s3-bucket=b"}, ExitUsage, "Run sweeper --help"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := Main(Env{Args: tc.args, Stderr: &out}); code != tc.code {
				t.Errorf("exit code %d; want %d; output:\n%s", code, tc.code, out.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("the output does not say %q:\n%s", tc.want, out.String())
			}
		})
	}
}

func TestHealthEndpoints(t *testing.T) {
	h := &health{}
	h.setReady(false, "starting")
	handler := h.handler(NewMetrics(false))
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	for _, tc := range []struct {
		name   string
		ready  bool
		path   string
		status int
		body   string
	}{
		{"HealthzWhileStarting", false, "/healthz", 200, "ok"},
		{"ReadyzWhileStarting", false, "/readyz", 503, "not ready: starting"},
		{"ReadyzWhenReady", true, "/readyz", 200, "ok"},
		{"Metrics", true, "/metrics", 200, `cairn_sweeper_runs_total{result="success"} 0`},
		{"BuildInfo", true, "/metrics", 200, "cairn_sweeper_build_info{"},
		{"GoCollector", true, "/metrics", 200, "go_goroutines "},
		{"Unknown", true, "/nothing", 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.setReady(tc.ready, "starting")
			status, body := get(tc.path)
			if status != tc.status || !strings.Contains(body, tc.body) {
				t.Errorf("GET %s = %d %q; want %d containing %q", tc.path, status, body, tc.status, tc.body)
			}
		})
	}
}
