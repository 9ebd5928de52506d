package etcdstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/etcdspace"
	"github.com/cairnstore/cairn/internal/fulltest"
)

// outOfSpaceQuota is the quota of the member TestOutOfSpace fills.
const outOfSpaceQuota = 16 << 20

// fullStore is a store on a member with a small quota, filled through the
// store until etcd refused an append, with the checkpoints it acknowledged.
type fullStore struct {
	srv     *embedetcd.Server
	cli     *clientv3.Client
	s       *etcdstore.Store
	threads []string
	leases  map[string]*cairn.Lease
	acked   map[string][]cairn.Checkpoint // per thread, oldest first
}

// fillStore appends ~400 KiB checkpoints to three threads in turn until an
// append fails, which must be with ErrStoreFull.
func fillStore(t *testing.T) *fullStore {
	t.Helper()
	srv, cli := embedetcd.ForTestWith(t, embedetcd.Config{QuotaBackendBytes: outOfSpaceQuota})
	x := &fullStore{srv: srv, cli: cli, s: newStore(t, cli, "oos/", etcdstore.Options{}),
		threads: []string{"a", "b", "c"}, leases: map[string]*cairn.Lease{}}
	ctx := testContext(t)
	var writers []cairn.Writer
	for _, th := range append(x.threads, "d") { // d: the destination of a fork
		l, err := x.s.AcquireWriter(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		x.leases[th] = l
		if th != "d" {
			writers = append(writers, l.Writer)
		}
	}
	x.acked = fulltest.Fill(t, ctx, x.s, writers, func(n int, thread, parent string) cairn.Checkpoint {
		return largeCheckpoint(fulltest.ID(thread, n), thread, parent, 40, 400<<10)
	})
	return x
}

// heads checks that every thread's head is its last acknowledged append and
// that it restores as it was appended.
func (x *fullStore) checkHeads(t *testing.T) {
	t.Helper()
	ctx := testContext(t)
	for _, th := range x.threads {
		a := x.acked[th]
		want := a[len(a)-1]
		h, err := x.s.GetHead(ctx, th)
		if err != nil || h != want.ID {
			t.Fatalf("head of %q = %q, %v; want %q", th, h, err, want.ID)
		}
		got, err := x.s.Get(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if got.ParentCheckpointID != want.ParentCheckpointID || len(got.Files) != len(want.Files) ||
			!jsonEqual(got.Conversation, want.Conversation) {
			t.Fatalf("head %q does not restore as appended", h)
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

func (x *fullStore) verify(t *testing.T, when string) {
	t.Helper()
	rep, err := x.s.Verify(testContext(t), etcdstore.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("Verify %s: %+v", when, rep.Problems)
	}
}

// TestOutOfSpace fills an etcd member through the store, then checks that
// every write is refused with ErrStoreFull and leaves nothing behind, that
// KeepNewest with keep 1 frees the space with deletes under the alarm, that
// etcdspace.Recover lifts the alarm, and that appends work again on heads
// that restore. It logs the time from the refusal to the first append
// accepted again.
func TestOutOfSpace(t *testing.T) {
	x := fillStore(t)
	ctx := testContext(t)
	st, err := etcdspace.Read(ctx, x.cli)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Alarmed() {
		t.Fatalf("no NOSPACE alarm after the refusal: %+v", st)
	}
	x.checkHeads(t)
	x.verify(t, "when full")

	a := x.acked["a"]
	head := a[len(a)-1].ID
	writes := []struct {
		name  string
		write func(ctx context.Context) error
	}{
		{"Append", func(ctx context.Context) error {
			_, err := x.s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("small", "a", head, "k1"), ExpectedHeadID: head, Writer: x.leases["a"].Writer})
			return err
		}},
		{"AcquireWriter", func(ctx context.Context) error {
			_, err := x.s.AcquireWriter(ctx, "new")
			return err
		}},
		{"ForkFromCheckpoint", func(ctx context.Context) error {
			_, err := x.s.ForkFromCheckpoint(ctx, cairn.ForkInput{SourceThreadID: "a", SourceCheckpointID: head,
				DestinationThreadID: "d", DestinationCheckpointID: "f1", CreatedAt: 2, Writer: x.leases["d"].Writer})
			return err
		}},
		{"DeleteHead", func(ctx context.Context) error {
			return x.s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "a", CheckpointID: head, Writer: x.leases["a"].Writer})
		}},
		{"DeleteCheckpoints", func(ctx context.Context) error {
			_, err := x.s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "a", Keep: 1, Writer: x.leases["a"].Writer})
			return err
		}},
		{"ClaimBlobs", func(ctx context.Context) error {
			_, err := x.s.ClaimBlobs(ctx, x.leases["a"].Writer, []string{fileKey("fresh")})
			return err
		}},
		{"SaveThread", func(ctx context.Context) error {
			return x.s.Transcripts().SaveThread(ctx, "a", json.RawMessage(`[{"role":"user"}]`))
		}},
		{"InstanceUpsert", func(ctx context.Context) error {
			return x.s.Instances().Upsert(ctx, cairn.InstanceRecord{Key: "i1", Provider: "p", ProviderSandboxID: "s", ThreadID: "a", UpdatedAt: 1})
		}},
	}
	for _, w := range writes {
		t.Run("Refused/"+w.name, func(t *testing.T) {
			err := w.write(testContext(t))
			var u *etcdstore.UnknownOutcomeError
			if errors.As(err, &u) || !errors.Is(err, cairn.ErrStoreFull) {
				t.Fatalf("err = %v (code %q), want ErrStoreFull", err, cairn.CodeOf(err))
			}
		})
	}
	x.checkHeads(t)
	x.verify(t, "after the refused writes")

	// The way back: KeepNewest with keep 1 takes no lease (etcd refuses
	// it) and prunes with deletes only.
	began := time.Now()
	removed := 0
	for _, th := range x.threads {
		ids, err := cairn.KeepNewest(ctx, x.s, th, 1)
		if err != nil {
			t.Fatalf("KeepNewest(%q) under the alarm: %v", th, err)
		}
		if want := len(x.acked[th]) - 1; len(ids) != want {
			t.Fatalf("KeepNewest(%q) removed %d, want %d", th, len(ids), want)
		}
		removed += len(ids)
		x.acked[th] = x.acked[th][len(x.acked[th])-1:]
	}
	pruned := time.Now()
	x.checkHeads(t)
	x.verify(t, "after the prune under the alarm")

	rep, err := etcdspace.Recover(ctx, x.cli, etcdspace.RecoverOptions{})
	if err != nil {
		t.Fatalf("Recover: %v (%+v)", err, rep)
	}
	recovered := time.Now()
	if !rep.Disarmed || rep.After.Alarmed() {
		t.Fatalf("the alarm is still raised: %+v", rep)
	}
	for _, th := range x.threads {
		x.leases[th].Release(ctx)
		l, err := x.s.AcquireWriter(ctx, th)
		if err != nil {
			t.Fatalf("AcquireWriter(%q) after the recovery: %v", th, err)
		}
		x.leases[th] = l
		parent := x.acked[th][0].ID
		c := largeCheckpoint(th+"-after", th, parent, 40, 400<<10)
		if _, err := x.s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: parent, Writer: l.Writer}); err != nil {
			t.Fatalf("append to %q after the recovery: %v", th, err)
		}
		x.acked[th] = append(x.acked[th], c)
		if th == x.threads[0] {
			// The checks between the refusal and the prune are the test's,
			// not the way back's: the figure starts with the prune.
			t.Logf("from full to accepting appends: %v (prune under the alarm %v, %d checkpoints; recovery %v: db %d -> %d bytes of %d; first acquire and append %v)",
				time.Since(began), pruned.Sub(began), removed, recovered.Sub(pruned),
				rep.Before.Members[0].DBSize, rep.After.Members[0].DBSize, rep.After.Members[0].Quota, time.Since(recovered))
		}
	}
	x.checkHeads(t)
	x.verify(t, "after the recovery")
	for _, l := range x.leases {
		l.Release(ctx)
	}
}
