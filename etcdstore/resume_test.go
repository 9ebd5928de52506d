package etcdstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// TestResumeWriter: a lease acquired through one store is renewed, used and
// released through another store on the same prefix (another replica), and
// a writer that is not the thread's record is refused.
func TestResumeWriter(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	clk := &clock{ms: 1000}
	opts := etcdstore.Options{Options: cairn.Options{Now: clk.Now, LeaseDuration: 10 * time.Second, RenewAfter: 3 * time.Second}}
	const prefix = "resume/"
	a := newStore(t, cli, prefix, opts)
	b := newStore(t, cli, prefix, opts)

	t.Run("RenewAppendReleaseThroughAnother", func(t *testing.T) {
		la, err := a.AcquireWriter(ctx, "t1")
		if err != nil {
			t.Fatal(err)
		}
		lb, err := b.ResumeWriter(ctx, la.Writer)
		if err != nil {
			t.Fatalf("ResumeWriter of a current lease: %v", err)
		}
		if lb.Writer != la.Writer || lb.ExpiresAt() != la.ExpiresAt() || lb.RenewAfter != la.RenewAfter {
			t.Fatalf("resumed lease %+v (expires %v), want %+v (expires %v)", lb.Writer, lb.ExpiresAt(), la.Writer, la.ExpiresAt())
		}
		clk.Add(5000)
		exp, err := lb.Renew(ctx)
		if err != nil || exp != clk.Now()+10000 {
			t.Fatalf("Renew through the other store: %v, %v; want %v", exp, err, clk.Now()+10000)
		}
		c := cairn.Checkpoint{ID: "c1", ThreadID: "t1", CreatedAt: 1, Reason: cairn.ReasonAutomatic}
		if _, err := b.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: lb.Writer}); err != nil {
			t.Fatalf("Append with the resumed lease: %v", err)
		}
		lb.Release(ctx)
		if _, err := la.Renew(ctx); !errors.Is(err, cairn.ErrWriterLost) {
			t.Fatalf("Renew of the original after a release through the other store: %v, want ErrWriterLost", err)
		}
		if _, err := a.ResumeWriter(ctx, la.Writer); !errors.Is(err, cairn.ErrWriterLost) {
			t.Fatalf("ResumeWriter after the release: %v, want ErrWriterLost", err)
		}
		if _, err := a.AcquireWriter(ctx, "t1"); err != nil {
			t.Fatalf("AcquireWriter after the release: %v", err)
		}
	})

	t.Run("ExpiredCanStillRelease", func(t *testing.T) {
		la, err := a.AcquireWriter(ctx, "t2")
		if err != nil {
			t.Fatal(err)
		}
		clk.Add(20000)
		lb, err := b.ResumeWriter(ctx, la.Writer)
		if err != nil {
			t.Fatalf("ResumeWriter of an expired lease nobody took over: %v", err)
		}
		if lb.ExpiresAt() > clk.Now() {
			t.Fatalf("expiry %v, want the stored one, before now %v", lb.ExpiresAt(), clk.Now())
		}
		if _, err := lb.Renew(ctx); !errors.Is(err, cairn.ErrWriterLost) {
			t.Fatalf("Renew of an expired lease: %v, want ErrWriterLost", err)
		}
	})

	la, err := a.AcquireWriter(ctx, "t3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Release(ctx) })
	for _, c := range []struct {
		name string
		w    cairn.Writer
		want error
	}{
		{"WrongToken", cairn.Writer{ThreadID: "t3", OwnerToken: la.OwnerToken + "x", Fence: la.Fence}, cairn.ErrWriterLost},
		{"WrongFence", cairn.Writer{ThreadID: "t3", OwnerToken: la.OwnerToken, Fence: la.Fence + 1}, cairn.ErrWriterLost},
		{"OtherThread", cairn.Writer{ThreadID: "t4", OwnerToken: la.OwnerToken, Fence: la.Fence}, cairn.ErrWriterLost},
		{"EmptyToken", cairn.Writer{ThreadID: "t3", Fence: la.Fence}, cairn.ErrWriterLost},
		{"ZeroFence", cairn.Writer{ThreadID: "t3", OwnerToken: la.OwnerToken}, cairn.ErrWriterLost},
		{"EmptyThread", cairn.Writer{OwnerToken: la.OwnerToken, Fence: la.Fence}, cairn.ErrInvalidID},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := b.ResumeWriter(ctx, c.w)
			if !errors.Is(err, c.want) || l != nil {
				t.Fatalf("ResumeWriter(%+v) = %v, %v; want %v", c.w, l, err, c.want)
			}
		})
	}
	if _, err := la.Renew(ctx); err != nil {
		t.Fatalf("the refused resumes changed the lease: %v", err)
	}
}
