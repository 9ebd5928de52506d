package sidecar

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/cli"
)

// ErrUsage is matched by every error of Parse: a bad flag, environment
// variable or combination. The process exits with ExitUsage.
var ErrUsage = cli.ErrUsage

// Config is the sweeper's configuration, from flags and the environment.
type Config struct {
	// Etcd is where the checkpoint store lives.
	Etcd cli.Etcd
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

	// flags are the parsed flags, for the start-up log line (secrets
	// redacted).
	flags *cli.Set
}

// newFlagSet registers every flag on a new flag set that writes its messages
// to out, bound to the fields of c, which holds the defaults.
func newFlagSet(c *Config, out io.Writer) *cli.Set {
	fs := cli.NewSet("sweeper", out)
	fs.Usage = func() { usage(fs, out) }

	c.Etcd.Register(fs)
	fs.StringVar(&c.Prefix, "prefix", c.Prefix, "etcd key prefix of the application's checkpoint store (required; may be empty)")
	cli.RegisterS3(fs, &c.S3)

	fs.IntVar(&c.Keep, "keep", c.Keep, "before sweeping, keep only the newest N checkpoints of every thread (0: prune nothing)")
	fs.Var(cli.Duration{D: &c.OlderThan}, "older-than", "the grace: delete a blob only once it has been unreferenced and unclaimed this long, and was uploaded this long ago")
	fs.BoolVar(&c.DryRun, "dry-run", c.DryRun, "do everything but remove checkpoints and delete blobs; report what would go")
	fs.IntVar(&c.MaxDeletes, "max-deletes", c.MaxDeletes, "delete at most this many blobs per run; the next run goes on (0: no limit)")
	fs.IntVar(&c.BatchSize, "batch-size", c.BatchSize, "blobs per delete request, 1 to 1000; a signal lets the request in flight finish")
	fs.BoolVar(&c.Verify, "verify", c.Verify, "after the run, check the store's invariants and reference counts")
	fs.BoolVar(&c.Repair, "repair", c.Repair, "with --verify, also delete the reclaimable garbage it finds")
	fs.BoolVar(&c.AllowEmptyStore, "allow-empty-store", c.AllowEmptyStore, "delete blobs even when the store has no checkpoint at all (by default that looks like a wrong --prefix and stops the run)")

	fs.BoolVar(&c.Once, "once", c.Once, "run once and exit with a code that tells the outcome (for cron)")
	fs.Var(cli.Duration{D: &c.Interval}, "interval", "run now and then every interval until stopped (a daemon)")
	fs.Var(cli.Duration{D: &c.LockTimeout}, "lock-timeout", "with --once, how long to wait for another sweeper's lock (0: exit 11 at once)")
	fs.Var(cli.Duration{D: &c.LockTTL}, "lock-ttl", "TTL of the etcd session behind the lock; a sweeper that dies frees it after this")
	fs.Var(cli.Duration{D: &c.ProbeTimeout}, "probe-timeout", "deadline of each start-up check of etcd and of the bucket")
	fs.Var(cli.Duration{D: &c.ShutdownTimeout}, "shutdown-timeout", "after SIGTERM or SIGINT, how long the delete batch in flight may take")

	fs.StringVar(&c.Listen, "listen", c.Listen, "HTTP address for /metrics, /healthz and /readyz, e.g. :9090 (empty: none)")
	fs.Var(cli.Level{L: &c.LogLevel}, "log-level", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "json or text, to stderr")
	return fs
}

// defaults returns the configuration before flags and environment.
func defaults() Config {
	return Config{
		Etcd:            cli.DefaultEtcd(),
		OlderThan:       24 * time.Hour,
		BatchSize:       bucket.MaxDeleteKeys,
		LockTTL:         30 * time.Second,
		ProbeTimeout:    10 * time.Second,
		ShutdownTimeout: 20 * time.Second,
		LogLevel:        slog.LevelInfo,
		LogFormat:       "json",
	}
}

// Parse reads the configuration from the command-line arguments (without the
// program name) and the environment, through getenv. A flag wins over its
// CAIRN_ variable, which wins over the matching ETCDCTL_ variable, which wins
// over the default. It reads --etcd-password-file. Errors match ErrUsage, or
// flag.ErrHelp when -h or --help was given; the flag set's messages go to out.
func Parse(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	c := defaults()
	fs := newFlagSet(&c, out)
	if err := fs.Parse(args, getenv); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, cli.Usagef("unexpected argument %q (every setting is a flag)", fs.Arg(0))
	}
	if fs.Source("prefix") == "default" {
		return c, cli.Usagef("--prefix (or %s) is required: the etcd key prefix your application's store uses; "+
			"with a wrong prefix the sweeper sees no checkpoints and would delete every blob (an empty prefix is allowed, but must be given)",
			cli.EnvName("prefix"))
	}
	cli.S3Credentials(getenv, &c.S3)
	if err := c.Etcd.Resolve(); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	c.flags = fs
	return c, nil
}

// Validate checks the configuration without I/O. Its errors match ErrUsage
// and never contain a secret.
func (c Config) Validate() error {
	bad := cli.Usagef
	if err := c.Etcd.Validate(); err != nil {
		return err
	}
	if err := cli.ValidateS3(c.S3); err != nil {
		return err
	}
	switch {
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
	return nil
}

// LogValue logs the effective settings, each with its source, secrets
// redacted.
func (c Config) LogValue() slog.Value {
	if c.flags == nil {
		return slog.GroupValue()
	}
	return c.flags.LogValue()
}

// usage prints the flags and their environment variables.
func usage(fs *cli.Set, out io.Writer) {
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
`, cli.EnvName("etcd-endpoints"), cli.EnvS3AccessKeyID, cli.EnvS3SecretAccessKey)
	fs.PrintFlags(out)
}
