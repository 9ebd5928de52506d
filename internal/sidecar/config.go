package sidecar

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/sweep"
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

	// What a run does. Keep, MaxAge, DeleteIdleThreads, Protect and
	// ProtectLabelPrefix are the retention policy of --prefix (see
	// sweep.Policy); PolicyFile gives one per prefix instead.
	Keep               int
	MaxAge             time.Duration
	DeleteIdleThreads  time.Duration
	Protect            []string
	ProtectLabelPrefix string
	PolicyFile         string
	// PlanFile, with a dry run, receives the preview as JSON; ApplyFile is
	// such a preview to carry out.
	PlanFile        string
	ApplyFile       string
	OlderThan       time.Duration
	DryRun          bool
	MaxDeletes      int
	BatchSize       int
	Verify          bool
	Repair          bool
	AllowEmptyStore bool
	// MirrorFile is the incremental sweep's mirror file (empty: the mirror
	// is kept in memory and rebuilt at each start); FullWalk turns the
	// mirror off; FullRunEvery is how often a run compares the mirror with a
	// full walk (docs/sweeper.md, "The incremental sweep").
	MirrorFile   string
	FullWalk     bool
	FullRunEvery time.Duration
	// MirrorReadRate bounds the objects per second the mirror reads from
	// the bucket, a cold build's above all (0: no bound).
	MirrorReadRate float64
	// Bind records, in each bucket, the binding of every configured prefix
	// and the binding registry's marker, and exits: the one-off step for a
	// bucket written before bindings existed. Unbind removes the bindings
	// of these prefixes (on the sweeper's etcd cluster) from every
	// configured bucket, and exits: for prefixes removed for good.
	Bind   bool
	Unbind []string

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

	// Targets are the stores to serve: the one of --prefix and the policy
	// flags, or those of --policy-file.
	Targets []Target

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

	fs.IntVar(&c.Keep, "keep", c.Keep, "before sweeping, keep only the newest N checkpoints of every thread (0: no count rule)")
	fs.Var(cli.Duration{D: &c.MaxAge}, "max-age", "before sweeping, remove checkpoints created longer ago than this, keeping the head (and at least --keep)")
	fs.Var(cli.Duration{D: &c.DeleteIdleThreads}, "delete-idle-threads", "remove whole threads whose head is older than this (0: never)")
	fs.Var(cli.List{L: &c.Protect}, "protect", "comma-separated checkpoint reasons no rule removes, e.g. named")
	fs.StringVar(&c.ProtectLabelPrefix, "protect-label-prefix", c.ProtectLabelPrefix, "no rule removes a checkpoint whose label starts with this, e.g. pin:")
	fs.StringVar(&c.PolicyFile, "policy-file", c.PolicyFile, "YAML file with one policy (and bucket) per prefix, instead of --prefix and the policy flags")
	fs.StringVar(&c.PlanFile, "plan", c.PlanFile, "make a dry run and write what the real run would do to this JSON file")
	fs.StringVar(&c.ApplyFile, "apply", c.ApplyFile, "carry out a plan written by --plan, refusing when the store changed since")
	fs.Var(cli.Duration{D: &c.OlderThan}, "older-than", "the grace: delete a blob only once it has been unreferenced and unclaimed this long, and was uploaded this long ago")
	fs.BoolVar(&c.DryRun, "dry-run", c.DryRun, "do everything but remove checkpoints and delete blobs; report what would go")
	fs.IntVar(&c.MaxDeletes, "max-deletes", c.MaxDeletes, "delete at most this many blobs per run; the next run goes on (0: no limit)")
	fs.IntVar(&c.BatchSize, "batch-size", c.BatchSize, "blobs per delete request, 1 to 1000; a signal lets the request in flight finish")
	fs.BoolVar(&c.Verify, "verify", c.Verify, "after the run, check the store's invariants and reference counts, and the objects of capacity-layout checkpoints")
	fs.BoolVar(&c.Repair, "repair", c.Repair, "with --verify, also delete the reclaimable garbage it finds")
	fs.BoolVar(&c.Bind, "bind", c.Bind, "record each configured prefix's binding and the registry marker in its bucket, then exit: once, for a bucket written before bindings, when the configured prefixes are every prefix that ever wrote to it")
	fs.Var(cli.List{L: &c.Unbind}, "unbind", "comma-separated prefixes removed for good: remove their bindings (on this etcd cluster) from every configured bucket, then exit")
	fs.BoolVar(&c.AllowEmptyStore, "allow-empty-store", c.AllowEmptyStore, "delete blobs even when the store has no checkpoint at all (by default that looks like a wrong --prefix and stops the run)")

	fs.StringVar(&c.MirrorFile, "mirror-file", c.MirrorFile, "the incremental sweep's mirror of the reference records, a local file (a persistent volume); empty: kept in memory and rebuilt by a full read at each start")
	fs.Float64Var(&c.MirrorReadRate, "mirror-read-rate", c.MirrorReadRate, "objects per second the mirror may read from the bucket, which paces a cold build after a lost file (0: no bound)")
	fs.BoolVar(&c.FullWalk, "full-walk", c.FullWalk, "sweep by walking every reference and reading every root from the bucket, without the mirror")
	fs.Var(cli.Duration{D: &c.FullRunEvery}, "full-run-every", "how often a run also walks every reference and compares it with the mirror, deleting nothing when they differ (0: never)")

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
		FullRunEvery:    7 * 24 * time.Hour,
		MirrorReadRate:  1000,
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
	c.flags = fs
	if c.PlanFile != "" {
		c.DryRun = true
	}
	if c.PolicyFile != "" {
		for _, f := range []string{"prefix", "keep", "max-age", "delete-idle-threads", "protect", "protect-label-prefix"} {
			if fs.Source(f) != "default" {
				return c, cli.Usagef("%s and --policy-file do not go together: the file gives each prefix and its policy", c.name(f))
			}
		}
	} else if fs.Source("prefix") == "default" {
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
	if c.PolicyFile != "" {
		targets, err := readPolicyFile(c.PolicyFile, c.S3.Bucket)
		if err != nil {
			return c, err
		}
		c.Targets = targets
	} else {
		c.Targets = []Target{{Name: "default", Prefix: c.Prefix, Bucket: c.S3.Bucket, Policy: c.policy()}}
	}
	for _, t := range c.Targets {
		if len(t.Prefix) > etcdstore.MaxPrefixBytes { // a typo no store can have
			return c, cli.Usagef("the prefix of %s is %d bytes long, more than a store's prefix can be (%d bytes)", t.Name, len(t.Prefix), etcdstore.MaxPrefixBytes)
		}
	}
	return c, nil
}

// policy is the retention policy of the flags.
func (c Config) policy() sweep.Policy {
	return sweep.Policy{Keep: c.Keep, MaxAge: c.MaxAge, DeleteIdle: c.DeleteIdleThreads, Protect: c.Protect, ProtectLabelPrefix: c.ProtectLabelPrefix}
}

// name names a setting as the user gave it: the variable when it came from
// the environment, else the flag.
func (c Config) name(flagName string) string {
	if c.flags == nil {
		return "--" + flagName
	}
	return c.flags.Name(flagName)
}

// Validate checks the configuration without I/O. Its errors match ErrUsage
// and never contain a secret.
func (c Config) Validate() error {
	bad := cli.Usagef
	if err := c.Etcd.Validate(); err != nil {
		return err
	}
	if c.PolicyFile == "" || c.S3.Bucket != "" {
		if err := cli.ValidateS3(c.S3); err != nil {
			return err
		}
	}
	switch {
	case c.Keep < 0:
		return bad("%s must be 0 (no count rule) or more, got %d", c.name("keep"), c.Keep)
	case c.MaxAge < 0:
		return bad("%s must not be negative, got %v", c.name("max-age"), c.MaxAge)
	case c.DeleteIdleThreads < 0:
		return bad("%s must not be negative, got %v", c.name("delete-idle-threads"), c.DeleteIdleThreads)
	case (len(c.Protect) > 0 || c.ProtectLabelPrefix != "") && !hasRule(c.policy()) && c.PolicyFile == "":
		return bad("%s protects checkpoints, but no rule removes any: give --keep, --max-age or --delete-idle-threads", c.name("protect"))
	case c.OlderThan < 0:
		return bad("%s must not be negative, got %v", c.name("older-than"), c.OlderThan)
	case c.MaxDeletes < 0:
		return bad("%s must be 0 (no limit) or more, got %d", c.name("max-deletes"), c.MaxDeletes)
	case c.BatchSize < 1 || c.BatchSize > bucket.MaxDeleteKeys:
		return bad("%s must be between 1 and %d, got %d", c.name("batch-size"), bucket.MaxDeleteKeys, c.BatchSize)
	case c.PlanFile != "" && c.ApplyFile != "":
		return bad("give --plan (preview) or --apply (carry a preview out), not both")
	case c.ApplyFile != "" && c.DryRun:
		return bad("--apply carries a plan out, which a %s does not do; drop one of them", c.name("dry-run"))
	case (c.PlanFile != "" || c.ApplyFile != "") && !c.Once:
		return bad("--plan and --apply run once: give --once")
	case c.Repair && !c.Verify:
		return bad("--repair needs --verify")
	case c.Repair && c.DryRun:
		return bad("--repair deletes garbage, which a --dry-run does not do; drop one of them")
	case c.Interval < 0:
		return bad("%s must be positive, got %v", c.name("interval"), c.Interval)
	case c.Bind && len(c.Unbind) > 0:
		return bad("give --bind or --unbind, not both")
	case (c.Bind || len(c.Unbind) > 0) && (c.Once || c.Interval > 0 || c.DryRun || c.PlanFile != "" || c.ApplyFile != ""):
		return bad("--bind and --unbind change the binding registry and exit; they take no --once, --interval, --dry-run, --plan or --apply")
	case c.Bind || len(c.Unbind) > 0:
	case c.Once && c.Interval > 0:
		return bad("give --once or --interval, not both")
	case !c.Once && c.Interval == 0:
		return bad("give --once (run and exit, for cron) or --interval (keep running)")
	case c.LockTimeout < 0:
		return bad("--lock-timeout must not be negative, got %v", c.LockTimeout)
	case !(c.MirrorReadRate >= 0) || math.IsInf(c.MirrorReadRate, 1):
		return bad("--mirror-read-rate must be a finite number, 0 or more, got %v", c.MirrorReadRate)
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

Applies the retention policy (--keep, --max-age, --delete-idle-threads, with
--protect'ed checkpoints kept) to every thread, then deletes from the S3 or R2
bucket the blobs that no checkpoint references. --dry-run (or --plan FILE)
reports exactly what the real run would do; --apply FILE carries a plan out. Every flag falls back
to an environment variable: --etcd-endpoints to %s, and so on.
Static S3 credentials come from %s and
%s, else from the AWS SDK's default chain
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, shared files, roles).

Prefixes of --policy-file that share a bucket are swept together; a sweep
refuses (exit 5) in a bucket bound to a prefix it does not serve.

Exit codes: 0 done, 1 failed, 2 usage, 3 some blobs not deleted, 4 --verify
found problems, 5 the bucket is bound to prefixes this sweeper does not
serve (nothing deleted), 11 another sweeper holds the lock, 130 interrupted.

Flags:
`, cli.EnvName("etcd-endpoints"), cli.EnvS3AccessKeyID, cli.EnvS3SecretAccessKey)
	fs.PrintFlags(out)
}
