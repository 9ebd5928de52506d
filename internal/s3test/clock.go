// Package s3test starts S3 servers for tests: an in-process gofakes3 server
// with a controllable clock and fault injection (StartFake), and a real
// versitygw server process on the loopback interface (StartVersityGW). Both
// create one bucket and are torn down by t.Cleanup, also when the test fails.
package s3test

import (
	"sync"
	"time"
)

// Clock is a settable clock, safe for concurrent use. It satisfies
// gofakes3.TimeSource, so a fake server stamps upload times with it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock that reads t until it is moved.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Since returns the time elapsed on the clock since t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
