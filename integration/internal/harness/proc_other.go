//go:build !linux

package harness

import (
	"os/exec"
	"syscall"
)

func childProcAttr() *syscall.SysProcAttr { return nil }

func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
