package conformance

import (
	"context"
	"errors"
	"reflect"
	"slices"

	"github.com/cairnstore/cairn"
)

// blobGCCases is the suite of the online sweep protocol, in the order it
// runs.
func blobGCCases() []storeCase {
	var cs []storeCase
	cs = append(cs, claimOrderCases()...)
	cs = append(cs, claimCases()...)
	cs = append(cs, waitCases()...)
	cs = append(cs, claimEndCases()...)
	cs = append(cs, recordCases()...)
	cs = append(cs, gcInputCases()...)
	cs = append(cs, readGCCases()...)
	cs = append(cs, gcConcurrencyCases()...)
	return cs
}

// claimOrderCases check the errors of ClaimBlobs in the contract's order:
// the writer's thread id (ErrInvalidID), the keys (ErrInvalidEntry), the
// lease (ErrWriterLost). A refused claim claims nothing: afterwards the keys
// are not claimed and MarkBlobs creates their records.
func claimOrderCases() []storeCase {
	const bad = "not-a-blob-key"
	k1, k2 := gcKey(1), gcKey(2)
	rows := []struct {
		name   string
		want   error
		writer writerKind
		keys   []string
	}{
		{"InvalidWriterThreadBeforeInvalidKey", cairn.ErrInvalidID, editedWriter(threadA, func(w *cairn.Writer) { w.ThreadID = invalidUTF8 }), []string{k1, bad}},
		{"EmptyWriterThreadBeforeInvalidKey", cairn.ErrInvalidID, editedWriter(threadA, func(w *cairn.Writer) { w.ThreadID = "" }), []string{bad}},
		{"InvalidWriterThread", cairn.ErrInvalidID, editedWriter(threadA, func(w *cairn.Writer) { w.ThreadID = invalidUTF8 }), []string{k1}},
		{"InvalidKeyBeforeExpiredWriter", cairn.ErrInvalidEntry, expiredWriter(threadA), []string{k1, bad}},
		{"InvalidKeyBeforeReleasedWriter", cairn.ErrInvalidEntry, releasedWriter(threadA), []string{bad, k1}},
		{"InvalidKeyBeforeTakenOverWriter", cairn.ErrInvalidEntry, takenOverWriter(threadA), []string{k1, k2, bad}},
		{"InvalidKeyBeforeWrongToken", cairn.ErrInvalidEntry, editedWriter(threadA, func(w *cairn.Writer) { w.OwnerToken += "x" }), []string{bad}},
		{"ExpiredWriter", cairn.ErrWriterLost, expiredWriter(threadA), []string{k1, k2}},
		{"WriterAtExpiry", cairn.ErrWriterLost, atExpiryWriter(threadA), []string{k1, k2}},
		{"ReleasedWriter", cairn.ErrWriterLost, releasedWriter(threadA), []string{k1, k2}},
		{"TakenOverWriter", cairn.ErrWriterLost, takenOverWriter(threadA), []string{k1, k2}},
		{"WrongToken", cairn.ErrWriterLost, editedWriter(threadA, func(w *cairn.Writer) { w.OwnerToken += "x" }), []string{k1}},
		{"WrongFence", cairn.ErrWriterLost, editedWriter(threadA, func(w *cairn.Writer) { w.Fence++ }), []string{k1}},
		{"OtherThreadsLease", cairn.ErrWriterLost, func(e *env) cairn.Writer {
			e.lease(threadA)
			w := e.writer(threadB)
			w.ThreadID = threadA
			return w
		}, []string{k1}},
		{"NeverIssuedWriter", cairn.ErrWriterLost, neverIssuedWriter(threadA), []string{k1, k2}},
	}
	var cs []storeCase
	for _, r := range rows {
		cs = append(cs, storeCase{"Claim/Order/" + r.name, func(e *env) {
			e.chain(threadA, "1")
			w := r.writer(e)
			e.gcFails("ClaimBlobs", r.want, func() error {
				busy, err := e.claimer().ClaimBlobs(e.ctx, w, r.keys)
				if err != nil && len(busy) != 0 {
					e.t.Errorf("ClaimBlobs returned busy keys %q together with its error", busy)
				}
				return err
			})
			var valid []string
			for _, k := range r.keys {
				if k != bad {
					valid = append(valid, k)
				}
			}
			e.expectClaimed()
			e.mustMark(sinceA, valid...)
		}})
	}
	return cs
}

// claimCases check what a claim does: it is live while its lease is current,
// it ends a candidacy, and it is refused for a key in GCDeleting.
func claimCases() []storeCase {
	k1, k2, k3, k4 := gcKey(1), gcKey(2), gcKey(3), gcKey(4)
	a1 := gcArtifactKey(1)
	return []storeCase{
		{"Claim/Live", func(e *env) {
			e.chain(threadA, "1")
			w := e.writer(threadA)
			e.unchanged("ClaimBlobs", func() { e.mustClaim(w, k2, a1, k1, k2, k1) })
			e.expectClaimed(a1, k1, k2)
			e.mustClaim(w, k1, k1)
			e.expectClaimed(a1, k1, k2)
			e.expectRecords()
			if got := e.mark(sinceA, a1, k1, k2, k3); !slices.Equal(recordKeys(got), []string{k3}) {
				e.t.Errorf("MarkBlobs of three claimed keys and one unclaimed created records %s, want one of %q only", showRecords(got), k3)
			}
			e.expectClaimed(a1, k1, k2)
		}},
		{"Claim/EndsCandidacy", func(e *env) {
			w := e.writer(threadA)
			recs := e.mustMark(sinceA, k1, k2)
			e.mustClaim(w, k1)
			e.expectClaimed(k1)
			e.expectRecords(recs[1])
			e.beginNone("BeginBlobDeletes of the record of a key claimed after its mark", recs[0])
			e.gcUnchanged("DropBlobRecords of that record", func() { e.drop(recs[0]) })
			e.gcUnchanged("EndBlobDeletes of that record", func() { e.end(true, recs[0]) })
			moved := e.begin(recs...)
			if !slices.Equal(recordKeys(moved), []string{k2}) {
				e.t.Errorf("BeginBlobDeletes of a claimed key's old record and an unclaimed candidate moved %s, want only %q", showRecords(moved), k2)
			}
		}},
		{"Claim/DeletingIsBusy", func(e *env) {
			w := e.writer(threadA)
			recs := e.mustMark(sinceA, k1, k2, k3)
			d := e.mustBegin(recs[0], recs[1])
			busy := e.claim(w, k3, k2, k4, k1, k2)
			if !slices.Equal(busy, []string{k1, k2}) {
				e.t.Errorf("ClaimBlobs of two keys in GCDeleting and two others returned busy %q, want %q", busy, []string{k1, k2})
			}
			e.expectClaimed(k3, k4)
			e.expectRecords(d...)
			e.end(true, d[0])
			e.expectRecords(d[1])
			if busy := e.claim(w, k1, k2); !slices.Equal(busy, []string{k2}) {
				e.t.Errorf("after the delete of %q ended, ClaimBlobs returned busy %q, want only %q", k1, busy, k2)
			}
			e.expectClaimed(k1, k3, k4)
			e.end(false, d[1])
			e.mustClaim(w, k2)
			e.expectClaimed(k1, k2, k3, k4)
			e.expectRecords()
		}},
		{"Claim/BusyClaimsNothing", func(e *env) {
			e.chain(threadA, "1")
			w := e.writer(threadA)
			d := e.mustBegin(e.markOne(sinceA, k1))
			e.gcUnchanged("ClaimBlobs of a key in GCDeleting", func() {
				if busy := e.claim(w, k1, k1); !slices.Equal(busy, []string{k1}) {
					e.t.Errorf("ClaimBlobs of a key in GCDeleting returned busy %q, want %q", busy, []string{k1})
				}
			})
			e.end(false, d[0])
			c, ok := e.recordOf(k1)
			if !ok {
				e.t.Fatalf("EndBlobDeletes(deleted=false) left no record of %q", k1)
			}
			// No claim of k1 is live, so nothing keeps the candidate from
			// the next delete.
			e.mustBegin(c)
		}},
	}
}

// waitCases check WaitBlobs: it returns at once when no key is in GCDeleting,
// waits while one is, returns when the delete is settled either way, and
// returns the context's error when the context ends first.
func waitCases() []storeCase {
	k1, k2, k3 := gcKey(1), gcKey(2), gcKey(3)
	return []storeCase{
		{"Wait/NothingDeleting", func(e *env) {
			w := e.writer(threadA)
			e.mustClaim(w, k3)
			recs := e.mustMark(sinceA, k1, k2)
			e.gcUnchanged("WaitBlobs", func() {
				e.waitNow(k1, k2, k3, gcKey(4))
				e.waitNow()
			})
			d := e.mustBegin(recs[0])
			e.waitNow(k2, k3)
			e.end(true, d...)
			e.waitNow(k1, k2)
			e.expectClaimed(k3)
		}},
		{"Wait/BlocksUntilDeleted", func(e *env) {
			d := e.mustBegin(e.mustMark(sinceA, k1, k2)...)
			e.waitProbed(k3, k1)
			e.waitProbed(k2)
			armed := make(chan struct{})
			var ws []*waiter
			for range 3 {
				ws = append(ws, e.startWait(e.ctx, armed, k1, k2, k3))
			}
			e.end(true, d[0])
			e.waitProbed(k2, k1)
			close(armed)
			e.end(true, d[1])
			for i, w := range ws {
				r, ok := w.result(e, "WaitBlobs on two deletes")
				switch {
				case !ok:
				case r.err != nil:
					e.t.Errorf("waiter %d: WaitBlobs returned %v once both deletes ended, want nil", i, r.err)
				case r.early:
					e.t.Errorf("waiter %d: WaitBlobs returned nil while a key was still in GCDeleting", i)
				}
			}
			e.expectRecords()
			e.expectClaimed()
		}},
		{"Wait/ReturnsAfterFailedDelete", func(e *env) {
			r := e.markOne(sinceA, k1)
			d := e.mustBegin(r)
			armed := make(chan struct{})
			w := e.startWait(e.ctx, armed, k1)
			e.waitProbed(k1)
			close(armed)
			e.end(false, d...)
			if res, ok := w.result(e, "WaitBlobs on a failed delete"); ok {
				if res.err != nil {
					e.t.Errorf("WaitBlobs returned %v once the delete failed, want nil", res.err)
				} else if res.early {
					e.t.Error("WaitBlobs returned nil while the key was still in GCDeleting")
				}
			}
			e.waitNow(k1)
			e.expectClaimed()
		}},
		{"Wait/ContextEnds", func(e *env) {
			d := e.mustBegin(e.markOne(sinceA, k1))
			ctx, cancel := context.WithCancel(e.ctx)
			never := make(chan struct{})
			w := e.startWait(ctx, never, k1)
			cancel()
			if r, ok := w.result(e, "WaitBlobs whose context was cancelled"); ok {
				expectErr(e.t, "WaitBlobs whose context was cancelled while it waited", r.err, context.Canceled)
			}
			e.waitProbed(k1)
			e.expectRecords(d...)
			e.expectClaimed()
		}},
	}
}

// claimEndCases check when claims end: with the lease's next successful
// Append, its Release, its expiry and its takeover, and not otherwise.
func claimEndCases() []storeCase {
	k1, k2, k3, k4 := gcKey(1), gcKey(2), gcKey(3), gcKey(4)
	a1 := gcArtifactKey(1)
	return []storeCase{
		{"ClaimsEnd/Append", func(e *env) {
			e.chain(threadA, "1")
			w := e.writer(threadA)
			e.mustClaim(w, k1, k2, a1)
			e.mustClaim(w, k1)
			e.expectClaimed(a1, k1, k2)
			c := withFiles(cp("2", "1", threadA), file("used", k1))
			c.Artifacts = []cairn.Artifact{artifact("art", a1)}
			e.mustAppend(c, "1")
			refs, view := e.readGC()
			if len(view.Claimed) != 0 {
				e.t.Errorf("after the lease's Append, Claimed = %q, want none", view.Claimed)
			}
			for _, k := range []string{k1, a1} {
				if i := slices.IndexFunc(refs, func(r cairn.BlobReference) bool { return r.Key == k }); i < 0 || refs[i].References != 1 {
					e.t.Errorf("after the Append that references %q, ReadBlobGC reported references %s, want one of it", k, showRefs(refs))
				}
			}
			e.mustMark(sinceA, k2)
			// Claims made after the Append last until the next one.
			e.mustClaim(w, k3)
			e.expectClaimed(k3)
			e.chain(threadA, "3")
			e.expectClaimed()
		}},
		{"ClaimsEnd/NotByOtherWrites", func(e *env) {
			e.chain(threadA, "1", "2")
			l := e.lease(threadA)
			w := l.Writer
			e.mustClaim(w, k1, k2)
			e.appendFails("Append on a stale head", cairn.ErrStaleHead, w, withFiles(cp("3", "1", threadA), file("f", k1)), "1")
			e.appendFails("Append of a taken id", cairn.ErrDuplicateID, w, withFiles(cp("1", "2", threadA), file("f", k1)), "2")
			e.appendFails("Append with a parent that is not the head", cairn.ErrParentMismatch, w, withFiles(cp("3", "1", threadA), file("f", k1)), "2")
			e.appendFails("Append of an invalid entry", cairn.ErrInvalidEntry, w, withFiles(cp("3", "2", threadA), file("/abs", k1)), "2")
			e.appendFails("Append with another thread's lease", cairn.ErrWriterLost, w, withFiles(cp("b1", "", threadB), file("f", k1)), "")
			e.expectClaimed(k1, k2)
			e.mustDeleteHead(threadA, "2")
			e.expectClaimed(k1, k2)
			if got := e.mark(sinceA, k1, k2); len(got) != 0 {
				e.t.Errorf("MarkBlobs of keys whose lease made only failed Appends and a DeleteHead created %s, want nothing", showRecords(got))
			}
		}},
		{"ClaimsEnd/Renew", func(e *env) {
			l := e.lease(threadA)
			e.mustClaim(l.Writer, k1)
			original := l.ExpiresAt()
			e.clock.advance(cairn.Millis(renewAfter))
			exp, err := l.Renew(e.ctx)
			noErr(e.t, "Renew", err)
			e.clock.set(original)
			e.expectClaimed(k1)
			if got := e.mark(sinceA, k1); len(got) != 0 {
				e.t.Errorf("MarkBlobs at the original expiry of a renewed lease created %s, want nothing", showRecords(got))
			}
			// Past the renewed expiry too: nobody took the lease over.
			e.clock.set(exp + leaseMillis)
			e.expectClaimed(k1)
		}},
		{"ClaimsEnd/Release", func(e *env) {
			e.chain(threadA, "1")
			l := e.lease(threadA)
			e.mustClaim(l.Writer, k1, a1)
			e.unchanged("Release", func() { l.Release(e.ctx) })
			delete(e.leases, threadA)
			e.expectClaimed()
			e.mustMark(sinceA, a1, k1)
			// A new lease does not inherit the claims.
			next := e.lease(threadA)
			e.mustClaim(next.Writer, k2)
			e.expectClaimed(k2)
		}},
		{"ClaimsKept/PastExpiry", func(e *env) {
			// No clock decides what a sweep may delete: a lease whose
			// stored expiry has passed by the store's clock, but whose
			// record nobody took over, released or ended, still protects
			// its claims, since its holder's clock may say otherwise and
			// its next append would be judged by that clock.
			l := e.lease(threadA)
			e.mustClaim(l.Writer, k1, k2)
			exp := l.ExpiresAt()
			for _, at := range []float64{exp - 0.5, exp, exp + 1, exp + 10*60_000} {
				e.clock.set(at)
				e.expectClaimed(k1, k2)
				if got := e.mark(sinceA, k1); len(got) != 0 {
					e.t.Errorf("MarkBlobs at %v ms past the expiry of a lease nobody took over created %s, want nothing", at-exp, showRecords(got))
				}
			}
			// The record's end is etcd state: a release ends the claims.
			e.unchanged("Release", func() { l.Release(e.ctx) })
			delete(e.leases, threadA)
			e.expectClaimed()
			e.mustMark(sinceA, k1, k2)
		}},
		{"ClaimsEnd/Takeover", func(e *env) {
			old := e.mustAcquire(threadA)
			e.mustClaim(old.Writer, k1, k2)
			e.clock.advance(leaseMillis + 1)
			next := e.mustAcquire(threadA)
			e.expectClaimed()
			e.mustClaim(next.Writer, k2, k3)
			e.expectClaimed(k2, k3)
			old.Release(e.ctx)
			e.expectClaimed(k2, k3)
			e.gcFails("ClaimBlobs with the replaced lease", cairn.ErrWriterLost, func() error {
				_, err := e.claimer().ClaimBlobs(e.ctx, old.Writer, []string{k1})
				return err
			})
			if got := e.mark(sinceA, k1, k2, k3); !slices.Equal(recordKeys(got), []string{k1}) {
				e.t.Errorf("MarkBlobs after the takeover created %s, want a record of %q only", showRecords(got), k1)
			}
		}},
		{"ClaimsEnd/LeasesIndependent", func(e *env) {
			la := e.lease(threadA)
			e.clock.advance(1000)
			lb := e.lease(threadB)
			e.mustClaim(la.Writer, k1, k3)
			e.mustClaim(lb.Writer, k2, k3)
			e.expectClaimed(k1, k2, k3)
			e.chain(threadA, "a1")
			e.expectClaimed(k2, k3)
			e.mustClaim(la.Writer, k4)
			e.clock.set(la.ExpiresAt())
			e.expectClaimed(k2, k3, k4)
			e.chain(threadB, "b1")
			e.expectClaimed(k4)
			e.mustMark(sinceA, k1, k2, k3)
			// A takeover of thread A ends la's claim.
			e.clock.advance(1)
			e.mustAcquire(threadA)
			e.expectClaimed()
			e.mustMark(sinceA, k4)
		}},
	}
}

// recordCases check the compare-and-swap transitions of GC records:
// MarkBlobs creates candidates, BeginBlobDeletes moves candidates of the same
// version to GCDeleting, EndBlobDeletes settles deletes of the same version,
// DropBlobRecords removes candidates of the same version. A record whose
// version or state differs is left alone, and versions are not reused.
func recordCases() []storeCase {
	k1, k2, k3, k9 := gcKey(1), gcKey(2), gcKey(3), gcKey(9)
	a1 := gcArtifactKey(1)
	return []storeCase{
		{"Mark/Records", func(e *env) {
			e.chain(threadA, "1")
			var recs []cairn.GCRecord
			e.unchanged("MarkBlobs", func() { recs = e.mark(sinceA, k3, a1, k1) })
			if got, want := recordKeys(recs), []string{a1, k1, k3}; !slices.Equal(got, want) {
				e.t.Fatalf("MarkBlobs created records of %q, want %q", got, want)
			}
			e.expectRecords(recs...)
			e.expectClaimed()
		}},
		{"Mark/KeepsExistingRecord", func(e *env) {
			r1 := e.markOne(sinceA, k1)
			if got := e.mark(sinceB, k2, k1); !slices.Equal(recordKeys(got), []string{k2}) {
				e.t.Errorf("MarkBlobs of a candidate and a new key created %s, want a record of %q only", showRecords(got), k2)
			}
			e.expectRecord(r1)
			d := e.mustBegin(r1)
			if got := e.mark(sinceC, k1); len(got) != 0 {
				e.t.Errorf("MarkBlobs of a key in GCDeleting created %s, want nothing", showRecords(got))
			}
			e.expectRecord(d[0])
			e.end(false, d...)
			c, _ := e.recordOf(k1)
			if got := e.mark(sinceC, k1); len(got) != 0 {
				e.t.Errorf("MarkBlobs of a candidate back from a failed delete created %s, want nothing", showRecords(got))
			}
			e.expectRecord(c)
		}},
		{"Begin/MovesCandidates", func(e *env) {
			e.chain(threadA, "1")
			recs := e.mustMark(sinceA, a1, k1, k2)
			var moved []cairn.GCRecord
			e.unchanged("BeginBlobDeletes", func() { moved = e.mustBegin(recs[2], recs[0]) })
			e.expectRecords(moved[0], recs[1], moved[1])
			e.expectClaimed()
		}},
		{"Begin/StaleVersion", func(e *env) {
			r := e.markOne(sinceA, k1)
			for _, v := range []int64{r.Version - 1, r.Version + 1, r.Version + 1000} {
				e.beginNone("BeginBlobDeletes with another version", withVersion(r, v))
			}
			e.beginNone("BeginBlobDeletes of a key without a record", cairn.GCRecord{Key: k9, State: cairn.GCCandidate, Since: sinceA, Version: r.Version})
			e.mustBegin(r)
		}},
		{"Begin/WrongState", func(e *env) {
			r := e.markOne(sinceA, k1)
			d := e.mustBegin(r)[0]
			e.beginNone("BeginBlobDeletes of a record in GCDeleting", d)
			e.beginNone("BeginBlobDeletes with the candidate's old version", r)
			e.expectRecord(d)
		}},
		{"End/Deleted", func(e *env) {
			e.chain(threadA, "1")
			d := e.mustBegin(e.mustMark(sinceA, k1, k2)...)
			e.unchanged("EndBlobDeletes", func() { e.end(true, d[0]) })
			e.expectRecords(d[1])
			e.waitNow(k1)
			r := e.markOne(sinceB, k1)
			e.expectRecords(r, d[1])
		}},
		{"End/NotDeleted", func(e *env) {
			r := e.markOne(sinceA, k1)
			d := e.mustBegin(r)[0]
			e.end(false, d)
			c, ok := e.recordOf(k1)
			switch {
			case !ok:
				e.t.Fatalf("EndBlobDeletes(deleted=false) removed the record of %q", k1)
			case c.State != cairn.GCCandidate:
				e.t.Errorf("EndBlobDeletes(deleted=false) left %s, want a GCCandidate", showRecord(c))
			case c.Since != sinceA:
				e.t.Errorf("EndBlobDeletes(deleted=false) left %s, want the since %v of the first mark", showRecord(c), sinceA)
			case c.Version == d.Version || c.Version == r.Version:
				e.t.Errorf("EndBlobDeletes(deleted=false) left %s, want a version new since %s and %s", showRecord(c), showRecord(r), showRecord(d))
			}
			e.beginNone("BeginBlobDeletes with the version of the first candidacy", r)
			e.beginNone("BeginBlobDeletes with the version of the failed delete", d)
			e.mustBegin(c)
		}},
		{"End/StaleVersionOrState", func(e *env) {
			r := e.markOne(sinceA, k1)
			d := e.mustBegin(e.markOne(sinceA, k2))[0]
			for _, deleted := range []bool{true, false} {
				e.gcUnchanged("EndBlobDeletes with another version", func() {
					e.end(deleted, withVersion(d, d.Version-1), withVersion(d, d.Version+1))
				})
				e.gcUnchanged("EndBlobDeletes of a candidate", func() { e.end(deleted, r) })
				e.gcUnchanged("EndBlobDeletes of a key without a record", func() {
					e.end(deleted, cairn.GCRecord{Key: k9, State: cairn.GCDeleting, Since: sinceA, Version: d.Version})
				})
			}
			e.expectRecords(r, d)
		}},
		{"Drop/Candidates", func(e *env) {
			e.chain(threadA, "1")
			recs := e.mustMark(sinceA, k1, k2, k3)
			e.unchanged("DropBlobRecords", func() { e.drop(recs[0], recs[2]) })
			e.expectRecords(recs[1])
			e.markOne(sinceB, k1)
		}},
		{"Drop/StaleOrDeleting", func(e *env) {
			r := e.markOne(sinceA, k1)
			r2 := e.markOne(sinceA, k2)
			d := e.mustBegin(r2)[0]
			e.gcUnchanged("DropBlobRecords with another version", func() {
				e.drop(withVersion(r, r.Version-1), withVersion(r, r.Version+1))
			})
			e.gcUnchanged("DropBlobRecords of a record in GCDeleting", func() { e.drop(d) })
			e.gcUnchanged("DropBlobRecords with the version of the candidate before its delete began", func() { e.drop(r2) })
			e.gcUnchanged("DropBlobRecords of a key without a record", func() {
				e.drop(cairn.GCRecord{Key: k9, State: cairn.GCCandidate, Since: sinceA, Version: r.Version})
			})
			e.end(false, d)
			c, _ := e.recordOf(k2)
			e.gcUnchanged("DropBlobRecords with the version of the failed delete", func() { e.drop(d) })
			e.drop(c, r)
			e.expectRecords()
		}},
		{"Version/NotReusedAfterRemoval", func(e *env) {
			w := e.writer(threadA)
			seen := map[int64]string{}
			see := func(what string, r cairn.GCRecord) {
				e.t.Helper()
				if prev, ok := seen[r.Version]; ok {
					e.t.Errorf("%s: the record %s has the version of %s, an earlier record of the key", what, showRecord(r), prev)
				}
				seen[r.Version] = what
			}
			r1 := e.markOne(sinceA, k1)
			see("first mark", r1)
			e.mustClaim(w, k1)
			e.dropLease(threadA)
			r2 := e.markOne(sinceB, k1)
			see("mark after a claim ended the first", r2)
			e.beginNone("BeginBlobDeletes with the version of the record the claim ended", r1)
			e.gcUnchanged("DropBlobRecords with the version of the record the claim ended", func() { e.drop(r1) })
			d2 := e.mustBegin(r2)[0]
			see("delete of the second mark", d2)
			e.end(true, d2)
			r3 := e.markOne(sinceC, k1)
			see("mark after the delete ended", r3)
			e.gcUnchanged("EndBlobDeletes with the version of the ended delete", func() {
				e.end(true, d2)
				e.end(false, d2)
			})
			e.beginNone("BeginBlobDeletes with earlier versions", r1)
			e.beginNone("BeginBlobDeletes with earlier versions", r2)
			e.drop(r3)
			r4 := e.markOne(sinceA, k1)
			see("mark after a drop", r4)
			e.beginNone("BeginBlobDeletes with the version of the dropped record", r3)
			e.expectRecord(r4)
		}},
	}
}

// gcInputCases check that every method rejects a key that is not a blob key
// with ErrInvalidEntry and changes nothing, accepts empty input, and returns
// the context's error as it is.
func gcInputCases() []storeCase {
	k1, k2, k3, k4, k5 := gcKey(1), gcKey(2), gcKey(3), gcKey(4), gcKey(5)
	// setup leaves a candidate of k1, k2 in GCDeleting and a claim of k3.
	setup := func(e *env) (w cairn.Writer, cand, del cairn.GCRecord) {
		e.chain(threadA, "1")
		w = e.writer(threadA)
		cand = e.markOne(sinceA, k1)
		del = e.mustBegin(e.markOne(sinceA, k2))[0]
		e.mustClaim(w, k3)
		return w, cand, del
	}
	return []storeCase{
		{"InvalidKeys", func(e *env) {
			w, cand, del := setup(e)
			for _, bad := range badBlobKeys {
				badRec := func(r cairn.GCRecord) cairn.GCRecord {
					r.Key = bad
					return r
				}
				e.row(rowName(bad), func(e *env) {
					ops := []struct {
						name string
						op   func() error
					}{
						{"ClaimBlobs, invalid key last", func() error {
							_, err := e.claimer().ClaimBlobs(e.ctx, w, []string{k4, k1, bad})
							return err
						}},
						{"ClaimBlobs, invalid key first", func() error {
							_, err := e.claimer().ClaimBlobs(e.ctx, w, []string{bad, k4})
							return err
						}},
						{"WaitBlobs", func() error {
							ctx, cancel := context.WithTimeout(e.ctx, conflictBound)
							defer cancel()
							return e.claimer().WaitBlobs(ctx, []string{k2, bad})
						}},
						{"MarkBlobs", func() error {
							recs, err := e.collector().MarkBlobs(e.ctx, []string{k5, bad}, sinceB)
							if err != nil && len(recs) != 0 {
								e.t.Errorf("MarkBlobs returned records %s together with its error", showRecords(recs))
							}
							return err
						}},
						{"BeginBlobDeletes", func() error {
							moved, err := e.collector().BeginBlobDeletes(e.ctx, []cairn.GCRecord{cand, badRec(cand)})
							if err != nil && len(moved) != 0 {
								e.t.Errorf("BeginBlobDeletes returned records %s together with its error", showRecords(moved))
							}
							return err
						}},
						{"EndBlobDeletes, deleted", func() error {
							return e.collector().EndBlobDeletes(e.ctx, []cairn.GCRecord{del, badRec(del)}, true)
						}},
						{"EndBlobDeletes, not deleted", func() error {
							return e.collector().EndBlobDeletes(e.ctx, []cairn.GCRecord{del, badRec(del)}, false)
						}},
						{"DropBlobRecords", func() error {
							return e.collector().DropBlobRecords(e.ctx, []cairn.GCRecord{badRec(cand), cand})
						}},
					}
					// One comparison for all the calls keeps the case to a
					// few hundred calls of the store.
					before := e.gcState()
					for _, o := range ops {
						expectErr(e.t, o.name, o.op(), cairn.ErrInvalidEntry)
					}
					e.expectGCState("the calls with an invalid key", before, e.gcState())
				})
			}
			e.expectRecords(cand, del)
			e.expectClaimed(k3)
		}},
		{"EmptyInput", func(e *env) {
			w, _, _ := setup(e)
			e.gcUnchanged("calls with no keys or records", func() {
				for _, keys := range [][]string{nil, {}} {
					e.mustClaim(w, keys...)
					e.waitNow(keys...)
					if got := e.mark(sinceB, keys...); len(got) != 0 {
						e.t.Errorf("MarkBlobs of no keys created %s", showRecords(got))
					}
				}
				for _, recs := range [][]cairn.GCRecord{nil, {}} {
					if got := e.begin(recs...); len(got) != 0 {
						e.t.Errorf("BeginBlobDeletes of no records moved %s", showRecords(got))
					}
					e.end(true, recs...)
					e.end(false, recs...)
					e.drop(recs...)
				}
			})
		}},
		{"Context/Canceled", func(e *env) {
			w, cand, del := setup(e)
			ctx, cancel := context.WithCancel(e.ctx)
			cancel()
			ops := []struct {
				name string
				op   func() error
			}{
				{"ReadBlobGC", func() error {
					_, err := e.collector().ReadBlobGC(ctx, func(cairn.BlobReference) error { return nil })
					return err
				}},
				{"ClaimBlobs", func() error { _, err := e.claimer().ClaimBlobs(ctx, w, []string{k1, k4}); return err }},
				{"WaitBlobs", func() error { return e.claimer().WaitBlobs(ctx, []string{k2}) }},
				{"MarkBlobs", func() error { _, err := e.collector().MarkBlobs(ctx, []string{k5}, sinceB); return err }},
				{"BeginBlobDeletes", func() error {
					_, err := e.collector().BeginBlobDeletes(ctx, []cairn.GCRecord{cand})
					return err
				}},
				{"EndBlobDeletes", func() error { return e.collector().EndBlobDeletes(ctx, []cairn.GCRecord{del}, true) }},
				{"DropBlobRecords", func() error { return e.collector().DropBlobRecords(ctx, []cairn.GCRecord{cand}) }},
			}
			for _, o := range ops {
				e.gcFails(o.name+" with a cancelled context", context.Canceled, o.op)
			}
		}},
	}
}

// readGCCases check ReadBlobGC: the references of ListBlobReferences, and
// references, claims and records of one point in time.
func readGCCases() []storeCase {
	k1, k2 := gcKey(1), gcKey(2)
	same := func(e *env) {
		e.t.Helper()
		got, _ := e.readGC()
		want := e.refs()
		if len(got) == 0 && len(want) == 0 {
			return
		}
		if !reflect.DeepEqual(got, want) {
			e.t.Errorf("ReadBlobGC reported references %s, ListBlobReferences %s", showRefs(got), showRefs(want))
		}
	}
	return []storeCase{
		{"Read/Empty", func(e *env) {
			refs, v := e.readGC()
			if len(refs) != 0 || len(v.Claimed) != 0 || len(v.Records) != 0 {
				e.t.Errorf("ReadBlobGC on an empty store: references %s, claimed %q, records %s; want none", showRefs(refs), v.Claimed, showRecords(v.Records))
			}
		}},
		{"Read/ReferencesMatchList", func(e *env) {
			c := withFiles(cp("1", "", threadA), file("a", fileKey(1)), file("b", fileKey(2)), file("c", fileKey(1)))
			c.Artifacts = []cairn.Artifact{artifact("x", artifactKey(1))}
			e.mustAppend(c, "")
			same(e)
			e.chain(threadA, "2", "3")
			e.chain(threadB, "b4")
			e.mustClaim(e.writer(threadC), k1, fileKey(2))
			e.mustMark(sinceA, k2, gcKey(3))
			same(e)
			e.mustDeleteHead(threadA, "3")
			same(e)
		}},
		{"Read/StopsAtFirstError", func(e *env) {
			e.chain(threadA, "1", "2", "3")
			stop := errors.New("stop here")
			calls := 0
			_, err := e.collector().ReadBlobGC(e.ctx, func(cairn.BlobReference) error {
				calls++
				if calls == 2 {
					return stop
				}
				return nil
			})
			if !errors.Is(err, stop) {
				e.t.Errorf("ReadBlobGC returned %v, want the callback's error", err)
			}
			if calls != 2 {
				e.t.Errorf("the callback ran %d times, want 2", calls)
			}
		}},
		{"Read/OnePointInTime", func(e *env) {
			e.chain(threadA, "1", "2")
			wc := e.writer(threadC)
			e.writer(threadB)
			before := e.refs()
			last := gcKey(0xfff) // sorts after every key referenced so far
			calls := 0
			var refs []cairn.BlobReference
			view, err := e.collector().ReadBlobGC(e.ctx, func(r cairn.BlobReference) error {
				calls++
				if !cairn.IsObjectKey(r.Key) {
					refs = append(refs, r)
				}
				if calls == 1 {
					// Every write below comes after the point in time of
					// the read, which preceded the first call.
					e.mustClaim(wc, k1)
					e.markOne(sinceA, k2)
					e.mustAppend(withFiles(cp("b1", "", threadB), file("late", last)), "")
					e.mustDeleteHead(threadA, "2")
				}
				return nil
			})
			noErr(e.t, "ReadBlobGC", err)
			if !reflect.DeepEqual(refs, before) {
				e.t.Errorf("ReadBlobGC reported references %s, want %s as they were when it began", showRefs(refs), showRefs(before))
			}
			if view.IsClaimed(k1) {
				e.t.Errorf("ReadBlobGC reported the claim of %q made after its point in time", k1)
			}
			if r, ok := view.Record(k2); ok {
				e.t.Errorf("ReadBlobGC reported the record %s made after its point in time", showRecord(r))
			}
			e.expectClaimed(k1)
			e.expectNoRecord(k1)
			if _, ok := e.recordOf(k2); !ok {
				e.t.Errorf("the record of %q made during ReadBlobGC is missing from the next read", k2)
			}
			same(e)
		}},
	}
}

// gcConcurrencyCases check that a claim and a sweep's move cannot both win.
func gcConcurrencyCases() []storeCase {
	return []storeCase{
		{"Concurrency/ClaimOrDelete", func(e *env) {
			w := e.writer(threadA)
			for round := range 3 {
				keys := make([]string, concurrency)
				for i := range keys {
					keys[i] = gcKey(100*(round+1) + i)
				}
				recs := e.mustMark(sinceA, keys...)
				var moved []cairn.GCRecord
				busy := make([][]string, concurrency)
				errs := race(concurrency+1, func(i int) error {
					if i == concurrency {
						m, err := e.collector().BeginBlobDeletes(e.ctx, recs)
						moved = m
						return err
					}
					b, err := e.claimer().ClaimBlobs(e.ctx, w, []string{keys[i]})
					busy[i] = b
					return err
				})
				for i, err := range errs {
					if err != nil {
						e.t.Fatalf("racing call %d: %v", i, err)
					}
				}
				view := e.gcView()
				for i, k := range keys {
					isMoved := slices.Contains(recordKeys(moved), k)
					isBusy := slices.Equal(busy[i], []string{k})
					rec, hasRec := view.Record(k)
					switch {
					case isMoved && !isBusy:
						e.t.Errorf("round %d: BeginBlobDeletes moved %q and a racing ClaimBlobs claimed it: both won", round, k)
					case !isMoved && isBusy:
						e.t.Errorf("round %d: ClaimBlobs reported %q busy but BeginBlobDeletes did not move it", round, k)
					case isMoved && (!hasRec || rec.State != cairn.GCDeleting || view.IsClaimed(k)):
						e.t.Errorf("round %d: %q was moved to GCDeleting; now its record is %s (present %v) and claimed %v", round, k, showRecord(rec), hasRec, view.IsClaimed(k))
					case !isMoved && (hasRec || !view.IsClaimed(k)):
						e.t.Errorf("round %d: %q was claimed; now it has a record %v and claimed %v", round, k, hasRec, view.IsClaimed(k))
					}
				}
			}
		}},
		{"Concurrency/ClaimAndMark", func(e *env) {
			w := e.writer(threadA)
			keys := make([]string, concurrency)
			for i := range keys {
				keys[i] = gcKey(100 + i)
			}
			errs := race(concurrency+1, func(i int) error {
				if i == concurrency {
					_, err := e.collector().MarkBlobs(e.ctx, keys, sinceA)
					return err
				}
				busy, err := e.claimer().ClaimBlobs(e.ctx, w, []string{keys[i]})
				if err == nil && len(busy) != 0 {
					e.t.Errorf("ClaimBlobs(%q) racing MarkBlobs reported busy %q", keys[i], busy)
				}
				return err
			})
			for i, err := range errs {
				if err != nil {
					e.t.Fatalf("racing call %d: %v", i, err)
				}
			}
			// Whichever came first, a claimed key has no record: MarkBlobs
			// skips a claimed key and a claim ends a candidacy.
			e.expectClaimed(keys...)
			e.expectRecords()
		}},
	}
}
