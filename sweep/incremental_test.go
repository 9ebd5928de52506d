package sweep_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/sweep"
)

// memorySource is a sweep.Incremental over a store without a mirror: each
// ReadGC walks the references and makes every key whose count fell to zero
// since the last one a candidate, as a mirror following the store would. It
// lets the incremental run be tested on the memory store.
type memorySource struct {
	col      cairn.BlobCollector
	rev      int64
	counts   map[string]int
	cands    map[string]int64 // candidate -> revision that saw it
	listed   int64
	complete bool
	settles  int
}

var _ sweep.Incremental = (*memorySource)(nil)

func newMemorySource(col cairn.BlobCollector) *memorySource {
	return &memorySource{col: col, counts: map[string]int{}, cands: map[string]int64{}}
}

func (m *memorySource) Sync(ctx context.Context) (int64, error) {
	_, rev, err := m.ReadGC(ctx)
	return rev, err
}

func (m *memorySource) ReadGC(ctx context.Context) (cairn.BlobGCView, int64, error) {
	now := map[string]int{}
	view, err := m.col.ReadBlobGC(ctx, func(r cairn.BlobReference) error {
		now[r.Key] = r.References
		return nil
	})
	if err != nil {
		return view, 0, err
	}
	m.rev++
	for k := range m.counts {
		if now[k] == 0 {
			m.cands[k] = m.rev
		}
	}
	m.counts = now
	return view, m.rev, nil
}

func (m *memorySource) Count(key string) int { return m.counts[key] }

func (m *memorySource) Candidates() []string {
	var out []string
	for k := range m.cands {
		if m.counts[k] == 0 {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func (m *memorySource) Complete() bool { return m.complete }

func (m *memorySource) Settle(keys []string, rev int64) error {
	m.settles++
	for _, k := range keys {
		if at, ok := m.cands[k]; ok && at <= rev {
			delete(m.cands, k)
		}
	}
	return nil
}

func (m *memorySource) Listed(rev int64) error {
	m.listed, m.complete = rev, true
	return nil
}

// TestIncrementalRun: the run without a listing on the memory store, step by
// step: what it lists, HEADs, marks, drops, deletes and settles.
func TestIncrementalRun(t *testing.T) {
	const hour = time.Hour
	a, b, c := fileKey("a"), fileKey("b"), artifactKey("c")
	outside := "elsewhere/" + fileKey("x")
	setup := func(t *testing.T) (*onlineWorld, *memorySource) {
		t.Helper()
		w := newOnlineWorld(t)
		if err := bucket.BindStore(t.Context(), w.store, w.blobs.Memory); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{a, b, c} {
			w.put(t, k, 48*hour)
		}
		w.reference(t, "t", a, b, c)
		src := newMemorySource(w.store)
		return w, src
	}
	sweepWith := func(t *testing.T, w *onlineWorld, src *memorySource, opts sweep.Options) sweep.Report {
		t.Helper()
		opts.Now, opts.Incremental = w.clock.Now, src
		rep, err := sweep.Sweep(t.Context(), w.store, w.blobs, opts)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}

	t.Run("ListsUntilComplete", func(t *testing.T) {
		w, src := setup(t)
		rep := sweepWith(t, w, src, sweep.Options{OlderThan: hour})
		if rep.Incremental || rep.ListRequests == 0 || src.listed == 0 {
			t.Fatalf("first run: incremental %v, %d LIST, listed at %d; want a listing recorded", rep.Incremental, rep.ListRequests, src.listed)
		}
		rep = sweepWith(t, w, src, sweep.Options{OlderThan: hour})
		if !rep.Incremental || rep.ListRequests != 0 {
			t.Fatalf("second run: incremental %v, %d LIST", rep.Incremental, rep.ListRequests)
		}
		rep = sweepWith(t, w, src, sweep.Options{OlderThan: hour, List: true})
		if rep.Incremental || rep.ListRequests == 0 {
			t.Fatalf("a run with List: incremental %v, %d LIST", rep.Incremental, rep.ListRequests)
		}
	})

	t.Run("NothingChangedSendsNothing", func(t *testing.T) {
		w, src := setup(t)
		sweepWith(t, w, src, sweep.Options{OlderThan: hour})
		n := len(w.blobs.ev.all())
		rep := sweepWith(t, w, src, sweep.Options{OlderThan: hour})
		if got := w.blobs.ev.all()[n:]; !rep.Incremental || len(got) != 0 || rep.HeadRequests != 0 {
			t.Fatalf("incremental %v; bucket calls %v, %d HEAD", rep.Incremental, got, rep.HeadRequests)
		}
	})

	t.Run("MarkThenDeleteAfterGrace", func(t *testing.T) {
		w, src := setup(t)
		sweepWith(t, w, src, sweep.Options{OlderThan: hour})
		w.unreference(t, "t")
		rep := sweepWith(t, w, src, sweep.Options{OlderThan: hour})
		if !rep.Incremental || rep.Marked != 3 || len(rep.Deleted) != 0 || rep.HeadRequests != 0 {
			t.Fatalf("run after the fall: incremental %v, marked %d, deleted %v, %d HEAD; want 3 marked without a HEAD", rep.Incremental, rep.Marked, rep.Deleted, rep.HeadRequests)
		}
		if len(src.Candidates()) != 0 {
			t.Fatalf("the marked keys were not settled: %v", src.Candidates())
		}
		w.clock.Advance(2 * hour)
		rep = sweepWith(t, w, src, sweep.Options{OlderThan: hour})
		if want := []string{a, b, c}; !slices.Equal(rep.Deleted, sortedCopy(want)) || rep.HeadRequests != 3 || rep.BytesFreed != int64(len(a)+len(b)+len(c)) {
			t.Fatalf("run after the grace: deleted %v, %d HEAD, %d bytes; want the three keys, one HEAD each, their sizes", rep.Deleted, rep.HeadRequests, rep.BytesFreed)
		}
	})

	t.Run("HeadDecides", func(t *testing.T) {
		// After the marks: a is deleted by someone else (absent: its
		// record is dropped), b is uploaded again (young: it waits), c
		// goes.
		w, src := setup(t)
		sweepWith(t, w, src, sweep.Options{OlderThan: hour})
		w.unreference(t, "t")
		sweepWith(t, w, src, sweep.Options{OlderThan: hour})
		w.clock.Advance(2 * hour)
		if _, err := w.blobs.Memory.Delete(t.Context(), []string{a}); err != nil {
			t.Fatal(err)
		}
		w.put(t, b, 0)
		rep := sweepWith(t, w, src, sweep.Options{OlderThan: hour})
		if !slices.Equal(rep.Deleted, []string{c}) || rep.Dropped != 1 || rep.Young != 1 || rep.Waiting != 1 {
			t.Fatalf("deleted %v, dropped %d, young %d, waiting %d; want c deleted, a's record dropped, b waiting", rep.Deleted, rep.Dropped, rep.Young, rep.Waiting)
		}
		recs := w.records(t)
		if _, ok := recs[a]; ok {
			t.Errorf("the absent key's record stays: %+v", recs[a])
		}
		if _, ok := recs[b]; !ok {
			t.Errorf("the young key lost its record")
		}
	})

	t.Run("ClaimedAndOutsideKept", func(t *testing.T) {
		// b is claimed when the run reads; the source also names keys
		// outside the swept prefixes and a key under sandbox-meta/ that is
		// not an object's: none of those is touched.
		w, src := setup(t)
		sweepWith(t, w, src, sweep.Options{OlderThan: 0})
		foreign := []string{outside, sweep.MetaPrefix + "not-an-object"}
		for _, k := range foreign {
			w.put(t, k, 48*hour)
		}
		w.claim(t, "other", b)
		w.unreference(t, "t")
		if _, err := src.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, k := range foreign {
			src.cands[k] = src.rev
		}
		rep := sweepWith(t, w, src, sweep.Options{OlderThan: 0})
		if !rep.Incremental || !slices.Equal(rep.Deleted, sortedCopy([]string{a, c})) || rep.Claimed != 1 || rep.HeadRequests != 2 {
			t.Fatalf("incremental %v, deleted %v, claimed %d, %d HEAD; want a and c deleted with a HEAD each, b claimed", rep.Incremental, rep.Deleted, rep.Claimed, rep.HeadRequests)
		}
		for _, k := range append([]string{b}, foreign...) {
			if _, err := w.blobs.Memory.Head(t.Context(), k); err != nil {
				t.Errorf("%s: %v", k, err)
			}
		}
		// The claim ends: the key is garbage again, and goes.
		w.release("other")
		if _, err := src.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
		src.cands[b] = src.rev // what a mirror records for an ended claim
		rep = sweepWith(t, w, src, sweep.Options{OlderThan: 0})
		if !slices.Equal(rep.Deleted, []string{b}) {
			t.Fatalf("after the claim ended: deleted %v, want b", rep.Deleted)
		}
	})

	t.Run("DryRunIsExact", func(t *testing.T) {
		w, src := setup(t)
		sweepWith(t, w, src, sweep.Options{OlderThan: 0})
		w.unreference(t, "t")
		settles := src.settles
		plan := sweepWith(t, w, src, sweep.Options{OlderThan: 0, DryRun: true})
		if src.settles != settles || len(src.Candidates()) != 3 {
			t.Fatalf("the dry run settled: %d settles, %d candidates left", src.settles-settles, len(src.Candidates()))
		}
		rep := sweepWith(t, w, src, sweep.Options{OlderThan: 0})
		if !plan.Incremental || !slices.Equal(plan.Deleted, rep.Deleted) || plan.BytesFreed != rep.BytesFreed || len(rep.Deleted) != 3 {
			t.Fatalf("dry run %v (%d bytes), real run %v (%d bytes)", plan.Deleted, plan.BytesFreed, rep.Deleted, rep.BytesFreed)
		}
	})

	t.Run("OthersList", func(t *testing.T) {
		// A sweep of several stores lists: the source knows one store's
		// keys only.
		w, src := setup(t)
		src.complete = true
		other, err := cairn.NewMemoryStore(cairn.Options{Now: w.clock.Millis})
		if err != nil {
			t.Fatal(err)
		}
		if err := bucket.BindStore(t.Context(), other, w.blobs.Memory); err != nil {
			t.Fatal(err)
		}
		rep := sweepWith(t, w, src, sweep.Options{OlderThan: hour, Others: []sweep.Other{{Store: other}}})
		if rep.Incremental || rep.ListRequests == 0 {
			t.Fatalf("incremental %v, %d LIST; want a listing", rep.Incremental, rep.ListRequests)
		}
	})
}

func sortedCopy(ks []string) []string {
	out := slices.Clone(ks)
	slices.Sort(out)
	return out
}

func fileKey(s string) string     { return bucket.FileBlob([]byte(s)).Key }
func artifactKey(s string) string { return bucket.ArtifactBlob([]byte(s)).Key }
