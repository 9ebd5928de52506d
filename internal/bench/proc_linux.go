package bench

import (
	"os"
	"syscall"
)

// childProcAttr makes the kernel kill a server process when the benchmark
// process dies, so that a crashed run leaves no server behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// supportsUserXattrs reports whether files in dir take user extended
// attributes, which versitygw's posix backend keeps its metadata in.
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
