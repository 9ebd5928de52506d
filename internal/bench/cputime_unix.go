//go:build unix

package bench

import (
	"runtime"
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

// settledCPUTime collects the garbage the process has made so far, then
// returns cpuTime: a window that starts here does not pay for collecting
// what was made before it (B2 computes a round's keys just before the
// round, and the other side's garbage may still be uncollected). Both sides
// of a comparison start this way. testing.B collects before it times, for
// the same reason.
func settledCPUTime() time.Duration {
	runtime.GC()
	return cpuTime()
}
