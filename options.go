package cairn

import (
	"errors"
	"time"
)

// Default lease timings, as upstream.
const (
	DefaultLeaseDuration = 120 * time.Second
	DefaultRenewAfter    = 45 * time.Second
)

// MaxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER, 2^53-1: the largest
// size a file entry or an artifact may have.
const MaxSafeInteger = 1<<53 - 1

// Options configure a store's writer leases and clock. The zero value selects
// the defaults.
type Options struct {
	// Now returns the current time in milliseconds since the Unix epoch. Lease
	// expiry compares a lease's stored expiry with Now: a lease is expired when
	// expiresAt <= Now(). Nil selects the system clock.
	Now func() float64
	// LeaseDuration is how long a writer lease lasts after AcquireWriter or
	// Renew. Zero selects DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewAfter is how often a holder should renew its lease. It must be
	// shorter than LeaseDuration. Zero selects DefaultRenewAfter.
	RenewAfter time.Duration
	// Binding, when its Cluster is set, is the identity a memory store
	// reports as cairn.Bound, so that stores that share a bucket in a test or
	// a demo record and respect each other's bindings as etcd stores do. It
	// is not checked here; bucket.Bind checks it.
	Binding Binding
}

// Errors of Options.Validate. They are plain errors, as upstream.
var (
	ErrLeaseDuration = errors.New("cairn: LeaseDuration must be finite and positive")
	ErrRenewAfter    = errors.New("cairn: RenewAfter must be finite, positive, and less than LeaseDuration")
)

// Validate applies the defaults and checks the options in the upstream order:
// LeaseDuration must be positive (ErrLeaseDuration), then RenewAfter must be
// positive and shorter than LeaseDuration (ErrRenewAfter). Note that setting
// only LeaseDuration to 45s or less fails, because the default RenewAfter is
// 45s.
func (o Options) Validate() (Options, error) {
	if o.Now == nil {
		o.Now = SystemClock
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewAfter == 0 {
		o.RenewAfter = DefaultRenewAfter
	}
	if o.LeaseDuration < 0 {
		return o, ErrLeaseDuration
	}
	if o.RenewAfter < 0 || o.RenewAfter >= o.LeaseDuration {
		return o, ErrRenewAfter
	}
	return o, nil
}

// SystemClock returns the current time in milliseconds since the Unix epoch.
func SystemClock() float64 {
	return float64(time.Now().UnixMicro()) / 1000
}

// Millis converts a duration to milliseconds, the unit of every time in the
// contract.
func Millis(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond)
}
