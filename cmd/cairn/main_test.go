package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/childproc"
)

// binary is the cairn command built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cairn-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "cairn")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build cairn:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		// The seeding of TestInspect runs etcd and S3 clients in the
		// process; they must all be gone.
		// The goroutine that starts helper servers (s3test, for TestDoctor)
		// lives as long as the process.
		if err := goleak.Find(goleak.IgnoreTopFunction(childproc.Spawner)); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is what one run of the command did.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runCairn runs the command with exactly the environment env (plus PATH and
// HOME) and returns what it did.
func runCairn(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("cairn %v: %v", args, err)
	}
	return r
}

// ok runs the command and fails the test unless it exits 0.
func ok(t *testing.T, env []string, args ...string) string {
	t.Helper()
	r := runCairn(t, env, args...)
	if r.code != 0 {
		t.Fatalf("cairn %s: %v", strings.Join(args, " "), r)
	}
	return r.stdout
}

// dev is a `cairn dev` process.
type dev struct {
	cmd    *exec.Cmd
	env    []string      // the variables it printed, NAME=value
	stderr string        // the file its stderr goes to
	exited chan struct{} // closed when the process has exited
	err    error         // of Wait, once exited is closed
}

// log returns what the process wrote to stderr so far.
func (d *dev) log() string {
	data, _ := os.ReadFile(d.stderr)
	return string(data)
}

// startDev starts `cairn dev` on dir, on free ports, and waits for its
// export lines. t.Cleanup kills it unless the test stopped it.
func startDev(t *testing.T, dir string) *dev {
	t.Helper()
	cmd := exec.Command(binary, "dev", "--data", dir, "--etcd-listen", "127.0.0.1:0", "--s3-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &dev{cmd: cmd, stderr: filepath.Join(t.TempDir(), "dev.log"), exited: make(chan struct{})}
	logFile, err := os.Create(d.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child has its own copy
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads any more
			}
		}
		close(lines)
		d.err = cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			_ = cmd.Process.Kill()
			<-d.exited
		}
	})
	timeout := time.After(time.Minute)
	for len(d.env) < 8 {
		select {
		case line, open := <-lines:
			if !open {
				<-d.exited
				t.Fatalf("cairn dev exited before printing its variables: %v\n%s", d.err, d.log())
			}
			kv, found := strings.CutPrefix(line, "export ")
			if !found {
				t.Fatalf("cairn dev printed %q, want export lines", line)
			}
			d.env = append(d.env, kv)
		case <-timeout:
			t.Fatalf("cairn dev printed no variables within a minute:\n%s", d.log())
		}
	}
	return d
}

// stop sends sig and returns the exit code.
func (d *dev) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(time.Minute):
		t.Fatalf("cairn dev did not stop within a minute of %v:\n%s", sig, d.log())
	}
	var exit *exec.ExitError
	if errors.As(d.err, &exit) {
		return exit.ExitCode()
	}
	if d.err != nil {
		t.Fatal(d.err)
	}
	return 0
}

func TestHelp(t *testing.T) {
	top := runCairn(t, nil, "--help")
	if top.code != 0 {
		t.Fatalf("cairn --help: %v", top)
	}
	for _, want := range []string{"Exit codes:", "130", "CAIRN_ETCD_ENDPOINTS"} {
		if !strings.Contains(top.stdout, want) {
			t.Errorf("cairn --help does not say %q:\n%s", want, top.stdout)
		}
	}
	if r := runCairn(t, nil, "help", "log"); r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: cairn log ") {
		t.Errorf("cairn help log: %v", r)
	}
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(top.stdout, "\n  "+c.name+" ") {
				t.Errorf("cairn --help does not list %s", c.name)
			}
			r := runCairn(t, nil, c.name, "--help")
			if r.code != 0 {
				t.Fatalf("cairn %s --help: %v", c.name, r)
			}
			for _, want := range []string{"Usage: cairn " + c.name, "Example:\n  cairn " + c.name, "Flags:"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("cairn %s --help does not say %q:\n%s", c.name, want, r.stdout)
				}
			}
			if c.store && !strings.Contains(r.stdout, "\nStore flags (as the sweeper's):\n") || c.store && !strings.Contains(r.stdout, "--prefix") {
				t.Errorf("cairn %s --help lists no store flags:\n%s", c.name, r.stdout)
			}
			if strings.Contains(r.stdout, "CAIRN_O]") || strings.Contains(r.stdout, "CAIRN_ID]") {
				t.Errorf("cairn %s --help gives a variable to a command-line-only flag:\n%s", c.name, r.stdout)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	store := []string{"CAIRN_PREFIX=p/", "CAIRN_S3_BUCKET=b", "CAIRN_ETCD_ENDPOINTS=127.0.0.1:1"}
	tests := []struct {
		name string
		env  []string
		args []string
		want string // in stderr
	}{
		{name: "no-command", args: nil, want: "Usage: cairn COMMAND"},
		{name: "unknown-command", args: []string{"frobnicate"}, want: `unknown command "frobnicate"`},
		{name: "unknown-flag", env: store, args: []string{"log", "--bogus", "t1"}, want: "-bogus"},
		{name: "missing-argument", env: store, args: []string{"log"}, want: "want 1 argument, got 0"},
		{name: "extra-argument", env: store, args: []string{"threads", "x"}, want: "want no arguments, got 1"},
		{name: "flag-without-value", env: store, args: []string{"log", "t1", "-n"}, want: "flag needs an argument: -n"},
		{name: "no-prefix", env: store[1:], args: []string{"threads"}, want: "--prefix (or CAIRN_PREFIX) is required"},
		{name: "no-bucket", env: []string{"CAIRN_PREFIX=p/"}, args: []string{"threads"}, want: "--s3-bucket (or CAIRN_S3_BUCKET) is required"},
		{name: "bad-env-duration", env: append([]string{"CAIRN_ETCD_DIAL_TIMEOUT=soon"}, store...), args: []string{"threads"}, want: "CAIRN_ETCD_DIAL_TIMEOUT"},
		{name: "bad-etcdctl-env", env: append([]string{"ETCDCTL_DIAL_TIMEOUT=soon"}, store...), args: []string{"threads"}, want: "ETCDCTL_DIAL_TIMEOUT"},
		{name: "bad-env-bool", env: append([]string{"CAIRN_S3_PATH_STYLE=maybe"}, store...), args: []string{"threads"}, want: "CAIRN_S3_PATH_STYLE"},
		{name: "bad-probe-timeout", env: store, args: []string{"threads", "--probe-timeout", "0"}, want: "--probe-timeout must be positive"},
		{name: "bad-output", env: store, args: []string{"show", "-o", "yaml", "cp-1"}, want: `"yaml" is not one of [text json]`},
		{name: "negative-count", env: store, args: []string{"log", "-n", "-1", "t1"}, want: `"-1" is not a whole number of 0 or more`},
		{name: "cert-without-key", env: store, args: []string{"threads", "--etcd-cert", "c.pem"}, want: "--etcd-cert and --etcd-key go together"},
		{name: "capture-without-thread", env: store, args: []string{"capture", "."}, want: "--thread (or CAIRN_THREAD) is required"},
		{name: "capture-bad-concurrency", env: store, args: []string{"capture", "--thread", "t1", "--concurrency", "-1", "."}, want: "--concurrency must be 0"},
		{name: "restore-include", env: store, args: []string{"restore", "--include", "*.go", "cp-1", "out"}, want: "--include applies to capture"},
		{name: "restore-one-argument", env: store, args: []string{"restore", "cp-1"}, want: "want 2 arguments, got 1"},
		{name: "fork-without-thread", env: store, args: []string{"fork", "cp-1"}, want: "--thread is required"},
		{name: "prefix-too-long", env: []string{"CAIRN_S3_BUCKET=b", "CAIRN_ETCD_ENDPOINTS=127.0.0.1:1", "CAIRN_PREFIX=" + strings.Repeat("p", 257)}, args: []string{"threads"}, want: "--prefix is 257 bytes long"},
		{name: "dev-not-loopback", args: []string{"dev", "--data", "d", "--s3-listen", "0.0.0.0:9000"}, want: "loopback"},
		{name: "dev-print-env-free-port", args: []string{"dev", "--print-env", "--etcd-listen", "127.0.0.1:0"}, want: "leaves the port to choose"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCairn(t, tt.env, tt.args...)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want %d (usage): %v", r.code, exitUsage, r)
			}
			if !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr does not say %q:\n%s", tt.want, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("a usage error printed on stdout:\n%s", r.stdout)
			}
		})
	}
}

// TestInvalidIDs: an identifier the store refuses (here one byte past
// cairn.MaxIDBytes, or not UTF-8), in an argument, a flag or its variable,
// is one line on stderr and exit 2, before anything reaches the store (which
// is unreachable here).
func TestInvalidIDs(t *testing.T) {
	store := []string{"CAIRN_PREFIX=p/", "CAIRN_S3_BUCKET=b", "CAIRN_ETCD_ENDPOINTS=127.0.0.1:1"}
	long := strings.Repeat("x", cairn.MaxIDBytes+1)
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		want string // in stderr
	}{
		{"log", nil, []string{"log", long}, "THREAD is 1025 bytes long"},
		{"show", nil, []string{"show", long}, "CHECKPOINT is 1025 bytes long"},
		{"restore", nil, []string{"restore", long, "out"}, "CHECKPOINT is 1025 bytes long"},
		{"diff", nil, []string{"diff", "cp-1", long}, "CHECKPOINT2 is 1025 bytes long"},
		{"fork-source", nil, []string{"fork", "--thread", "t2", long}, "CHECKPOINT is 1025 bytes long"},
		{"fork-thread", nil, []string{"fork", "--thread", long, "cp-1"}, "--thread is 1025 bytes long"},
		{"capture-id", nil, []string{"capture", "--thread", "t1", "--id", long, "."}, "--id is 1025 bytes long"},
		{"capture-thread-env", []string{"CAIRN_THREAD=" + long}, []string{"capture", "."}, "--thread is 1025 bytes long"},
		{"not-utf8", nil, []string{"show", "a\xffb"}, "CHECKPOINT must be well-formed Unicode"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runCairn(t, append(tt.env, store...), tt.args...)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want %d (usage): %v", r.code, exitUsage, r)
			}
			if lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); len(lines) != 1 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr is not one line saying %q:\n%s", tt.want, r.stderr)
			}
		})
	}
}

func TestUnreachableStore(t *testing.T) {
	// Nothing listens on port 1: the probe fails with a message naming the
	// endpoint, exit 1.
	r := runCairn(t, []string{"CAIRN_PREFIX=p/", "CAIRN_S3_BUCKET=b", "CAIRN_ETCD_ENDPOINTS=127.0.0.1:1", "CAIRN_PROBE_TIMEOUT=2s"}, "threads")
	if r.code != exitFailure {
		t.Fatalf("exit %d, want %d: %v", r.code, exitFailure, r)
	}
	if !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Errorf("stderr does not name the endpoint:\n%s", r.stderr)
	}
}

func TestDevPrintEnv(t *testing.T) {
	out := ok(t, nil, "dev", "--print-env")
	for _, want := range []string{"export CAIRN_ETCD_ENDPOINTS=127.0.0.1:2379\n", "export CAIRN_S3_ENDPOINT=http://127.0.0.1:9000\n", "export CAIRN_PREFIX=dev/\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("cairn dev --print-env does not print %q:\n%s", want, out)
		}
	}
}

func TestDevStopsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			d := startDev(t, t.TempDir())
			if code := d.stop(t, sig); code != 0 {
				t.Fatalf("cairn dev exited %d on %v, want 0:\n%s", code, sig, d.log())
			}
			if !strings.Contains(d.log(), "stopped") {
				t.Errorf("cairn dev did not say it stopped:\n%s", d.log())
			}
		})
	}
}

func TestDevBusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	r := runCairn(t, nil, "dev", "--data", t.TempDir(), "--etcd-listen", "127.0.0.1:0", "--s3-listen", busy.Addr().String(), "--console-listen", "127.0.0.1:0")
	if r.code != exitFailure || !strings.Contains(r.stderr, busy.Addr().String()) || !strings.Contains(r.stderr, "--s3-listen") {
		t.Errorf("cairn dev on a busy port: %v, want exit 1 naming the address and the flag", r)
	}
}

// TestInterrupted stops a command that waits for an etcd that accepts
// connections and never answers: SIGINT ends it with exit 130.
func TestInterrupted(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := silent.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	cmd := exec.Command(binary, "threads", "--probe-timeout", "5m", "--etcd-dial-timeout", "5m")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CAIRN_PREFIX=p/", "CAIRN_S3_BUCKET=b", "CAIRN_ETCD_ENDPOINTS=" + silent.Addr().String()}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A connection means the command runs, its signal handler in place.
	select {
	case c := <-accepted:
		if c != nil {
			defer c.Close()
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("the command did not connect within a minute")
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitInterrupted {
		t.Fatalf("exit %v, want %d:\n%s", err, exitInterrupted, stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr does not say it was interrupted:\n%s", stderr.String())
	}
}
