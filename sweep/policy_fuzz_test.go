package sweep_test

import (
	"slices"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/sweep"
)

// FuzzPolicyPlan checks the rules of Policy.Plan on random chains: the head
// and protected checkpoints stay, only a tail of the chain goes, Keep and
// MaxAge keep what they promise, and an idle thread goes whole only when
// nothing in it is protected.
func FuzzPolicyPlan(f *testing.F) {
	f.Add([]byte{50, 40, 30, 20, 10}, uint32(0b00010), uint8(1), uint8(25), uint8(0))
	f.Add([]byte{5, 90, 1, 200}, uint32(0), uint8(0), uint8(3), uint8(100))
	f.Add([]byte{1}, uint32(1), uint8(3), uint8(0), uint8(1))
	f.Fuzz(func(t *testing.T, ages []byte, named uint32, keep, maxAgeH, idleH uint8) {
		if len(ages) == 0 || len(ages) > 30 {
			return
		}
		p := sweep.Policy{Keep: int(keep % 8), MaxAge: time.Duration(maxAgeH) * time.Hour, DeleteIdle: time.Duration(idleH) * time.Hour,
			Protect: []string{cairn.ReasonNamed}}
		if p.Validate() != nil {
			return
		}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		durs := make([]time.Duration, len(ages))
		reasons := map[int]string{}
		for i, a := range ages {
			durs[i] = time.Duration(a) * time.Hour
			if named&(1<<i) != 0 {
				reasons[i+1] = cairn.ReasonNamed
			}
		}
		head, list := chainOf(now, durs, reasons, nil)
		got := p.Plan(now, "t", head, list)
		// chainOf builds c1 <- ... <- cn; index i from the head is c(n-i).
		n := len(list)
		byID := map[string]cairn.Checkpoint{}
		for _, c := range list {
			byID[c.ID] = c
		}
		if got.DeleteThread {
			if len(got.Removed) != n || len(reasons) != 0 {
				t.Fatalf("deleted a thread of %d with %d named, removing %d", n, len(reasons), len(got.Removed))
			}
			return
		}
		if got.Keep < 1 || got.Keep > n || len(got.Removed) != n-got.Keep {
			t.Fatalf("keep %d of %d, removed %d", got.Keep, n, len(got.Removed))
		}
		// The removed are the oldest of the chain, oldest first.
		for i, id := range got.Removed {
			if want := list[i].ID; id != want {
				t.Fatalf("removed %q, want the chain's tail %q", got.Removed, want)
			}
		}
		if slices.Contains(got.Removed, head) {
			t.Fatal("the head was removed")
		}
		for _, id := range got.Removed {
			c := byID[id]
			if c.Reason == cairn.ReasonNamed {
				t.Fatalf("protected %s was removed", id)
			}
			if p.MaxAge > 0 && float64(now.UnixMilli())-c.CreatedAt <= float64(p.MaxAge.Milliseconds()) {
				t.Fatalf("%s is younger than MaxAge and was removed", id)
			}
		}
		if p.Keep > 0 && got.Keep < min(p.Keep, n) {
			t.Fatalf("keeps %d, fewer than Keep %d", got.Keep, p.Keep)
		}
		if p.Keep == 0 && p.MaxAge == 0 && len(got.Removed) != 0 {
			t.Fatalf("no pruning rule, yet removed %q", got.Removed)
		}
	})
}
