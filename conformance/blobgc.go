package conformance

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/cairnstore/cairn"
)

// The online sweep protocol: helpers over cairn.BlobClaimer and
// cairn.BlobCollector.

const (
	// waitProbe is the deadline of a WaitBlobs that must still be waiting
	// when it passes: it shows that WaitBlobs waits, without a sleep.
	waitProbe = 50 * time.Millisecond
	// settleBound is how long a WaitBlobs may take to return once the delete
	// it waits for was settled.
	settleBound = 10 * time.Second
)

// Sweep times of the cases (GCRecord.Since), in milliseconds. They are
// unrelated to the store's clock, as a sweeper's clock is.
const (
	sinceA = 1_000.5
	sinceB = 2_000.25
	sinceC = 3_000.125
)

// gcKey is the i-th file blob key of the sweep cases, gcArtifactKey the i-th
// artifact blob key. Artifact keys sort before file keys.
func gcKey(i int) string         { return fileKey(0xc1a100 + i) }
func gcArtifactKey(i int) string { return artifactKey(0xc1a100 + i) }

// badBlobKeys are strings that are not blob keys, one way each.
var badBlobKeys = []string{
	"",
	"not-a-blob-key",
	cairn.FileBlobPrefix + strings.Repeat("a", 63),
	cairn.FileBlobPrefix + strings.Repeat("A", 64),
	cairn.FileBlobPrefix + invalidUTF8 + strings.Repeat("a", 61),
	fileKey(1) + "/",
	strings.ToUpper(cairn.ArtifactBlobPrefix) + strings.Repeat("a", 64),
}

func (e *env) claimer() cairn.BlobClaimer     { return e.s.(cairn.BlobClaimer) }
func (e *env) collector() cairn.BlobCollector { return e.s.(cairn.BlobCollector) }

// claim claims keys for w and returns the busy keys, after checking that they
// are sorted, distinct and among keys.
func (e *env) claim(w cairn.Writer, keys ...string) []string {
	e.t.Helper()
	busy, err := e.claimer().ClaimBlobs(e.ctx, w, keys)
	if err != nil {
		e.t.Fatalf("ClaimBlobs(%q): %v", keys, err)
	}
	if !sortedDistinct(busy) {
		e.t.Errorf("ClaimBlobs(%q) returned busy keys %q, want them sorted and distinct", keys, busy)
	}
	for _, k := range busy {
		if !slices.Contains(keys, k) {
			e.t.Errorf("ClaimBlobs(%q) returned the busy key %q, which it was not given", keys, k)
		}
	}
	return busy
}

// mustClaim claims keys for w, none of which may be busy.
func (e *env) mustClaim(w cairn.Writer, keys ...string) {
	e.t.Helper()
	if busy := e.claim(w, keys...); len(busy) != 0 {
		e.t.Errorf("ClaimBlobs(%q) reported busy keys %q, want none", keys, busy)
	}
}

// readGC calls ReadBlobGC and returns the references it reported and the
// view, after checking the view's form.
func (e *env) readGC() ([]cairn.BlobReference, cairn.BlobGCView) {
	e.t.Helper()
	var refs []cairn.BlobReference
	view, err := e.collector().ReadBlobGC(e.ctx, func(r cairn.BlobReference) error {
		if !cairn.IsObjectKey(r.Key) {
			refs = append(refs, r)
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("ReadBlobGC: %v", err)
	}
	e.checkView(view)
	return refs, withoutObjects(view)
}

// withoutObjects returns v without the claims and records of a store's own
// body objects (cairn.IsObjectKey), which a store that keeps them reports
// beside the blob keys; the cases here are about blob keys.
func withoutObjects(v cairn.BlobGCView) cairn.BlobGCView {
	var out cairn.BlobGCView
	for _, k := range v.Claimed {
		if !cairn.IsObjectKey(k) {
			out.Claimed = append(out.Claimed, k)
		}
	}
	for _, r := range v.Records {
		if !cairn.IsObjectKey(r.Key) {
			out.Records = append(out.Records, r)
		}
	}
	return out
}

// checkView checks what the contract says of every view: claims sorted and
// distinct, records sorted by key, one a key, in a known state.
func (e *env) checkView(v cairn.BlobGCView) {
	e.t.Helper()
	if !sortedDistinct(v.Claimed) {
		e.t.Errorf("ReadBlobGC: Claimed %q is not sorted and distinct", v.Claimed)
	}
	for i, r := range v.Records {
		if i > 0 && v.Records[i-1].Key >= r.Key {
			e.t.Errorf("ReadBlobGC: records %s are not sorted by key, one a key", showRecords(v.Records))
			break
		}
	}
	for _, r := range v.Records {
		if r.State != cairn.GCCandidate && r.State != cairn.GCDeleting {
			e.t.Errorf("ReadBlobGC: record %s has an unknown state", showRecord(r))
		}
	}
}

// gcView returns the view of ReadBlobGC.
func (e *env) gcView() cairn.BlobGCView {
	e.t.Helper()
	_, v := e.readGC()
	return v
}

// recordOf returns the GC record of key, if any.
func (e *env) recordOf(key string) (cairn.GCRecord, bool) {
	e.t.Helper()
	v := e.gcView()
	return v.Record(key)
}

// expectClaimed checks that the keys with a live claim are exactly want.
func (e *env) expectClaimed(want ...string) {
	e.t.Helper()
	want = cairn.SortedKeys(want)
	got := e.gcView().Claimed
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		e.t.Errorf("ReadBlobGC: Claimed = %q, want %q", got, want)
	}
}

// expectRecords checks that the GC records are exactly want.
func (e *env) expectRecords(want ...cairn.GCRecord) {
	e.t.Helper()
	want = slices.Clone(want)
	slices.SortFunc(want, func(a, b cairn.GCRecord) int { return strings.Compare(a.Key, b.Key) })
	got := e.gcView().Records
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		e.t.Errorf("ReadBlobGC: Records = %s, want %s", showRecords(got), showRecords(want))
	}
}

// expectRecord checks that the record of want.Key is want.
func (e *env) expectRecord(want cairn.GCRecord) {
	e.t.Helper()
	v := e.gcView()
	got, ok := v.Record(want.Key)
	switch {
	case !ok:
		e.t.Errorf("ReadBlobGC has no record of %q, want %s", want.Key, showRecord(want))
	case got != want:
		e.t.Errorf("ReadBlobGC: the record of %q is %s, want %s", want.Key, showRecord(got), showRecord(want))
	}
}

// expectNoRecord checks that no key of keys has a GC record.
func (e *env) expectNoRecord(keys ...string) {
	e.t.Helper()
	v := e.gcView()
	for _, k := range keys {
		if r, ok := v.Record(k); ok {
			e.t.Errorf("ReadBlobGC: %q has the record %s, want none", k, showRecord(r))
		}
	}
}

// mark calls MarkBlobs and checks the form of the records it created: sorted
// by key, among keys, candidates with the given since.
func (e *env) mark(since float64, keys ...string) []cairn.GCRecord {
	e.t.Helper()
	recs, err := e.collector().MarkBlobs(e.ctx, keys, since)
	if err != nil {
		e.t.Fatalf("MarkBlobs(%q): %v", keys, err)
	}
	for i, r := range recs {
		if i > 0 && recs[i-1].Key >= r.Key {
			e.t.Errorf("MarkBlobs(%q) returned %s, not sorted by key, one a key", keys, showRecords(recs))
			break
		}
	}
	for _, r := range recs {
		if !slices.Contains(keys, r.Key) || r.State != cairn.GCCandidate || r.Since != since {
			e.t.Errorf("MarkBlobs(%q, since %v) returned the record %s, want a candidate of one of the keys with that since", keys, since, showRecord(r))
		}
	}
	return recs
}

// mustMark marks keys, each of which must get a record, and returns the
// records sorted by key.
func (e *env) mustMark(since float64, keys ...string) []cairn.GCRecord {
	e.t.Helper()
	recs := e.mark(since, keys...)
	if got, want := recordKeys(recs), cairn.SortedKeys(keys); !slices.Equal(got, want) {
		e.t.Fatalf("MarkBlobs(%q) created records of %q, want one of each key", keys, got)
	}
	return recs
}

// markOne marks key, which must get a record, and returns it.
func (e *env) markOne(since float64, key string) cairn.GCRecord {
	e.t.Helper()
	return e.mustMark(since, key)[0]
}

// begin calls BeginBlobDeletes and checks the form of the records it moved:
// sorted by key, each one of recs moved to GCDeleting with its Since and a
// new version.
func (e *env) begin(recs ...cairn.GCRecord) []cairn.GCRecord {
	e.t.Helper()
	moved, err := e.collector().BeginBlobDeletes(e.ctx, recs)
	if err != nil {
		e.t.Fatalf("BeginBlobDeletes(%s): %v", showRecords(recs), err)
	}
	for i, m := range moved {
		if i > 0 && moved[i-1].Key >= m.Key {
			e.t.Errorf("BeginBlobDeletes(%s) returned %s, not sorted by key, one a key", showRecords(recs), showRecords(moved))
			break
		}
	}
	for _, m := range moved {
		i := slices.IndexFunc(recs, func(r cairn.GCRecord) bool { return r.Key == m.Key })
		switch {
		case i < 0:
			e.t.Errorf("BeginBlobDeletes(%s) moved %s, which it was not given", showRecords(recs), showRecord(m))
		case m.State != cairn.GCDeleting || m.Since != recs[i].Since || m.Version == recs[i].Version:
			e.t.Errorf("BeginBlobDeletes moved %s to %s, want GCDeleting with the same since and a new version", showRecord(recs[i]), showRecord(m))
		}
	}
	return moved
}

// mustBegin moves recs, all of which must move, to GCDeleting and returns the
// moved records sorted by key.
func (e *env) mustBegin(recs ...cairn.GCRecord) []cairn.GCRecord {
	e.t.Helper()
	moved := e.begin(recs...)
	want := recordKeys(recs)
	slices.Sort(want)
	if got := recordKeys(moved); !slices.Equal(got, want) {
		e.t.Fatalf("BeginBlobDeletes(%s) moved %q, want every key", showRecords(recs), got)
	}
	return moved
}

// beginNone calls BeginBlobDeletes, which must move nothing and change
// nothing.
func (e *env) beginNone(what string, recs ...cairn.GCRecord) {
	e.t.Helper()
	e.gcUnchanged(what, func() {
		if moved := e.begin(recs...); len(moved) != 0 {
			e.t.Errorf("%s: BeginBlobDeletes(%s) moved %s, want nothing", what, showRecords(recs), showRecords(moved))
		}
	})
}

func (e *env) end(deleted bool, recs ...cairn.GCRecord) {
	e.t.Helper()
	if err := e.collector().EndBlobDeletes(e.ctx, recs, deleted); err != nil {
		e.t.Fatalf("EndBlobDeletes(%s, deleted %v): %v", showRecords(recs), deleted, err)
	}
}

func (e *env) drop(recs ...cairn.GCRecord) {
	e.t.Helper()
	if err := e.collector().DropBlobRecords(e.ctx, recs); err != nil {
		e.t.Fatalf("DropBlobRecords(%s): %v", showRecords(recs), err)
	}
}

// waitNow calls WaitBlobs, which must return nil without waiting for any
// sweep.
func (e *env) waitNow(keys ...string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, conflictBound)
	defer cancel()
	if err := e.claimer().WaitBlobs(ctx, keys); err != nil {
		e.t.Errorf("WaitBlobs(%q) with no key in GCDeleting: %v, want nil at once", keys, err)
	}
}

// waitProbed calls WaitBlobs with a deadline of waitProbe; it must wait for
// the deadline and return its error, since a key is in GCDeleting.
func (e *env) waitProbed(keys ...string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, waitProbe)
	defer cancel()
	err := e.claimer().WaitBlobs(ctx, keys)
	expectErr(e.t, fmt.Sprintf("WaitBlobs(%q) while a key is in GCDeleting, with a deadline", keys), err, context.DeadlineExceeded)
}

// waiter is a WaitBlobs running in a goroutine.
type waiter struct {
	done chan waitResult
	stop context.CancelFunc
}

type waitResult struct {
	err   error
	early bool // it returned before armed was closed
}

// startWait runs WaitBlobs(keys) in a goroutine. The waiter notes whether it
// returned before armed was closed: the caller closes armed just before the
// write that lets WaitBlobs return, so a WaitBlobs that returns nil early is
// caught without any timing.
func (e *env) startWait(ctx context.Context, armed <-chan struct{}, keys ...string) *waiter {
	ctx, stop := context.WithCancel(ctx)
	w := &waiter{done: make(chan waitResult, 1), stop: stop}
	go func() {
		err := e.claimer().WaitBlobs(ctx, keys)
		early := true
		select {
		case <-armed:
			early = false
		default:
		}
		w.done <- waitResult{err, early}
	}()
	e.t.Cleanup(stop)
	return w
}

// result waits up to settleBound for the waiter to return.
func (w *waiter) result(e *env, what string) (waitResult, bool) {
	e.t.Helper()
	timer := time.NewTimer(settleBound)
	defer timer.Stop()
	select {
	case r := <-w.done:
		return r, true
	case <-timer.C:
		e.t.Errorf("%s: WaitBlobs had not returned %v after the write that should end it", what, settleBound)
	case <-e.ctx.Done():
		e.t.Errorf("%s: WaitBlobs had not returned when the case's context ended", what)
	}
	w.stop()
	return waitResult{}, false
}

// gcState is what a call that changes nothing must leave as it was: the
// checkpoint state, the live claims and the GC records.
type gcState struct {
	st      state
	claimed []string
	records []cairn.GCRecord
}

func (e *env) gcState() gcState {
	e.t.Helper()
	v := e.gcView()
	g := gcState{st: e.state(), claimed: v.Claimed, records: v.Records}
	if len(g.claimed) == 0 {
		g.claimed = nil
	}
	if len(g.records) == 0 {
		g.records = nil
	}
	return g
}

func (e *env) expectGCState(what string, before, after gcState) {
	e.t.Helper()
	e.expectState(what, before.st, after.st)
	if !slices.Equal(before.claimed, after.claimed) {
		e.t.Errorf("%s: the live claims changed from %q to %q", what, before.claimed, after.claimed)
	}
	if !reflect.DeepEqual(before.records, after.records) {
		e.t.Errorf("%s: the GC records changed from %s to %s", what, showRecords(before.records), showRecords(after.records))
	}
}

// gcFails runs op, which must fail with want and change nothing, claims and
// GC records included.
func (e *env) gcFails(what string, want error, op func() error) {
	e.t.Helper()
	before := e.gcState()
	err := op()
	expectErr(e.t, what, err, want)
	e.expectGCState(what, before, e.gcState())
}

// gcUnchanged runs op, which must change nothing, claims and GC records
// included.
func (e *env) gcUnchanged(what string, op func()) {
	e.t.Helper()
	before := e.gcState()
	op()
	e.expectGCState(what, before, e.gcState())
}

// withVersion returns r with another version.
func withVersion(r cairn.GCRecord, v int64) cairn.GCRecord {
	r.Version = v
	return r
}

func recordKeys(recs []cairn.GCRecord) []string {
	keys := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = r.Key
	}
	return keys
}

func sortedDistinct(keys []string) bool {
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			return false
		}
	}
	return true
}

func showRecord(r cairn.GCRecord) string {
	return fmt.Sprintf("{%s %s since %v version %d}", r.Key, r.State, r.Since, r.Version)
}

func showRecords(rs []cairn.GCRecord) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = showRecord(r)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// atExpiryWriter is thread's cached lease with the clock at its expiry.
func atExpiryWriter(thread string) writerKind {
	return func(e *env) cairn.Writer {
		l := e.lease(thread)
		e.clock.set(l.ExpiresAt())
		return l.Writer
	}
}
