package s3test

import (
	"os"
	"syscall"
)

// childProcAttr makes the kernel kill a server process when the test binary
// that started it dies, so that a crashed or timed-out test leaves no server
// behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// supportsUserXattrs reports whether files in dir take user extended
// attributes.
func supportsUserXattrs(dir string) bool {
	f, err := os.CreateTemp(dir, "xattr-probe-")
	if err != nil {
		return false
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	return syscall.Setxattr(name, "user.cairn.probe", []byte("1"), 0) == nil
}
