package sweep_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/sweep"
)

// TestDeleteWithin pauses a sweep after a batch moved to deleting for longer
// than DeleteWithin, as a sweeper stopped (SIGSTOP, a VM pause) past its
// lock's TTL would be: the batch is not sent, its keys stay in the deleting
// state, and the next run deletes and settles them. Without the bound the
// paused run deletes on waking, whatever happened meanwhile.
func TestDeleteWithin(t *testing.T) {
	for _, tc := range []struct {
		name      string
		within    time.Duration
		wantSent  bool
		wantError error
	}{
		{"PastTheBound", 20 * time.Millisecond, false, sweep.ErrStopped},
		{"NoBound", 0, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newOnlineWorld(t)
			w.uploadAge = 48 * time.Hour
			garbage := bucket.FileKey([]byte("garbage of " + tc.name))
			w.put(t, garbage, 48*time.Hour)
			opts := sweep.WithHooks(sweep.Options{OlderThan: 0, Now: w.clock.Now, DeleteWithin: tc.within}, sweep.Hooks{
				AfterBegin: func(ctx context.Context, moved []cairn.GCRecord) {
					time.Sleep(3 * tc.within) // the pause
				},
			})
			rep, err := sweep.Sweep(t.Context(), w.store, w.blobs, opts)
			if !errors.Is(err, tc.wantError) && (tc.wantError != nil || err != nil) {
				t.Fatalf("Sweep error = %v; want %v", err, tc.wantError)
			}
			sent := w.blobs.ev.count("delete") > 0
			if sent != tc.wantSent {
				t.Fatalf("delete sent = %v; want %v (report %+v)", sent, tc.wantSent, rep)
			}
			if tc.wantSent {
				return
			}
			if r, ok := w.records(t)[garbage]; !ok || r.State != cairn.GCDeleting {
				t.Fatalf("record after the late batch = %+v (present %v); want deleting", r, ok)
			}
			// A writer must wait: the key is busy.
			if busy := w.claim(t, "writer", garbage); len(busy) != 1 {
				t.Fatalf("claim of a key left deleting: busy %v; want it busy", busy)
			}
			w.release("writer")
			// The next run, on time, settles it.
			rep, err = sweep.Sweep(t.Context(), w.store, w.blobs, sweep.Options{OlderThan: 0, Now: w.clock.Now, DeleteWithin: time.Minute})
			if err != nil || rep.Unsettled != 1 || len(rep.Deleted) != 1 || rep.Deleted[0] != garbage {
				t.Fatalf("next run: %v, unsettled %d, deleted %v; want the key settled", err, rep.Unsettled, rep.Deleted)
			}
			if _, ok := w.records(t)[garbage]; ok {
				t.Fatalf("the record is still there after the settling run")
			}
		})
	}
}
