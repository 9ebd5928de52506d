package integration

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairnstore/cairn/internal/childproc"
)

// sweeperProc is one run of the sweeper binary whose JSON log (its standard
// error) is read line by line while it runs, so that a test can signal it at
// a given point of the run.
type sweeperProc struct {
	name string
	cmd  *exec.Cmd
	// onLine is called, from the goroutine that reads the log, with every
	// line as soon as it is read.
	onLine func(line string)

	mu    sync.Mutex
	lines []string

	done chan struct{}
	code int // the exit code; -1 when a signal ended the process
	err  error
}

// startSweeperProc starts bin with args and the environment env (appended to
// this process's), copying every line it logs to sink as well. The process
// gets SIGKILL when this process dies.
func startSweeperProc(name, bin string, args, env []string, sink io.Writer, onLine func(string)) (*sweeperProc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &sweeperProc{name: name, cmd: cmd, onLine: onLine, done: make(chan struct{})}
	if err := childproc.Start(cmd); err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("start sweeper %s: %w", name, err)
	}
	pw.Close() // the child holds the write end now
	if sink != nil {
		fmt.Fprintf(sink, "==== %s %s start pid %d\n", time.Now().Format(time.RFC3339Nano), name, cmd.Process.Pid)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.lines = append(p.lines, line)
			p.mu.Unlock()
			if sink != nil {
				fmt.Fprintf(sink, "%s: %s\n", name, line)
			}
			if p.onLine != nil {
				p.onLine(line)
			}
		}
		// A line too long for the scanner must not block the child.
		_, _ = io.Copy(io.Discard, pr)
		pr.Close()
		p.err = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		if sink != nil {
			fmt.Fprintf(sink, "==== %s %s exit %d (%v)\n", time.Now().Format(time.RFC3339Nano), name, p.code, p.err)
		}
		close(p.done)
	}()
	return p, nil
}

// signal sends sig unless the process has exited.
func (p *sweeperProc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill sends SIGKILL, also to a stopped process.
func (p *sweeperProc) kill() { p.signal(syscall.SIGKILL) }

// wait waits up to d for the process to exit and returns its exit code; when
// it has not exited by then it is killed and ok is false.
func (p *sweeperProc) wait(d time.Duration) (code int, ok bool) {
	select {
	case <-p.done:
		return p.code, true
	case <-time.After(d):
	}
	p.signal(syscall.SIGCONT)
	p.kill()
	<-p.done
	return p.code, false
}

// log returns the lines logged so far.
func (p *sweeperProc) log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// logged returns the lines logged so far that contain substr.
func (p *sweeperProc) logged(substr string) []string {
	var out []string
	for _, l := range p.log() {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}
