package conformance

import "time"

// SetCaseTimeout sets the watchdog of each case to d and returns a function
// that restores it.
func SetCaseTimeout(d time.Duration) (restore func()) {
	old := caseTimeout
	caseTimeout = d
	return func() { caseTimeout = old }
}

// SetHangGrace sets how long the watchdog waits, after cancelling the context
// of a case, before it panics; it returns a function that restores it.
func SetHangGrace(d time.Duration) (restore func()) {
	old := hangGrace
	hangGrace = d
	return func() { hangGrace = old }
}
