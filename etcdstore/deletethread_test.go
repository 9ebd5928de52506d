package etcdstore_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// TestDeleteThreadOneTransaction deletes threads of every shape, from a few
// small checkpoints to more records than one transaction has operations and
// checkpoints whose bodies and references span chunks and shards. Every
// write transaction after the first fails (sticky), so what the reads show
// is the work of that one transaction alone; Verify must find no problem,
// and the records the cleanup could not delete are garbage no read sees.
func TestDeleteThreadOneTransaction(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		large bool
	}{
		{"ThreeSmall", 3, false},
		{"MoreRecordsThanATransaction", 2 * etcdstore.MaxTxnOps, false},
		{"LargeBodiesAndShards", 4, true},
	}
	// One member for every case, each case under a prefix of its own.
	srv, _ := embedetcd.ForTest(t)
	for _, tc := range cases {
		for _, cleanupFails := range []bool{false, true} {
			name := fmt.Sprintf("%s/cleanupFails=%v", tc.name, cleanupFails)
			t.Run(name, func(t *testing.T) {
				f := &faults{method: "KV/Txn", writesOnly: true}
				cli := faultyClient(t, srv, f)
				ctx := testContext(t)
				s := newStore(t, cli, "deletethread-"+strings.ReplaceAll(name, "/", "-")+"/", etcdstore.Options{})
				lease, err := s.AcquireWriter(ctx, "t")
				if err != nil {
					t.Fatal(err)
				}
				other, err := s.AcquireWriter(ctx, "o")
				if err != nil {
					t.Fatal(err)
				}
				shared := "shared"
				if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("o1", "o", "", shared), Writer: other.Writer}); err != nil {
					t.Fatal(err)
				}
				before := readState(t, s, "o")
				var want []string
				prev := ""
				for i := range tc.n {
					id := fmt.Sprintf("c%03d", i)
					c := smallCheckpoint(id, "t", prev, shared, id)
					if tc.large {
						c = largeCheckpoint(id, "t", prev, 300, 300<<10)
					}
					if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: prev, Writer: lease.Writer}); err != nil {
						t.Fatal(err)
					}
					want, prev = append(want, id), id
				}
				if cleanupFails {
					f.reset()
					f.failAt.Store(2)
					f.sticky.Store(true)
				}
				got, err := s.DeleteThread(ctx, cairn.DeleteThreadInput{ThreadID: "t", Writer: lease.Writer})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("DeleteThread removed %d ids %q, want %d", len(got), got, len(want))
				}
				f.reset()
				after := readState(t, s, "o", "t")
				if after.Heads["t"] != "" || len(after.Lists["t"]) != 0 {
					t.Errorf("after DeleteThread: head %q, %d checkpoints", after.Heads["t"], len(after.Lists["t"]))
				}
				if !reflect.DeepEqual(after.Refs, before.Refs) {
					t.Errorf("%d references after DeleteThread, want the other thread's %d: %v", len(after.Refs), len(before.Refs), after.Refs[:min(len(after.Refs), 3)])
				}
				for _, id := range []string{want[0], want[len(want)-1]} {
					if c, err := s.Get(ctx, id); err != nil || c != nil {
						t.Errorf("Get(%s) = %v, %v; want nil", id, c, err)
					}
				}
				r, err := s.Verify(ctx, etcdstore.VerifyOptions{})
				if err != nil || !r.OK() {
					t.Fatalf("verify: %v, %v", r.Problems, err)
				}
				if !cleanupFails && len(r.Garbage) != 0 {
					t.Errorf("garbage after DeleteThread: %v", r.Garbage)
				}
				for _, g := range r.Garbage {
					if !strings.Contains(g.Kind, "pruned") && !strings.Contains(g.Kind, "index") {
						t.Errorf("garbage of an unexpected kind after DeleteThread: %+v", g)
					}
				}
				// The thread grows again above its floor.
				if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint(want[0], "t", "", "again"), Writer: lease.Writer}); err != nil {
					t.Fatalf("append after DeleteThread: %v", err)
				}
				if st := readState(t, s, "t"); !reflect.DeepEqual(st.Lists["t"], []string{want[0]}) {
					t.Errorf("after a new append: %q", st.Lists["t"])
				}
			})
		}
	}
}

// TestDeleteThreadUnknownOutcome loses the answer of the delete's
// transaction, or fails it before etcd sees it; the store must resolve the
// outcome itself and report the removed ids once.
func TestDeleteThreadUnknownOutcome(t *testing.T) {
	srv, _ := embedetcd.ForTest(t)
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			f := &faults{method: "KV/Txn", writesOnly: true}
			cli := faultyClient(t, srv, f)
			ctx := testContext(t)
			s := newStore(t, cli, fmt.Sprintf("deletethread-outcome-%v/", applied), etcdstore.Options{})
			lease, err := s.AcquireWriter(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			prev := ""
			for _, id := range []string{"c1", "c2", "c3"} {
				if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint(id, "t", prev, id), ExpectedHeadID: prev, Writer: lease.Writer}); err != nil {
					t.Fatal(err)
				}
				prev = id
			}
			f.reset()
			f.failAt.Store(1)
			f.after.Store(applied)
			got, err := s.DeleteThread(ctx, cairn.DeleteThreadInput{ThreadID: "t", Writer: lease.Writer})
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"c1", "c2", "c3"}; !reflect.DeepEqual(got, want) {
				t.Errorf("DeleteThread removed %q, want %q", got, want)
			}
			if st := readState(t, s, "t"); st.Heads["t"] != "" || len(st.Lists["t"]) != 0 || len(st.Refs) != 0 {
				t.Errorf("after DeleteThread: %+v", st)
			}
		})
	}
}
