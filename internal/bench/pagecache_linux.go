package bench

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropPageCache drops the clean pages of f from the kernel's page cache
// (posix_fadvise POSIX_FADV_DONTNEED); write them to disk first.
func dropPageCache(f *os.File) error {
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
