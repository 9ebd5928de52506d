//go:build !linux

package demo

import "syscall"

// childProcAttr returns nil: only Linux can tie a child's life to its parent.
func childProcAttr() *syscall.SysProcAttr { return nil }
