package sidecar

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn/internal/embedetcd"
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

// TestConnectEtcd checks that each way the start-up check of etcd can fail
// says what is wrong, against an embedded etcd with authentication on.
func TestConnectEtcd(t *testing.T) {
	srv, admin := embedetcd.ForTest(t)
	ctx := t.Context()
	for _, step := range []func() error{
		func() error { _, err := admin.RoleAdd(ctx, "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, "stranger", "stranger-pw"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	endpoints := srv.Endpoints()
	tests := []struct {
		name      string
		endpoints []string
		user, pw  string
		want      string // "" means success
	}{
		{"Root", endpoints, "root", "root-pw", ""},
		{"WrongPassword", endpoints, "root", "nope", "rejected the user name or password"},
		{"UnknownUser", endpoints, "nobody", "nope", "rejected the user name or password"},
		{"NoPermission", endpoints, "stranger", "stranger-pw", `etcd user "stranger" may not read the keys of --prefix "app/"`},
		{"Unreachable", []string{"127.0.0.1:1"}, "", "", "cannot reach etcd at 127.0.0.1:1 within 1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaults()
			cfg.EtcdEndpoints, cfg.EtcdUser, cfg.EtcdPassword, cfg.Prefix = tc.endpoints, tc.user, tc.pw, "app/"
			// A login costs etcd a bcrypt comparison, which can take well
			// over a second on a loaded machine under the race detector:
			// only the unreachable case needs a short deadline.
			cfg.ProbeTimeout, cfg.EtcdDialTimeout = 30*time.Second, 30*time.Second
			if tc.name == "Unreachable" {
				cfg.ProbeTimeout, cfg.EtcdDialTimeout = time.Second, time.Second
			}
			client, err := ConnectEtcd(ctx, cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ConnectEtcd: %v", err)
				}
				client.Close()
				return
			}
			if err == nil {
				client.Close()
				t.Fatalf("ConnectEtcd succeeded; want an error saying %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q; want it to say %q", err, tc.want)
			}
			if tc.pw != "" && strings.Contains(err.Error(), tc.pw) {
				t.Errorf("the error shows the password: %q", err)
			}
		})
	}
}
