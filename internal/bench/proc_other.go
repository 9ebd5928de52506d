//go:build !linux

package bench

import "syscall"

// childProcAttr returns nil: only Linux can tie a child's life to its parent.
func childProcAttr() *syscall.SysProcAttr { return nil }

// supportsUserXattrs assumes the file system takes extended attributes.
func supportsUserXattrs(string) bool { return true }
