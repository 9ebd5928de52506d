package childproc

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Linux delivers the parent-death signal when the *thread* that forked the
// child exits, not the process, and Go may retire threads. So every child is
// started from one goroutine locked to its thread for the life of the
// process: the signal then fires exactly when the process dies.
var spawn = make(chan spawnReq)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func init() { go spawner() }

// spawner starts the children, from a thread it never gives back.
func spawner() {
	runtime.LockOSThread() // never unlocked: the thread lives as long as the process
	for r := range spawn {
		r.done <- r.cmd.Start()
	}
}

func start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	spawn <- spawnReq{cmd, done}
	return <-done
}
