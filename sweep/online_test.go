package sweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/sweep"
)

// clock is a test clock shared by a sweep, a memory bucket and a store.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(at time.Time) *clock { return &clock{t: at} }

// Now returns the clock's time, for sweep.Options.Now and bucket.NewMemory.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Millis returns the clock's time in milliseconds since the Unix epoch, for
// cairn.Options.Now.
func (c *clock) Millis() float64 { return float64(c.Now().UnixMicro()) / 1000 }

// Advance moves the clock forward by d.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to at.
func (c *clock) Set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = at
}

// millisTime returns the time of ms milliseconds since the Unix epoch.
func millisTime(ms float64) time.Time { return time.UnixMicro(int64(ms * 1000)).UTC() }

// onlineWorld is a memory store and a memory bucket (behind fakeBlobs) on one
// clock: the setting of the online sweep's tests.
type onlineWorld struct {
	clock *clock
	store *cairn.MemoryStore
	blobs *fakeBlobs
	// uploadAge and undated set the upload time of the next put.
	uploadAge time.Duration
	undated   bool
	leases    map[string]*cairn.Lease
	n         int
}

func newOnlineWorld(t *testing.T) *onlineWorld {
	t.Helper()
	w := &onlineWorld{clock: newClock(now), leases: map[string]*cairn.Lease{}}
	w.blobs = &fakeBlobs{Memory: bucket.NewMemory(func() time.Time {
		if w.undated {
			return time.Time{}
		}
		return w.clock.Now().Add(-w.uploadAge)
	}), ev: &events{}}
	store, err := cairn.NewMemoryStore(cairn.Options{Now: w.clock.Millis})
	if err != nil {
		t.Fatal(err)
	}
	w.store = store
	t.Cleanup(func() {
		for _, l := range w.leases {
			l.Release(context.Background())
		}
	})
	return w
}

// put stores key, uploaded age before the clock's time; a negative age
// stands for no upload time. It replaces an object already there.
func (w *onlineWorld) put(t *testing.T, key string, age time.Duration) {
	t.Helper()
	w.uploadAge, w.undated = age, age < 0
	defer func() { w.uploadAge, w.undated = 0, false }()
	if err := w.blobs.Put(t.Context(), key, []byte(key)); err != nil {
		t.Fatal(err)
	}
}

// reference appends to thread a checkpoint that references keys.
func (w *onlineWorld) reference(t *testing.T, thread string, keys ...string) {
	t.Helper()
	ctx := t.Context()
	lease, err := w.store.AcquireWriter(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	head, err := w.store.GetHead(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	w.n++
	cp := cairn.Checkpoint{ID: fmt.Sprintf("%s-%d", thread, w.n), ThreadID: thread, ParentCheckpointID: head,
		CreatedAt: float64(w.n), Reason: cairn.ReasonAutomatic, Conversation: json.RawMessage(`[]`)}
	for i, k := range keys {
		if cairn.IsArtifactBlobKey(k) {
			cp.Artifacts = append(cp.Artifacts, cairn.Artifact{ArtifactID: fmt.Sprint("a", i), Name: "a", MimeType: "text/plain", Size: 1, BlobKey: k})
		} else {
			cp.Files = append(cp.Files, cairn.Entry{Path: fmt.Sprintf("f%d", i), Kind: cairn.KindFile, BlobKey: k, Size: 1})
		}
	}
	if _, err := w.store.Append(ctx, cairn.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: lease.Writer}); err != nil {
		t.Fatal(err)
	}
}

// unreference removes the head of thread.
func (w *onlineWorld) unreference(t *testing.T, thread string) {
	t.Helper()
	ctx := t.Context()
	lease, err := w.store.AcquireWriter(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	head, err := w.store.GetHead(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.store.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: thread, CheckpointID: head, Writer: lease.Writer}); err != nil {
		t.Fatal(err)
	}
}

// claim takes the writer lease of thread, unless the world holds it, and
// claims keys under it; it returns the busy keys. The lease stays held until
// release.
func (w *onlineWorld) claim(t *testing.T, thread string, keys ...string) []string {
	t.Helper()
	lease := w.leases[thread]
	if lease == nil {
		var err error
		if lease, err = w.store.AcquireWriter(t.Context(), thread); err != nil {
			t.Fatal(err)
		}
		w.leases[thread] = lease
	}
	busy, err := w.store.ClaimBlobs(t.Context(), lease.Writer, keys)
	if err != nil {
		t.Fatalf("ClaimBlobs(%v): %v", keys, err)
	}
	return busy
}

// release releases the lease of thread that claim took.
func (w *onlineWorld) release(thread string) {
	if l := w.leases[thread]; l != nil {
		l.Release(context.Background())
		delete(w.leases, thread)
	}
}

// records returns the store's GC records by key.
func (w *onlineWorld) records(t *testing.T) map[string]cairn.GCRecord {
	t.Helper()
	out := map[string]cairn.GCRecord{}
	for _, r := range gcRecords(t, w.store) {
		out[r.Key] = r
	}
	return out
}

// onlineRun is one sweep of a scenario.
type onlineRun struct {
	// advance moves the clock before the run, and before before.
	advance time.Duration
	// before changes the world before the run.
	before func(t *testing.T, w *onlineWorld)
	// opts returns the run's options; nil is OlderThan of an hour. The world
	// sets Now.
	opts func(t *testing.T, w *onlineWorld) sweep.Options
	want onlineWant
	// check checks more, given the records before the run.
	check func(t *testing.T, w *onlineWorld, before map[string]cairn.GCRecord, rep sweep.Report)
}

// onlineWant is what a run reports and leaves behind.
type onlineWant struct {
	deleted, failed, pending, skipped, aborted                      []string
	young, referenced, claimed, marked, waiting, dropped, unsettled int
	// candidates and deleting are the keys with a record in that state after
	// the run.
	candidates, deleting []string
	errs                 []error
}

// TestOnlineSweep runs scenarios of several sweeps on a memory store, which
// takes the online path, with the clock moving between them.
func TestOnlineSweep(t *testing.T) {
	const hour = time.Hour
	hookErr := errors.New("lock lost")
	a, b, c, y, u, r := fk("a"), fk("b"), ak("c"), fk("young"), ak("undated"), fk("referenced")
	five := sorted(fk("0"), ak("1"), fk("2"), ak("3"), fk("4"))
	four := five[:4]
	abc := sorted(a, b, c)
	putAll := func(keys []string, age time.Duration) func(*testing.T, *onlineWorld) {
		return func(t *testing.T, w *onlineWorld) {
			for _, k := range keys {
				w.put(t, k, age)
			}
		}
	}
	// sinceKept checks that the records of keys kept their Since and got a new version.
	sinceKept := func(keys ...string) func(*testing.T, *onlineWorld, map[string]cairn.GCRecord, sweep.Report) {
		return func(t *testing.T, w *onlineWorld, before map[string]cairn.GCRecord, _ sweep.Report) {
			after := w.records(t)
			for _, k := range keys {
				if after[k].Since != before[k].Since || after[k].Version == before[k].Version {
					t.Errorf("record of %s = %+v, was %+v; want the same Since and a new version", k, after[k], before[k])
				}
			}
		}
	}
	// unchangedRecords checks that the records of keys are those before the run.
	unchangedRecords := func(keys ...string) func(*testing.T, *onlineWorld, map[string]cairn.GCRecord, sweep.Report) {
		return func(t *testing.T, w *onlineWorld, before map[string]cairn.GCRecord, _ sweep.Report) {
			after := w.records(t)
			for _, k := range keys {
				if after[k] != before[k] {
					t.Errorf("record of %s = %+v; want it unchanged, %+v", k, after[k], before[k])
				}
			}
		}
	}
	// candidatesAtEachBatch makes BeforeDelete check that every key of its
	// batch is still a candidate, and return err on the batch numbered
	// failOn (1-based; 0 never).
	candidatesAtEachBatch := func(failOn int, err error) func(*testing.T, *onlineWorld) sweep.Options {
		return func(t *testing.T, w *onlineWorld) sweep.Options {
			n := 0
			return sweep.Options{OlderThan: hour, BatchSize: 2, BeforeDelete: func(_ context.Context, batch []string) error {
				recs := w.records(t)
				for _, k := range batch {
					if recs[k].State != cairn.GCCandidate {
						t.Errorf("BeforeDelete: record of %s is %+v; want a candidate", k, recs[k])
					}
				}
				if n++; n == failOn {
					return err
				}
				return nil
			}}
		}
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, w *onlineWorld)
		runs  []onlineRun
	}{
		{
			name:  "GraceRunsFromTheMark",
			setup: putAll([]string{a}, 3*hour),
			runs: []onlineRun{
				{want: onlineWant{marked: 1, candidates: []string{a}},
					check: func(t *testing.T, w *onlineWorld, _ map[string]cairn.GCRecord, rep sweep.Report) {
						if got := w.records(t)[a].Since; got != float64(now.UnixMilli()) {
							t.Errorf("Since = %v; want the run's now, %v", got, now.UnixMilli())
						}
					}},
				{advance: 59 * time.Minute, want: onlineWant{waiting: 1, candidates: []string{a}}},
				{advance: time.Minute, want: onlineWant{deleted: []string{a}}},
			},
		},
		{
			name: "YoungByUploadKept",
			setup: func(t *testing.T, w *onlineWorld) {
				w.put(t, y, 10*time.Minute)
				w.put(t, u, -1)
			},
			runs: []onlineRun{
				// Young keys are marked: their grace runs while they age.
				{want: onlineWant{young: 2, marked: 2, candidates: sorted(y, u)}},
				{advance: hour, want: onlineWant{young: 1, waiting: 1, deleted: []string{y}, candidates: []string{u}}},
				// A key without an upload time is never old enough.
				{advance: 100 * hour, want: onlineWant{young: 1, waiting: 1, candidates: []string{u}}},
			},
		},
		{
			name:  "UploadRefreshedAfterTheMark",
			setup: putAll([]string{a}, 3*hour),
			runs: []onlineRun{
				{want: onlineWant{marked: 1, candidates: []string{a}}},
				{advance: 61 * time.Minute, before: func(t *testing.T, w *onlineWorld) { w.put(t, a, 30*time.Minute) },
					want: onlineWant{young: 1, waiting: 1, candidates: []string{a}}},
				{advance: 31 * time.Minute, want: onlineWant{deleted: []string{a}}},
			},
		},
		{
			name: "ReferencedKeysRecordsDropped",
			setup: func(t *testing.T, w *onlineWorld) {
				w.put(t, a, 3*hour)
				w.put(t, r, 3*hour)
				w.put(t, y, time.Minute)
				w.reference(t, "keep", r, y)
			},
			runs: []onlineRun{
				// The young referenced key counts as young, not referenced.
				{want: onlineWant{young: 1, referenced: 1, marked: 1, candidates: []string{a}}},
				{advance: 2 * hour, before: func(t *testing.T, w *onlineWorld) { w.reference(t, "user", a) },
					want: onlineWant{referenced: 3, dropped: 1}},
				// Unreferenced again: the grace starts over.
				{before: func(t *testing.T, w *onlineWorld) { w.unreference(t, "user") },
					want: onlineWant{referenced: 2, marked: 1, candidates: []string{a}}},
				{advance: 59 * time.Minute, want: onlineWant{referenced: 2, waiting: 1, candidates: []string{a}}},
				{advance: time.Minute, want: onlineWant{referenced: 2, deleted: []string{a}}},
			},
		},
		{
			name:  "ClaimedKeysNotMarked",
			setup: putAll([]string{a, b}, 3*hour),
			runs: []onlineRun{
				{before: func(t *testing.T, w *onlineWorld) { w.claim(t, "w1", a) },
					want: onlineWant{claimed: 1, marked: 1, candidates: []string{b}}},
				// w1's lease has expired by every clock, but nobody took it
				// over, so its claim still protects a; a claim of b ends
				// b's candidacy.
				{advance: 2 * hour, before: func(t *testing.T, w *onlineWorld) { w.claim(t, "w2", b) },
					want: onlineWant{claimed: 2}},
				// Released, w2's claim is over; w1's holds.
				{advance: 2 * hour, before: func(t *testing.T, w *onlineWorld) { w.release("w2") },
					want: onlineWant{claimed: 1, marked: 1, candidates: []string{b}}},
				{advance: 2 * hour, before: func(t *testing.T, w *onlineWorld) { w.release("w1") },
					want: onlineWant{marked: 1, deleted: []string{b}, candidates: []string{a}}},
			},
		},
		{
			name: "OlderThanZeroMarksAndDeletesInOneRun",
			setup: func(t *testing.T, w *onlineWorld) {
				w.put(t, a, time.Second)
				w.put(t, b, 0)
			},
			runs: []onlineRun{
				{opts: func(*testing.T, *onlineWorld) sweep.Options { return sweep.Options{} },
					want: onlineWant{young: 1, marked: 2, deleted: []string{a}, candidates: []string{b}}},
				{advance: time.Millisecond, opts: func(*testing.T, *onlineWorld) sweep.Options { return sweep.Options{} },
					want: onlineWant{deleted: []string{b}}},
			},
		},
		{
			name:  "MaxDeletesSkipsTheRest",
			setup: putAll(five, 3*hour),
			runs: []onlineRun{
				{want: onlineWant{marked: 5, candidates: five}},
				{advance: 2 * hour, opts: func(*testing.T, *onlineWorld) sweep.Options { return sweep.Options{OlderThan: hour, MaxDeletes: 2} },
					want: onlineWant{deleted: five[:2], skipped: five[2:], candidates: five[2:]}},
				{opts: func(*testing.T, *onlineWorld) sweep.Options { return sweep.Options{OlderThan: hour, MaxDeletes: 2} },
					want: onlineWant{deleted: five[2:4], skipped: five[4:], candidates: five[4:]}},
			},
		},
		{
			// A key an earlier run left deleting goes before the candidates
			// when MaxDeletes cuts: writers wait for it until a run settles
			// it, whatever its place in key order.
			name:  "MaxDeletesSettlesUnsettledKeysFirst",
			setup: putAll(four[3:], 3*hour),
			runs: []onlineRun{
				{want: onlineWant{marked: 1, candidates: four[3:]}},
				{advance: 2 * hour, before: func(_ *testing.T, w *onlineWorld) { w.blobs.requestFailsOn = len(w.blobs.deletes) + 1 },
					want: onlineWant{pending: four[3:], deleting: four[3:], errs: []error{sweep.ErrStopped, errInjected}}},
				{before: putAll(four[:3], 3*hour),
					opts: func(*testing.T, *onlineWorld) sweep.Options {
						return sweep.Options{OlderThan: hour, BeforeDelete: func(context.Context, []string) error { return hookErr }}
					},
					want: onlineWant{marked: 3, unsettled: 1, pending: four[3:], deleting: four[3:], candidates: four[:3], errs: []error{sweep.ErrStopped, hookErr}}},
				{advance: 2 * hour, opts: func(*testing.T, *onlineWorld) sweep.Options { return sweep.Options{OlderThan: hour, MaxDeletes: 1} },
					want: onlineWant{unsettled: 1, deleted: four[3:], skipped: four[:3], candidates: four[:3]}},
				{opts: func(*testing.T, *onlineWorld) sweep.Options { return sweep.Options{OlderThan: hour, MaxDeletes: 2} },
					want: onlineWant{deleted: four[:2], skipped: four[2:3], candidates: four[2:3]}},
			},
		},
		{
			name:  "BeforeDeleteVetoesTheFirstBatch",
			setup: putAll(four, 3*hour),
			runs: []onlineRun{
				{want: onlineWant{marked: 4, candidates: four}},
				{advance: 2 * hour, opts: candidatesAtEachBatch(1, hookErr),
					want:  onlineWant{pending: four, candidates: four, errs: []error{sweep.ErrStopped, hookErr}},
					check: unchangedRecords(four...)},
				{want: onlineWant{deleted: four}},
			},
		},
		{
			name:  "BeforeDeleteVetoesTheSecondBatch",
			setup: putAll(four, 3*hour),
			runs: []onlineRun{
				{want: onlineWant{marked: 4, candidates: four}},
				{advance: 2 * hour, opts: candidatesAtEachBatch(2, hookErr),
					want:  onlineWant{deleted: four[:2], pending: four[2:], candidates: four[2:], errs: []error{sweep.ErrStopped, hookErr}},
					check: unchangedRecords(four[2:]...)},
				{want: onlineWant{deleted: four[2:]}},
			},
		},
		{
			name:  "PerKeyFailureReturnsToCandidate",
			setup: putAll([]string{a, b}, 3*hour),
			runs: []onlineRun{
				{want: onlineWant{marked: 2, candidates: sorted(a, b)}},
				{advance: 2 * hour, before: func(_ *testing.T, w *onlineWorld) { w.blobs.keyFailures = map[string]error{b: bucket.ErrAccessDenied} },
					want:  onlineWant{deleted: []string{a}, failed: []string{b}, candidates: []string{b}, errs: []error{sweep.ErrIncomplete}},
					check: sinceKept(b)},
				// Its grace has passed already: the next run deletes it.
				{before: func(_ *testing.T, w *onlineWorld) { w.blobs.keyFailures = nil },
					want: onlineWant{deleted: []string{b}}},
			},
		},
		{
			name:  "RequestFailureLeavesDeleting",
			setup: putAll(abc, 3*hour),
			runs: []onlineRun{
				{want: onlineWant{marked: 3, candidates: abc}},
				// The first batch's request fails: its keys stay deleting, the
				// second batch is never sent and stays a candidate.
				{advance: 2 * hour, before: func(_ *testing.T, w *onlineWorld) { w.blobs.requestFailsOn = len(w.blobs.deletes) + 1 },
					opts: func(*testing.T, *onlineWorld) sweep.Options { return sweep.Options{OlderThan: hour, BatchSize: 2} },
					want: onlineWant{pending: abc, deleting: abc[:2], candidates: abc[2:], errs: []error{sweep.ErrStopped, errInjected}},
					check: func(t *testing.T, w *onlineWorld, _ map[string]cairn.GCRecord, _ sweep.Report) {
						if busy := w.claim(t, "writer", abc[0]); !slices.Equal(busy, abc[:1]) {
							t.Errorf("a claim of a key in deleting found busy %v; want %v", busy, abc[:1])
						}
						ctx, cancel := context.WithCancel(t.Context())
						cancel()
						if err := w.store.WaitBlobs(ctx, abc[:1]); !errors.Is(err, context.Canceled) {
							t.Errorf("WaitBlobs on a key in deleting = %v; want it to wait until ctx ends", err)
						}
					}},
				{want: onlineWant{unsettled: 2, deleted: abc},
					check: func(t *testing.T, w *onlineWorld, _ map[string]cairn.GCRecord, _ sweep.Report) {
						if err := w.store.WaitBlobs(t.Context(), abc[:1]); err != nil {
							t.Errorf("WaitBlobs after the settling run: %v", err)
						}
						if busy := w.claim(t, "writer", abc[0]); busy != nil {
							t.Errorf("a claim after the settling run found busy %v; want none", busy)
						}
					}},
			},
		},
		{
			name:  "RecordsOfKeysGoneFromTheBucketDropped",
			setup: putAll([]string{a, b}, 3*hour),
			runs: []onlineRun{
				{want: onlineWant{marked: 2, candidates: sorted(a, b)}},
				{advance: 30 * time.Minute, before: func(t *testing.T, w *onlineWorld) {
					if _, err := w.blobs.Memory.Delete(t.Context(), []string{a}); err != nil {
						t.Fatal(err)
					}
				}, want: onlineWant{dropped: 1, waiting: 1, candidates: []string{b}}},
			},
		},
		{
			name:  "ClaimAfterTheReadAborts",
			setup: putAll([]string{a, b}, 3*hour),
			runs: []onlineRun{
				{want: onlineWant{marked: 2, candidates: sorted(a, b)}},
				{advance: 2 * hour, opts: func(t *testing.T, w *onlineWorld) sweep.Options {
					return sweep.WithHooks(sweep.Options{OlderThan: hour}, sweep.Hooks{
						AfterRead: func(context.Context, cairn.BlobGCView) { w.claim(t, "writer", a) },
					})
				}, want: onlineWant{deleted: []string{b}, aborted: []string{a}}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newOnlineWorld(t)
			tc.setup(t, w)
			for i, run := range tc.runs {
				// The runs build on each other: stop at the first that fails.
				ok := t.Run(fmt.Sprint("Run", i+1), func(t *testing.T) {
					w.clock.Advance(run.advance)
					if run.before != nil {
						run.before(t, w)
					}
					opts := sweep.Options{OlderThan: hour}
					if run.opts != nil {
						opts = run.opts(t, w)
					}
					opts.Now = w.clock.Now
					before, keys := w.records(t), memKeys(t, w.blobs.Memory)

					rep, err := sweep.Sweep(t.Context(), w.store, w.blobs, opts)

					checkOnlineRun(t, w, rep, err, run.want)
					wantLeft := slices.DeleteFunc(keys, func(k string) bool { return slices.Contains(run.want.deleted, k) })
					if got := memKeys(t, w.blobs.Memory); !slices.Equal(got, wantLeft) {
						t.Errorf("bucket holds %v; want %v", got, wantLeft)
					}
					if run.check != nil {
						run.check(t, w, before, rep)
					}
				})
				if !ok {
					return
				}
			}
		})
	}
}

// checkOnlineRun checks a run's error, report and records against want, and
// the report's accounting.
func checkOnlineRun(t *testing.T, w *onlineWorld, rep sweep.Report, err error, want onlineWant) {
	t.Helper()
	for _, e := range want.errs {
		if !errors.Is(err, e) {
			t.Errorf("error = %v; want one matching %v", err, e)
		}
	}
	if len(want.errs) == 0 && err != nil {
		t.Errorf("error = %v; want none", err)
	}
	lists := []struct {
		name      string
		got, want []string
	}{
		{"Deleted", rep.Deleted, want.deleted},
		{"Failed", failedKeys(rep), want.failed},
		{"Pending", rep.Pending, want.pending},
		{"Skipped", rep.Skipped, want.skipped},
		{"Aborted", rep.Aborted, want.aborted},
	}
	for _, l := range lists {
		if !slices.Equal(l.got, l.want) {
			t.Errorf("%s = %v; want %v", l.name, l.got, l.want)
		}
	}
	counts := []struct {
		name      string
		got, want int
	}{
		{"Young", rep.Young, want.young},
		{"Referenced", rep.Referenced, want.referenced},
		{"Claimed", rep.Claimed, want.claimed},
		{"Marked", rep.Marked, want.marked},
		{"Waiting", rep.Waiting, want.waiting},
		{"Dropped", rep.Dropped, want.dropped},
		{"Unsettled", rep.Unsettled, want.unsettled},
	}
	for _, c := range counts {
		if c.got != c.want {
			t.Errorf("%s = %d; want %d", c.name, c.got, c.want)
		}
	}
	recs := gcRecords(t, w.store)
	if got := recordKeys(recs, cairn.GCCandidate); !slices.Equal(got, want.candidates) {
		t.Errorf("candidates after the run = %v; want %v", got, want.candidates)
	}
	if got := recordKeys(recs, cairn.GCDeleting); !slices.Equal(got, want.deleting) {
		t.Errorf("deleting after the run = %v; want %v", got, want.deleting)
	}
	checkOnlineReport(t, rep)
}

// checkOnlineReport checks the accounting of an online sweep's report: every
// key it set out to delete is in exactly one of its five lists, each list is
// in key order, and the counts fit together.
func checkOnlineReport(t *testing.T, rep sweep.Report) {
	t.Helper()
	if !rep.Online {
		t.Error("the report does not say the sweep ran online")
	}
	seen := map[string]string{}
	for name, keys := range map[string][]string{"Deleted": rep.Deleted, "Failed": failedKeys(rep),
		"Pending": rep.Pending, "Skipped": rep.Skipped, "Aborted": rep.Aborted} {
		if !slices.IsSorted(keys) {
			t.Errorf("%s is not in key order: %v", name, keys)
		}
		for _, k := range keys {
			if other, dup := seen[k]; dup {
				t.Errorf("%s is in both %s and %s", k, other, name)
			}
			seen[k] = name
		}
	}
	if len(seen) != rep.Candidates {
		t.Errorf("deleted+failed+pending+skipped+aborted = %d; candidates = %d", len(seen), rep.Candidates)
	}
	if rep.Unsettled > rep.Candidates {
		t.Errorf("unsettled %d > candidates %d", rep.Unsettled, rep.Candidates)
	}
	if rep.Young+rep.Referenced > rep.Listed {
		t.Errorf("young %d + referenced %d > listed %d", rep.Young, rep.Referenced, rep.Listed)
	}
	if rep.Claimed+rep.Marked+rep.Waiting > rep.Listed-rep.Referenced {
		t.Errorf("claimed %d + marked %d + waiting %d > listed %d - referenced %d", rep.Claimed, rep.Marked, rep.Waiting, rep.Listed, rep.Referenced)
	}
	for _, f := range rep.Failed {
		if f.Err == nil {
			t.Errorf("failed key %q without a reason", f.Key)
		}
	}
}

// TestOnlineDryRun checks that an online dry run writes nothing, neither GC
// records nor deletes, and reports exactly what the real run on the same
// state then deletes, with every kind of key and record present.
func TestOnlineDryRun(t *testing.T) {
	const hour = time.Hour
	e := sorted(fk("e0"), ak("e1"), fk("e2"), ak("e3"))
	d, wk, n, y, r, g, c := fk("deleting"), fk("waiting"), fk("new"), fk("young"), fk("referenced"), ak("gone"), ak("claimed")
	z := ak("this-instant")
	for _, olderThan := range []time.Duration{hour, 0} {
		t.Run(fmt.Sprint("OlderThan=", olderThan), func(t *testing.T) {
			w := newOnlineWorld(t)
			sweepOnce := func(opts sweep.Options) {
				t.Helper()
				opts.OlderThan, opts.Now = hour, w.clock.Now
				if _, err := sweep.Sweep(t.Context(), w.store, w.blobs, opts); err != nil && !errors.Is(err, sweep.ErrStopped) {
					t.Fatal(err)
				}
			}
			// d: marked, then left deleting by a failed request.
			w.put(t, d, 3*hour)
			sweepOnce(sweep.Options{})
			w.clock.Advance(2 * hour)
			for _, k := range append([]string{g, r}, e...) {
				w.put(t, k, 3*hour)
			}
			w.blobs.requestFailsOn = len(w.blobs.deletes) + 1
			sweepOnce(sweep.Options{})
			// wk: marked half an hour before the dry run; nothing deleted.
			w.clock.Advance(90 * time.Minute)
			w.put(t, wk, 3*hour)
			sweepOnce(sweep.Options{BeforeDelete: func(context.Context, []string) error { return errInjected }})
			w.clock.Advance(30 * time.Minute)
			// n: never seen; y: young; z: uploaded at the run's instant, young
			// even with OlderThan 0; r: referenced since its mark; g: gone
			// from the bucket since its mark; c: claimed.
			w.put(t, n, 3*hour)
			w.put(t, y, time.Minute)
			w.put(t, z, 0)
			w.put(t, c, 3*hour)
			w.reference(t, "keep", r)
			w.claim(t, "writer", c)
			if _, err := w.blobs.Memory.Delete(t.Context(), []string{g}); err != nil {
				t.Fatal(err)
			}
			if recs := w.records(t); recs[d].State != cairn.GCDeleting || recs[wk].State != cairn.GCCandidate || len(recs) != 8 {
				t.Fatalf("the state is not set up: records %v", recs)
			}

			run := func(dry bool) (sweep.Report, [][]string) {
				t.Helper()
				var batches [][]string
				rep, err := sweep.Sweep(t.Context(), w.store, w.blobs, sweep.Options{
					OlderThan: olderThan, Now: w.clock.Now, DryRun: dry, BatchSize: 2, MaxDeletes: 4,
					BeforeDelete: func(_ context.Context, batch []string) error {
						batches = append(batches, slices.Clone(batch))
						return nil
					},
				})
				if err != nil {
					t.Fatalf("Sweep(dry run %t): %v", dry, err)
				}
				checkOnlineReport(t, rep)
				return rep, batches
			}
			recs, keys, deletes := w.records(t), memKeys(t, w.blobs.Memory), len(w.blobs.deletes)
			dry, dryBatches := run(true)
			if got := w.records(t); !maps.Equal(got, recs) {
				t.Errorf("the dry run changed the GC records:\n%v\nwere\n%v", got, recs)
			}
			if got := memKeys(t, w.blobs.Memory); !slices.Equal(got, keys) || len(w.blobs.deletes) != deletes {
				t.Errorf("the dry run sent %d deletes and left %v; want none and %v", len(w.blobs.deletes)-deletes, got, keys)
			}
			if !dry.DryRun {
				t.Error("dry run: DryRun false")
			}

			wet, wetBatches := run(false)
			if len(wet.Deleted) != 4 || len(wet.Skipped) == 0 || wet.Unsettled != 1 || wet.Claimed != 1 || wet.Dropped != 2 {
				t.Errorf("the real run deleted %v, skipped %v, %d unsettled, %d claimed, %d dropped; want 4 deleted, some skipped, 1, 1, 2",
					wet.Deleted, wet.Skipped, wet.Unsettled, wet.Claimed, wet.Dropped)
			}
			same := []struct {
				name     string
				dry, wet any
			}{
				{"Deleted", dry.Deleted, wet.Deleted},
				{"Marked", dry.Marked, wet.Marked},
				{"Dropped", dry.Dropped, wet.Dropped},
				{"Skipped", dry.Skipped, wet.Skipped},
				{"Pending", dry.Pending, wet.Pending},
				{"Aborted", dry.Aborted, wet.Aborted},
				{"Failed", len(dry.Failed), len(wet.Failed)},
				{"Candidates", dry.Candidates, wet.Candidates},
				{"Batches", dry.Batches, wet.Batches},
				{"BytesFreed", dry.BytesFreed, wet.BytesFreed},
				{"Listed", dry.Listed, wet.Listed},
				{"Young", dry.Young, wet.Young},
				{"Referenced", dry.Referenced, wet.Referenced},
				{"Claimed", dry.Claimed, wet.Claimed},
				{"Waiting", dry.Waiting, wet.Waiting},
				{"Unsettled", dry.Unsettled, wet.Unsettled},
				{"BeforeDelete batches", fmt.Sprint(dryBatches), fmt.Sprint(wetBatches)},
			}
			for _, s := range same {
				if fmt.Sprint(s.dry) != fmt.Sprint(s.wet) {
					t.Errorf("%s: dry run %v, real run %v", s.name, s.dry, s.wet)
				}
			}
		})
	}
}
