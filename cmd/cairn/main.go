// Command cairn captures workspaces into a cairn checkpoint store, restores
// them, and looks at the store from a shell: its threads, the checkpoint
// chain of a thread, one checkpoint's manifest, the difference of two, and the
// store's invariants. `cairn dev` runs a local etcd and S3 server for all of
// it. Run `cairn --help` for the commands and exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/term"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/buildinfo"
	"github.com/cairnstore/cairn/snapshot"
)

// The exit codes, as `cairn --help` and the README list them.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitProblems    = 4
	exitInterrupted = 130
)

// proc is what a run needs from its process.
type proc struct {
	args           []string // without the program name
	getenv         func(string) string
	stdout, stderr io.Writer
	// terminal reports whether stderr is a terminal, where progress goes.
	terminal bool
	// signals delivers SIGINT and SIGTERM.
	signals <-chan os.Signal
}

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	os.Exit(run(proc{
		args:     os.Args[1:],
		getenv:   os.Getenv,
		stdout:   os.Stdout,
		stderr:   os.Stderr,
		terminal: term.IsTerminal(int(os.Stderr.Fd())),
		signals:  sigs,
	}))
}

// run runs one command and returns the exit code.
func run(p proc) int {
	if len(p.args) == 0 {
		mainUsage(p.stderr)
		return exitUsage
	}
	name := p.args[0]
	switch name {
	case "-version", "--version":
		buildinfo.Print(p.stdout, "cairn")
		return exitOK
	case "-h", "-help", "--help", "help":
		if name == "help" && len(p.args) > 1 {
			return run(proc{args: []string{p.args[1], "--help"}, getenv: p.getenv, stdout: p.stdout, stderr: p.stderr})
		}
		mainUsage(p.stdout)
		return exitOK
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(p.stderr, "cairn: unknown command %q\nRun 'cairn --help' for the commands.\n", name)
		return exitUsage
	}

	// The first signal cancels ctx; a command that cannot stop at once
	// returns when it has cleaned up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quit := make(chan struct{})
	defer close(quit)
	interrupted := make(chan struct{})
	go func() {
		select {
		case <-p.signals:
			close(interrupted)
			cancel()
		case <-quit:
		}
	}()

	err := cmd.exec(ctx, p, p.args[1:])
	select {
	case <-interrupted:
		if cmd.name == "dev" && err == nil {
			return exitOK
		}
		fmt.Fprintf(p.stderr, "cairn %s: interrupted\n", cmd.name)
		return exitInterrupted
	default:
	}
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	fmt.Fprintf(p.stderr, "cairn %s: %v\n", cmd.name, err)
	if code == exitUsage && !errors.Is(err, cairn.ErrInvalidID) {
		fmt.Fprintf(p.stderr, "Run 'cairn %s --help' for its flags and an example.\n", cmd.name)
	}
	return code
}

// errNotFound is matched by the errors about a checkpoint or thread that does
// not exist; notFound makes them.
var errNotFound = errors.New("not found")

// notFound is an error matching errNotFound with the message it is given.
type notFound string

func notFoundf(format string, args ...any) error { return notFound(fmt.Sprintf(format, args...)) }

func (e notFound) Error() string        { return string(e) }
func (e notFound) Is(target error) bool { return target == errNotFound }

// errProblems is matched by the error of a verify that found problems.
var errProblems = errors.New("the store has problems")

// mainUsage prints the commands and the exit codes.
func mainUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: cairn COMMAND [flags] [arguments]

Captures workspaces into a cairn checkpoint store (etcd for the checkpoints,
an S3 or R2 bucket for the bytes), restores them, and shows what the store
holds.

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
Every command but dev reaches the store with the sweeper's flags, each of
which falls back to an environment variable: --etcd-endpoints to
CAIRN_ETCD_ENDPOINTS (then ETCDCTL_ENDPOINTS), --prefix to CAIRN_PREFIX,
--s3-bucket to CAIRN_S3_BUCKET, and so on; static S3 credentials come from
CAIRN_S3_ACCESS_KEY_ID and CAIRN_S3_SECRET_ACCESS_KEY. 'cairn dev' prints
these variables for a local store:

  cairn dev --data ./dev-data     # in one terminal; then, in another:
  eval "$(cairn dev --print-env)"
  cairn capture --thread t1 ./workspace

Run 'cairn COMMAND --help' for a command's flags and an example, and
'cairn --version' for the build.

Exit codes:
  0    done
  1    failed (the message says what to fix)
  2    usage: a bad flag, argument or environment variable, or an identifier
       the store refuses (empty, not UTF-8, longer than 1024 bytes)
  3    no such checkpoint or thread
  4    verify found problems
  130  interrupted by SIGINT or SIGTERM ('cairn dev' exits 0: that is how it stops)
`)
}

// exitCode maps an error of a command to the exit code.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case isUsage(err), errors.Is(err, cairn.ErrInvalidID):
		return exitUsage
	case errors.Is(err, errNotFound), errors.Is(err, snapshot.ErrMissingCheckpoint), errors.Is(err, cairn.ErrForkSourceNotFound):
		return exitNotFound
	case errors.Is(err, errProblems):
		return exitProblems
	}
	return exitFailure
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:,=@+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
