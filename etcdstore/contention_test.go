package etcdstore_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// TestPruneRacingAppends races DeleteCheckpoints against a stream of appends
// by the same lease holder on the same thread, round after round. Neither
// write can fail by the contract (a prune leaves the head where it is), so
// each must succeed however often it loses its compare-and-swap, and what is
// left must be a suffix of what was appended, ending at the head.
func TestPruneRacingAppends(t *testing.T) {
	const (
		rounds = 200
		keep   = 2
		// maxAppends bounds the appends racing one prune, so that a round
		// ends even if the prune were starved.
		maxAppends = 10
	)
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	s := newStore(t, cli, "contention/", etcdstore.Options{})
	lease, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	var appended []string
	head := ""
	appendNext := func() error {
		id := fmt.Sprintf("c%d", len(appended))
		if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint(id, "t", head, "k"+id), ExpectedHeadID: head, Writer: lease.Writer}); err != nil {
			return fmt.Errorf("append %s: %w", id, err)
		}
		appended, head = append(appended, id), id
		return nil
	}
	for range keep {
		if err := appendNext(); err != nil {
			t.Fatal(err)
		}
	}
	live, racing := keep, 0 // checkpoints on the thread, appends during prunes
	for round := range rounds {
		var (
			wg        sync.WaitGroup
			done      = make(chan struct{})
			pruneErr  error
			removed   []string
			appendErr error
			start     = len(appended)
		)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			removed, pruneErr = s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: keep, Writer: lease.Writer})
		}()
		// At least one append races the prune; more follow until it ends.
	racing:
		for range maxAppends {
			if appendErr = appendNext(); appendErr != nil {
				break
			}
			select {
			case <-done:
				break racing
			default:
			}
		}
		wg.Wait()
		if pruneErr != nil || appendErr != nil {
			t.Fatalf("round %d: prune: %v; append: %v", round, pruneErr, appendErr)
		}
		// The prune removed at least what lay beyond keep before it began.
		if len(removed) < live-keep {
			t.Fatalf("round %d: the prune removed %v of %d checkpoints, keeping %d", round, removed, live, keep)
		}
		list, err := s.List(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range list {
			ids = append(ids, c.ID)
		}
		slices.Sort(ids)
		want := slices.Clone(appended[len(appended)-len(ids):])
		slices.Sort(want)
		if len(ids) < keep || !slices.Equal(ids, want) {
			t.Fatalf("round %d: listed %v, want a suffix of at least %d of %v", round, ids, keep, appended)
		}
		for _, id := range removed {
			if slices.Contains(ids, id) {
				t.Fatalf("round %d: %s was removed and is still listed", round, id)
			}
		}
		live = len(ids)
		racing += len(appended) - start
	}
	t.Logf("%d appends raced %d prunes", racing, rounds)
}
