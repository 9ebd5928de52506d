package sweep

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cairnstore/cairn"
)

// Other is one more store whose keys a sweep's bucket holds (Options.Others).
type Other struct {
	// Store is the store, on any cluster; a sweep with Others keeps a key
	// while any of its stores references or claims it.
	Store References
	// Released, in a dry run, are the references to count as gone in this
	// store: those its own prune would have dropped (PruneReport.Released),
	// as Options.Released is for the first store.
	Released map[string]int
}

// union is the stores of a sweep with Others, seen as one store: its
// references are every store's, a key is claimed when any store has a live
// claim on it, and a key has a record when every store has one in the same
// state. Each move of a record is made in every store, so that each store's
// writers see their own store's record exactly as with a sweep of that store
// alone (docs/design.md, "A bucket shared by several stores"):
//
//   - ReadBlobGC reads the stores one after the other. The argument for one
//     store needs a read of that store taken after the listing and after the
//     key's record there was created; each store's read is such a read.
//   - MarkBlobs marks the key in every store that has no record of it; it is
//     marked in the union once every store has a candidate record.
//   - BeginBlobDeletes moves the key to deleting in the stores in order; when
//     a store refuses (a claim since the read), the stores before it are
//     moved back to candidate. The bytes go only when every store has the key
//     in deleting: none of them has or can gain a reference to it.
//   - EndBlobDeletes and DropBlobRecords settle or drop in every store.
//
// A key in deleting in some stores but not all was left by a run that
// stopped between the stores of a move: its delete was not sent (or was
// answered before the settle began), so no delete of it is in flight, and
// ReadBlobGC, outside a dry run, moves those records back to candidate so that
// their writers need not wait. Union GC records carry versions of the union's
// own: equal member records give equal versions, within one sweep.
type union struct {
	members  []References
	cols     []cairn.BlobCollector // nil for a union of stores without the protocol
	released []map[string]int
	dryRun   bool

	// tuples holds, by union version, the member records a union record
	// stands for; ids the version of each tuple.
	tuples map[int64][]cairn.GCRecord
	ids    map[string]int64
	// last holds, by key, the member records of the latest read (a zero
	// Version is no record).
	last map[string][]cairn.GCRecord
}

// newUnion returns the union of refs and opts.Others, or ErrInvalidArgument
// when some of them run the online protocol and some do not.
func newUnion(refs References, opts Options) (References, error) {
	u := &union{members: []References{refs}, released: []map[string]int{opts.Released}, dryRun: opts.DryRun,
		tuples: map[int64][]cairn.GCRecord{}, ids: map[string]int64{}, last: map[string][]cairn.GCRecord{}}
	for _, o := range opts.Others {
		if o.Store == nil {
			return nil, fmt.Errorf("%w: an Other without a Store", ErrInvalidArgument)
		}
		u.members = append(u.members, o.Store)
		u.released = append(u.released, o.Released)
	}
	for _, m := range u.members {
		if c, ok := m.(cairn.BlobCollector); ok {
			u.cols = append(u.cols, c)
		}
	}
	switch len(u.cols) {
	case 0:
		return plainUnion{u}, nil
	case len(u.members):
		return u, nil
	default:
		return nil, fmt.Errorf("%w: %d of the %d stores run the online sweep protocol; a sweep of several stores needs all or none", ErrInvalidArgument, len(u.cols), len(u.members))
	}
}

// plainUnion is a union of stores without the online protocol: references
// only.
type plainUnion struct{ u *union }

func (p plainUnion) ListBlobReferences(ctx context.Context) ([]cairn.BlobReference, error) {
	return p.u.ListBlobReferences(ctx)
}

func (p plainUnion) WalkBlobReferences(ctx context.Context, fn func(cairn.BlobReference) error) error {
	return p.u.WalkBlobReferences(ctx, fn)
}

// keep wraps fn for member i: in a dry run it leaves out the references that
// member's prune would have released (the sweeper does not apply
// Options.Released to a union).
func (u *union) keep(i int, fn func(cairn.BlobReference) error) func(cairn.BlobReference) error {
	return func(r cairn.BlobReference) error {
		if u.dryRun && r.References <= u.released[i][r.Key] {
			return nil
		}
		return fn(r)
	}
}

func (u *union) ListBlobReferences(ctx context.Context) ([]cairn.BlobReference, error) {
	var out []cairn.BlobReference
	err := u.WalkBlobReferences(ctx, func(r cairn.BlobReference) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// WalkBlobReferences reports every member's references, member by member.
func (u *union) WalkBlobReferences(ctx context.Context, fn func(cairn.BlobReference) error) error {
	for i, m := range u.members {
		fn := u.keep(i, fn)
		if w, ok := m.(cairn.BlobReferenceWalker); ok {
			if err := w.WalkBlobReferences(ctx, fn); err != nil {
				return err
			}
			continue
		}
		list, err := m.ListBlobReferences(ctx)
		if err != nil {
			return err
		}
		for _, r := range list {
			if err := fn(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// id returns the union version of key's member records t.
func (u *union) id(key string, t []cairn.GCRecord) int64 {
	var b strings.Builder
	b.WriteString(key)
	b.WriteByte('|')
	for _, r := range t {
		b.WriteString(string(r.State))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatFloat(r.Since, 'g', -1, 64))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(r.Version, 10))
		b.WriteByte('|')
	}
	k := b.String()
	if v, ok := u.ids[k]; ok {
		return v
	}
	v := int64(len(u.ids) + 1)
	u.ids[k] = v
	u.tuples[v] = slices.Clone(t)
	return v
}

// record returns the union record of key for the member records t, and
// whether every member has a record in one state.
func (u *union) record(key string, t []cairn.GCRecord) (cairn.GCRecord, bool) {
	rec := cairn.GCRecord{Key: key, State: t[0].State}
	for _, r := range t {
		if r.Version == 0 || r.State != rec.State {
			return cairn.GCRecord{}, false
		}
		rec.Since = max(rec.Since, r.Since)
	}
	rec.Version = u.id(key, t)
	return rec, true
}

// ReadBlobGC implements cairn.BlobCollector over the members (see union).
func (u *union) ReadBlobGC(ctx context.Context, fn func(cairn.BlobReference) error) (cairn.BlobGCView, error) {
	var view cairn.BlobGCView
	last := map[string][]cairn.GCRecord{}
	for i, c := range u.cols {
		v, err := c.ReadBlobGC(ctx, u.keep(i, fn))
		if err != nil {
			return cairn.BlobGCView{}, err
		}
		view.Claimed = append(view.Claimed, v.Claimed...)
		for _, r := range v.Records {
			t := last[r.Key]
			if t == nil {
				t = make([]cairn.GCRecord, len(u.cols))
				last[r.Key] = t
			}
			t[i] = r
		}
	}
	slices.Sort(view.Claimed)
	view.Claimed = slices.Compact(view.Claimed)
	u.last = last
	partial := make([][]cairn.GCRecord, len(u.cols))
	for k, t := range last {
		if rec, ok := u.record(k, t); ok {
			view.Records = append(view.Records, rec)
			continue
		}
		for i, r := range t {
			if r.State == cairn.GCDeleting {
				partial[i] = append(partial[i], r)
			}
		}
	}
	slices.SortFunc(view.Records, func(a, b cairn.GCRecord) int { return strings.Compare(a.Key, b.Key) })
	if !u.dryRun {
		for i, recs := range partial {
			if err := u.cols[i].EndBlobDeletes(ctx, recs, false); err != nil {
				return cairn.BlobGCView{}, fmt.Errorf("sweep: return the records of a move that stopped between stores to candidate: %w", err)
			}
		}
	}
	return view, nil
}

// MarkBlobs implements cairn.BlobCollector: it marks keys in every member and
// returns the union records of the keys that every member now has a
// candidate record of.
func (u *union) MarkBlobs(ctx context.Context, keys []string, since float64) ([]cairn.GCRecord, error) {
	if err := cairn.CheckCollectorKeys(keys); err != nil {
		return nil, err
	}
	t := map[string][]cairn.GCRecord{}
	for _, k := range keys {
		t[k] = slices.Clone(u.last[k])
		if t[k] == nil {
			t[k] = make([]cairn.GCRecord, len(u.cols))
		}
	}
	for i, c := range u.cols {
		created, err := c.MarkBlobs(ctx, keys, since)
		if err != nil {
			return nil, err
		}
		for _, r := range created {
			t[r.Key][i] = r
		}
	}
	var out []cairn.GCRecord
	for k, rs := range t {
		if rec, ok := u.record(k, rs); ok && rec.State == cairn.GCCandidate {
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, func(a, b cairn.GCRecord) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// members returns member i's records of the union records recs that the
// union knows.
func (u *union) memberRecs(recs []cairn.GCRecord, i int) []cairn.GCRecord {
	var out []cairn.GCRecord
	for _, r := range recs {
		if t, ok := u.tuples[r.Version]; ok {
			out = append(out, t[i])
		}
	}
	return out
}

// BeginBlobDeletes implements cairn.BlobCollector (see union): a key moves
// when every member moved it; the members that moved a key another member
// refused move it back to candidate.
func (u *union) BeginBlobDeletes(ctx context.Context, recs []cairn.GCRecord) ([]cairn.GCRecord, error) {
	if err := cairn.CheckGCRecords(recs); err != nil {
		return nil, err
	}
	var live []cairn.GCRecord
	for _, r := range recs {
		if t, ok := u.tuples[r.Version]; ok && r.State == cairn.GCCandidate && t[0].State == cairn.GCCandidate {
			live = append(live, r)
		}
	}
	moved := make([]map[string]cairn.GCRecord, len(u.cols))
	undo := func(keep func(string) bool) error {
		for i, m := range moved {
			var back []cairn.GCRecord
			for k, r := range m {
				if !keep(k) {
					back = append(back, r)
					delete(m, k)
				}
			}
			if err := u.cols[i].EndBlobDeletes(ctx, back, false); err != nil {
				return err
			}
		}
		return nil
	}
	for i, c := range u.cols {
		got, err := c.BeginBlobDeletes(ctx, u.memberRecs(live, i))
		if err != nil {
			// Nothing is deleted: every record this call moved goes back.
			if uerr := undo(func(string) bool { return false }); uerr != nil {
				return nil, fmt.Errorf("%w; moving the other stores' records back to candidate: %w", err, uerr)
			}
			return nil, err
		}
		moved[i] = make(map[string]cairn.GCRecord, len(got))
		for _, r := range got {
			moved[i][r.Key] = r
		}
		live = slices.DeleteFunc(live, func(r cairn.GCRecord) bool { _, ok := moved[i][r.Key]; return !ok })
		in := map[string]bool{}
		for _, r := range live {
			in[r.Key] = true
		}
		if err := undo(func(k string) bool { return in[k] }); err != nil {
			return nil, err
		}
	}
	out := make([]cairn.GCRecord, 0, len(live))
	for _, r := range live {
		t := make([]cairn.GCRecord, len(u.cols))
		for i := range u.cols {
			t[i] = moved[i][r.Key]
		}
		rec, _ := u.record(r.Key, t)
		out = append(out, rec)
	}
	return out, nil
}

// EndBlobDeletes implements cairn.BlobCollector in every member.
func (u *union) EndBlobDeletes(ctx context.Context, recs []cairn.GCRecord, deleted bool) error {
	if err := cairn.CheckGCRecords(recs); err != nil {
		return err
	}
	for i, c := range u.cols {
		if err := c.EndBlobDeletes(ctx, u.memberRecs(recs, i), deleted); err != nil {
			return err
		}
	}
	return nil
}

// DropBlobRecords implements cairn.BlobCollector in every member.
func (u *union) DropBlobRecords(ctx context.Context, recs []cairn.GCRecord) error {
	if err := cairn.CheckGCRecords(recs); err != nil {
		return err
	}
	for i, c := range u.cols {
		if err := c.DropBlobRecords(ctx, u.memberRecs(recs, i)); err != nil {
			return err
		}
	}
	return nil
}
