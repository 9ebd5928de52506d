package bucket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ErrSendDeadline marks a request that was not sent, or not sent whole,
// because its send deadline (WithSendDeadline) had passed. Nothing of it
// was written to the network after the deadline.
var ErrSendDeadline = errors.New("bucket: the request's send deadline passed before it was written")

// ErrCannotFence marks a request with a send deadline that the bucket's HTTP
// client cannot honour: the caller supplied an HTTP client whose transport
// is not an *http.Transport, or one that dials TLS itself. The request was
// not sent.
var ErrCannotFence = errors.New("bucket: the HTTP client cannot enforce a send deadline")

type sendDeadlineKey struct{}

// WithSendDeadline returns a context that ends at t, and whose S3 requests
// write nothing to the network at or after t: S3 takes no fencing token, so a
// request that must not reach the bucket late (the sweep's deletes, after
// which another sweeper may settle the keys and a writer upload them again)
// is bounded by the sender. The bound holds even when the process is paused
// (SIGSTOP, a VM freeze, a long GC) between deciding to send and sending, and
// when the network holds bytes back:
//
//   - each such request goes over a connection of its own, dialled only
//     before t;
//   - every write on that connection is refused, with ErrSendDeadline, once
//     the monotonic clock reads t or later, checked just before the write,
//     so a paused sender that wakes after t writes nothing more;
//   - on Linux the connection's TCP_USER_TIMEOUT makes the kernel drop it
//     when bytes it already holds are still unacknowledged at t, so that
//     they are not retransmitted later.
//
// What remains is a request the server received before t and runs later;
// bound that with the server's own request timeout. A bucket whose HTTP
// client cannot do this (Config.HTTPClient with a transport other than an
// *http.Transport, or one with its own DialTLSContext) refuses such a request
// with ErrCannotFence. The in-memory bucket sends nothing over a network and
// needs no fence.
func WithSendDeadline(ctx context.Context, t time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(ctx, t)
	return context.WithValue(ctx, sendDeadlineKey{}, t), cancel
}

// sendDeadline returns the send deadline of ctx, if it has one.
func sendDeadline(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(sendDeadlineKey{}).(time.Time)
	return t, ok
}

// fencedClient returns an HTTP client that sends each request over a new
// connection that writes nothing at or after by, built from base. The
// caller closes the returned transport's idle connections when done.
func fencedClient(base *http.Transport, redirect func(*http.Request, []*http.Request) error, by time.Time) (*http.Client, *http.Transport, error) {
	if base == nil || base.DialTLSContext != nil {
		return nil, nil, ErrCannotFence
	}
	tr := base.Clone()
	tr.DisableKeepAlives = true
	dial := base.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialFenced(ctx, dial, network, addr, by)
	}
	return &http.Client{Transport: tr, CheckRedirect: redirect}, tr, nil
}

// dialFenced dials through dial, unless by has passed, and returns the
// connection fenced at by.
func dialFenced(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), network, addr string, by time.Time) (net.Conn, error) {
	if !time.Now().Before(by) {
		return nil, fmt.Errorf("dial %s: %w", addr, ErrSendDeadline)
	}
	ctx, cancel := context.WithDeadline(ctx, by)
	defer cancel()
	c, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if testUnfenced {
		return &fencedConn{Conn: c, unfenced: true}, nil
	}
	left := time.Until(by)
	if left <= 0 {
		c.Close()
		return nil, fmt.Errorf("dial %s: %w", addr, ErrSendDeadline)
	}
	if err := setUserTimeout(c, left); err != nil {
		c.Close()
		return nil, fmt.Errorf("dial %s: set the connection's TCP_USER_TIMEOUT: %w", addr, err)
	}
	if err := c.SetDeadline(by); err != nil {
		c.Close()
		return nil, fmt.Errorf("dial %s: set the connection's deadline: %w", addr, err)
	}
	return &fencedConn{Conn: c, by: by}, nil
}

// testBeforeWrite, when set by a test, runs before each write on a fenced
// connection decides whether to write, as a pause of the process would.
var testBeforeWrite func()

// testUnfenced, set by a test, makes the fence a plain connection: the
// deliberately broken variant that the fence's tests must catch.
var testUnfenced bool

// fencedConn refuses every write once its deadline has passed.
type fencedConn struct {
	net.Conn
	by       time.Time
	unfenced bool // testUnfenced
}

// Write writes p unless the deadline has passed, by the monotonic clock
// read just before the write.
func (c *fencedConn) Write(p []byte) (int, error) {
	if hook := testBeforeWrite; hook != nil {
		hook()
	}
	if !c.unfenced && !time.Now().Before(c.by) {
		return 0, ErrSendDeadline
	}
	return c.Conn.Write(p)
}
