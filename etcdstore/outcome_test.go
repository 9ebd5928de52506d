package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// outcomeFixture is a store whose client fails the next KV transaction on
// demand, before or after etcd applies it.
type outcomeFixture struct {
	s     *etcdstore.Store
	f     *faults
	lease *cairn.Lease
	other *cairn.Lease
	clock *clock
}

// newOutcomeFixture returns a fixture on a member of its own.
func newOutcomeFixture(t *testing.T) *outcomeFixture {
	t.Helper()
	srv, _ := embedetcd.ForTest(t)
	return newOutcomeFixtureOn(t, srv, "outcome/")
}

// newOutcomeFixtureOn returns a fixture on srv, with a client (and faults) of
// its own and the store under prefix: the cases of one test share a member,
// each under a prefix of its own, as the stores of a cluster do.
func newOutcomeFixtureOn(t *testing.T, srv *embedetcd.Server, prefix string) *outcomeFixture {
	t.Helper()
	f := &faults{method: "KV/Txn", writesOnly: true}
	cli := faultyClient(t, srv, f)
	clk := &clock{ms: 1000}
	s := newStore(t, cli, prefix, etcdstore.Options{Options: cairn.Options{Now: clk.Now}})
	lease, err := s.AcquireWriter(testContext(t), "t")
	if err != nil {
		t.Fatal(err)
	}
	return &outcomeFixture{s: s, f: f, lease: lease, clock: clk}
}

// failNext fails the next transaction; applied says whether etcd applies it
// first (its answer is lost) or never sees it. cancel, when set, runs as the
// failure happens, as a deadline expiring during the commit would.
func (x *outcomeFixture) failNext(applied bool, cancel func()) {
	x.f.reset()
	x.f.failAt.Store(1)
	x.f.after.Store(applied)
	x.f.onFail = cancel
}

// TestUnknownOutcomes fails the commit of each write, with its answer lost or
// with the write never applied, while the call's context still has time (the
// store resolves it) and after the context ended (the caller resolves it with
// Retry). Each write must take effect exactly once.
// outcomeWrite is a write of a thread: setup prepares the fixture, write
// runs it once, want is the state of thread "t" once it has taken effect.
type outcomeWrite struct {
	name  string
	setup func(t *testing.T, x *outcomeFixture)
	write func(ctx context.Context, x *outcomeFixture) error
	want  state
}

// outcomeWrites are the writes whose outcome the store settles by the thread
// record's nonce.
func outcomeWrites() []outcomeWrite {
	return []outcomeWrite{
		{
			name: "Append",
			write: func(ctx context.Context, x *outcomeFixture) error {
				_, err := x.s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("c1", "t", "", "k1"), Writer: x.lease.Writer})
				return err
			},
			want: state{Heads: map[string]string{"t": "c1"}, Lists: map[string][]string{"t": {"c1"}}, Refs: []cairn.BlobReference{{Key: fileKey("k1"), References: 1}}},
		},
		{
			name: "DeleteHead",
			setup: func(t *testing.T, x *outcomeFixture) {
				mustAppend(t, x, smallCheckpoint("c1", "t", "", "k1"), "")
				mustAppend(t, x, smallCheckpoint("c2", "t", "c1", "k1"), "c1")
			},
			write: func(ctx context.Context, x *outcomeFixture) error {
				return x.s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "t", CheckpointID: "c2", Writer: x.lease.Writer})
			},
			want: state{Heads: map[string]string{"t": "c1"}, Lists: map[string][]string{"t": {"c1"}}, Refs: []cairn.BlobReference{{Key: fileKey("k1"), References: 1}}},
		},
		{
			name: "DeleteCheckpoints",
			setup: func(t *testing.T, x *outcomeFixture) {
				mustAppend(t, x, smallCheckpoint("c1", "t", "", "k1"), "")
				mustAppend(t, x, smallCheckpoint("c2", "t", "c1", "k1"), "c1")
			},
			write: func(ctx context.Context, x *outcomeFixture) error {
				_, err := x.s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: 1, Writer: x.lease.Writer})
				return err
			},
			want: state{Heads: map[string]string{"t": "c2"}, Lists: map[string][]string{"t": {"c2"}}, Refs: []cairn.BlobReference{{Key: fileKey("k1"), References: 1}}},
		},
		{
			name: "ForkFromCheckpoint",
			setup: func(t *testing.T, x *outcomeFixture) {
				mustAppend(t, x, smallCheckpoint("c1", "t", "", "k1"), "")
				d, err := x.s.AcquireWriter(testContext(t), "d")
				if err != nil {
					t.Fatal(err)
				}
				x.other = d
			},
			write: func(ctx context.Context, x *outcomeFixture) error {
				_, err := x.s.ForkFromCheckpoint(ctx, cairn.ForkInput{SourceThreadID: "t", SourceCheckpointID: "c1",
					DestinationThreadID: "d", DestinationCheckpointID: "f1", CreatedAt: 2, Writer: x.other.Writer})
				return err
			},
			want: state{Heads: map[string]string{"t": "c1"}, Lists: map[string][]string{"t": {"c1"}}, Refs: []cairn.BlobReference{{Key: fileKey("k1"), References: 2}}},
		},
	}
}

func TestUnknownOutcomes(t *testing.T) {
	writes := outcomeWrites()
	srv, _ := embedetcd.ForTest(t)
	n := 0
	for _, w := range writes {
		for _, applied := range []bool{true, false} {
			for _, byCaller := range []bool{false, true} {
				name := w.name + map[bool]string{true: "/AnswerLost", false: "/NotApplied"}[applied] +
					map[bool]string{true: "/ResolvedByRetry", false: "/ResolvedByStore"}[byCaller]
				n++
				prefix := fmt.Sprintf("outcome-%d/", n)
				t.Run(name, func(t *testing.T) {
					x := newOutcomeFixtureOn(t, srv, prefix)
					if w.setup != nil {
						w.setup(t, x)
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					if byCaller {
						x.failNext(applied, cancel)
					} else {
						x.failNext(applied, nil)
					}
					err := w.write(ctx, x)
					x.f.reset()
					if byCaller {
						var u *etcdstore.UnknownOutcomeError
						if !errors.As(err, &u) || !errors.Is(err, context.Canceled) {
							t.Fatalf("err = %v, want an UnknownOutcomeError wrapping context.Canceled", err)
						}
						if err := u.Retry(testContext(t)); err != nil {
							t.Fatalf("Retry: %v", err)
						}
					} else if err != nil {
						t.Fatalf("the store did not resolve the outcome: %v", err)
					}
					if got := readState(t, x.s, "t"); !reflect.DeepEqual(got, w.want) {
						t.Fatalf("state %+v, want %+v", got, w.want)
					}
				})
			}
		}
	}
}

func mustAppend(t *testing.T, x *outcomeFixture, c cairn.Checkpoint, expected string) {
	t.Helper()
	if _, err := x.s.Append(testContext(t), cairn.AppendInput{Checkpoint: c, ExpectedHeadID: expected, Writer: x.lease.Writer}); err != nil {
		t.Fatal(err)
	}
}

// TestRetryAfterLeaseExpiry resolves an append that never landed after the
// writer lease expired. The retry must not write. While nothing else has
// written the thread, the lost attempt could still be applied by etcd, so the
// outcome stays unknown (wrapping WRITER_LOST); once another writer has
// written the thread, the lost attempt can never apply and the answer is a
// definite WRITER_LOST.
func TestRetryAfterLeaseExpiry(t *testing.T) {
	x := newOutcomeFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	x.failNext(false, cancel)
	_, err := x.s.Append(ctx, cairn.AppendInput{Checkpoint: smallCheckpoint("c1", "t", "", "k1"), Writer: x.lease.Writer})
	x.f.reset()
	var u *etcdstore.UnknownOutcomeError
	if !errors.As(err, &u) {
		t.Fatalf("err = %v, want an UnknownOutcomeError", err)
	}
	x.clock.Add(cairn.Millis(cairn.DefaultLeaseDuration))
	err = u.Retry(testContext(t))
	var still *etcdstore.UnknownOutcomeError
	if !errors.Is(err, cairn.ErrWriterLost) || !errors.As(err, &still) {
		t.Fatalf("Retry after expiry: %v, want an unknown outcome wrapping WRITER_LOST", err)
	}
	if got := readState(t, x.s, "t"); got.Heads["t"] != "" || len(got.Refs) != 0 {
		t.Fatalf("a retry after expiry wrote: %+v", got)
	}
	// Another writer takes the thread over and writes it.
	next, err := x.s.AcquireWriter(testContext(t), "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.s.Append(testContext(t), cairn.AppendInput{Checkpoint: smallCheckpoint("c2", "t", "", "k2"), Writer: next.Writer}); err != nil {
		t.Fatal(err)
	}
	err = still.Retry(testContext(t))
	if !errors.Is(err, cairn.ErrWriterLost) || errors.As(err, &still) {
		t.Fatalf("Retry after another write: %v, want a definite WRITER_LOST", err)
	}
	if got := readState(t, x.s, "t"); got.Heads["t"] != "c2" || len(got.Lists["t"]) != 1 {
		t.Fatalf("state %+v", got)
	}
}

// TestAcquireAnswerLost: the answer of an acquire's transaction is lost after
// etcd applied it. The store's retry finds its own token and takes that lease,
// with the etcd lease the lost attempt attached the record to: renewing keeps
// it, releasing revokes it, and that etcd lease is never handed to another
// record (which its revoke would end too).
func TestAcquireAnswerLost(t *testing.T) {
	x := newOutcomeFixture(t)
	ctx := testContext(t)
	x.failNext(true, nil)
	l, err := x.s.AcquireWriter(ctx, "lost")
	if err != nil {
		t.Fatalf("AcquireWriter with its answer lost: %v", err)
	}
	if got := x.f.calls.Load(); got < 2 {
		t.Fatalf("%d write transactions; want the lost one and the retry", got)
	}
	// Other records, acquired after, must not share its etcd lease.
	var others []*cairn.Lease
	for i := range 6 {
		o, err := x.s.AcquireWriter(ctx, fmt.Sprintf("other-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, o)
	}
	if _, err := l.Renew(ctx); err != nil {
		t.Fatalf("Renew of the lease taken by the retry: %v", err)
	}
	l.Release(ctx)
	for _, o := range others {
		if _, err := o.Renew(ctx); err != nil {
			t.Fatalf("the release of the lease whose answer was lost ended another lease: %v", err)
		}
	}
	if _, err := x.s.AcquireWriter(ctx, "lost"); err != nil {
		t.Fatalf("AcquireWriter after the release: %v", err)
	}
}
