package cairn_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts cairn.Options
		want error
	}{
		{"Zero", cairn.Options{}, nil},
		{"Upstream", cairn.Options{LeaseDuration: 100 * time.Millisecond, RenewAfter: 25 * time.Millisecond}, nil},
		{"Fractional", cairn.Options{LeaseDuration: 500 * time.Microsecond, RenewAfter: 250 * time.Microsecond}, nil},
		{"OneNanosecondApart", cairn.Options{LeaseDuration: 2, RenewAfter: 1}, nil},
		{"OnlyLeaseDurationLong", cairn.Options{LeaseDuration: 46 * time.Second}, nil},
		{"OnlyRenewAfterShort", cairn.Options{RenewAfter: time.Second}, nil},
		{"NegativeLeaseDuration", cairn.Options{LeaseDuration: -1}, cairn.ErrLeaseDuration},
		{"NegativeLeaseDurationAndRenewAfter", cairn.Options{LeaseDuration: -time.Second, RenewAfter: -time.Second}, cairn.ErrLeaseDuration},
		{"NegativeRenewAfter", cairn.Options{RenewAfter: -1}, cairn.ErrRenewAfter},
		{"RenewAfterEqualsLeaseDuration", cairn.Options{LeaseDuration: 100 * time.Millisecond, RenewAfter: 100 * time.Millisecond}, cairn.ErrRenewAfter},
		{"RenewAfterAboveLeaseDuration", cairn.Options{LeaseDuration: time.Second, RenewAfter: 2 * time.Second}, cairn.ErrRenewAfter},
		{"OnlyLeaseDuration30s", cairn.Options{LeaseDuration: 30 * time.Second}, cairn.ErrRenewAfter},
		{"OnlyLeaseDuration45s", cairn.Options{LeaseDuration: 45 * time.Second}, cairn.ErrRenewAfter},
		{"OnlyRenewAfter120s", cairn.Options{RenewAfter: 120 * time.Second}, cairn.ErrRenewAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.opts.Validate()
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Validate() error %v, want %v", err, tc.want)
			}
			if err != nil {
				var ce *cairn.Error
				if errors.As(err, &ce) {
					t.Errorf("an option error is a *cairn.Error (%v); it must be a plain error", err)
				}
				if _, err := cairn.NewMemoryStore(tc.opts); !errors.Is(err, tc.want) {
					t.Errorf("NewMemoryStore: %v, want %v", err, tc.want)
				}
				return
			}
			if got.Now == nil || got.LeaseDuration <= 0 || got.RenewAfter <= 0 || got.RenewAfter >= got.LeaseDuration {
				t.Errorf("Validate() = %+v, want defaults applied", got)
			}
		})
	}
	got, _ := cairn.Options{}.Validate()
	if got.LeaseDuration != cairn.DefaultLeaseDuration || got.RenewAfter != cairn.DefaultRenewAfter {
		t.Errorf("defaults %v/%v, want %v/%v", got.LeaseDuration, got.RenewAfter, cairn.DefaultLeaseDuration, cairn.DefaultRenewAfter)
	}
	if now := got.Now(); now < 1.7e12 {
		t.Errorf("the default clock gave %v, want milliseconds since the Unix epoch", now)
	}
}

func TestMillis(t *testing.T) {
	for d, want := range map[time.Duration]float64{time.Second: 1000, 250 * time.Microsecond: 0.25, 0: 0, 120 * time.Second: 120000} {
		if got := cairn.Millis(d); got != want {
			t.Errorf("Millis(%v) = %v, want %v", d, got, want)
		}
	}
}

func TestErrors(t *testing.T) {
	sentinels := []*cairn.Error{
		cairn.ErrStaleHead, cairn.ErrParentMismatch, cairn.ErrDuplicateID, cairn.ErrNotHead, cairn.ErrWriterConflict,
		cairn.ErrWriterLost, cairn.ErrInvalidID, cairn.ErrInvalidEntry, cairn.ErrForkSourceNotFound,
		cairn.ErrForkSourceThreadMismatch, cairn.ErrForkDestinationNotEmpty, cairn.ErrCheckpointNotFound, cairn.ErrAtomicForkRequired,
		cairn.ErrStoreFull,
	}
	for i, s := range sentinels {
		err := cairn.NewError(s.Code, "thread %q", "t")
		wrapped := fmt.Errorf("outer: %w", err)
		for j, other := range sentinels {
			if got := errors.Is(wrapped, other); got != (i == j) {
				t.Errorf("errors.Is(%v, %s) = %v", wrapped, other.Code, got)
			}
		}
		if cairn.CodeOf(wrapped) != s.Code {
			t.Errorf("CodeOf(%v) = %q, want %q", wrapped, cairn.CodeOf(wrapped), s.Code)
		}
		if want := `cairn: thread "t" (` + string(s.Code) + ")"; err.Error() != want {
			t.Errorf("Error() = %q, want %q", err.Error(), want)
		}
	}
	if got := cairn.ErrStaleHead.Error(); got != "cairn: SANDBOX_SNAPSHOT_STALE_HEAD" {
		t.Errorf("sentinel Error() = %q", got)
	}
	cause := errors.New("boom")
	err := &cairn.Error{Code: cairn.CodeInvalidEntry, Err: cause}
	if !errors.Is(err, cause) || !errors.Is(err, cairn.ErrInvalidEntry) {
		t.Error("an *Error does not match its cause and its code")
	}
	if cairn.CodeOf(cause) != "" || cairn.CodeOf(nil) != "" {
		t.Error("CodeOf of a plain error or nil is not empty")
	}
	if errors.Is(cairn.ErrUnsupported, cairn.ErrInvalidEntry) || cairn.CodeOf(cairn.ErrUnsupported) != "" {
		t.Error("ErrUnsupported is a coded error")
	}
}

func TestKeepNewestWithoutPruner(t *testing.T) {
	s, err := cairn.NewMemoryStore(cairn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plain := struct{ cairn.Store }{s}
	_, err = cairn.KeepNewest(context.Background(), plain, "t", 1)
	if !errors.Is(err, cairn.ErrUnsupported) {
		t.Fatalf("KeepNewest on a store without Pruner: %v, want ErrUnsupported", err)
	}
	l, err := s.AcquireWriter(context.Background(), "t")
	if err != nil {
		t.Fatalf("KeepNewest left a lease behind: %v", err)
	}
	l.Release(context.Background())
}

type fakeDriver struct {
	exp      float64
	err      error
	released int
}

func (d *fakeDriver) Renew(context.Context) (float64, error) { return d.exp, d.err }
func (d *fakeDriver) Release(context.Context)                { d.released++ }

func TestLease(t *testing.T) {
	d := &fakeDriver{exp: 200}
	w := cairn.Writer{ThreadID: "t", OwnerToken: "o", Fence: 3}
	l := cairn.NewLease(w, 100, time.Second, d)
	if l.Writer != w || l.RenewAfter != time.Second || l.ExpiresAt() != 100 {
		t.Fatalf("NewLease = %+v, expiry %v", l, l.ExpiresAt())
	}
	if exp, err := l.Renew(context.Background()); err != nil || exp != 200 || l.ExpiresAt() != 200 {
		t.Errorf("Renew = %v, %v; ExpiresAt %v", exp, err, l.ExpiresAt())
	}
	d.err = cairn.NewError(cairn.CodeWriterLost, "gone")
	if _, err := l.Renew(context.Background()); !errors.Is(err, cairn.ErrWriterLost) || l.ExpiresAt() != 200 {
		t.Errorf("failed Renew = %v; ExpiresAt %v, want 200", err, l.ExpiresAt())
	}
	l.Release(context.Background())
	l.Release(context.Background())
	if d.released != 2 {
		t.Errorf("Release reached the driver %d times, want 2", d.released)
	}
}
