package harness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/cairnstore/cairn/internal/childproc"
)

// stopTimeout bounds a polite stop before the process is killed.
const stopTimeout = 10 * time.Second

// Process is one run of a server process whose output goes to a log file.
type Process struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, set before done is closed
	log  *os.File
}

// StartProcess starts bin with args, appending its standard output and error
// to logPath. The process gets SIGKILL when the process that started it dies
// (on Linux), so a crashed test leaves nothing behind.
func StartProcess(name, bin string, args []string, logPath string, env []string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "\n==== %s start %s: %s %s\n", time.Now().Format(time.RFC3339Nano), name, bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if env != nil {
		cmd.Env = env
	}
	if err := childproc.Start(cmd); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, done: make(chan struct{}), log: f}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(f, "==== %s exit %s: %v\n", time.Now().Format(time.RFC3339Nano), name, p.err)
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, waits up to stopTimeout, then kills the process.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.Kill()
	}
}

// Tail returns the last n lines of a log file.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
