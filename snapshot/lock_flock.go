//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// lockTarget takes the restore lock of the target parent/base: an exclusive
// flock(2) on parent/.<base>.cairn-restore.lock, without waiting. It returns
// errTargetBusy while another restore holds it. The kernel lets go of the
// lock when its holder dies, so a crashed restore never leaves the target
// locked.
//
// unlock removes the file and then lets go of the lock. A restore that opened
// the file before the removal and takes the lock after it would hold the lock
// of a file no longer at the path, which the next restore would create and
// lock again; so a lock counts only while the path still names the file
// locked, and lockTarget tries again otherwise.
func lockTarget(parent, base string) (unlock func(), err error) {
	path := filepath.Join(parent, "."+base+lockSuffix)
	for range 100 {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, err
		}
		if err := flock(f); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, errTargetBusy
			}
			return nil, err
		}
		held, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		now, err := os.Stat(path)
		if err == nil && os.SameFile(held, now) {
			return func() {
				os.Remove(path)
				f.Close()
			}, nil
		}
		f.Close()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return nil, errTargetBusy
}

// flock takes an exclusive lock on f without waiting, trying again when a
// signal interrupts the call.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
