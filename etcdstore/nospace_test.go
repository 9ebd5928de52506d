package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// TestNoSpaceAnswers answers the commit of each write with etcd's NOSPACE
// error, once after etcd applied it (etcd does so for the write that crosses
// its quota) and once without applying it (the alarm is raised). The write
// must report what happened: success when it landed, ErrStoreFull, never an
// unknown outcome, when it did not, with the state untouched.
func TestNoSpaceAnswers(t *testing.T) {
	srv, _ := embedetcd.ForTest(t)
	n := 0
	writes := append(outcomeWrites(), outcomeWrite{
		name: "DeleteThread",
		setup: func(t *testing.T, x *outcomeFixture) {
			mustAppend(t, x, smallCheckpoint("c1", "t", "", "k1"), "")
		},
		write: func(ctx context.Context, x *outcomeFixture) error {
			_, err := x.s.DeleteThread(ctx, cairn.DeleteThreadInput{ThreadID: "t", Writer: x.lease.Writer})
			return err
		},
		want: state{Heads: map[string]string{"t": ""}, Lists: map[string][]string{"t": {}}, Refs: []cairn.BlobReference{}},
	})
	for _, w := range writes {
		for _, applied := range []bool{true, false} {
			n++
			prefix := fmt.Sprintf("nospace-%d/", n)
			t.Run(w.name+map[bool]string{true: "/Applied", false: "/Refused"}[applied], func(t *testing.T) {
				x := newOutcomeFixtureOn(t, srv, prefix)
				if w.setup != nil {
					w.setup(t, x)
				}
				before := readState(t, x.s, "t")
				x.failNext(applied, nil)
				x.f.failWith = rpctypes.ErrGRPCNoSpace
				err := w.write(testContext(t), x)
				x.f.reset()
				var u *etcdstore.UnknownOutcomeError
				if errors.As(err, &u) {
					t.Fatalf("err = %v: a NOSPACE answer is reported as an unknown outcome", err)
				}
				want := w.want
				if applied {
					if err != nil {
						t.Fatalf("err = %v for a write etcd applied", err)
					}
				} else {
					if !errors.Is(err, cairn.ErrStoreFull) {
						t.Fatalf("err = %v (code %q), want ErrStoreFull", err, cairn.CodeOf(err))
					}
					want = before
				}
				if got := readState(t, x.s, "t"); !reflect.DeepEqual(got, want) {
					t.Fatalf("state %+v, want %+v", got, want)
				}
			})
		}
	}
}

// TestNoSpaceAcquire answers AcquireWriter's transaction with NOSPACE, after
// etcd applied it and without: the first must hand out the lease it took,
// the second ErrStoreFull, and the thread must be free for the next writer.
func TestNoSpaceAcquire(t *testing.T) {
	srv, _ := embedetcd.ForTest(t)
	for i, applied := range []bool{true, false} {
		t.Run(map[bool]string{true: "Applied", false: "Refused"}[applied], func(t *testing.T) {
			x := newOutcomeFixtureOn(t, srv, fmt.Sprintf("nospace-acquire-%d/", i))
			x.failNext(applied, nil)
			x.f.failWith = rpctypes.ErrGRPCNoSpace
			l, err := x.s.AcquireWriter(testContext(t), "u")
			x.f.reset()
			if !applied {
				if !errors.Is(err, cairn.ErrStoreFull) {
					t.Fatalf("err = %v, want ErrStoreFull", err)
				}
				l, err = x.s.AcquireWriter(testContext(t), "u") // nothing holds the thread
				if err != nil {
					t.Fatal(err)
				}
			}
			if err != nil {
				t.Fatalf("err = %v for an acquire etcd applied", err)
			}
			if _, err := x.s.Append(testContext(t), cairn.AppendInput{Checkpoint: smallCheckpoint("u1", "u", "", "k1"), Writer: l.Writer}); err != nil {
				t.Fatalf("append under the acquired lease: %v", err)
			}
			l.Release(testContext(t))
		})
	}
}
