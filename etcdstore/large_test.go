package etcdstore_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

const (
	largeEntries = 20000
	largeConv    = 4 << 20
)

// TestLargeCheckpointLifecycle takes checkpoints of 20,000 files with 20,000
// distinct blob keys and a 4 MiB conversation through every operation on a
// server with default limits.
func TestLargeCheckpointLifecycle(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	s := newStore(t, cli, "large/", etcdstore.Options{})
	lease, err := s.AcquireWriter(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	c1 := largeCheckpoint("c1", "main", "", largeEntries, largeConv)
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c1, Writer: lease.Writer}); err != nil {
		t.Fatalf("append c1: %v", err)
	}
	got, err := s.Get(ctx, "c1")
	if err != nil || got == nil {
		t.Fatalf("get c1: %v, %v", got, err)
	}
	if !reflect.DeepEqual(*got, c1) {
		t.Fatal("c1 read back differs from what was appended")
	}
	// c2 shares its first half of blob keys with c1.
	c2 := largeCheckpoint("c2", "main", "c1", largeEntries, largeConv)
	copy(c2.Files[:largeEntries/2], c1.Files[:largeEntries/2])
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c2, ExpectedHeadID: "c1", Writer: lease.Writer}); err != nil {
		t.Fatalf("append c2: %v", err)
	}
	list, err := s.List(ctx, "main")
	if err != nil || len(list) != 2 || !reflect.DeepEqual(list[0], c1) || !reflect.DeepEqual(list[1], c2) {
		t.Fatalf("list: %d checkpoints, %v", len(list), err)
	}
	checkRefs(t, s, map[string]int{}, c1, c2)

	forkLease, err := s.AcquireWriter(ctx, "fork")
	if err != nil {
		t.Fatal(err)
	}
	root, err := s.ForkFromCheckpoint(ctx, cairn.ForkInput{SourceThreadID: "main", SourceCheckpointID: "c1",
		DestinationThreadID: "fork", DestinationCheckpointID: "f1", CreatedAt: 2, Writer: forkLease.Writer})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	want := cairn.Checkpoint{ID: "f1", ThreadID: "fork", CreatedAt: 2, Reason: cairn.ReasonForkRoot, Files: c1.Files, Conversation: c1.Conversation, Artifacts: c1.Artifacts}
	if !reflect.DeepEqual(*root, want) {
		t.Fatal("fork root differs from its source")
	}
	if got, err := s.Get(ctx, "f1"); err != nil || !reflect.DeepEqual(*got, want) {
		t.Fatalf("get fork root: %v", err)
	}
	if tr, err := s.Transcripts().LoadThread(ctx, "fork"); err != nil || string(tr) != string(c1.Conversation) {
		t.Fatalf("fork transcript: %d bytes, %v", len(tr), err)
	}
	checkRefs(t, s, map[string]int{}, c1, c2, *root)

	removed, err := s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "main", Keep: 1, Writer: lease.Writer})
	if err != nil || !reflect.DeepEqual(removed, []string{"c1"}) {
		t.Fatalf("prune: %v, %v", removed, err)
	}
	checkRefs(t, s, map[string]int{}, c2, *root)
	if err := s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "main", CheckpointID: "c2", Writer: lease.Writer}); err != nil {
		t.Fatalf("delete head c2: %v", err)
	}
	if err := s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "fork", CheckpointID: "f1", Writer: forkLease.Writer}); err != nil {
		t.Fatalf("delete head f1: %v", err)
	}
	if st := readState(t, s, "main", "fork"); len(st.Refs) != 0 || st.Heads["main"] != "" || len(st.Lists["main"]) != 0 || len(st.Lists["fork"]) != 0 {
		t.Fatalf("state after deleting everything: %+v", st)
	}
	// Only the thread records and the fork's transcript (record and chunks)
	// remain: no checkpoint, body, index or reference record.
	l := s.Layout()
	for k := range visibleKeys(t, cli, s) {
		switch {
		case k == string(l.Thread("main")), k == string(l.Thread("fork")), k == string(l.Transcript("fork")),
			strings.HasPrefix(k, string(l.TranscriptChunks("fork"))):
		default:
			t.Errorf("key %q remains after every checkpoint was deleted", k)
		}
	}
}

// checkRefs compares the store's references with those recomputed from cs.
func checkRefs(t *testing.T, s *etcdstore.Store, want map[string]int, cs ...cairn.Checkpoint) {
	t.Helper()
	for _, c := range cs {
		for _, k := range c.BlobKeys() {
			want[k]++
		}
	}
	refs, err := s.ListBlobReferences(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != len(want) {
		t.Fatalf("%d referenced keys, want %d", len(refs), len(want))
	}
	for i, r := range refs {
		if want[r.Key] != r.References {
			t.Fatalf("key %s has %d references, want %d", r.Key, r.References, want[r.Key])
		}
		if i > 0 && refs[i-1].Key >= r.Key {
			t.Fatalf("references out of order at %d", i)
		}
	}
}

// TestLargeAppendAllOrNothing fails a large append at every one of its
// requests in turn and checks that a failed append leaves no visible trace,
// that what it staged is removed, and that resolving the failed write then
// applies it exactly once.
func TestLargeAppendAllOrNothing(t *testing.T) {
	srv, _ := embedetcd.ForTest(t)
	f := &faults{method: "KV/"}
	cli := faultyClient(t, srv, f)
	ctx := testContext(t)

	// Count the requests of a clean append.
	s := newStore(t, cli, "count/", etcdstore.Options{})
	lease, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	c := largeCheckpoint("big", "t", "", largeEntries, largeConv)
	f.reset()
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: lease.Writer}); err != nil {
		t.Fatal(err)
	}
	n := f.calls.Load()
	t.Logf("a large append takes %d KV requests", n)

	for k := int64(1); k <= n; k++ {
		t.Run(fmt.Sprintf("FailFromRequest%02d", k), func(t *testing.T) {
			// A context of its own: one shared by every subtest would end
			// part way on a loaded machine.
			ctx := testContext(t)
			s := newStore(t, cli, fmt.Sprintf("fail%02d/", k), etcdstore.Options{})
			lease, err := s.AcquireWriter(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			before, keysBefore := readState(t, s, "t"), visibleKeys(t, cli, s)
			f.reset()
			f.failAt.Store(k)
			f.sticky.Store(true)
			_, err = s.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: lease.Writer})
			f.reset()
			if err == nil {
				t.Fatal("append succeeded although every request from this one on failed")
			}
			if after := readState(t, s, "t"); !reflect.DeepEqual(before, after) {
				t.Fatalf("failed append changed the state:\nbefore %+v\nafter  %+v", before, after)
			}
			if after := visibleKeys(t, cli, s); !reflect.DeepEqual(keysBefore, after) {
				t.Fatalf("failed append left visible keys: %d before, %d after", len(keysBefore), len(after))
			}
			if n := leasedKeys(t, cli, s); n != 2 {
				t.Fatalf("%d leased keys remain, want the 2 of the writer record", n)
			}
			// A failure before the publish is a plain error: nothing was
			// written, and appending again applies the checkpoint. A failure
			// of the publish leaves the outcome unknown until resolved.
			var u *etcdstore.UnknownOutcomeError
			if errors.As(err, &u) {
				if err := u.Retry(ctx); err != nil {
					t.Fatalf("retry: %v", err)
				}
				if err := u.Retry(ctx); err != nil {
					t.Fatalf("second retry: %v", err)
				}
			} else if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: lease.Writer}); err != nil {
				t.Fatalf("append again: %v", err)
			}
			checkRefs(t, s, map[string]int{}, c)
			if h, _ := s.GetHead(ctx, "t"); h != "big" {
				t.Fatalf("head %q after retry", h)
			}
		})
	}
}
