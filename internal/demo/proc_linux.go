package demo

import "syscall"

// childProcAttr makes the kernel kill the S3 server when the demo dies, so
// that an interrupted demo leaves no server behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
