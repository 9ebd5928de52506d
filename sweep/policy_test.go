package sweep_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/sweep"
)

// chainOf returns a chain c1 <- c2 <- ... <- cn (cn the head) whose
// checkpoint ci was created ages[i-1] before now, with reasons and labels
// from the given maps, and one file of its own plus one shared file.
func chainOf(now time.Time, ages []time.Duration, reasons, labels map[int]string) (string, []cairn.Checkpoint) {
	var list []cairn.Checkpoint
	parent := ""
	for i, age := range ages {
		id := fmt.Sprintf("c%d", i+1)
		reason := cairn.ReasonAutomatic
		if r, ok := reasons[i+1]; ok {
			reason = r
		}
		list = append(list, cairn.Checkpoint{
			ID: id, ThreadID: "t", ParentCheckpointID: parent,
			CreatedAt: float64(now.Add(-age).UnixMilli()), Reason: reason, Label: labels[i+1],
			Files: []cairn.Entry{
				{Path: "own", Kind: cairn.KindFile, BlobKey: bucket.FileKey([]byte(id)), Size: 1},
				{Path: "shared", Kind: cairn.KindFile, BlobKey: bucket.FileKey([]byte("shared")), Size: 1},
			},
		})
		parent = id
	}
	return parent, list
}

func TestPolicyPlan(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := time.Hour
	// c1 is the oldest, c5 the head.
	ages := []time.Duration{50 * h, 40 * h, 30 * h, 20 * h, 10 * h}
	cases := []struct {
		name          string
		policy        sweep.Policy
		ages          []time.Duration
		reasons       map[int]string
		labels        map[int]string
		wantRemoved   []string
		wantKeep      int
		wantDelete    bool
		wantProtected int
	}{
		{name: "KeepTwo", policy: sweep.Policy{Keep: 2}, wantRemoved: []string{"c1", "c2", "c3"}, wantKeep: 2},
		{name: "KeepMoreThanChain", policy: sweep.Policy{Keep: 9}, wantRemoved: []string{}, wantKeep: 5},
		{name: "MaxAgeKeepsYounger", policy: sweep.Policy{MaxAge: 25 * h}, wantRemoved: []string{"c1", "c2", "c3"}, wantKeep: 2},
		{name: "MaxAgeAlwaysKeepsHead", policy: sweep.Policy{MaxAge: h}, wantRemoved: []string{"c1", "c2", "c3", "c4"}, wantKeep: 1},
		{name: "MaxAgeBoundaryKeeps", policy: sweep.Policy{MaxAge: 30 * h}, wantRemoved: []string{"c1", "c2"}, wantKeep: 3},
		{name: "KeepAndMaxAgeKeepTheUnion/KeepWins", policy: sweep.Policy{Keep: 3, MaxAge: 15 * h}, wantRemoved: []string{"c1", "c2"}, wantKeep: 3},
		{name: "KeepAndMaxAgeKeepTheUnion/MaxAgeWins", policy: sweep.Policy{Keep: 1, MaxAge: 45 * h}, wantRemoved: []string{"c1"}, wantKeep: 4},
		{
			// A young checkpoint deep in the chain keeps everything above it.
			name: "MaxAgeOutOfOrderCreatedAt", policy: sweep.Policy{MaxAge: 5 * h},
			ages: []time.Duration{50 * h, 40 * h, h, 20 * h, 10 * h}, wantRemoved: []string{"c1", "c2"}, wantKeep: 3,
		},
		{
			name: "ProtectedStopsTheFloor", policy: sweep.Policy{Keep: 1, Protect: []string{cairn.ReasonNamed}},
			reasons: map[int]string{2: cairn.ReasonNamed}, wantRemoved: []string{"c1"}, wantKeep: 4, wantProtected: 1,
		},
		{
			name: "ProtectedWithinKeepCountsNothing", policy: sweep.Policy{Keep: 4, Protect: []string{cairn.ReasonNamed}},
			reasons: map[int]string{3: cairn.ReasonNamed}, wantRemoved: []string{"c1"}, wantKeep: 4,
		},
		{
			name: "DeepestProtectedWins", policy: sweep.Policy{Keep: 1, Protect: []string{cairn.ReasonNamed}},
			reasons: map[int]string{1: cairn.ReasonNamed, 3: cairn.ReasonNamed}, wantRemoved: []string{}, wantKeep: 5, wantProtected: 2,
		},
		{
			name: "LabelPin", policy: sweep.Policy{Keep: 1, ProtectLabelPrefix: "pin:"},
			labels: map[int]string{3: "pin:release", 2: "pinned"}, wantRemoved: []string{"c1", "c2"}, wantKeep: 3, wantProtected: 1,
		},
		{
			name: "UnprotectedReasonIsPruned", policy: sweep.Policy{Keep: 1, Protect: []string{cairn.ReasonNamed}},
			reasons: map[int]string{2: cairn.ReasonForkRoot}, wantRemoved: []string{"c1", "c2", "c3", "c4"}, wantKeep: 1,
		},
		{name: "IdleThreadDeleted", policy: sweep.Policy{DeleteIdle: 9 * h}, wantRemoved: []string{"c1", "c2", "c3", "c4", "c5"}, wantDelete: true},
		{name: "ActiveThreadStays", policy: sweep.Policy{DeleteIdle: 11 * h}, wantRemoved: []string{}, wantKeep: 5},
		{name: "ActiveThreadPrunedByOtherRules", policy: sweep.Policy{DeleteIdle: 11 * h, Keep: 2}, wantRemoved: []string{"c1", "c2", "c3"}, wantKeep: 2},
		{
			name: "IdleThreadWithProtectedIsPrunedInstead", policy: sweep.Policy{DeleteIdle: h, Keep: 1, Protect: []string{cairn.ReasonNamed}},
			reasons: map[int]string{3: cairn.ReasonNamed}, wantRemoved: []string{"c1", "c2"}, wantKeep: 3, wantProtected: 1,
		},
		{
			name: "IdleThreadWithProtectedAndNoOtherRuleStays", policy: sweep.Policy{DeleteIdle: h, Protect: []string{cairn.ReasonNamed}},
			reasons: map[int]string{1: cairn.ReasonNamed}, wantRemoved: []string{}, wantKeep: 5, wantProtected: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.ages
			if a == nil {
				a = ages
			}
			head, list := chainOf(now, a, tc.reasons, tc.labels)
			if err := tc.policy.Validate(); err != nil {
				t.Fatal(err)
			}
			got := tc.policy.Plan(now, "t", head, list)
			if !slices.Equal(got.Removed, tc.wantRemoved) || got.DeleteThread != tc.wantDelete || got.Protected != tc.wantProtected {
				t.Errorf("Plan = removed %q, delete %t, protected %d; want %q, %t, %d",
					got.Removed, got.DeleteThread, got.Protected, tc.wantRemoved, tc.wantDelete, tc.wantProtected)
			}
			if !tc.wantDelete && got.Keep != tc.wantKeep {
				t.Errorf("Plan keeps %d, want %d", got.Keep, tc.wantKeep)
			}
			// Released: one reference per removed checkpoint and key.
			want := map[string]int{}
			for _, id := range tc.wantRemoved {
				want[bucket.FileKey([]byte(id))] = 1
			}
			if n := len(tc.wantRemoved); n > 0 {
				want[bucket.FileKey([]byte("shared"))] = n
			}
			if !maps.Equal(got.Released, want) {
				t.Errorf("Released = %v, want %v", got.Released, want)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	cases := []struct {
		name   string
		policy sweep.Policy
	}{
		{"NoRule", sweep.Policy{}},
		{"NoRuleOnlyProtection", sweep.Policy{Protect: []string{cairn.ReasonNamed}}},
		{"NegativeKeep", sweep.Policy{Keep: -1}},
		{"NegativeMaxAge", sweep.Policy{Keep: 1, MaxAge: -time.Second}},
		{"NegativeDeleteIdle", sweep.Policy{Keep: 1, DeleteIdle: -time.Second}},
		{"EmptyReason", sweep.Policy{Keep: 1, Protect: []string{""}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.policy.Validate(); !errors.Is(err, sweep.ErrInvalidArgument) {
				t.Errorf("Validate() = %v, want ErrInvalidArgument", err)
			}
		})
	}
}

// seedRetention fills a memory store and bucket with threads of every kind
// the policies treat differently, at times relative to now, with blobs
// uploaded two hours before now.
func seedRetention(t *testing.T, now time.Time) (*cairn.MemoryStore, *bucket.Memory) {
	t.Helper()
	ctx := t.Context()
	store, err := cairn.NewMemoryStore(cairn.Options{Now: func() float64 { return float64(now.UnixMilli()) }})
	if err != nil {
		t.Fatal(err)
	}
	mem := bucket.NewMemory(func() time.Time { return now.Add(-2 * time.Hour) })
	add := func(thread string, ageHours []int, reasons map[int]string) {
		lease, err := store.AcquireWriter(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		parent := ""
		for i, age := range ageHours {
			id := fmt.Sprintf("%s-%d", thread, i+1)
			own, shared := []byte(id), []byte("shared-"+thread)
			for _, b := range [][]byte{own, shared, []byte("everywhere")} {
				if err := mem.Put(ctx, bucket.FileKey(b), b); err != nil {
					t.Fatal(err)
				}
			}
			c := cairn.Checkpoint{ID: id, ThreadID: thread, ParentCheckpointID: parent,
				CreatedAt: float64(now.Add(-time.Duration(age) * time.Hour).UnixMilli()), Reason: reasons[i+1],
				Conversation: json.RawMessage(`[]`),
				Files: []cairn.Entry{
					{Path: "own", Kind: cairn.KindFile, BlobKey: bucket.FileKey(own), Size: int64(len(own))},
					{Path: "shared", Kind: cairn.KindFile, BlobKey: bucket.FileKey(shared), Size: int64(len(shared))},
					{Path: "everywhere", Kind: cairn.KindFile, BlobKey: bucket.FileKey([]byte("everywhere")), Size: 10},
				}}
			if c.Reason == "" {
				c.Reason = cairn.ReasonAutomatic
			}
			if _, err := store.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: parent, Writer: lease.Writer}); err != nil {
				t.Fatal(err)
			}
			parent = id
		}
	}
	add("active", []int{90, 70, 50, 30, 1}, nil)
	add("named", []int{90, 70, 50, 30, 1}, map[int]string{2: cairn.ReasonNamed})
	add("idle", []int{300, 200, 100}, nil)
	add("idle-named", []int{300, 200, 100}, map[int]string{1: cairn.ReasonNamed})
	add("young", []int{3, 2, 1}, nil)
	if err := mem.Put(ctx, bucket.FileKey([]byte("orphan")), []byte("orphan")); err != nil {
		t.Fatal(err)
	}
	return store, mem
}

// TestDryRunEqualsRealRun runs each policy as a dry run and then for real on
// the same seeded state, and requires the same counts: checkpoints and
// threads removed, protected, blobs marked and deleted, bytes freed.
func TestDryRunEqualsRealRun(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	policies := []struct {
		name   string
		policy sweep.Policy
	}{
		{"Keep2", sweep.Policy{Keep: 2}},
		{"MaxAge40h", sweep.Policy{MaxAge: 40 * time.Hour}},
		{"Keep1MaxAge60hNamed", sweep.Policy{Keep: 1, MaxAge: 60 * time.Hour, Protect: []string{cairn.ReasonNamed}}},
		{"DeleteIdle48h", sweep.Policy{DeleteIdle: 48 * time.Hour}},
		{"DeleteIdle48hKeep1Named", sweep.Policy{DeleteIdle: 48 * time.Hour, Keep: 1, Protect: []string{cairn.ReasonNamed}}},
	}
	for _, p := range policies {
		for _, olderThan := range []time.Duration{0, time.Hour} {
			t.Run(fmt.Sprintf("%s/OlderThan=%v", p.name, olderThan), func(t *testing.T) {
				store, mem := seedRetention(t, now)
				run := func(dry bool) sweep.RunReport {
					t.Helper()
					rep, err := sweep.Run(t.Context(), store, mem, sweep.RunOptions{Policy: p.policy,
						Sweep: sweep.Options{OlderThan: olderThan, DryRun: dry, Now: func() time.Time { return now }}})
					if err != nil {
						t.Fatalf("Run(dry run %t): %v", dry, err)
					}
					return rep
				}
				dry := run(true)
				wet := run(false)
				if dry.Prune.Removed == 0 {
					t.Fatal("the policy removes nothing from the seeded store; the case shows nothing")
				}
				same := []struct {
					name     string
					dry, wet any
				}{
					{"Prune.Pruned", dry.Prune.Pruned, wet.Prune.Pruned},
					{"Prune.Removed", dry.Prune.Removed, wet.Prune.Removed},
					{"Prune.ThreadsDeleted", dry.Prune.ThreadsDeleted, wet.Prune.ThreadsDeleted},
					{"Prune.Protected", dry.Prune.Protected, wet.Prune.Protected},
					{"Sweep.Deleted", dry.Sweep.Deleted, wet.Sweep.Deleted},
					{"Sweep.BytesFreed", dry.Sweep.BytesFreed, wet.Sweep.BytesFreed},
					{"Sweep.Marked", dry.Sweep.Marked, wet.Sweep.Marked},
					{"Sweep.Referenced", dry.Sweep.Referenced, wet.Sweep.Referenced},
					{"Sweep.Candidates", dry.Sweep.Candidates, wet.Sweep.Candidates},
				}
				for _, s := range same {
					if fmt.Sprint(s.dry) != fmt.Sprint(s.wet) {
						t.Errorf("%s: dry run %v, real run %v", s.name, s.dry, s.wet)
					}
				}
				if olderThan == 0 && len(wet.Sweep.Deleted) == 0 {
					t.Error("with OlderThan 0 the real run deleted nothing; the case shows nothing")
				}
			})
		}
	}
}

func TestPruneWithPolicies(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name        string
		opts        sweep.PruneOptions
		wantLists   map[string]int // thread -> checkpoints left
		wantDeleted int
		wantProt    int
	}{
		{"MaxAge", sweep.PruneOptions{MaxAge: 60 * time.Hour}, map[string]int{"active": 3, "named": 3, "idle": 1, "idle-named": 1, "young": 3}, 0, 0},
		{"Named", sweep.PruneOptions{Keep: 1, Protect: []string{cairn.ReasonNamed}}, map[string]int{"active": 1, "named": 4, "idle": 1, "idle-named": 3, "young": 1}, 0, 2},
		{"DeleteIdle", sweep.PruneOptions{DeleteIdle: 48 * time.Hour, Protect: []string{cairn.ReasonNamed}}, map[string]int{"active": 5, "named": 5, "idle": 0, "idle-named": 3, "young": 3}, 1, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store, _ := seedRetention(t, now)
			opts := tc.opts
			opts.Now = func() time.Time { return now }
			rep, err := sweep.Prune(t.Context(), store, opts)
			if err != nil {
				t.Fatal(err)
			}
			for thread, want := range tc.wantLists {
				list, err := store.List(t.Context(), thread)
				if err != nil {
					t.Fatal(err)
				}
				if len(list) != want {
					t.Errorf("%s has %d checkpoints, want %d", thread, len(list), want)
				}
			}
			if rep.ThreadsDeleted != tc.wantDeleted || rep.Protected != tc.wantProt {
				t.Errorf("report: %d threads deleted, %d protected; want %d, %d", rep.ThreadsDeleted, rep.Protected, tc.wantDeleted, tc.wantProt)
			}
		})
	}
}

func TestPruneDeleteIdleBusyThread(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	store, _ := seedRetention(t, now)
	lease, err := store.AcquireWriter(t.Context(), "idle")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(t.Context())
	rep, err := sweep.Prune(t.Context(), store, sweep.PruneOptions{DeleteIdle: 48 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Busy, []string{"idle"}) || rep.ThreadsDeleted != 1 {
		t.Errorf("busy %q, %d threads deleted; want [idle] busy and idle-named deleted", rep.Busy, rep.ThreadsDeleted)
	}
	if head, _ := store.GetHead(t.Context(), "idle"); head == "" {
		t.Error("the busy idle thread was deleted")
	}
}

func TestPruneDeleteIdleNeedsThreadDeleter(t *testing.T) {
	store, _ := seedRetention(t, time.Now())
	type lister interface {
		cairn.Store
		cairn.Pruner
		cairn.ThreadLister
	}
	noDelete := struct{ lister }{store}
	_, err := sweep.Prune(t.Context(), noDelete, sweep.PruneOptions{DeleteIdle: time.Hour})
	if !errors.Is(err, cairn.ErrUnsupported) {
		t.Errorf("Prune with DeleteIdle on a store without ThreadDeleter: %v, want ErrUnsupported", err)
	}
}

// TestApplyPlan makes a plan with a dry run, applies it, and shows that a
// plan made before the store changed is refused without removing anything.
func TestApplyPlan(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	opts := sweep.PruneOptions{Keep: 1, DeleteIdle: 48 * time.Hour, Now: func() time.Time { return now }, DryRun: true}
	t.Run("Applies", func(t *testing.T) {
		store, _ := seedRetention(t, now)
		plan, err := sweep.Prune(t.Context(), store, opts)
		if err != nil {
			t.Fatal(err)
		}
		// Through JSON, as --plan and --apply pass it.
		b, err := json.Marshal(plan.Plans)
		if err != nil {
			t.Fatal(err)
		}
		var plans []sweep.ThreadPlan
		if err := json.Unmarshal(b, &plans); err != nil {
			t.Fatal(err)
		}
		rep, err := sweep.Prune(t.Context(), store, sweep.PruneOptions{Apply: plans})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rep.Pruned, plan.Pruned) {
			t.Errorf("applied %v, planned %v", rep.Pruned, plan.Pruned)
		}
		again, err := sweep.Prune(t.Context(), store, opts)
		if err != nil || again.Removed != 0 {
			t.Errorf("after the apply a new plan removes %d (%v), want 0", again.Removed, err)
		}
	})
	changes := []struct {
		name   string
		change func(t *testing.T, store *cairn.MemoryStore)
	}{
		{"NewHead", func(t *testing.T, store *cairn.MemoryStore) {
			lease, err := store.AcquireWriter(t.Context(), "active")
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Release(t.Context())
			c := cairn.Checkpoint{ID: "active-new", ThreadID: "active", ParentCheckpointID: "active-5", CreatedAt: float64(now.UnixMilli()),
				Reason: cairn.ReasonAutomatic, Conversation: json.RawMessage(`[]`)}
			if _, err := store.Append(t.Context(), cairn.AppendInput{Checkpoint: c, ExpectedHeadID: "active-5", Writer: lease.Writer}); err != nil {
				t.Fatal(err)
			}
		}},
		{"PrunedSince", func(t *testing.T, store *cairn.MemoryStore) {
			if _, err := cairn.KeepNewest(t.Context(), store, "named", 3); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, ch := range changes {
		t.Run("RefusedAfter"+ch.name, func(t *testing.T) {
			store, _ := seedRetention(t, now)
			plan, err := sweep.Prune(t.Context(), store, opts)
			if err != nil {
				t.Fatal(err)
			}
			ch.change(t, store)
			before := map[string]int{}
			for _, th := range []string{"active", "named", "idle", "idle-named", "young"} {
				l, _ := store.List(t.Context(), th)
				before[th] = len(l)
			}
			_, err = sweep.Prune(t.Context(), store, sweep.PruneOptions{Apply: plan.Plans})
			if !errors.Is(err, sweep.ErrPlanStale) {
				t.Fatalf("apply after a change: %v, want ErrPlanStale", err)
			}
			for th, n := range before {
				if l, _ := store.List(t.Context(), th); len(l) != n {
					t.Errorf("the refused apply changed %s: %d checkpoints, had %d", th, len(l), n)
				}
			}
		})
	}
}
