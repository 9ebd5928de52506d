//go:build unix

package bench

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time, user and system, that this process has used:
// the client side only, since etcd and versitygw run in processes of their
// own.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
