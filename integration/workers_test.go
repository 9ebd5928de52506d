package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/integration/internal/lincheck"
)

// sourceThread is the thread forks copy from. It is written once, before the
// workers start, and never again, so the partition by thread stays sound.
const sourceThread = "source"

func pause(ctx context.Context, r *rand.Rand, lo, hi time.Duration) {
	d := lo + time.Duration(r.Int64N(int64(hi-lo)+1))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// setupSource writes the source thread: two checkpoints, then releases.
func (c *campaign) setupSource() {
	cl := c.newClient(0, 1)
	c.addThread(sourceThread)
	lease, out := cl.acquire(sourceThread)
	if lease == nil {
		c.t.Fatalf("acquire the source thread: %+v", out)
	}
	parent := ""
	for i := 0; i < 2; i++ {
		id := c.newID(sourceThread)
		if out := cl.append(lease.Writer, c.checkpoint(cl.r, id, sourceThread, parent, true), parent); out.Err != "" || out.Unknown {
			c.t.Fatalf("append %s to the source thread: %+v", id, out)
		}
		parent = id
	}
	cl.release(lease)
}

// writer races for the thread's lease and writes while it holds it. One
// lease in staleOneIn is "stale": its holder never renews it and keeps writing until
// the store says WRITER_LOST, after the lease expired on the logical clock or
// another client took it over. Now and then a writer stalls, as a process
// in a long pause would, and wakes up to write with a lease that may have
// been taken over meanwhile.
func (c *campaign) writer(ctx context.Context, cl *client, thread string, staleOneIn int) {
	var lease *cairn.Lease
	var lastRenew float64
	stale := false
	head, known := "", false
	for ctx.Err() == nil {
		if lease == nil {
			l, _ := cl.acquire(thread)
			if l == nil {
				pause(ctx, cl.r, 20*time.Millisecond, 120*time.Millisecond)
				continue
			}
			lease, lastRenew, stale, known = l, l.ExpiresAt()-cairn.Millis(leaseDuration), cl.r.IntN(staleOneIn) == 0, false
			continue
		}
		w := lease.Writer
		if !stale && cl.now()-lastRenew >= cairn.Millis(renewAfter) && cl.r.IntN(12) != 0 {
			out := cl.renew(lease)
			switch {
			case out.Err == lincheck.CodeWriterLost:
				lease = nil
			case out.Err == "" && !out.Unknown:
				lastRenew = out.Exp - cairn.Millis(leaseDuration)
			}
			continue
		}
		if !known {
			h, ok := cl.getHead(thread)
			if !ok {
				pause(ctx, cl.r, 10*time.Millisecond, 50*time.Millisecond)
				continue
			}
			head, known = h, true
		}
		var out lincheck.Output
		switch p := cl.r.IntN(100); {
		case p < 1 && !stale:
			cl.release(lease)
			lease = nil
			continue
		case p < 2 && !stale:
			pause(ctx, cl.r, time.Second, 3*time.Second)
			continue
		case p < 60:
			id, parent, expected, register := c.newID(thread), head, head, true
			switch q := cl.r.IntN(40); {
			case q == 0: // a stale expected head: STALE_HEAD
				if head == "" {
					expected = c.someID(cl.r, thread)
				} else {
					expected = ""
				}
				parent = expected
			case q == 1: // a parent that is not the expected head: PARENT_MISMATCH
				if head == "" {
					parent = c.someID(cl.r, thread)
				} else {
					parent = ""
				}
			case q == 2 && head != "": // the head's own id again: DUPLICATE_ID
				id, register = head, false
			}
			out = cl.append(w, c.checkpoint(cl.r, id, thread, parent, register), expected)
			if out.Err == "" && !out.Unknown {
				head = id
			}
		case p < 78:
			if head == "" {
				continue
			}
			target := head
			if cl.r.IntN(15) == 0 {
				target = c.someID(cl.r, thread) // most likely not the head: NOT_HEAD
			}
			out = cl.deleteHead(w, target)
			known = false
		case p < 86:
			out = cl.prune(w, 1+cl.r.IntN(3))
		case p < 93:
			cl.list(thread)
			continue
		default:
			cl.get(thread, c.someID(cl.r, thread))
			continue
		}
		switch {
		case out.Unknown:
			known = false
		case out.Err == lincheck.CodeWriterLost:
			lease = nil
		case out.Err != "":
			known = false
		}
	}
}

// reader reads random threads.
func (c *campaign) reader(ctx context.Context, cl *client) {
	for ctx.Err() == nil {
		threads := c.allThreads()
		t := threads[cl.r.IntN(len(threads))]
		switch cl.r.IntN(3) {
		case 0:
			cl.getHead(t)
		case 1:
			cl.list(t)
		default:
			cl.get(t, c.someID(cl.r, t))
		}
		pause(ctx, cl.r, 0, 20*time.Millisecond)
	}
}

// forker forks the source thread into fresh threads and writes there.
func (c *campaign) forker(ctx context.Context, cl *client, n int) {
	for k := 0; ctx.Err() == nil; k++ {
		dest := fmt.Sprintf("fork%d-%d", n, k)
		c.addThread(dest)
		var lease *cairn.Lease
		for try := 0; lease == nil && try < 5 && ctx.Err() == nil; try++ {
			lease, _ = cl.acquire(dest)
		}
		if lease == nil {
			continue
		}
		src := fmt.Sprintf("%s.c%d", sourceThread, 1+cl.r.IntN(2))
		id := c.newID(dest)
		out := cl.fork(lease.Writer, sourceThread, src, id)
		if out.Err == "" && !out.Unknown {
			next := c.newID(dest)
			if o := cl.append(lease.Writer, c.checkpoint(cl.r, next, dest, id, true), id); o.Err == "" && !o.Unknown && cl.r.IntN(2) == 0 {
				cl.deleteHead(lease.Writer, next)
			}
			if cl.r.IntN(4) == 0 { // a second fork into the same thread: NOT_EMPTY
				cl.fork(lease.Writer, sourceThread, src, c.newID(dest))
			}
		}
		cl.release(lease)
		pause(ctx, cl.r, 10*time.Millisecond, 100*time.Millisecond)
	}
}

// finalReads reads every thread once more, after every worker stopped and
// the cluster healed, with a client of its own.
func (c *campaign) finalReads(member int) {
	cl := c.newClient(member, 99)
	for _, t := range c.allThreads() {
		for try := 0; try < 10; try++ {
			if _, ok := cl.getHead(t); ok {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		cl.list(t)
	}
}
