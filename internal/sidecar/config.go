package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cairnstore/cairn/bucket"
)

// EnvPrefix starts the environment variable of every flag: --etcd-endpoints
// falls back to CAIRN_ETCD_ENDPOINTS.
const EnvPrefix = "CAIRN_"

// Environment variables without a flag: static S3 credentials, which never go
// on a command line. Without them the AWS SDK's default chain applies
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, shared files, roles).
const (
	EnvS3AccessKeyID     = "CAIRN_S3_ACCESS_KEY_ID"
	EnvS3SecretAccessKey = "CAIRN_S3_SECRET_ACCESS_KEY"
	EnvS3SessionToken    = "CAIRN_S3_SESSION_TOKEN"
)

// etcdctlEnv maps flags onto the variables etcdctl reads, consulted after
// the CAIRN_ variable.
var etcdctlEnv = map[string]string{
	"etcd-endpoints":    "ETCDCTL_ENDPOINTS",
	"etcd-dial-timeout": "ETCDCTL_DIAL_TIMEOUT",
	"etcd-cacert":       "ETCDCTL_CACERT",
	"etcd-cert":         "ETCDCTL_CERT",
	"etcd-key":          "ETCDCTL_KEY",
	"etcd-user":         "ETCDCTL_USER",
	"etcd-password":     "ETCDCTL_PASSWORD",
}

// secretFlags are the flags whose values are never logged.
var secretFlags = map[string]bool{"etcd-password": true}

// ErrUsage is matched by every error of Parse: a bad flag, environment
// variable or combination. The process exits with ExitUsage.
var ErrUsage = errors.New("usage error")

// Config is the sweeper's configuration, from flags and the environment.
type Config struct {
	// etcd: where the checkpoint store lives.
	EtcdEndpoints      []string
	EtcdDialTimeout    time.Duration
	EtcdRequestTimeout time.Duration
	EtcdCACert         string
	EtcdCert           string
	EtcdKey            string
	EtcdUser           string
	EtcdPassword       string
	EtcdPasswordFile   string
	// Prefix is the etcdstore prefix of the application's store.
	Prefix string

	// S3 is the bucket of the blobs, credentials included.
	S3 bucket.Config

	// What a run does.
	Keep            int
	OlderThan       time.Duration
	DryRun          bool
	MaxDeletes      int
	BatchSize       int
	Verify          bool
	Repair          bool
	AllowEmptyStore bool

	// When runs happen.
	Once            bool
	Interval        time.Duration
	LockTimeout     time.Duration
	LockTTL         time.Duration
	ProbeTimeout    time.Duration
	ShutdownTimeout time.Duration

	// Operations.
	Listen    string
	LogLevel  slog.Level
	LogFormat string

	// settings are the effective settings in flag order, for the start-up
	// log line; secrets are redacted.
	settings []setting
}

// setting is one flag's effective value and where it came from.
type setting struct {
	name, value, source string
}

// durationValue is a flag.Value for durations that also accepts whole days
// ("7d") and says what it expects when it cannot parse.
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil {
		return ""
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// parseDuration parses a Go duration ("90m", "24h", "1h30m", "0") or a whole
// number of days ("7d").
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" {
		n, err := strconv.ParseInt(days, 10, 32)
		if err == nil {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (write it like 90s, 30m, 24h or 7d)", s)
	}
	return d, nil
}

// levelValue is a flag.Value for slog levels by name.
type levelValue struct{ l *slog.Level }

func (v levelValue) String() string {
	if v.l == nil {
		return ""
	}
	return strings.ToLower(v.l.String())
}

func (v levelValue) Set(s string) error {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		*v.l = slog.LevelDebug
	case "info":
		*v.l = slog.LevelInfo
	case "warn", "warning":
		*v.l = slog.LevelWarn
	case "error":
		*v.l = slog.LevelError
	default:
		return fmt.Errorf("%q is not one of debug, info, warn, error", s)
	}
	return nil
}

// listValue is a flag.Value for a comma-separated list.
type listValue struct{ l *[]string }

func (v listValue) String() string {
	if v.l == nil {
		return ""
	}
	return strings.Join(*v.l, ",")
}

func (v listValue) Set(s string) error {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	*v.l = out
	return nil
}

// newFlagSet registers every flag on a new flag set that writes its messages
// to out, bound to the fields of c, which holds the defaults.
func newFlagSet(c *Config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sweeper", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { usage(fs, out) }

	fs.Var(listValue{&c.EtcdEndpoints}, "etcd-endpoints", "comma-separated etcd endpoints (host:port or URL)")
	fs.Var(durationValue{&c.EtcdDialTimeout}, "etcd-dial-timeout", "deadline for connecting to etcd")
	fs.Var(durationValue{&c.EtcdRequestTimeout}, "etcd-request-timeout", "deadline of each lock and status request to etcd")
	fs.StringVar(&c.EtcdCACert, "etcd-cacert", c.EtcdCACert, "PEM file of the CA that signed the etcd server certificates (enables TLS)")
	fs.StringVar(&c.EtcdCert, "etcd-cert", c.EtcdCert, "PEM file of the client certificate for etcd (with --etcd-key)")
	fs.StringVar(&c.EtcdKey, "etcd-key", c.EtcdKey, "PEM file of the client key for etcd (with --etcd-cert)")
	fs.StringVar(&c.EtcdUser, "etcd-user", c.EtcdUser, "etcd user name, or user:password")
	fs.StringVar(&c.EtcdPassword, "etcd-password", c.EtcdPassword, "etcd password (prefer --etcd-password-file or the environment)")
	fs.StringVar(&c.EtcdPasswordFile, "etcd-password-file", c.EtcdPasswordFile, "file holding the etcd password")
	fs.StringVar(&c.Prefix, "prefix", c.Prefix, "etcd key prefix of the application's checkpoint store (required; may be empty)")

	fs.StringVar(&c.S3.Endpoint, "s3-endpoint", c.S3.Endpoint, "S3 endpoint URL, e.g. https://<account>.r2.cloudflarestorage.com (empty: the SDK's default)")
	fs.StringVar(&c.S3.Region, "s3-region", c.S3.Region, "S3 signing region; R2 uses auto (empty: the SDK's default chain, else auto)")
	fs.StringVar(&c.S3.Bucket, "s3-bucket", c.S3.Bucket, "bucket holding the blobs (required)")
	fs.BoolVar(&c.S3.PathStyle, "s3-path-style", c.S3.PathStyle, "address the bucket in the URL path (most local S3 servers need it)")

	fs.IntVar(&c.Keep, "keep", c.Keep, "before sweeping, keep only the newest N checkpoints of every thread (0: prune nothing)")
	fs.Var(durationValue{&c.OlderThan}, "older-than", "the grace: delete a blob only once it has been unreferenced and unclaimed this long, and was uploaded this long ago")
	fs.BoolVar(&c.DryRun, "dry-run", c.DryRun, "do everything but remove checkpoints and delete blobs; report what would go")
	fs.IntVar(&c.MaxDeletes, "max-deletes", c.MaxDeletes, "delete at most this many blobs per run; the next run goes on (0: no limit)")
	fs.IntVar(&c.BatchSize, "batch-size", c.BatchSize, "blobs per delete request, 1 to 1000; a signal lets the request in flight finish")
	fs.BoolVar(&c.Verify, "verify", c.Verify, "after the run, check the store's invariants and reference counts")
	fs.BoolVar(&c.Repair, "repair", c.Repair, "with --verify, also delete the reclaimable garbage it finds")
	fs.BoolVar(&c.AllowEmptyStore, "allow-empty-store", c.AllowEmptyStore, "delete blobs even when the store has no checkpoint at all (by default that looks like a wrong --prefix and stops the run)")

	fs.BoolVar(&c.Once, "once", c.Once, "run once and exit with a code that tells the outcome (for cron)")
	fs.Var(durationValue{&c.Interval}, "interval", "run now and then every interval until stopped (a daemon)")
	fs.Var(durationValue{&c.LockTimeout}, "lock-timeout", "with --once, how long to wait for another sweeper's lock (0: exit 11 at once)")
	fs.Var(durationValue{&c.LockTTL}, "lock-ttl", "TTL of the etcd session behind the lock; a sweeper that dies frees it after this")
	fs.Var(durationValue{&c.ProbeTimeout}, "probe-timeout", "deadline of each start-up check of etcd and of the bucket")
	fs.Var(durationValue{&c.ShutdownTimeout}, "shutdown-timeout", "after SIGTERM or SIGINT, how long the delete batch in flight may take")

	fs.StringVar(&c.Listen, "listen", c.Listen, "HTTP address for /metrics, /healthz and /readyz, e.g. :9090 (empty: none)")
	fs.Var(levelValue{&c.LogLevel}, "log-level", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "json or text, to stderr")
	return fs
}

// defaults returns the configuration before flags and environment.
func defaults() Config {
	return Config{
		EtcdEndpoints:      []string{"127.0.0.1:2379"},
		EtcdDialTimeout:    5 * time.Second,
		EtcdRequestTimeout: 10 * time.Second,
		OlderThan:          24 * time.Hour,
		BatchSize:          bucket.MaxDeleteKeys,
		LockTTL:            30 * time.Second,
		ProbeTimeout:       10 * time.Second,
		ShutdownTimeout:    20 * time.Second,
		LogLevel:           slog.LevelInfo,
		LogFormat:          "json",
	}
}

// EnvName returns the environment variable that a flag falls back to.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse reads the configuration from the command-line arguments (without the
// program name) and the environment, through getenv. A flag wins over its
// CAIRN_ variable, which wins over the matching ETCDCTL_ variable, which wins
// over the default. It reads --etcd-password-file. Errors match ErrUsage, or
// flag.ErrHelp when -h or --help was given; the flag set's messages go to out.
func Parse(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	c := defaults()
	fs := newFlagSet(&c, out)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("%w: unexpected argument %q (every setting is a flag)", ErrUsage, fs.Arg(0))
	}
	source := map[string]string{}
	fs.Visit(func(f *flag.Flag) { source[f.Name] = "flag" })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if envErr != nil || source[f.Name] != "" {
			return
		}
		for _, name := range []string{EnvName(f.Name), etcdctlEnv[f.Name]} {
			if name == "" {
				continue
			}
			v, ok := lookup(getenv, name)
			if !ok {
				continue
			}
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%w: %s: %w", ErrUsage, name, err)
				return
			}
			source[f.Name] = "env " + name
			return
		}
		source[f.Name] = "default"
	})
	if envErr != nil {
		return c, envErr
	}
	if source["prefix"] == "default" {
		return c, fmt.Errorf("%w: --prefix (or %s) is required: the etcd key prefix your application's store uses; "+
			"with a wrong prefix the sweeper sees no checkpoints and would delete every blob (an empty prefix is allowed, but must be given)",
			ErrUsage, EnvName("prefix"))
	}
	c.S3.AccessKeyID, _ = lookup(getenv, EnvS3AccessKeyID)
	c.S3.SecretAccessKey, _ = lookup(getenv, EnvS3SecretAccessKey)
	c.S3.SessionToken, _ = lookup(getenv, EnvS3SessionToken)
	if err := c.resolveEtcdPassword(); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		switch {
		case secretFlags[f.Name] && v != "":
			v = redacted
		case f.Name == "etcd-user":
			v = redactUser(v)
		case f.Name == "s3-endpoint" || f.Name == "etcd-endpoints":
			v = redactURLs(v)
		}
		c.settings = append(c.settings, setting{name: f.Name, value: v, source: source[f.Name]})
	})
	for _, name := range []string{EnvS3AccessKeyID, EnvS3SecretAccessKey, EnvS3SessionToken} {
		if _, ok := lookup(getenv, name); ok {
			c.settings = append(c.settings, setting{name: strings.ToLower(strings.TrimPrefix(name, EnvPrefix)), value: redacted, source: "env " + name})
		}
	}
	return c, nil
}

// lookup returns a variable's value and whether it is set and not empty.
func lookup(getenv func(string) string, name string) (string, bool) {
	if getenv == nil {
		return "", false
	}
	v := getenv(name)
	return v, v != ""
}

// resolveEtcdPassword splits a user:password --etcd-user, as etcdctl does, and
// reads --etcd-password-file.
func (c *Config) resolveEtcdPassword() error {
	if user, pass, ok := strings.Cut(c.EtcdUser, ":"); ok {
		if c.EtcdPassword != "" || c.EtcdPasswordFile != "" {
			return fmt.Errorf("%w: --etcd-user holds a password, and --etcd-password or --etcd-password-file gives another", ErrUsage)
		}
		c.EtcdUser, c.EtcdPassword = user, pass
	}
	if c.EtcdPasswordFile == "" {
		return nil
	}
	if c.EtcdPassword != "" {
		return fmt.Errorf("%w: give --etcd-password or --etcd-password-file, not both", ErrUsage)
	}
	data, err := os.ReadFile(c.EtcdPasswordFile)
	if err != nil {
		return fmt.Errorf("%w: --etcd-password-file: %w", ErrUsage, err)
	}
	c.EtcdPassword = strings.TrimRight(string(data), "\r\n")
	if c.EtcdPassword == "" {
		return fmt.Errorf("%w: --etcd-password-file %s is empty", ErrUsage, c.EtcdPasswordFile)
	}
	return nil
}

// Validate checks the configuration without I/O. Its errors match ErrUsage
// and never contain a secret.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, args...)...)
	}
	switch {
	case len(c.EtcdEndpoints) == 0:
		return bad("--etcd-endpoints is empty")
	case c.EtcdDialTimeout <= 0:
		return bad("--etcd-dial-timeout must be positive, got %v", c.EtcdDialTimeout)
	case c.EtcdRequestTimeout <= 0:
		return bad("--etcd-request-timeout must be positive, got %v", c.EtcdRequestTimeout)
	case (c.EtcdCert == "") != (c.EtcdKey == ""):
		return bad("--etcd-cert and --etcd-key go together: give both or neither")
	case c.EtcdPassword != "" && c.EtcdUser == "":
		return bad("an etcd password needs --etcd-user")
	case c.S3.Bucket == "":
		return bad("--s3-bucket (or %s) is required", EnvName("s3-bucket"))
	case c.Keep < 0:
		return bad("--keep must be 0 (prune nothing) or more, got %d", c.Keep)
	case c.OlderThan < 0:
		return bad("--older-than must not be negative, got %v", c.OlderThan)
	case c.MaxDeletes < 0:
		return bad("--max-deletes must be 0 (no limit) or more, got %d", c.MaxDeletes)
	case c.BatchSize < 1 || c.BatchSize > bucket.MaxDeleteKeys:
		return bad("--batch-size must be between 1 and %d, got %d", bucket.MaxDeleteKeys, c.BatchSize)
	case c.Repair && !c.Verify:
		return bad("--repair needs --verify")
	case c.Repair && c.DryRun:
		return bad("--repair deletes garbage, which a --dry-run does not do; drop one of them")
	case c.Interval < 0:
		return bad("--interval must be positive, got %v", c.Interval)
	case c.Once && c.Interval > 0:
		return bad("give --once or --interval, not both")
	case !c.Once && c.Interval == 0:
		return bad("give --once (run and exit, for cron) or --interval (keep running)")
	case c.LockTimeout < 0:
		return bad("--lock-timeout must not be negative, got %v", c.LockTimeout)
	case c.LockTimeout > 0 && !c.Once:
		return bad("--lock-timeout applies to --once; with --interval the sweeper always waits for the lock")
	case c.LockTTL < 2*time.Second:
		return bad("--lock-ttl must be at least 2s, got %v", c.LockTTL)
	case c.ProbeTimeout <= 0:
		return bad("--probe-timeout must be positive, got %v", c.ProbeTimeout)
	case c.ShutdownTimeout <= 0:
		return bad("--shutdown-timeout must be positive, got %v", c.ShutdownTimeout)
	case c.LogFormat != "json" && c.LogFormat != "text":
		return bad("--log-format must be json or text, got %q", c.LogFormat)
	}
	if err := c.S3.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), bucket.ErrInvalidConfig.Error()+": ")
		return bad("S3 settings: %s", msg)
	}
	return nil
}

// redacted stands in for a secret that is set.
const redacted = "[redacted]"

// redactUser hides the password of a user:password value.
func redactUser(v string) string {
	if user, _, ok := strings.Cut(v, ":"); ok {
		return user + ":" + redacted
	}
	return v
}

// redactURLs hides the password of any URL in a comma-separated list.
func redactURLs(v string) string {
	parts := strings.Split(v, ",")
	for i, p := range parts {
		if u, err := url.Parse(p); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

// LogValue logs the effective settings, each with its source, secrets
// redacted.
func (c Config) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, len(c.settings))
	for _, s := range c.settings {
		key := strings.ReplaceAll(s.name, "-", "_")
		if s.source == "default" {
			attrs = append(attrs, slog.String(key, s.value))
			continue
		}
		attrs = append(attrs, slog.Group(key, slog.String("value", s.value), slog.String("from", s.source)))
	}
	return slog.GroupValue(attrs...)
}

// usage prints the flags and their environment variables.
func usage(fs *flag.FlagSet, out io.Writer) {
	fmt.Fprintf(out, `Usage: sweeper --prefix=P --s3-bucket=B (--once | --interval=D) [flags]

Keeps the newest --keep checkpoints of every thread, then deletes from the
S3 or R2 bucket the blobs that no checkpoint references. Every flag falls back
to an environment variable: --etcd-endpoints to %s, and so on.
Static S3 credentials come from %s and
%s, else from the AWS SDK's default chain
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, shared files, roles).

Exit codes: 0 done, 1 failed, 2 usage, 3 some blobs not deleted, 4 --verify
found problems, 11 another sweeper holds the lock, 130 interrupted.

Flags:
`, EnvName("etcd-endpoints"), EnvS3AccessKeyID, EnvS3SecretAccessKey)
	fs.VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		env := EnvName(f.Name)
		if alt := etcdctlEnv[f.Name]; alt != "" {
			env += ", " + alt
		}
		fmt.Fprintf(out, "  --%s\n    \t%s%s [%s]\n", f.Name, f.Usage, def, env)
	})
}
