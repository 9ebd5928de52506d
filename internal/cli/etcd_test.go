package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn/internal/embedetcd"
)

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
			e := DefaultEtcd()
			e.Endpoints, e.User, e.Password = tc.endpoints, tc.user, tc.pw
			// A login costs etcd a bcrypt comparison, which can take well
			// over a second on a loaded machine under the race detector:
			// only the unreachable case needs a short deadline.
			probe := 30 * time.Second
			if tc.name == "Unreachable" {
				probe = time.Second
			}
			e.DialTimeout = probe
			client, err := ConnectEtcd(ctx, e, "app/", probe)
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

func TestEtcdValidateEndpoints(t *testing.T) {
	tests := []struct {
		name      string
		endpoints []string
		want      string // "" means valid
	}{
		{"HostPort", []string{"127.0.0.1:2379"}, ""},
		{"URL", []string{"http://etcd-0:2379", "https://etcd-1:2379"}, ""},
		{"SchemeOnly", []string{"http://"}, `--etcd-endpoints: "http://" has no host`},
		{"SchemeAndPort", []string{"http://:2379"}, `"http://:2379" has no host`},
		{"PortOnly", []string{":2379"}, `":2379" has no host`},
		{"SecondBad", []string{"127.0.0.1:2379", "https://"}, `"https://" has no host`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := DefaultEtcd()
			e.Endpoints = tc.endpoints
			err := e.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (!errors.Is(err, ErrUsage) || !strings.Contains(fmt.Sprint(err), tc.want)):
				t.Errorf("Validate() = %v, want a usage error containing %q", err, tc.want)
			}
		})
	}
}

// TestEtcdAuthWarning connects with a user to an etcd without
// authentication: the connection works and a warning says the user is
// ignored.
func TestEtcdAuthWarning(t *testing.T) {
	srv, _ := embedetcd.ForTest(t)
	tests := []struct {
		name string
		user string
		want string // "" means no warning
	}{
		{"NoUser", "", ""},
		{"UserWithoutAuth", "root", `--etcd-user "root" is set but etcd at`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := DefaultEtcd()
			e.Endpoints, e.User, e.Password = srv.Endpoints(), tc.user, "pw"
			if tc.user == "" {
				e.Password = ""
			}
			client, err := ConnectEtcd(t.Context(), e, "app/", 5*time.Second)
			if err != nil {
				t.Fatalf("ConnectEtcd: %v", err)
			}
			defer client.Close()
			got := EtcdAuthWarning(t.Context(), client, e)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("warning %q, want one containing %q", got, tc.want)
			}
		})
	}
}
