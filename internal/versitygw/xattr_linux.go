package versitygw

import (
	"os"
	"syscall"
)

// supportsUserXattrs reports whether files in dir take user extended
// attributes, in which the posix backend keeps object metadata.
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
