package cli

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn/bucket"
)

// newTestSet returns a set with the etcd and S3 flags and one duration.
func newTestSet(e *Etcd, c *bucket.Config, d *time.Duration) *Set {
	s := NewSet("test", &bytes.Buffer{})
	e.Register(s)
	RegisterS3(s, c)
	s.Var(Duration{d}, "grace", "a duration")
	return s
}

func TestSetParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string // "" means success
		check   func(t *testing.T, s *Set, e Etcd, d time.Duration)
	}{
		{"FlagWins", []string{"--grace=2h"}, map[string]string{"CAIRN_GRACE": "3h"}, "", func(t *testing.T, s *Set, e Etcd, d time.Duration) {
			if d != 2*time.Hour || s.Source("grace") != "flag" {
				t.Errorf("grace = %v from %q; want 2h from the flag", d, s.Source("grace"))
			}
		}},
		{"CairnVariable", nil, map[string]string{"CAIRN_GRACE": "7d"}, "", func(t *testing.T, s *Set, e Etcd, d time.Duration) {
			if d != 7*24*time.Hour || s.Source("grace") != "env CAIRN_GRACE" {
				t.Errorf("grace = %v from %q; want 7d from CAIRN_GRACE", d, s.Source("grace"))
			}
		}},
		{"AliasAfterCairn", nil, map[string]string{"ETCDCTL_ENDPOINTS": "a:1", "CAIRN_ETCD_ENDPOINTS": "b:2"}, "", func(t *testing.T, s *Set, e Etcd, d time.Duration) {
			if len(e.Endpoints) != 1 || e.Endpoints[0] != "b:2" {
				t.Errorf("endpoints = %v; want [b:2]", e.Endpoints)
			}
		}},
		{"Alias", nil, map[string]string{"ETCDCTL_USER": "u"}, "", func(t *testing.T, s *Set, e Etcd, d time.Duration) {
			if e.User != "u" || s.Source("etcd-user") != "env ETCDCTL_USER" {
				t.Errorf("user = %q from %q; want u from ETCDCTL_USER", e.User, s.Source("etcd-user"))
			}
		}},
		{"BadVariableNamed", nil, map[string]string{"CAIRN_GRACE": "soon"}, "CAIRN_GRACE", nil},
		{"BadFlagNamed", []string{"--grace=soon"}, nil, "-grace", nil},
		{"UnknownFlag", []string{"--nope"}, nil, "nope", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, c, d := DefaultEtcd(), bucket.Config{}, time.Duration(0)
			s := newTestSet(&e, &c, &d)
			err := s.Parse(tc.args, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v; want a usage error naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s, e, d)
		})
	}
}

func TestSetHelp(t *testing.T) {
	e, c, d := DefaultEtcd(), bucket.Config{}, time.Duration(0)
	s := newTestSet(&e, &c, &d)
	if err := s.Parse([]string{"-h"}, nil); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v; want flag.ErrHelp", err)
	}
	var out bytes.Buffer
	s.PrintFlags(&out)
	for _, want := range []string{"--etcd-endpoints\n", "CAIRN_ETCD_ENDPOINTS, ETCDCTL_ENDPOINTS", "--s3-bucket\n", "(default 127.0.0.1:2379)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("PrintFlags lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSetLogValueRedacts(t *testing.T) {
	e, c, d := DefaultEtcd(), bucket.Config{}, time.Duration(0)
	s := newTestSet(&e, &c, &d)
	env := map[string]string{
		"CAIRN_ETCD_PASSWORD":        "pw-secret",
		"CAIRN_S3_SECRET_ACCESS_KEY": "s3-secret",
	}
	args := []string{"--etcd-user=u:user-secret", "--etcd-endpoints=https://x:url-secret@h:1", "--s3-endpoint=https://k:ep-secret@s3.example"}
	if err := s.Parse(args, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	slog.New(slog.NewJSONHandler(&out, nil)).Info("start", "settings", s)
	for _, secret := range []string{"pw-secret", "s3-secret", "user-secret", "url-secret", "ep-secret"} {
		if strings.Contains(out.String(), secret) {
			t.Errorf("the log shows %q: %s", secret, out.String())
		}
	}
	if !strings.Contains(out.String(), `"s3_secret_access_key":{"value":"[redacted]","from":"env CAIRN_S3_SECRET_ACCESS_KEY"}`) {
		t.Errorf("the log does not say the S3 secret is set: %s", out.String())
	}
}

func TestSetNoEnv(t *testing.T) {
	s := NewSet("test", &bytes.Buffer{})
	out := s.String("output", "text", "output format")
	grace := s.String("grace", "", "a value")
	s.NoEnv("output")
	env := map[string]string{"CAIRN_OUTPUT": "json", "CAIRN_GRACE": "2h"}
	if err := s.Parse(nil, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if *out != "text" || s.Source("output") != "default" {
		t.Errorf("output = %q from %q; want the default, CAIRN_OUTPUT ignored", *out, s.Source("output"))
	}
	if *grace != "2h" {
		t.Errorf("grace = %q; want 2h from CAIRN_GRACE", *grace)
	}
	if v := s.Variables("output"); len(v) != 0 {
		t.Errorf("Variables(output) = %q; want none", v)
	}
	var help bytes.Buffer
	s.PrintFlags(&help)
	if strings.Contains(help.String(), "CAIRN_OUTPUT") || !strings.Contains(help.String(), "[CAIRN_GRACE]") {
		t.Errorf("PrintFlags:\n%s", help.String())
	}
}

// TestParseMessages checks that a value that does not parse is reported
// with the flag or variable, the value and the type expected, and that a
// bad flag prints nothing itself (the caller prints the error and a pointer
// to --help), while --help prints the help.
func TestParseMessages(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"IntVariable", nil, map[string]string{"CAIRN_KEEP": "x"}, []string{`invalid value "x" for CAIRN_KEEP (the variable of --keep): expected a whole number`}},
		{"IntFlag", []string{"--keep=abc"}, nil, []string{`invalid value "abc" for flag --keep: expected a whole number`}},
		{"BoolVariable", nil, map[string]string{"CAIRN_DRY_RUN": "maybe"}, []string{`invalid value "maybe" for CAIRN_DRY_RUN (the variable of --dry-run): expected true or false`}},
		{"BoolFlag", []string{"--dry-run=maybe"}, nil, []string{`invalid boolean value "maybe" for --dry-run: expected true or false`}},
		{"DurationVariable", nil, map[string]string{"CAIRN_GRACE": "soon"}, []string{`invalid value "soon" for CAIRN_GRACE (the variable of --grace)`, "90s, 30m, 24h or 7d"}},
		{"UnknownFlag", []string{"--kep=1"}, nil, []string{"flag provided but not defined: --kep"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			s := NewSet("test", &out)
			s.Int("keep", 0, "checkpoints to keep")
			s.Bool("dry-run", false, "remove nothing")
			var d time.Duration
			s.Var(Duration{&d}, "grace", "a duration")
			s.Usage = func() { out.WriteString("the whole help\n") }
			err := s.Parse(tc.args, func(k string) string { return tc.env[k] })
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("Parse = %v, want a usage error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "parse error") {
				t.Errorf("error %q still says only parse error", err)
			}
			if out.Len() != 0 {
				t.Errorf("Parse printed %q; want nothing (the caller prints the error)", out.String())
			}
		})
	}
	t.Run("HelpPrintsTheHelp", func(t *testing.T) {
		var out bytes.Buffer
		s := NewSet("test", &out)
		s.Usage = func() { out.WriteString("the whole help\n") }
		if err := s.Parse([]string{"--help"}, nil); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("Parse(--help) = %v", err)
		}
		if out.String() != "the whole help\n" {
			t.Errorf("--help printed %q", out.String())
		}
	})
	t.Run("NameSaysWhereTheValueCameFrom", func(t *testing.T) {
		s := NewSet("test", &bytes.Buffer{})
		var a, b time.Duration
		s.Var(Duration{&a}, "older-than", "")
		s.Var(Duration{&b}, "interval", "")
		if err := s.Parse([]string{"--interval=1h"}, func(k string) string { return map[string]string{"CAIRN_OLDER_THAN": "-1h"}[k] }); err != nil {
			t.Fatal(err)
		}
		if got := s.Name("older-than"); got != "CAIRN_OLDER_THAN" {
			t.Errorf("Name(older-than) = %q, want CAIRN_OLDER_THAN", got)
		}
		if got := s.Name("interval"); got != "--interval" {
			t.Errorf("Name(interval) = %q, want --interval", got)
		}
	})
}
