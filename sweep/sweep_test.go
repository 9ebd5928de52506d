package sweep_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/sweep"
)

func fk(name string) string { return bucket.FileKey([]byte(name)) }
func ak(name string) string { return bucket.ArtifactKey([]byte(name)) }

// sorted returns keys in byte order.
func sorted(keys ...string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return out
}

// TestSweepRules checks the rules of the sweep one by one on an in-memory
// bucket and fake stores.
func TestSweepRules(t *testing.T) {
	const hour = time.Hour
	hookErr := errors.New("lock lost")
	tests := []struct {
		name    string
		objects []stagedObject
		refs    []string
		walker  bool
		opts    sweep.Options
		// setup adjusts the fakes.
		setup func(*fakeBlobs, *walkerRefs)

		wantDeleted []string
		wantFailed  []string
		wantPending []string
		wantSkipped []string
		wantErr     []error
		// wantEvents, when set, is the exact sequence of calls.
		wantEvents []string
		// wantBatches are the sizes of the Delete calls.
		wantBatches []int
	}{
		{
			name: "OnlyTheTwoPrefixes",
			objects: []stagedObject{
				{fk("a"), 2 * hour}, {ak("b"), 2 * hour},
				{"other/" + fk("c")[len("sandbox-files/"):], 2 * hour},
				{"sandbox-filesx/old", 2 * hour}, {"sandbox-file", 2 * hour}, {"zzz", 2 * hour},
				{"sandbox-files/not-a-digest", 2 * hour},
			},
			opts:        sweep.Options{OlderThan: hour},
			wantDeleted: sorted(fk("a"), ak("b"), "sandbox-files/not-a-digest"),
			wantBatches: []int{3},
		},
		{
			name: "StrictAgeBoundary",
			objects: []stagedObject{
				{fk("exactly"), hour}, {fk("just-older"), hour + time.Nanosecond},
				{fk("younger"), hour - time.Millisecond}, {fk("much-older"), 100 * hour},
				{ak("exactly"), hour}, {ak("just-older"), hour + time.Millisecond},
			},
			opts:        sweep.Options{OlderThan: hour},
			wantDeleted: sorted(fk("just-older"), fk("much-older"), ak("just-older")),
		},
		{
			name:        "OlderThanZeroKeepsOnlyThisInstant",
			objects:     []stagedObject{{fk("now"), 0}, {fk("ns-ago"), time.Nanosecond}},
			opts:        sweep.Options{OlderThan: 0},
			wantDeleted: []string{fk("ns-ago")},
		},
		{
			name:        "NoUploadTimeKept",
			objects:     []stagedObject{{fk("undated"), -1}, {fk("old"), 2 * hour}},
			opts:        sweep.Options{OlderThan: hour},
			wantDeleted: []string{fk("old")},
		},
		{
			name:        "ReferencedKeysKept",
			objects:     []stagedObject{{fk("used"), 2 * hour}, {ak("used"), 2 * hour}, {fk("unused"), 2 * hour}, {ak("unused"), 2 * hour}},
			refs:        []string{fk("used"), ak("used"), fk("referenced-but-missing")},
			opts:        sweep.Options{OlderThan: hour},
			wantDeleted: sorted(fk("unused"), ak("unused")),
		},
		{
			name:        "ReferencesStreamedFromAWalker",
			objects:     []stagedObject{{fk("used"), 2 * hour}, {fk("unused"), 2 * hour}},
			refs:        []string{fk("used")},
			walker:      true,
			opts:        sweep.Options{OlderThan: hour},
			wantDeleted: []string{fk("unused")},
			wantEvents:  []string{"now", "list sandbox-artifacts/", "list sandbox-files/", "list cairn-bindings/", "refs walk", "before 1", "delete 1"},
		},
		{
			name:        "CutoffBeforeListingReferencesAfter",
			objects:     []stagedObject{{fk("x"), 2 * hour}, {ak("y"), 2 * hour}},
			opts:        sweep.Options{OlderThan: hour, BatchSize: 1},
			wantDeleted: sorted(fk("x"), ak("y")),
			wantEvents:  []string{"now", "list sandbox-artifacts/", "list sandbox-files/", "list cairn-bindings/", "refs list", "before 1", "delete 1", "before 1", "delete 1"},
		},
		{
			name:       "NegativeOlderThanBeforeListing",
			objects:    []stagedObject{{fk("x"), 2 * hour}},
			opts:       sweep.Options{OlderThan: -time.Nanosecond},
			wantErr:    []error{sweep.ErrInvalidArgument},
			wantEvents: []string{},
		},
		{
			name:       "NegativeMaxDeletes",
			opts:       sweep.Options{OlderThan: hour, MaxDeletes: -1},
			wantErr:    []error{sweep.ErrInvalidArgument},
			wantEvents: []string{},
		},
		{
			name:       "BatchSizeAbove1000",
			opts:       sweep.Options{OlderThan: hour, BatchSize: 1001},
			wantErr:    []error{sweep.ErrInvalidArgument},
			wantEvents: []string{},
		},
		{
			name:       "ListErrorFailsClosed",
			objects:    []stagedObject{{fk("x"), 2 * hour}, {ak("y"), 2 * hour}},
			opts:       sweep.Options{OlderThan: hour},
			setup:      func(b *fakeBlobs, _ *walkerRefs) { b.listFailsOn = "sandbox-files/" },
			wantErr:    []error{errInjected},
			wantEvents: []string{"now", "list sandbox-artifacts/", "list sandbox-files/"},
		},
		{
			name:       "ReferenceListErrorFailsClosed",
			objects:    []stagedObject{{fk("x"), 2 * hour}},
			opts:       sweep.Options{OlderThan: hour},
			setup:      func(_ *fakeBlobs, r *walkerRefs) { r.err = errInjected },
			wantErr:    []error{errInjected},
			wantEvents: []string{"now", "list sandbox-artifacts/", "list sandbox-files/", "list cairn-bindings/", "refs list"},
		},
		{
			name:       "ReferenceWalkErrorFailsClosed",
			objects:    []stagedObject{{fk("x"), 2 * hour}, {fk("y"), 2 * hour}},
			refs:       []string{fk("x"), fk("y")},
			walker:     true,
			opts:       sweep.Options{OlderThan: hour},
			setup:      func(_ *fakeBlobs, r *walkerRefs) { r.err, r.failAfter = errInjected, 1 },
			wantErr:    []error{errInjected},
			wantEvents: []string{"now", "list sandbox-artifacts/", "list sandbox-files/", "list cairn-bindings/", "refs walk"},
		},
		{
			name:    "PartialDeleteFailureReportedPerKey",
			objects: []stagedObject{{fk("a"), 2 * hour}, {fk("b"), 2 * hour}, {fk("c"), 2 * hour}, {fk("d"), 2 * hour}},
			opts:    sweep.Options{OlderThan: hour, BatchSize: 2},
			setup: func(b *fakeBlobs, _ *walkerRefs) {
				b.keyFailures = map[string]error{sorted(fk("a"), fk("b"), fk("c"), fk("d"))[1]: bucket.ErrAccessDenied}
			},
			wantDeleted: without(sorted(fk("a"), fk("b"), fk("c"), fk("d")), 1),
			wantFailed:  []string{sorted(fk("a"), fk("b"), fk("c"), fk("d"))[1]},
			wantErr:     []error{sweep.ErrIncomplete},
			wantBatches: []int{2, 2},
		},
		{
			name:    "FailedRequestStops",
			objects: []stagedObject{{fk("a"), 2 * hour}, {fk("b"), 2 * hour}, {fk("c"), 2 * hour}, {fk("d"), 2 * hour}, {fk("e"), 2 * hour}},
			opts:    sweep.Options{OlderThan: hour, BatchSize: 2},
			setup:   func(b *fakeBlobs, _ *walkerRefs) { b.requestFailsOn = 2 },
			// Batch 1 deleted, batch 2's request failed (outcome unknown), batch 3 never sent.
			wantDeleted: sorted(fk("a"), fk("b"), fk("c"), fk("d"), fk("e"))[0:2],
			wantFailed:  sorted(fk("a"), fk("b"), fk("c"), fk("d"), fk("e"))[2:4],
			wantPending: sorted(fk("a"), fk("b"), fk("c"), fk("d"), fk("e"))[4:],
			wantErr:     []error{sweep.ErrStopped, errInjected, sweep.ErrIncomplete},
			wantBatches: []int{2, 2},
		},
		{
			name:        "MaxDeletesSkipsTheRest",
			objects:     []stagedObject{{fk("a"), 2 * hour}, {fk("b"), 2 * hour}, {fk("c"), 2 * hour}, {fk("d"), 2 * hour}, {fk("e"), 2 * hour}},
			opts:        sweep.Options{OlderThan: hour, MaxDeletes: 2},
			wantDeleted: sorted(fk("a"), fk("b"), fk("c"), fk("d"), fk("e"))[:2],
			wantSkipped: sorted(fk("a"), fk("b"), fk("c"), fk("d"), fk("e"))[2:],
			wantBatches: []int{2},
		},
		{
			name:    "BeforeDeleteErrorStops",
			objects: []stagedObject{{fk("a"), 2 * hour}, {fk("b"), 2 * hour}, {fk("c"), 2 * hour}, {fk("d"), 2 * hour}, {fk("e"), 2 * hour}},
			opts: sweep.Options{OlderThan: hour, BatchSize: 2, BeforeDelete: func() func(context.Context, []string) error {
				n := 0
				return func(context.Context, []string) error {
					if n++; n == 2 {
						return hookErr
					}
					return nil
				}
			}()},
			wantDeleted: sorted(fk("a"), fk("b"), fk("c"), fk("d"), fk("e"))[:2],
			wantPending: sorted(fk("a"), fk("b"), fk("c"), fk("d"), fk("e"))[2:],
			wantErr:     []error{sweep.ErrStopped, hookErr},
			wantBatches: []int{2},
		},
		{
			name:        "NoCandidatesNoDeleteRequest",
			objects:     []stagedObject{{fk("young"), time.Minute}, {fk("used"), 2 * hour}},
			refs:        []string{fk("used")},
			opts:        sweep.Options{OlderThan: hour},
			wantEvents:  []string{"now", "list sandbox-artifacts/", "list sandbox-files/", "list cairn-bindings/", "refs list"},
			wantBatches: nil,
		},
		{
			name:    "SmallListingPages",
			objects: manyObjects(25, 2*hour),
			opts:    sweep.Options{OlderThan: hour, PageSize: 4},
			wantDeleted: func() []string {
				var keys []string
				for _, o := range manyObjects(25, 2*hour) {
					keys = append(keys, o.key)
				}
				return sorted(keys...)
			}(),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := &events{}
			blobs := &fakeBlobs{Memory: stage(t, tc.objects), ev: ev}
			refs := &walkerRefs{fakeRefs: fakeRefs{ev: ev, keys: tc.refs}}
			if tc.setup != nil {
				tc.setup(blobs, refs)
			}
			var store sweep.References = &refs.fakeRefs
			if tc.walker {
				store = refs
			}
			opts := tc.opts
			opts.Now = func() time.Time { ev.add("now"); return now }
			if hook := opts.BeforeDelete; hook != nil || tc.wantEvents != nil {
				opts.BeforeDelete = func(ctx context.Context, batch []string) error {
					ev.add("before %d", len(batch))
					if hook != nil {
						return hook(ctx, batch)
					}
					return nil
				}
			}
			before := memKeys(t, blobs.Memory)

			rep, err := sweep.Sweep(t.Context(), store, blobs, opts)

			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("error = %v; want one matching %v", err, want)
				}
			}
			if len(tc.wantErr) == 0 && err != nil {
				t.Errorf("error = %v; want none", err)
			}
			if tc.wantEvents != nil {
				got := ev.all()
				if got == nil {
					got = []string{}
				}
				if !slices.Equal(got, tc.wantEvents) {
					t.Errorf("calls = %q; want %q", got, tc.wantEvents)
				}
			}
			if !slices.Equal(rep.Deleted, tc.wantDeleted) {
				t.Errorf("Deleted = %v; want %v", rep.Deleted, tc.wantDeleted)
			}
			if got := failedKeys(rep); !slices.Equal(got, tc.wantFailed) {
				t.Errorf("Failed = %v; want %v", rep.Failed, tc.wantFailed)
			}
			if !slices.Equal(rep.Pending, tc.wantPending) || !slices.Equal(rep.Skipped, tc.wantSkipped) {
				t.Errorf("Pending = %v, Skipped = %v; want %v, %v", rep.Pending, rep.Skipped, tc.wantPending, tc.wantSkipped)
			}
			if !slices.Equal(blobs.deletes, tc.wantBatches) && tc.wantBatches != nil {
				t.Errorf("Delete calls carried %v keys; want %v", blobs.deletes, tc.wantBatches)
			}
			if slices.Contains(blobs.deletes, 0) {
				t.Errorf("an empty Delete call was made: %v", blobs.deletes)
			}
			// The bucket lost exactly the deleted keys.
			wantLeft := slices.DeleteFunc(slices.Clone(before), func(k string) bool { return slices.Contains(tc.wantDeleted, k) })
			if got := memKeys(t, blobs.Memory); !slices.Equal(got, wantLeft) {
				t.Errorf("bucket holds %v; want %v", got, wantLeft)
			}
			reachedDeletes := err == nil || errors.Is(err, sweep.ErrStopped) || errors.Is(err, sweep.ErrIncomplete)
			checkInvariants(t, rep, reachedDeletes)
		})
	}
}

func without(keys []string, i int) []string { return slices.Delete(slices.Clone(keys), i, i+1) }

func manyObjects(n int, age time.Duration) []stagedObject {
	out := make([]stagedObject, n)
	for i := range out {
		if i%2 == 0 {
			out[i] = stagedObject{fk(fmt.Sprint(i)), age}
		} else {
			out[i] = stagedObject{ak(fmt.Sprint(i)), age}
		}
	}
	return out
}

func failedKeys(rep sweep.Report) []string {
	var out []string
	for _, f := range rep.Failed {
		out = append(out, f.Key)
	}
	return out
}

// checkInvariants checks the report's accounting.
func checkInvariants(t *testing.T, rep sweep.Report, reachedDeletes bool) {
	t.Helper()
	if got := len(rep.Deleted) + len(rep.Failed) + len(rep.Pending) + len(rep.Skipped); got != rep.Candidates {
		t.Errorf("deleted+failed+pending+skipped = %d; candidates = %d", got, rep.Candidates)
	}
	if reachedDeletes && rep.Listed != rep.Young+rep.Referenced+rep.Candidates {
		t.Errorf("listed %d != young %d + referenced %d + candidates %d", rep.Listed, rep.Young, rep.Referenced, rep.Candidates)
	}
	for _, f := range rep.Failed {
		if f.Err == nil {
			t.Errorf("failed key %q without a reason", f.Key)
		}
	}
}

// TestSweepDryRun checks that a dry run deletes nothing, calls BeforeDelete
// the same way, and reports the same keys as a real run.
func TestSweepDryRun(t *testing.T) {
	objects := append(manyObjects(7, 3*time.Hour), stagedObject{fk("young"), time.Minute}, stagedObject{fk("used"), 3 * time.Hour})
	refs := []string{fk("used")}
	run := func(dry bool) (sweep.Report, *fakeBlobs, []string) {
		ev := &events{}
		blobs := &fakeBlobs{Memory: stage(t, objects), ev: ev}
		rep, err := sweep.Sweep(t.Context(), &fakeRefs{ev: ev, keys: refs}, blobs, sweep.Options{
			OlderThan: time.Hour, Now: func() time.Time { return now }, DryRun: dry, BatchSize: 3, MaxDeletes: 6,
			BeforeDelete: func(_ context.Context, batch []string) error { ev.add("before %d", len(batch)); return nil },
		})
		if err != nil {
			t.Fatalf("Sweep(dry run %t): %v", dry, err)
		}
		return rep, blobs, ev.all()
	}
	dry, dryBlobs, dryEvents := run(true)
	wet, _, wetEvents := run(false)
	if !dry.DryRun || wet.DryRun {
		t.Errorf("DryRun flags = %t, %t; want true, false", dry.DryRun, wet.DryRun)
	}
	if len(dryBlobs.deletes) != 0 || dryBlobs.Len() != len(objects) {
		t.Errorf("dry run sent %v deletes and left %d of %d objects; want none and all", dryBlobs.deletes, dryBlobs.Len(), len(objects))
	}
	if len(dry.Deleted) != 6 || !slices.Equal(dry.Deleted, wet.Deleted) || !slices.Equal(dry.Skipped, wet.Skipped) ||
		dry.BytesFreed != wet.BytesFreed || dry.Candidates != wet.Candidates || dry.Batches != wet.Batches {
		t.Errorf("dry run report %+v differs from the real one %+v", dry, wet)
	}
	wetWithoutDeletes := slices.DeleteFunc(slices.Clone(wetEvents), func(e string) bool { return strings.HasPrefix(e, "delete") })
	if !slices.Equal(dryEvents, wetWithoutDeletes) {
		t.Errorf("dry run calls %q; want the real run's without its deletes %q", dryEvents, wetWithoutDeletes)
	}
}

// TestSweepBatchesOf1000 checks the default batch size on 2500 candidates.
func TestSweepBatchesOf1000(t *testing.T) {
	ev := &events{}
	blobs := &fakeBlobs{Memory: stage(t, manyObjects(2500, 2*time.Hour)), ev: ev}
	rep, err := sweep.Sweep(t.Context(), &fakeRefs{ev: ev}, blobs, sweep.Options{OlderThan: time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(blobs.deletes, []int{1000, 1000, 500}) || len(rep.Deleted) != 2500 || rep.Batches != 3 || blobs.Len() != 0 {
		t.Fatalf("deletes %v, %d deleted, %d batches, %d left; want [1000 1000 500], 2500, 3, 0", blobs.deletes, len(rep.Deleted), rep.Batches, blobs.Len())
	}
	if !slices.IsSorted(rep.Deleted) {
		t.Error("Deleted is not in key order")
	}
}

// TestSweepContextEnds checks that a context ending during the listing
// aborts before any delete and is returned as it is.
func TestSweepContextEnds(t *testing.T) {
	ev := &events{}
	blobs := &fakeBlobs{Memory: stage(t, manyObjects(10, 2*time.Hour)), ev: ev}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := sweep.Sweep(ctx, &fakeRefs{ev: ev}, blobs, sweep.Options{OlderThan: time.Hour})
	if err != context.Canceled {
		t.Fatalf("error = %v; want context.Canceled itself", err)
	}
	if len(blobs.deletes) != 0 || blobs.Len() != 10 {
		t.Fatalf("deletes %v after cancellation; want none", blobs.deletes)
	}
}

// TestSweepLogs checks the stable keys of the log records.
func TestSweepLogs(t *testing.T) {
	var buf bytes.Buffer
	ev := &events{}
	blobs := &fakeBlobs{Memory: stage(t, manyObjects(3, 2*time.Hour)), ev: ev}
	blobs.keyFailures = map[string]error{sorted(fk("0"), ak("1"), fk("2"))[0]: bucket.ErrAccessDenied}
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, err := sweep.Sweep(t.Context(), &fakeRefs{ev: ev}, blobs, sweep.Options{OlderThan: time.Hour, Now: func() time.Time { return now }, Logger: logger})
	if !errors.Is(err, sweep.ErrIncomplete) {
		t.Fatalf("error = %v; want ErrIncomplete", err)
	}
	out := buf.String()
	for _, want := range []string{`"phase":"list"`, `"phase":"references"`, `"phase":"delete"`, `"phase":"done"`,
		`"blob":"` + sorted(fk("0"), ak("1"), fk("2"))[0] + `"`, `"deleted":2`, `"failed":1`, `"dry_run":false`, `"bytes_freed":`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

// TestReportJSON checks that a report, failed keys included, encodes to JSON.
func TestReportJSON(t *testing.T) {
	rep := sweep.Report{Deleted: []string{"a"}, Failed: []bucket.KeyError{{Key: "b", Err: bucket.ErrAccessDenied}}}
	out, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"deleted":["a"]`, `"failed":[{"key":"b","error":"access denied"}]`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("JSON %s lacks %s", out, want)
		}
	}
}

// TestSweepCountsListRequests: the report counts the LIST requests of the
// swept prefixes, one per page, and those of the bindings, as the bucket
// received them.
func TestSweepCountsListRequests(t *testing.T) {
	for _, tc := range []struct {
		name     string
		objects  int
		pageSize int
		want     int // LIST requests of the two prefixes
	}{
		{"EmptyBucket", 0, 10, 2},
		{"OnePageEach", 5, 10, 2},
		{"SeveralPages", 25, 10, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := &events{}
			blobs := &fakeBlobs{Memory: stage(t, manyObjects(tc.objects, 2*time.Hour)), ev: ev}
			rep, err := sweep.Sweep(t.Context(), &walkerRefs{fakeRefs: fakeRefs{ev: ev}}, blobs, sweep.Options{OlderThan: time.Hour, PageSize: tc.pageSize, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.ListRequests != tc.want {
				t.Errorf("ListRequests = %d, want %d", rep.ListRequests, tc.want)
			}
			if got := ev.count("list sandbox-"); got != rep.ListRequests {
				t.Errorf("the bucket received %d LIST requests of the swept prefixes, the report says %d", got, rep.ListRequests)
			}
			if got := ev.count("list " + bucket.BindingPrefix); got != rep.BindingListRequests || got != 1 {
				t.Errorf("the bucket received %d LIST requests of the bindings, the report says %d", got, rep.BindingListRequests)
			}
		})
	}
}
