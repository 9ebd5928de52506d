package conformance

import (
	"encoding/json"
	"strings"

	"github.com/cairnstore/cairn"
)

// leaseCases check writer leases: expiry at expiresAt <= now, fences that
// only grow, tokens that are new each time, Renew and Release, independence
// of threads, and writer identity by value.
func leaseCases() []storeCase {
	renewFails := func(e *env, what string, l *cairn.Lease) {
		e.t.Helper()
		e.fails(what, cairn.ErrWriterLost, func() error { _, err := l.Renew(e.ctx); return err })
	}
	return []storeCase{
		{"Lease/Fields", func(e *env) {
			l := e.mustAcquire(threadA)
			if l.ThreadID != threadA {
				e.t.Errorf("lease thread %q, want %q", l.ThreadID, threadA)
			}
			if l.OwnerToken == "" {
				e.t.Error("lease owner token is empty")
			}
			if got, want := l.ExpiresAt(), startTime+leaseMillis; got != want {
				e.t.Errorf("lease ExpiresAt() = %v, want now + lease duration = %v", got, want)
			}
			if l.RenewAfter != renewAfter {
				e.t.Errorf("lease RenewAfter = %v, want the configured %v", l.RenewAfter, renewAfter)
			}
		}},
		{"Lease/ExpiryBoundary", func(e *env) {
			l := e.lease(threadA)
			e.chain(threadA, "1")
			exp := l.ExpiresAt()
			e.clock.set(exp - 0.5)
			_, err := e.acquire(threadA)
			expectErr(e.t, "AcquireWriter just before expiry", err, cairn.ErrWriterConflict)
			e.chain(threadA, "2")
			e.clock.set(exp)
			renewFails(e, "Renew at expiresAt == now", l)
			e.appendFails("Append at expiresAt == now", cairn.ErrWriterLost, l.Writer, cp("3", "2", threadA), "2")
			e.deleteHeadFails("DeleteHead at expiresAt == now", cairn.ErrWriterLost, l.Writer, threadA, "2")
			next, err := e.acquire(threadA)
			noErr(e.t, "AcquireWriter at expiresAt == now", err)
			if next.Fence <= l.Fence {
				e.t.Errorf("takeover fence %d, want more than %d", next.Fence, l.Fence)
			}
			if got := next.ExpiresAt(); got != exp+leaseMillis {
				e.t.Errorf("takeover ExpiresAt() = %v, want %v", got, exp+leaseMillis)
			}
			e.mustAppendWith(next.Writer, cp("3", "2", threadA), "2")
		}},
		{"Lease/FenceGrowsAcrossRelease", func(e *env) {
			var prev *cairn.Lease
			tokens := map[string]bool{}
			for range 4 {
				l := e.mustAcquire(threadA)
				if prev != nil && l.Fence <= prev.Fence {
					e.t.Errorf("fence after release %d, want more than %d", l.Fence, prev.Fence)
				}
				if tokens[l.OwnerToken] {
					e.t.Errorf("owner token %q was issued twice", l.OwnerToken)
				}
				tokens[l.OwnerToken] = true
				l.Release(e.ctx)
				prev = l
			}
		}},
		{"Lease/FenceGrowsAcrossTakeover", func(e *env) {
			var prev *cairn.Lease
			tokens := map[string]bool{}
			for i := range 4 {
				l := e.mustAcquire(threadA)
				if prev != nil {
					if l.Fence <= prev.Fence {
						e.t.Errorf("takeover fence %d, want more than %d", l.Fence, prev.Fence)
					}
					e.appendFails("Append with the replaced lease", cairn.ErrWriterLost, prev.Writer, cp("x", "", threadA), "")
				}
				if tokens[l.OwnerToken] {
					e.t.Errorf("owner token %q was issued twice", l.OwnerToken)
				}
				tokens[l.OwnerToken] = true
				if i%2 == 0 {
					e.clock.advance(leaseMillis)
				} else {
					e.clock.advance(leaseMillis + 1e6)
				}
				prev = l
			}
		}},
		{"Lease/ReleaseIdempotent", func(e *env) {
			l := e.mustAcquire(threadA)
			l.Release(e.ctx)
			l.Release(e.ctx)
			next := e.mustAcquire(threadA)
			l.Release(e.ctx)
			_, err := e.acquire(threadA)
			expectErr(e.t, "AcquireWriter after a third Release of the old lease", err, cairn.ErrWriterConflict)
			e.mustAppendWith(next.Writer, cp("1", "", threadA), "")
		}},
		{"Lease/ReleasedLeaseCannotReleaseReplacement", func(e *env) {
			old := e.mustAcquire(threadA)
			old.Release(e.ctx)
			next := e.mustAcquire(threadA)
			old.Release(e.ctx)
			_, err := e.acquire(threadA)
			expectErr(e.t, "AcquireWriter after the old lease's Release", err, cairn.ErrWriterConflict)
			e.mustAppendWith(next.Writer, cp("1", "", threadA), "")
			if _, err := next.Renew(e.ctx); err != nil {
				e.t.Errorf("Renew of the replacement: %v", err)
			}
		}},
		{"Lease/ReleaseChangesNoCheckpoints", func(e *env) {
			e.chain(threadA, "1", "2")
			l := e.lease(threadA)
			e.unchanged("Release", func() { l.Release(e.ctx) })
		}},
		{"Lease/ReleasedLeaseCannotWrite", func(e *env) {
			e.chain(threadA, "1")
			l := e.lease(threadA)
			l.Release(e.ctx)
			e.appendFails("Append after Release", cairn.ErrWriterLost, l.Writer, cp("2", "1", threadA), "1")
			e.deleteHeadFails("DeleteHead after Release", cairn.ErrWriterLost, l.Writer, threadA, "1")
			renewFails(e, "Renew after Release", l)
		}},
		{"Lease/ExpiredLeaseCannotBeRevived", func(e *env) {
			e.chain(threadA, "1")
			l := e.lease(threadA)
			e.clock.advance(leaseMillis + 1)
			renewFails(e, "Renew after expiry with no takeover", l)
			e.appendFails("Append after the failed Renew", cairn.ErrWriterLost, l.Writer, cp("2", "1", threadA), "1")
			renewFails(e, "second Renew after expiry", l)
			l.Release(e.ctx)
			e.mustAcquire(threadA)
		}},
		{"Lease/RenewKeepsLeaseAlive", func(e *env) {
			l := e.lease(threadA)
			original := l.ExpiresAt()
			e.clock.advance(cairn.Millis(renewAfter))
			exp, err := l.Renew(e.ctx)
			noErr(e.t, "Renew", err)
			if want := startTime + cairn.Millis(renewAfter) + leaseMillis; exp != want {
				e.t.Errorf("Renew = %v, want %v", exp, want)
			}
			if l.ExpiresAt() != exp {
				e.t.Errorf("ExpiresAt() = %v after Renew returned %v", l.ExpiresAt(), exp)
			}
			e.clock.set(original)
			_, err = e.acquire(threadA)
			expectErr(e.t, "AcquireWriter at the original expiry of a renewed lease", err, cairn.ErrWriterConflict)
			e.chain(threadA, "1")
			e.clock.set(exp - 1)
			exp2, err := l.Renew(e.ctx)
			noErr(e.t, "second Renew", err)
			if exp2 != exp-1+leaseMillis {
				e.t.Errorf("second Renew = %v, want %v", exp2, exp-1+leaseMillis)
			}
			e.clock.set(exp2)
			e.mustAcquire(threadA)
		}},
		{"Lease/RenewOfReplacedLeaseLeavesReplacement", func(e *env) {
			old := e.mustAcquire(threadA)
			e.clock.advance(leaseMillis + 1)
			next := e.mustAcquire(threadA)
			exp := next.ExpiresAt()
			e.clock.advance(1000)
			renewFails(e, "Renew of the replaced lease", old)
			e.clock.set(exp)
			replacement, err := e.acquire(threadA)
			noErr(e.t, "AcquireWriter at the replacement's expiry (a stale Renew must not extend it)", err)
			if err == nil && replacement.Fence <= next.Fence {
				e.t.Errorf("fence %d, want more than %d", replacement.Fence, next.Fence)
			}
		}},
		{"Lease/ConflictLeavesHolder", func(e *env) {
			l := e.lease(threadA)
			for i := range 3 {
				e.clock.advance(1000)
				_, err := e.acquire(threadA)
				expectErr(e.t, "contended AcquireWriter", err, cairn.ErrWriterConflict)
				e.chain(threadA, string(rune('1'+i)))
			}
			if _, err := l.Renew(e.ctx); err != nil {
				e.t.Errorf("Renew of the holder after conflicts: %v", err)
			}
			l.Release(e.ctx)
			next := e.mustAcquire(threadA)
			if next.Fence <= l.Fence {
				e.t.Errorf("fence after release %d, want more than %d", next.Fence, l.Fence)
			}
		}},
		{"Lease/IndependentThreads", func(e *env) {
			la := e.lease(threadA)
			e.clock.advance(1000)
			lb := e.lease(threadB)
			for _, th := range []string{threadA, threadB} {
				_, err := e.acquire(th)
				expectErr(e.t, "AcquireWriter("+th+")", err, cairn.ErrWriterConflict)
			}
			e.appendFails("thread-a's writer on thread-b", cairn.ErrWriterLost, la.Writer, cp("b1", "", threadB), "")
			spoof := cairn.Writer{ThreadID: threadB, OwnerToken: la.OwnerToken, Fence: la.Fence}
			e.appendFails("thread-a's token and fence on thread-b", cairn.ErrWriterLost, spoof, cp("b1", "", threadB), "")
			e.clock.advance(leaseMillis - 500) // thread-a's lease expired, thread-b's not
			e.mustAcquire(threadA)
			_, err := e.acquire(threadB)
			expectErr(e.t, "AcquireWriter(thread-b) while its lease lives", err, cairn.ErrWriterConflict)
			e.mustAppendWith(lb.Writer, cp("b1", "", threadB), "")
			lb.Release(e.ctx)
			e.mustAcquire(threadB)
		}},
		{"Lease/WriterIdentityByValue", func(e *env) {
			l := e.mustAcquire(threadA)
			same := cairn.Writer{ThreadID: strings.Clone(l.ThreadID), OwnerToken: strings.Clone(l.OwnerToken), Fence: l.Fence}
			e.mustAppendWith(same, cp("1", "", threadA), "")
			var viaJSON cairn.Writer
			b, err := json.Marshal(l.Writer)
			noErr(e.t, "json.Marshal(writer)", err)
			noErr(e.t, "json.Unmarshal(writer)", json.Unmarshal(b, &viaJSON))
			e.mustAppendWith(viaJSON, cp("2", "1", threadA), "1")
			for _, r := range []struct {
				name string
				w    cairn.Writer
			}{
				{"WrongToken", cairn.Writer{ThreadID: threadA, OwnerToken: l.OwnerToken + "x", Fence: l.Fence}},
				{"EmptyToken", cairn.Writer{ThreadID: threadA, OwnerToken: "", Fence: l.Fence}},
				{"OtherToken", cairn.Writer{ThreadID: threadA, OwnerToken: strings.ToUpper(l.OwnerToken) + "!", Fence: l.Fence}},
				{"HigherFence", cairn.Writer{ThreadID: threadA, OwnerToken: l.OwnerToken, Fence: l.Fence + 1}},
				{"LowerFence", cairn.Writer{ThreadID: threadA, OwnerToken: l.OwnerToken, Fence: l.Fence - 1}},
				{"ZeroFence", cairn.Writer{ThreadID: threadA, OwnerToken: l.OwnerToken, Fence: 0}},
			} {
				e.appendFails(r.name, cairn.ErrWriterLost, r.w, cp("3", "2", threadA), "2")
				e.deleteHeadFails(r.name, cairn.ErrWriterLost, r.w, threadA, "2")
			}
			e.clock.advance(leaseMillis)
			next := e.mustAcquire(threadA)
			mixed := []cairn.Writer{
				{ThreadID: threadA, OwnerToken: l.OwnerToken, Fence: next.Fence},
				{ThreadID: threadA, OwnerToken: next.OwnerToken, Fence: l.Fence},
			}
			for _, w := range mixed {
				e.appendFails("old and new lease fields mixed", cairn.ErrWriterLost, w, cp("3", "2", threadA), "2")
			}
			e.mustAppendWith(next.Writer, cp("3", "2", threadA), "2")
		}},
		{"Lease/ExpiredLeaseCanReleaseItsRecord", func(e *env) {
			l := e.mustAcquire(threadA)
			e.clock.advance(leaseMillis + 1)
			l.Release(e.ctx)
			next := e.mustAcquire(threadA)
			if next.Fence <= l.Fence {
				e.t.Errorf("fence %d, want more than %d", next.Fence, l.Fence)
			}
		}},
	}
}
