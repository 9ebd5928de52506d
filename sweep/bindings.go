package sweep

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

// ErrUncovered: the sweep refused to delete anything, because the bucket is
// bound to a store the sweep does not cover (its references and claims could
// not be seen), or because the bucket has cairn objects but no registry
// marker (it was written before bindings existed, so its bindings may be
// incomplete). The error is an *UncoveredError; the report's Uncovered and
// Unregistered say the same. Nothing was written, in etcd or in the bucket.
var ErrUncovered = errors.New("sweep: refused: the bucket is bound to stores this sweep does not cover")

// UncoveredError is the error of a refused sweep; it matches ErrUncovered.
type UncoveredError struct {
	// Uncovered are the bindings the sweep does not cover, sorted.
	Uncovered []cairn.Binding
	// Unregistered says the bucket has objects but no registry marker
	// (bucket.RegistryKey).
	Unregistered bool
}

func (e *UncoveredError) Error() string {
	var parts []string
	if len(e.Uncovered) > 0 {
		parts = append(parts, "the bucket is bound to "+FormatBindings(e.Uncovered)+", which this sweep does not cover")
	}
	if e.Unregistered {
		parts = append(parts, "the bucket has cairn objects but no binding registry marker ("+bucket.RegistryKey+"): it was written before bindings existed; record every store that writes to it and the marker (the sweeper's -bind) first")
	}
	return "sweep: refused, nothing deleted: " + strings.Join(parts, "; ")
}

// Is makes the error match ErrUncovered.
func (e *UncoveredError) Is(target error) bool { return target == ErrUncovered }

// FormatBindings writes bindings as cluster/"prefix", comma-separated.
func FormatBindings(bs []cairn.Binding) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = fmt.Sprintf("%s/%q", b.Cluster, b.Prefix)
	}
	return strings.Join(s, ", ")
}

// covers returns the bindings of the stores the sweep covers, sorted and
// distinct.
func (s *sweeper) covers(ctx context.Context) ([]cairn.Binding, error) {
	var out []cairn.Binding
	for _, r := range s.members {
		b, ok := r.(cairn.Bound)
		if !ok {
			continue
		}
		id, has, err := b.BucketBinding(ctx)
		if err != nil {
			return nil, wrap(err, "sweep: the store's binding (nothing deleted)")
		}
		if has {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, compareBindings)
	return slices.Compact(out), nil
}

func compareBindings(a, b cairn.Binding) int {
	if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
		return c
	}
	return strings.Compare(a.Prefix, b.Prefix)
}

// checkBindings runs after the listing and before any write of the sweep:
// unless the run is dry or covers no store with a binding (a store that is
// not cairn.Bound, such as a memory store without Options.Binding), it
// writes the sweep's marker (so that a store that
// binds from now on waits for this sweep), then lists the bindings and
// refuses, with an *UncoveredError, when one of them is not covered, or when
// listed objects and bindings exist without the registry's marker. Every
// object the listing saw was put by a store that had bound before (a store
// binds before its first claim), so the bindings listed now name every store
// that may reference it.
func (s *sweeper) checkBindings(ctx context.Context) error {
	if s.opts.ignoreBindings {
		return nil
	}
	covers, err := s.covers(ctx)
	if err != nil {
		return err
	}
	if !s.opts.DryRun && len(covers) > 0 {
		p, ok := s.blobs.(bucket.Putter)
		if !ok {
			return fmt.Errorf("%w: the bucket of a sweep of stores with bindings must put objects, for its sweep marker", ErrInvalidArgument)
		}
		key, err := bucket.BeginSweep(ctx, p, covers)
		if err != nil {
			return wrap(err, "sweep: (nothing deleted)")
		}
		s.marker = key
	}
	bound, err := bucket.Bindings(ctx, countingLister{l: s.blobs, n: &s.rep.BindingListRequests})
	if err != nil {
		return wrap(err, "sweep: list the bucket's bindings (nothing deleted)")
	}
	rep := s.rep
	rep.Bindings = bound
	for _, b := range bound {
		if _, ok := slices.BinarySearchFunc(covers, b, compareBindings); !ok {
			rep.Uncovered = append(rep.Uncovered, b)
		}
	}
	if (rep.Listed > 0 || s.hasObjects) && (len(covers) > 0 || len(bound) > 0) {
		r, ok := s.blobs.(bucket.Reader)
		if !ok {
			return fmt.Errorf("%w: the bucket of a sweep of stores with bindings must read objects, for the registry's marker", ErrInvalidArgument)
		}
		has, err := bucket.HasRegistry(ctx, r)
		if err != nil {
			return wrap(err, "sweep: (nothing deleted)")
		}
		rep.Unregistered = !has
	}
	if len(rep.Uncovered) == 0 && !rep.Unregistered {
		return nil
	}
	err = &UncoveredError{Uncovered: rep.Uncovered, Unregistered: rep.Unregistered}
	s.log.ErrorContext(ctx, "sweep refused: the bucket is bound to stores this sweep does not cover; nothing deleted",
		"phase", "bindings", "uncovered", FormatBindings(rep.Uncovered), "unregistered", rep.Unregistered,
		"covered", FormatBindings(covers), "error", err)
	return err
}

// endMarker removes the sweep's marker, unless the sweep stopped with deletes
// whose outcome is unknown (ErrStopped): then its next run removes it.
func (s *sweeper) endMarker(ctx context.Context, err error) {
	if s.marker == "" || errors.Is(err, ErrStopped) {
		return
	}
	if d := bucket.EndSweep(context.WithoutCancel(ctx), s.blobs, s.marker); d != nil {
		s.log.WarnContext(ctx, "the sweep marker was not removed; stores binding to the bucket wait for the next run", "marker", s.marker, "error", d)
	}
}
