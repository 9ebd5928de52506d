package conformance

import "time"

// SetCaseTimeout sets the watchdog of each case to d and returns a function
// that restores it.
func SetCaseTimeout(d time.Duration) (restore func()) {
	old := caseTimeout
	caseTimeout = d
	return func() { caseTimeout = old }
}
