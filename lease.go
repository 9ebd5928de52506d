package cairn

import (
	"context"
	"sync"
	"time"
)

// Lease is a writer lease on one thread, as returned by Store.AcquireWriter.
// Its embedded Writer is what Append, DeleteHead, DeleteCheckpoints and
// ForkFromCheckpoint take as proof of the lease.
//
// A Lease is safe for concurrent use.
type Lease struct {
	Writer
	// RenewAfter is how often the holder should call Renew: the store's
	// configured value, shorter than the lease duration.
	RenewAfter time.Duration

	driver LeaseDriver
	mu     sync.Mutex
	expiry float64
}

// LeaseDriver is what a store implements to back the leases it hands out.
type LeaseDriver interface {
	// Renew extends the lease to the store's now plus the lease duration and
	// returns the new expiry in milliseconds. It returns an error for which
	// errors.Is(err, ErrWriterLost) is true when the lease was released,
	// replaced, or has expired; an expired lease cannot be revived.
	Renew(ctx context.Context) (expiresAt float64, err error)
	// Release ends the lease if it is still the thread's current lease, and
	// does nothing otherwise. It must not fail.
	Release(ctx context.Context)
}

// NewLease returns a lease for w that expires at expiresAt (milliseconds) and
// is renewed and released through d. Store implementations call it from
// AcquireWriter.
func NewLease(w Writer, expiresAt float64, renewAfter time.Duration, d LeaseDriver) *Lease {
	return &Lease{Writer: w, RenewAfter: renewAfter, driver: d, expiry: expiresAt}
}

// ExpiresAt returns the lease's expiry in milliseconds. It reflects every
// successful Renew.
func (l *Lease) ExpiresAt() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiry
}

// Renew extends the lease to now plus the lease duration and returns the new
// expiry. It returns an error matching ErrWriterLost when the lease was
// released, taken over, or has expired, even if nobody took it over: an
// expired lease cannot be revived. Context errors are returned as they are.
func (l *Lease) Renew(ctx context.Context) (float64, error) {
	exp, err := l.driver.Renew(ctx)
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if exp > l.expiry {
		l.expiry = exp
	}
	return exp, nil
}

// Release ends the lease. It does nothing when a newer lease replaced this one
// and it never fails; calling it twice is harmless. An expired lease that
// nobody took over can still release its record.
func (l *Lease) Release(ctx context.Context) {
	l.driver.Release(ctx)
}
