package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/cli"
)

// command is one subcommand of cairn.
type command struct {
	name    string
	args    string // the synopsis after the name
	summary string // one line for cairn --help
	help    string // what it does, with an example
	nargs   int    // the number of positional arguments
	// env lists the command's own flags that fall back to a CAIRN_
	// variable; the others are command-line only (the store flags always
	// have their variables).
	env []string
	// store says the command opens the store, and so takes the etcd, S3
	// and --prefix flags.
	store bool
	// ids names the flags (by name) and positional arguments (by their
	// synopsis, e.g. "CHECKPOINT", in order) that hold identifiers: each is
	// checked against the contract (cairn.ValidateID) before the store is
	// opened, so that a typo is one line and exit 2 even without etcd. A
	// flag left empty is not checked (it has a default).
	ids []string
	// setup registers the command's own flags and returns what runs it.
	setup func(s *cli.Set) func(ctx context.Context, c *call) error
}

// call is one run of a command: its arguments and, once open has been
// called, the store.
type call struct {
	p      proc
	args   []string
	set    *cli.Set
	conn   *conn
	store  *etcdstore.Store
	client *clientv3.Client // the store's etcd client
	blobs  *bucket.S3
	close  func()
}

// open opens the store; a command calls it once it has checked its own flags
// and arguments, so that a usage error never waits for etcd.
func (k *call) open(ctx context.Context) error {
	return k.conn.open(ctx, k)
}

// commands are the subcommands, in the order cairn --help lists them.
var commands = []*command{captureCmd, restoreCmd, logCmd, threadsCmd, showCmd, diffCmd, forkCmd, verifyCmd, doctorCmd, devCmd}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// conn holds the flags that reach the store.
type conn struct {
	etcd   cli.Etcd
	s3     bucket.Config
	prefix string
	probe  time.Duration
}

func (c *conn) register(s *cli.Set) {
	c.etcd = cli.DefaultEtcd()
	c.etcd.Register(s)
	s.StringVar(&c.prefix, "prefix", "", "etcd key prefix of the application's checkpoint store (required; may be empty)")
	cli.RegisterS3(s, &c.s3)
	c.probe = 10 * time.Second
	s.Var(cli.Duration{D: &c.probe}, "probe-timeout", "deadline of the start-up check of etcd and of the bucket")
}

// resolve completes and checks the flags after Parse.
func (c *conn) resolve(s *cli.Set, getenv func(string) string) error {
	if err := c.etcd.Resolve(); err != nil {
		return err
	}
	if err := c.etcd.Validate(); err != nil {
		return err
	}
	if s.Source("prefix") == "default" {
		return cli.Usagef("--prefix (or %s) is required: the etcd key prefix your application's store uses (an empty prefix is allowed, but must be given)",
			cli.EnvName("prefix"))
	}
	if len(c.prefix) > etcdstore.MaxPrefixBytes {
		return cli.Usagef("--prefix is %d bytes long, more than a store's prefix can be (%d bytes)", len(c.prefix), etcdstore.MaxPrefixBytes)
	}
	cli.S3Credentials(getenv, &c.s3)
	if err := cli.ValidateS3(c.s3); err != nil {
		return err
	}
	if c.probe <= 0 {
		return cli.Usagef("--probe-timeout must be positive, got %v", c.probe)
	}
	return nil
}

// open connects to etcd and the bucket, each checked within --probe-timeout,
// and opens the store with the bucket as its object store, as the sweeper
// does.
func (c *conn) open(ctx context.Context, k *call) error {
	client, err := cli.ConnectEtcd(ctx, c.etcd, c.prefix, c.probe)
	if err != nil {
		return err
	}
	blobs, err := cli.OpenBucket(ctx, c.s3, c.probe)
	if err != nil {
		client.Close()
		return err
	}
	store, err := etcdstore.New(client, c.prefix, etcdstore.Options{Objects: blobs})
	if err != nil {
		blobs.Close()
		client.Close()
		return fmt.Errorf("open the store: %w", err)
	}
	k.store, k.client, k.blobs = store, client, blobs
	k.close = func() {
		store.Close()
		blobs.Close()
		client.Close()
	}
	return nil
}

// flags returns a set with the command's own flags and, when store, the
// store flags bound to cn; and the command's run function.
func (cmd *command) flags(cn *conn, store bool) (*cli.Set, func(context.Context, *call) error) {
	s := cli.NewSet("cairn "+cmd.name, io.Discard) // run prints the errors
	runFn := cmd.setup(s)
	s.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(cmd.env, f.Name) {
			s.NoEnv(f.Name)
		}
	})
	if store {
		cn.register(s)
	}
	return s, runFn
}

// exec parses the command's arguments, opens the store when it needs it, and
// runs it.
func (cmd *command) exec(ctx context.Context, p proc, args []string) error {
	var cn conn
	s, runFn := cmd.flags(&cn, cmd.store)
	s.Usage = func() {}
	flags, positional, err := permute(s.FlagSet, args)
	if err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	if err := s.Parse(flags, p.getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cmd.usage(p.stdout)
			return nil
		}
		return err
	}
	if len(positional) != cmd.nargs {
		return fmt.Errorf("%w: want %s, got %d argument(s)", cli.ErrUsage, plural(cmd.nargs, "argument"), len(positional))
	}
	if err := cmd.checkIDs(s, positional); err != nil {
		return err
	}
	if cmd.store {
		if err := cn.resolve(s, p.getenv); err != nil {
			return err
		}
	}
	k := &call{p: p, args: positional, set: s, conn: &cn}
	defer func() {
		if k.close != nil {
			k.close()
		}
	}()
	return runFn(ctx, k)
}

// checkIDs checks the identifiers among the command's flags and positional
// arguments (cmd.ids) and returns the first cairn.ErrInvalidID.
func (cmd *command) checkIDs(s *cli.Set, positional []string) error {
	var names []string // the positional arguments' names: the synopsis without its flags
	words := strings.Fields(cmd.args)
	for i := 0; i < len(words); i++ {
		switch w := words[i]; {
		case strings.HasPrefix(w, "--"):
			i++ // and the flag's value
		case !strings.HasPrefix(w, "["):
			names = append(names, w)
		}
	}
	for _, id := range cmd.ids {
		if f := s.Lookup(id); f != nil {
			if v := f.Value.String(); v != "" {
				if err := cairn.ValidateID(v, "--"+id); err != nil {
					return err
				}
			}
			continue
		}
		// A positional argument: its place among the synopsis's words.
		if i := slices.Index(names, id); i >= 0 && i < len(positional) {
			if err := cairn.ValidateID(positional[i], id); err != nil {
				return err
			}
		}
	}
	return nil
}

// usage prints the command's help: synopsis, text, its own flags and the
// store flags.
func (cmd *command) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: cairn %s %s\n\n%s\n", cmd.name, cmd.args, strings.TrimSpace(cmd.help))
	own, _ := cmd.flags(nil, false)
	fmt.Fprintf(w, "\nFlags:\n")
	own.PrintFlags(w)
	if cmd.store {
		store := cli.NewSet("", io.Discard)
		new(conn).register(store)
		fmt.Fprintf(w, "\nStore flags (as the sweeper's):\n")
		store.PrintFlags(w)
	}
}

// permute splits args into flags (with their values) and positional
// arguments, so that flags may come after the arguments, as in
// `cairn capture ./ws --thread t1`. "--" ends the flags.
func permute(fs *flag.FlagSet, args []string) (flags, positional []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return flags, append(positional, args[i+1:]...), nil
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // Parse names it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 == len(args) {
			return nil, nil, fmt.Errorf("flag needs an argument: %s", a)
		}
		i++
		flags = append(flags, args[i])
	}
	return flags, positional, nil
}

// plural says "no files", "1 file" or "3 files".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	many := what + "s"
	if w, ok := strings.CutSuffix(what, "y"); ok {
		many = w + "ies"
	}
	if n == 0 {
		return "no " + many
	}
	return fmt.Sprintf("%d %s", n, many)
}

// isUsage reports whether err is a usage error.
func isUsage(err error) bool { return errors.Is(err, cli.ErrUsage) }
