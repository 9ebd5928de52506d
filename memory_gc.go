package cairn

import (
	"context"
	"maps"
	"slices"
)

var (
	_ BlobClaimer   = (*MemoryStore)(nil)
	_ BlobCollector = (*MemoryStore)(nil)
)

// memGC is the online sweep state of a memory store. The caller of every
// method holds memState.mu.
type memGC struct {
	claims  map[string]map[Writer]struct{} // blob key -> claiming leases
	byLease map[Writer]map[string]struct{} // lease -> claimed keys
	records map[string]*GCRecord
	version int64
	// changed is closed, and replaced, whenever a record leaves GCDeleting,
	// to wake WaitBlobs.
	changed chan struct{}
}

func (g *memGC) init() {
	if g.claims == nil {
		g.claims = map[string]map[Writer]struct{}{}
		g.byLease = map[Writer]map[string]struct{}{}
		g.records = map[string]*GCRecord{}
		g.changed = make(chan struct{})
	}
}

func (g *memGC) wake() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// dropLease ends every claim of w.
func (g *memGC) dropLease(w Writer) {
	for k := range g.byLease[w] {
		delete(g.claims[k], w)
		if len(g.claims[k]) == 0 {
			delete(g.claims, k)
		}
	}
	delete(g.byLease, w)
}

// liveClaim reports whether key has a claim whose lease still holds its
// writer record, and ends the claims of leases that do not: those can never
// publish again. It reads no clock: a lease whose expiry passed but whose
// record nobody replaced can still append, by its own writer's clock.
func (s *memState) liveClaim(key string) bool {
	g := &s.gc
	live := false
	for w := range g.claims[key] {
		if s.writer(w.ThreadID).Holds(w) {
			live = true
		} else {
			g.dropLease(w)
		}
	}
	return live
}

// ClaimBlobs implements BlobClaimer.
func (m *MemoryStore) ClaimBlobs(ctx context.Context, w Writer, keys []string) ([]string, error) {
	if err := CheckClaimInput(w, keys); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.writer(w.ThreadID).Current(w, m.now()) {
		s.endClaims(w)
		return nil, writerLost(w.ThreadID)
	}
	g := &s.gc
	g.init()
	var busy []string
	for _, k := range SortedKeys(keys) {
		if r := g.records[k]; r != nil {
			if r.State == GCDeleting {
				busy = append(busy, k)
				continue
			}
			delete(g.records, k) // a claim ends a candidacy
		}
		if g.claims[k] == nil {
			g.claims[k] = map[Writer]struct{}{}
		}
		g.claims[k][w] = struct{}{}
		if g.byLease[w] == nil {
			g.byLease[w] = map[string]struct{}{}
		}
		g.byLease[w][k] = struct{}{}
	}
	return busy, nil
}

// WaitBlobs implements BlobClaimer.
func (m *MemoryStore) WaitBlobs(ctx context.Context, keys []string) error {
	if err := CheckBlobKeys(keys); err != nil {
		return err
	}
	s := m.s
	for {
		s.mu.Lock()
		s.gc.init()
		busy := false
		for _, k := range keys {
			if r := s.gc.records[k]; r != nil && r.State == GCDeleting {
				busy = true
				break
			}
		}
		ch := s.gc.changed
		s.mu.Unlock()
		if !busy {
			return ctx.Err()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ReadBlobGC implements BlobCollector.
func (m *MemoryStore) ReadBlobGC(ctx context.Context, fn func(BlobReference) error) (BlobGCView, error) {
	if err := ctx.Err(); err != nil {
		return BlobGCView{}, err
	}
	s := m.s
	s.mu.Lock()
	s.gc.init()
	refs := make([]BlobReference, 0, len(s.refs))
	for _, k := range slices.Sorted(maps.Keys(s.refs)) {
		refs = append(refs, BlobReference{Key: k, References: s.refs[k]})
	}
	var view BlobGCView
	for _, k := range slices.Sorted(maps.Keys(s.gc.claims)) {
		if s.liveClaim(k) {
			view.Claimed = append(view.Claimed, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.gc.records)) {
		view.Records = append(view.Records, *s.gc.records[k])
	}
	s.mu.Unlock()
	for _, r := range refs {
		if err := ctx.Err(); err != nil {
			return BlobGCView{}, err
		}
		if err := fn(r); err != nil {
			return BlobGCView{}, err
		}
	}
	return view, nil
}

// MarkBlobs implements BlobCollector.
func (m *MemoryStore) MarkBlobs(ctx context.Context, keys []string, since float64) ([]GCRecord, error) {
	if err := CheckMarkInput(keys, since); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	g := &s.gc
	g.init()
	var out []GCRecord
	for _, k := range SortedKeys(keys) {
		if g.records[k] != nil || s.liveClaim(k) {
			continue
		}
		g.version++
		r := &GCRecord{Key: k, State: GCCandidate, Since: since, Version: g.version}
		g.records[k] = r
		out = append(out, *r)
	}
	return out, nil
}

// sameRecord returns the record of r.Key when it still has r's version and
// the given state.
func (g *memGC) sameRecord(r GCRecord, state GCState) *GCRecord {
	cur := g.records[r.Key]
	if cur == nil || cur.Version != r.Version || cur.State != state {
		return nil
	}
	return cur
}

// BeginBlobDeletes implements BlobCollector.
func (m *MemoryStore) BeginBlobDeletes(ctx context.Context, recs []GCRecord) ([]GCRecord, error) {
	if err := CheckGCRecords(recs); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	g := &s.gc
	g.init()
	var out []GCRecord
	for _, r := range sortedRecords(recs) {
		cur := g.sameRecord(r, GCCandidate)
		if cur == nil || s.liveClaim(r.Key) {
			continue
		}
		g.version++
		cur.State, cur.Version = GCDeleting, g.version
		out = append(out, *cur)
	}
	return out, nil
}

// EndBlobDeletes implements BlobCollector.
func (m *MemoryStore) EndBlobDeletes(ctx context.Context, recs []GCRecord, deleted bool) error {
	if err := CheckGCRecords(recs); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	g := &s.gc
	g.init()
	for _, r := range recs {
		cur := g.sameRecord(r, GCDeleting)
		if cur == nil {
			continue
		}
		if deleted {
			delete(g.records, r.Key)
		} else {
			g.version++
			cur.State, cur.Version = GCCandidate, g.version
		}
	}
	g.wake()
	return nil
}

// DropBlobRecords implements BlobCollector.
func (m *MemoryStore) DropBlobRecords(ctx context.Context, recs []GCRecord) error {
	if err := CheckGCRecords(recs); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	g := &s.gc
	g.init()
	for _, r := range recs {
		if g.sameRecord(r, GCCandidate) != nil {
			delete(g.records, r.Key)
		}
	}
	return nil
}

// sortedRecords returns recs sorted by key, one record a key (the first).
func sortedRecords(recs []GCRecord) []GCRecord {
	out := slices.Clone(recs)
	slices.SortStableFunc(out, func(a, b GCRecord) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	return slices.CompactFunc(out, func(a, b GCRecord) bool { return a.Key == b.Key })
}
