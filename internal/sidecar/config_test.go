package sidecar

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/sweep"
)

// required are the flags every valid configuration needs.
var required = []string{"--prefix=app/", "--s3-bucket=blobs", "--once"}

// envOf returns a getenv over the given variables.
func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestParsePrecedence(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		endpoints []string
		source    string
	}{
		{"Default", nil, nil, []string{"127.0.0.1:2379"}, "default"},
		{"EtcdctlVariable", nil, map[string]string{"ETCDCTL_ENDPOINTS": "e1:2379"}, []string{"e1:2379"}, "env ETCDCTL_ENDPOINTS"},
		{"CairnVariableWinsOverEtcdctl", nil, map[string]string{"ETCDCTL_ENDPOINTS": "e1:2379", "CAIRN_ETCD_ENDPOINTS": "c1:2379,c2:2379"},
			[]string{"c1:2379", "c2:2379"}, "env CAIRN_ETCD_ENDPOINTS"},
		{"FlagWinsOverBoth", []string{"--etcd-endpoints=f1:2379"}, map[string]string{"ETCDCTL_ENDPOINTS": "e1:2379", "CAIRN_ETCD_ENDPOINTS": "c1:2379"},
			[]string{"f1:2379"}, "flag"},
		{"EmptyVariableIsUnset", nil, map[string]string{"CAIRN_ETCD_ENDPOINTS": "", "ETCDCTL_ENDPOINTS": "e1:2379"}, []string{"e1:2379"}, "env ETCDCTL_ENDPOINTS"},
		{"SpacesAndEmptyEntriesDropped", []string{"--etcd-endpoints= a:1 ,, b:2 "}, nil, []string{"a:1", "b:2"}, "flag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(append(slices.Clone(required), tc.args...), envOf(tc.env), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Etcd.Endpoints, tc.endpoints) {
				t.Errorf("endpoints = %q; want %q", c.Etcd.Endpoints, tc.endpoints)
			}
			if got := sourceOf(c, "etcd-endpoints"); got != tc.source {
				t.Errorf("source = %q; want %q", got, tc.source)
			}
		})
	}
}

func sourceOf(c Config, name string) string { return c.flags.Source(name) }

func TestParseEveryFlagHasAVariable(t *testing.T) {
	env := map[string]string{
		"CAIRN_ETCD_ENDPOINTS":       "a:1,b:2",
		"CAIRN_ETCD_DIAL_TIMEOUT":    "3s",
		"CAIRN_ETCD_REQUEST_TIMEOUT": "4s",
		"CAIRN_ETCD_USER":            "sweeper",
		"CAIRN_ETCD_PASSWORD":        "pw",
		"CAIRN_PREFIX":               "",
		"CAIRN_S3_ENDPOINT":          "https://acct.r2.cloudflarestorage.com",
		"CAIRN_S3_REGION":            "auto",
		"CAIRN_S3_BUCKET":            "blobs",
		"CAIRN_S3_PATH_STYLE":        "true",
		"CAIRN_KEEP":                 "20",
		"CAIRN_MAX_AGE":              "30d",
		"CAIRN_DELETE_IDLE_THREADS":  "90d",
		"CAIRN_PROTECT":              "named,pinned",
		"CAIRN_PROTECT_LABEL_PREFIX": "pin:",
		"CAIRN_OLDER_THAN":           "7d",
		"CAIRN_DRY_RUN":              "1",
		"CAIRN_MAX_DELETES":          "1000",
		"CAIRN_BATCH_SIZE":           "500",
		"CAIRN_VERIFY":               "true",
		"CAIRN_ALLOW_EMPTY_STORE":    "true",
		"CAIRN_MIRROR_FILE":          "/var/lib/cairn/mirror.db",
		"CAIRN_FULL_WALK":            "true",
		"CAIRN_FULL_RUN_EVERY":       "3d",
		"CAIRN_MIRROR_READ_RATE":     "250",
		"CAIRN_INTERVAL":             "24h",
		"CAIRN_LOCK_TTL":             "15s",
		"CAIRN_PROBE_TIMEOUT":        "2s",
		"CAIRN_SHUTDOWN_TIMEOUT":     "9s",
		"CAIRN_LISTEN":               ":9090",
		"CAIRN_LOG_LEVEL":            "debug",
		"CAIRN_LOG_FORMAT":           "text",
	}
	// An empty CAIRN_PREFIX counts as unset, so the prefix comes as a flag.
	c, err := Parse([]string{"--prefix=app/"}, envOf(env), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Etcd: cli.Etcd{Endpoints: []string{"a:1", "b:2"}, DialTimeout: 3 * time.Second, RequestTimeout: 4 * time.Second,
			User: "sweeper", Password: "pw"},
		Prefix: "app/",
		Keep:   20, OlderThan: 7 * 24 * time.Hour, DryRun: true, MaxDeletes: 1000, BatchSize: 500, Verify: true, AllowEmptyStore: true,
		MirrorFile: "/var/lib/cairn/mirror.db", FullWalk: true, FullRunEvery: 3 * 24 * time.Hour, MirrorReadRate: 250,
		Interval: 24 * time.Hour, LockTTL: 15 * time.Second, ProbeTimeout: 2 * time.Second, ShutdownTimeout: 9 * time.Second,
		Listen: ":9090", LogLevel: slog.LevelDebug, LogFormat: "text",
		MaxAge: 30 * 24 * time.Hour, DeleteIdleThreads: 90 * 24 * time.Hour, Protect: []string{"named", "pinned"}, ProtectLabelPrefix: "pin:",
	}
	want.Targets = []Target{{Name: "default", Prefix: "app/", Bucket: "blobs", Policy: sweep.Policy{Keep: 20, MaxAge: want.MaxAge,
		DeleteIdle: want.DeleteIdleThreads, Protect: want.Protect, ProtectLabelPrefix: "pin:"}}}
	want.S3.Endpoint, want.S3.Region, want.S3.Bucket, want.S3.PathStyle = "https://acct.r2.cloudflarestorage.com", "auto", "blobs", true
	c.flags = nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("config\n%+v\nwant\n%+v", c, want)
	}
}

func TestParseErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"NegativeOlderThan", []string{"--older-than=-1h"}, nil, "--older-than must not be negative"},
		{"UnparsableOlderThan", []string{"--older-than=yesterday"}, nil, `"yesterday" is not a duration`},
		{"UnparsableOlderThanFromEnv", nil, map[string]string{"CAIRN_OLDER_THAN": "soon"}, `invalid value "soon" for CAIRN_OLDER_THAN (the variable of --older-than): "soon" is not a duration`},
		{"UnparsableBoolFromEnv", nil, map[string]string{"CAIRN_DRY_RUN": "perhaps"}, "CAIRN_DRY_RUN"},
		{"NegativeKeep", []string{"--keep=-1"}, nil, "--keep must be 0"},
		{"NegativeMaxDeletes", []string{"--max-deletes=-5"}, nil, "--max-deletes must be 0"},
		{"BatchTooLarge", []string{"--batch-size=1001"}, nil, "--batch-size must be between 1 and 1000"},
		{"BatchZero", []string{"--batch-size=0"}, nil, "--batch-size must be between 1 and 1000"},
		{"NegativeMirrorReadRate", []string{"--mirror-read-rate=-1"}, nil, "--mirror-read-rate must be a finite number"},
		{"NaNMirrorReadRate", []string{"--mirror-read-rate=NaN"}, nil, "--mirror-read-rate must be a finite number"},
		{"InfiniteMirrorReadRate", []string{"--mirror-read-rate=+Inf"}, nil, "--mirror-read-rate must be a finite number"},
		{"OnceAndInterval", []string{"--interval=1h"}, nil, "give --once or --interval, not both"},
		{"RepairWithoutVerify", []string{"--repair"}, nil, "--repair needs --verify"},
		{"BindAndUnbind", []string{"--bind", "--unbind=old/"}, nil, "give --bind or --unbind, not both"},
		{"BindWithOnce", []string{"--bind"}, nil, "--bind and --unbind change the binding registry and exit"},
		{"UnbindWithOnce", []string{"--unbind=old/"}, nil, "--bind and --unbind change the binding registry and exit"},
		{"RepairInDryRun", []string{"--verify", "--repair", "--dry-run"}, nil, "--repair deletes garbage"},
		{"BadLogFormat", []string{"--log-format=xml"}, nil, "--log-format must be json or text"},
		{"BadLogLevel", []string{"--log-level=loud"}, nil, `"loud" is not one of debug, info, warn, error`},
		{"CertWithoutKey", []string{"--etcd-cert=c.pem"}, nil, "--etcd-cert and --etcd-key go together"},
		{"PasswordWithoutUser", []string{"--etcd-password=pw"}, nil, "an etcd password needs --etcd-user"},
		{"TwoPasswords", []string{"--etcd-user=u:p1", "--etcd-password=p2"}, nil, "--etcd-user holds a password"},
		{"PasswordAndFile", []string{"--etcd-user=u", "--etcd-password=p", "--etcd-password-file=" + empty}, nil, "not both"},
		{"MissingPasswordFile", []string{"--etcd-user=u", "--etcd-password-file=" + filepath.Join(dir, "none")}, nil, "--etcd-password-file"},
		{"EmptyPasswordFile", []string{"--etcd-user=u", "--etcd-password-file=" + empty}, nil, "is empty"},
		{"BadS3Endpoint", []string{"--s3-endpoint=r2.example"}, nil, `S3 settings: Endpoint "r2.example" must be an http or https URL`},
		{"OnlyOneS3Key", nil, map[string]string{cli.EnvS3AccessKeyID: "id"}, "AccessKeyID and SecretAccessKey go together"},
		{"LockTimeoutWithInterval", []string{"--lock-timeout=1m"}, map[string]string{"CAIRN_ONCE": "false", "CAIRN_INTERVAL": "1h"}, "--lock-timeout applies to --once"},
		{"ShortLockTTL", []string{"--lock-ttl=1s"}, nil, "--lock-ttl must be at least 2s"},
		{"ZeroProbeTimeout", []string{"--probe-timeout=0"}, nil, "--probe-timeout must be positive"},
		{"PositionalArgument", []string{"sweep"}, nil, `unexpected argument "sweep"`},
		{"UnknownFlag", []string{"--older-then=1h"}, nil, "flag provided but not defined: --older-then"},
		{"PrefixTooLong", []string{"--prefix=" + strings.Repeat("p", etcdstore.MaxPrefixBytes+1)}, nil, "the prefix of default is 257 bytes long"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := slices.Clone(required)
			if tc.name == "LockTimeoutWithInterval" {
				args = args[:2]
			}
			_, err := Parse(append(args, tc.args...), envOf(tc.env), &bytes.Buffer{})
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("err = %v; want ErrUsage", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q; want it to say %q", err, tc.want)
			}
			if got := ExitCode(err); got != ExitUsage {
				t.Errorf("exit code %d; want %d", got, ExitUsage)
			}
		})
	}
	t.Run("MissingRequired", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"Prefix", []string{"--s3-bucket=b", "--once"}, "--prefix (or CAIRN_PREFIX) is required"},
			{"Bucket", []string{"--prefix=", "--once"}, "--s3-bucket (or CAIRN_S3_BUCKET) is required"},
			{"Mode", []string{"--prefix=p", "--s3-bucket=b"}, "give --once (run and exit, for cron) or --interval"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := Parse(tc.args, nil, &bytes.Buffer{})
				if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("err = %v; want a usage error saying %q", err, tc.want)
				}
			})
		}
	})
}

func TestParseEmptyPrefixAllowedWhenGiven(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"Flag", []string{"--prefix="}, nil},
		{"FlagWinsOverVariable", []string{"--prefix="}, map[string]string{"CAIRN_PREFIX": "other/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(append([]string{"--s3-bucket=b", "--once"}, tc.args...), envOf(tc.env), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if c.Prefix != "" {
				t.Errorf("prefix = %q; want empty", c.Prefix)
			}
		})
	}
}

func TestParseHelp(t *testing.T) {
	var out bytes.Buffer
	_, err := Parse([]string{"--help"}, nil, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v; want flag.ErrHelp", err)
	}
	fs := newFlagSet(&Config{}, &bytes.Buffer{})
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(out.String(), "--"+f.Name+"\n") || !strings.Contains(out.String(), cli.EnvName(f.Name)) {
			t.Errorf("the help does not list --%s with %s", f.Name, cli.EnvName(f.Name))
		}
	})
	for _, s := range []string{"ETCDCTL_ENDPOINTS", cli.EnvS3AccessKeyID, "11 another sweeper holds the lock"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the help does not mention %s", s)
		}
	}
}

func TestSecretsAreRedacted(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		secrets  []string
		password string
		marker   string // what stands in for the secret; "" means redacted
	}{
		{"PasswordFlag", []string{"--etcd-user=root", "--etcd-password=flag-secret"}, nil, []string{"flag-secret"}, "flag-secret", ""},
		{"UserColonPassword", []string{"--etcd-user=root:colon-secret"}, nil, []string{"colon-secret"}, "colon-secret", ""},
		{"EtcdctlPassword", nil, map[string]string{"ETCDCTL_USER": "root", "ETCDCTL_PASSWORD": "env-secret"}, []string{"env-secret"}, "env-secret", ""},
		{"PasswordFile", []string{"--etcd-user=root", "--etcd-password-file=" + pwFile}, nil, []string{"file-secret"}, "file-secret", ""},
		{"S3Keys", nil, map[string]string{cli.EnvS3AccessKeyID: "AKIDSECRET", cli.EnvS3SecretAccessKey: "s3-secret", cli.EnvS3SessionToken: "token-secret"},
			[]string{"AKIDSECRET", "s3-secret", "token-secret"}, "", ""},
		{"EndpointUserinfo", []string{"--s3-endpoint=https://user:url-secret@host.example"}, nil, []string{"url-secret"}, "", "user:xxxxx@host.example"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(append(slices.Clone(required), tc.args...), envOf(tc.env), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if c.Etcd.Password != tc.password {
				t.Errorf("password = %q; want %q", c.Etcd.Password, tc.password)
			}
			for _, format := range []string{"json", "text"} {
				var out bytes.Buffer
				cli.NewLogger(&out, format, slog.LevelInfo).Info("sweeper starting", "settings", c)
				for _, s := range tc.secrets {
					if strings.Contains(out.String(), s) {
						t.Errorf("%s log shows the secret %q:\n%s", format, s, out.String())
					}
				}
				marker := tc.marker
				if marker == "" {
					marker = "[redacted]"
				}
				if !strings.Contains(out.String(), marker) {
					t.Errorf("%s log shows no %s:\n%s", format, marker, out.String())
				}
			}
		})
	}
}

func TestUsageErrorsNeverShowSecrets(t *testing.T) {
	_, err := Parse(append(slices.Clone(required), "--etcd-password=hunter2"), nil, &bytes.Buffer{})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("err = %v; want a usage error without the password", err)
	}
}
