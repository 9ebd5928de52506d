package harness

import (
	"os/exec"
	"runtime"
	"syscall"
)

// childProcAttr makes the kernel send SIGKILL to a child when the thread
// that started it exits.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// Linux delivers the parent-death signal when the *thread* that forked the
// child exits, not the process. Go may retire threads, so every child is
// started from one goroutine locked to its thread for the life of the
// process: the signal then fires exactly when the process dies.
var spawn = make(chan spawnReq)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		for r := range spawn {
			r.done <- r.cmd.Start()
		}
	}()
}

func startCmd(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawn <- spawnReq{cmd, done}
	return <-done
}
