package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cairnstore/cairn"
)

// StorePairFactory returns two stores on the same new, empty data, as two
// processes (in two regions, say) would open it: the first with options a,
// the second with options b. Each store reads its own clock (Options.Now).
// The suites call it once per subtest and the factory registers any teardown
// with t.Cleanup.
type StorePairFactory func(t *testing.T, a, b cairn.Options) (cairn.Store, cairn.Store)

// RunClockSkewTests runs the suite of the rule that no clock decides what a
// sweep may delete: a writer on one store and a sweeper on the other, their
// clocks apart by an offset or running at different rates, the writer
// stalled to the last millisecond of its lease by its own clock, and the
// sweep run at every point of the writer's capture. Every case ends with the
// writer's append refused (cairn.ErrWriterLost, nothing appended) or the blob
// kept; never with a checkpoint that names a key the sweep deleted. It skips
// when the stores do not implement cairn.BlobClaimer and
// cairn.BlobCollector.
func RunClockSkewTests(t *testing.T, newPair StorePairFactory) {
	t.Helper()
	t.Run("ClockSkew", func(t *testing.T) {
		for _, sk := range skews {
			for _, c := range skewCases() {
				runCase(t, sk.name+"/"+c.name, func(t *testing.T, ctx context.Context) {
					x := newSkewEnv(t, ctx, newPair, sk)
					if _, ok := x.w.s.(cairn.BlobClaimer); !ok {
						t.Skipf("%T does not implement cairn.BlobClaimer", x.w.s)
					}
					if _, ok := x.sw.s.(cairn.BlobCollector); !ok {
						t.Skipf("%T does not implement cairn.BlobCollector", x.sw.s)
					}
					c.run(x)
				})
			}
		}
	})
}

// skew is how the writer's clock relates to the sweeper's: writer = start +
// offset + rate × (sweeper − start).
type skew struct {
	name   string
	offset float64 // ms the writer's clock is ahead of the sweeper's
	rate   float64
}

var skews = []skew{
	{"SweeperAhead500ms", -500, 1},
	{"SweeperAhead5s", -5_000, 1},
	{"SweeperAhead10m", -600_000, 1},
	{"SweeperBehind10m", 600_000, 1},
	{"WriterHalfRate", 0, 0.5},
	{"WriterDoubleRate", 0, 2},
}

// skewEnv is a case of the suite: w is the writer's store and clock, sw the
// sweeper's, over the same data; bucket is the bucket both see, by key.
type skewEnv struct {
	t      *testing.T
	sk     skew
	w, sw  *env
	bucket map[string]bool
}

func newSkewEnv(t *testing.T, ctx context.Context, newPair StorePairFactory, sk skew) *skewEnv {
	t.Helper()
	sweeperClock := &clock{now: startTime}
	writerClock := &clock{now: startTime + sk.offset}
	a, b := newPair(t, suiteOptions(writerClock), suiteOptions(sweeperClock))
	if a == nil || b == nil {
		t.Fatal("the factory returned a nil Store")
	}
	k := &known{threads: map[string]bool{}, ids: map[string]bool{}}
	return &skewEnv{
		t: t, sk: sk, bucket: map[string]bool{},
		w:  &env{t: t, ctx: ctx, clock: writerClock, s: a, leases: map[string]*cairn.Lease{}, known: k},
		sw: &env{t: t, ctx: ctx, clock: sweeperClock, s: b, leases: map[string]*cairn.Lease{}, known: k},
	}
}

// tick moves the sweeper's clock by ms and the writer's by rate × ms.
func (x *skewEnv) tick(ms float64) {
	x.sw.clock.advance(ms)
	x.w.clock.advance(x.sk.rate * ms)
}

// stall moves time until the writer's clock reads at, the writer having done
// nothing in between (a pause, a slow disk, renewals that did not get
// through).
func (x *skewEnv) stall(at float64) {
	x.t.Helper()
	if d := at - x.w.clock.Now(); d > 0 {
		x.tick(d / x.sk.rate)
	}
	x.w.clock.set(at)
}

// capture is the writer's side of a capture of key on its lease l: claim,
// and upload when the bucket lacks the key. It reports false when the key is
// busy (a sweep is deleting it): the writer must then wait, not use it.
func (x *skewEnv) capture(l *cairn.Lease, key string) bool {
	x.t.Helper()
	if busy := x.w.claim(l.Writer, key); len(busy) > 0 {
		return false
	}
	x.bucket[key] = true // reused when present, uploaded when not
	return true
}

// sweepStep is one step of a sweep of key, run by the sweeper's store.
type sweepStep int

const (
	stepRead sweepStep = iota
	stepMark
	stepBegin
	stepDelete
)

// sweeper runs a sweep of key one step at a time, as package sweep does with
// a grace of zero: a key that is unreferenced, unclaimed and in the bucket is
// marked, begun and deleted.
type sweeper struct {
	x       *skewEnv
	key     string
	garbage bool
	marked  []cairn.GCRecord
	moved   []cairn.GCRecord
	next    sweepStep
}

func (x *skewEnv) sweeper(key string) *sweeper { return &sweeper{x: x, key: key} }

// until runs the sweep's steps up to and including last.
func (s *sweeper) until(last sweepStep) {
	s.x.t.Helper()
	for ; s.next <= last; s.next++ {
		sw := s.x.sw
		switch s.next {
		case stepRead:
			refs, view := sw.readGC()
			referenced := slices.ContainsFunc(refs, func(r cairn.BlobReference) bool { return r.Key == s.key && r.References > 0 })
			_, recorded := view.Record(s.key)
			s.garbage = s.x.bucket[s.key] && !referenced && !view.IsClaimed(s.key) && !recorded
		case stepMark:
			if s.garbage {
				s.marked = sw.mark(sinceA, s.key)
			}
		case stepBegin:
			if len(s.marked) > 0 {
				// With a grace of zero the sweep reads again before it
				// begins, and begins what that read still finds unclaimed.
				if _, view := sw.readGC(); view.IsClaimed(s.key) {
					s.marked = nil
					continue
				}
				s.moved = sw.begin(s.marked...)
			}
		case stepDelete:
			for _, r := range s.moved {
				delete(s.x.bucket, r.Key)
			}
			if len(s.moved) > 0 {
				sw.end(true, s.moved...)
			}
		}
	}
}

// all runs the rest of the sweep.
func (s *sweeper) all() { s.until(stepDelete) }

// deleted reports whether the sweep deleted its key.
func (s *sweeper) deleted() bool { return len(s.moved) > 0 }

// publish appends c with the lease l at the last millisecond of the lease by
// the writer's clock, and requires the outcome the rule allows: the append
// succeeds and every key it names is in the bucket, or it is refused with
// cairn.ErrWriterLost and nothing was appended.
func (x *skewEnv) publish(l *cairn.Lease, c cairn.Checkpoint, expected string) bool {
	x.t.Helper()
	before := x.w.head(c.ThreadID)
	_, err := x.w.appendWith(l.Writer, c, expected)
	switch {
	case err == nil:
		for _, f := range c.Files {
			if f.BlobKey != "" && !x.bucket[f.BlobKey] {
				x.t.Errorf("Append of %q succeeded and names %q, which the sweep deleted (writer clock %v, sweeper clock %v, lease expiry %v)",
					c.ID, f.BlobKey, x.w.clock.Now(), x.sw.clock.Now(), l.ExpiresAt())
			}
		}
		return true
	case errors.Is(err, cairn.ErrWriterLost):
		if after := x.w.head(c.ThreadID); after != before {
			x.t.Errorf("a refused Append moved the head of %q from %q to %q", c.ThreadID, before, after)
		}
		return false
	default:
		x.t.Fatalf("Append(%q): %v, want success or ErrWriterLost", c.ID, err)
		return false
	}
}

// orphan makes key a blob in the bucket that nothing references: thread A
// captured it in a1 and deleted that head.
func (x *skewEnv) orphan(key string) {
	x.t.Helper()
	a := x.w.lease(threadA)
	if !x.capture(a, key) {
		x.t.Fatalf("ClaimBlobs(%q) on a fresh store reported it busy", key)
	}
	x.w.mustAppend(withFiles(cp("a1", "", threadA), file("f", key)), "")
	x.w.mustDeleteHead(threadA, "a1")
	a.Release(x.w.ctx)
	delete(x.w.leases, threadA)
}

// check requires that every checkpoint the case touched names only keys in
// the bucket.
func (x *skewEnv) check() {
	x.t.Helper()
	for _, thread := range []string{threadA, threadB} {
		for _, c := range x.sw.list(thread) {
			for _, f := range c.Files {
				if f.BlobKey != "" && !x.bucket[f.BlobKey] {
					x.t.Errorf("checkpoint %q of %q names %q, which the sweep deleted", c.ID, thread, f.BlobKey)
				}
			}
		}
	}
}

type skewCase struct {
	name string
	run  func(x *skewEnv)
}

// skewCases place the sweep at each point of the writer's capture of X on
// thread B: before the claim, between the claim and the append, between the
// mark and the begin, and between the begin and the bucket's delete; and a
// takeover by a writer on the sweeper's clock while the first writer stalls.
func skewCases() []skewCase {
	x := gcKey(1)
	b1 := func() cairn.Checkpoint { return withFiles(cp("b1", "", threadB), file("g", x)) }
	return []skewCase{
		{"SweepBeforeClaim", func(e *skewEnv) {
			e.orphan(x)
			l := e.w.lease(threadB)
			s := e.sweeper(x)
			s.all()
			if !s.deleted() {
				e.t.Errorf("a sweep of an unclaimed, unreferenced key deleted nothing")
			}
			if !e.capture(l, x) {
				e.t.Fatalf("ClaimBlobs(%q) after the sweep settled reported it busy", x)
			}
			e.stall(l.ExpiresAt() - 1)
			e.publish(l, b1(), "")
			e.check()
		}},
		{"SweepBetweenClaimAndAppend", func(e *skewEnv) {
			e.orphan(x)
			l := e.w.lease(threadB)
			if !e.capture(l, x) {
				e.t.Fatalf("ClaimBlobs(%q) reported it busy", x)
			}
			e.stall(l.ExpiresAt() - 1)
			s := e.sweeper(x)
			s.all()
			if e.publish(l, b1(), "") && s.deleted() {
				e.t.Errorf("the sweep deleted %q, claimed by a lease that then appended", x)
			}
			e.check()
		}},
		{"SweepBetweenMarkAndBegin", func(e *skewEnv) {
			e.orphan(x)
			l := e.w.lease(threadB)
			s := e.sweeper(x)
			s.until(stepMark)
			if !e.capture(l, x) {
				e.t.Fatalf("ClaimBlobs(%q) of a candidate reported it busy", x)
			}
			e.stall(l.ExpiresAt() - 1)
			s.all()
			if e.publish(l, b1(), "") && s.deleted() {
				e.t.Errorf("the sweep deleted %q, claimed between its mark and its begin by a lease that then appended", x)
			}
			e.check()
		}},
		{"SweepBetweenBeginAndDelete", func(e *skewEnv) {
			e.orphan(x)
			l := e.w.lease(threadB)
			s := e.sweeper(x)
			s.until(stepBegin)
			if !s.deleted() {
				e.t.Fatalf("a sweep of an unclaimed, unreferenced key began no delete")
			}
			if e.capture(l, x) {
				e.t.Errorf("ClaimBlobs(%q) while a sweep deletes it did not report it busy", x)
			}
			e.stall(l.ExpiresAt() - 1)
			s.all()
			if !e.capture(l, x) {
				e.t.Fatalf("ClaimBlobs(%q) after the delete settled reported it busy", x)
			}
			e.publish(l, b1(), "")
			e.check()
		}},
		{"TakeoverWhileStalled", func(e *skewEnv) {
			e.orphan(x)
			old := e.w.mustAcquire(threadB)
			if !e.capture(old, x) {
				e.t.Fatalf("ClaimBlobs(%q) reported it busy", x)
			}
			e.stall(old.ExpiresAt() - 1)
			// A writer on the sweeper's clock takes the thread over when its
			// clock says the lease expired.
			next, err := e.sw.acquire(threadB)
			took := err == nil
			if err != nil && !errors.Is(err, cairn.ErrWriterConflict) {
				e.t.Fatalf("AcquireWriter(%q) on the second store: %v", threadB, err)
			}
			s := e.sweeper(x)
			s.all()
			if took && !s.deleted() {
				e.t.Errorf("after a takeover the replaced lease's claim still kept %q", x)
			}
			if !took && s.deleted() {
				e.t.Errorf("the sweep deleted %q, claimed by a lease that nobody took over", x)
			}
			appended := e.publish(old, b1(), "")
			if took && appended {
				e.t.Errorf("the replaced lease appended after a takeover (fence %d < %d)", old.Fence, next.Fence)
			}
			if took {
				if !e.capture(next, x) {
					e.t.Fatalf("ClaimBlobs(%q) for the new lease reported it busy", x)
				}
				e.publish(next, withFiles(cp("b2", "", threadB), file("g", x)), "")
			}
			e.check()
		}},
	}
}
