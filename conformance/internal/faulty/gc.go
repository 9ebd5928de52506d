package faulty

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/cairnstore/cairn"
)

var (
	_ cairn.BlobClaimer   = (*Store)(nil)
	_ cairn.BlobCollector = (*Store)(nil)
)

// gcState is the online sweep state of the faulty store. Unlike the memory
// store it numbers versions as etcd numbers revisions: every write call takes
// one new revision, and every record it creates or moves gets it, so that
// records written by one call share their version.
type gcState struct {
	claims  map[cairn.Writer]map[string]bool // lease -> claimed keys, live or not
	records map[string]cairn.GCRecord
	rev     int64
	perKey  map[string]int64 // with VersionReused: the last version of each key's record
	settled chan struct{}    // closed, and replaced, when a record leaves GCDeleting
}

func newGCState() gcState {
	return gcState{
		claims:  map[cairn.Writer]map[string]bool{},
		records: map[string]cairn.GCRecord{},
		perKey:  map[string]int64{},
		settled: make(chan struct{}),
	}
}

func isBlobKey(k string) bool { return cairn.IsFileBlobKey(k) || cairn.IsArtifactBlobKey(k) }

func checkKeys(keys []string) error {
	for _, k := range keys {
		if !isBlobKey(k) {
			return invalidEntry("%q is not a blob key", k)
		}
	}
	return nil
}

func checkRecords(recs []cairn.GCRecord) error {
	for _, r := range recs {
		if !isBlobKey(r.Key) {
			return invalidEntry("%q is not a blob key", r.Key)
		}
	}
	return nil
}

// distinct returns the keys of keys once each, sorted.
func distinct(keys []string) []string {
	set := map[string]bool{}
	for _, k := range keys {
		set[k] = true
	}
	return slices.Sorted(maps.Keys(set))
}

func byKey(a, b cairn.GCRecord) int { return strings.Compare(a.Key, b.Key) }

// version returns the version of a record of key written at revision rev.
// s.mu is held.
func (s *Store) version(key string, rev int64) int64 {
	if s.f.VersionReused {
		s.gc.perKey[key]++
		return s.gc.perKey[key]
	}
	return rev
}

// removeRecord removes the record of key. s.mu is held.
func (s *Store) removeRecord(key string) {
	delete(s.gc.records, key)
	if s.f.VersionReused {
		delete(s.gc.perKey, key)
	}
}

// claimed reports whether key has a live claim: one whose lease still holds
// its writer record (with ClaimsJudgedByClock: one whose lease is current at
// now by this handle's clock). s.mu is held.
func (s *Store) claimed(key string, now float64) bool {
	for w, keys := range s.gc.claims {
		if !keys[key] {
			continue
		}
		rec := s.writers[w.ThreadID]
		switch {
		case s.f.ClaimsOutliveLease:
			return true
		case s.f.ClaimsJudgedByClock && s.current(rec, w, now):
			return true
		case !s.f.ClaimsJudgedByClock && rec.Holds(w):
			return true
		}
	}
	return false
}

// endClaims ends the claims of w. s.mu is held.
func (s *Store) endClaims(w cairn.Writer) { delete(s.gc.claims, w) }

// releaseClaims ends the claims that the Release of w ends. s.mu is held.
func (s *Store) releaseClaims(w cairn.Writer) {
	switch {
	case s.f.ReleaseEndsThreadClaims:
		for c := range s.gc.claims {
			if c.ThreadID == w.ThreadID {
				delete(s.gc.claims, c)
			}
		}
	case !s.f.ClaimsOutliveLease:
		s.endClaims(w)
	}
}

// ClaimBlobs implements cairn.BlobClaimer.
func (s *Store) ClaimBlobs(ctx context.Context, w cairn.Writer, keys []string) ([]string, error) {
	if err := cairn.ValidateID(w.ThreadID, "writer thread id"); err != nil {
		return nil, err
	}
	if s.f.ClaimLeaseBeforeKeys {
		s.mu.Lock()
		ok := s.current(s.writers[w.ThreadID], w, s.now())
		s.mu.Unlock()
		if !ok {
			return nil, lost(w.ThreadID)
		}
	}
	if !s.f.ClaimBeforeKeyCheck {
		if err := checkKeys(keys); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.f.ClaimWithoutLease && !s.current(s.writers[w.ThreadID], w, s.now()) {
		return nil, lost(w.ThreadID)
	}
	busy := map[string]bool{}
	for _, k := range keys {
		if !isBlobKey(k) { // only with ClaimBeforeKeyCheck
			return nil, invalidEntry("%q is not a blob key", k)
		}
		rec, has := s.gc.records[k]
		if has && rec.State == cairn.GCDeleting && !s.f.ClaimDeleting {
			busy[k] = true
			continue
		}
		if has && rec.State == cairn.GCCandidate && !s.f.ClaimIgnoredByDelete {
			s.removeRecord(k)
		}
		if s.gc.claims[w] == nil {
			s.gc.claims[w] = map[string]bool{}
		}
		s.gc.claims[w][k] = true
	}
	if len(busy) == 0 {
		return nil, nil
	}
	return slices.Sorted(maps.Keys(busy)), nil
}

// WaitBlobs implements cairn.BlobClaimer. Unlike the memory store, it returns
// nil without looking at ctx when no key is in GCDeleting.
func (s *Store) WaitBlobs(ctx context.Context, keys []string) error {
	if err := checkKeys(keys); err != nil {
		return err
	}
	for {
		s.mu.Lock()
		deleting := slices.ContainsFunc(keys, func(k string) bool {
			r, ok := s.gc.records[k]
			return ok && r.State == cairn.GCDeleting
		})
		settled := s.gc.settled
		s.mu.Unlock()
		if !deleting || s.f.WaitReturnsAtOnce {
			return nil
		}
		select {
		case <-settled:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// view returns the live claims and the records. s.mu is held.
func (s *Store) view() cairn.BlobGCView {
	now := s.now()
	var v cairn.BlobGCView
	keys := map[string]bool{}
	for _, ks := range s.gc.claims {
		maps.Copy(keys, ks)
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if s.claimed(k, now) {
			v.Claimed = append(v.Claimed, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.gc.records)) {
		v.Records = append(v.Records, s.gc.records[k])
	}
	return v
}

// ReadBlobGC implements cairn.BlobCollector.
func (s *Store) ReadBlobGC(ctx context.Context, fn func(cairn.BlobReference) error) (cairn.BlobGCView, error) {
	if err := ctx.Err(); err != nil {
		return cairn.BlobGCView{}, err
	}
	s.mu.Lock()
	refs := s.references()
	var v cairn.BlobGCView
	if !s.f.ReadGCAfterWalk {
		v = s.view()
	}
	s.mu.Unlock()
	for _, r := range refs {
		if err := ctx.Err(); err != nil {
			return cairn.BlobGCView{}, err
		}
		if err := fn(r); err != nil {
			return cairn.BlobGCView{}, err
		}
	}
	if s.f.ReadGCAfterWalk {
		s.mu.Lock()
		v = s.view()
		s.mu.Unlock()
	}
	return v, nil
}

// MarkBlobs implements cairn.BlobCollector.
func (s *Store) MarkBlobs(ctx context.Context, keys []string, since float64) ([]cairn.GCRecord, error) {
	if err := checkKeys(keys); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gc.rev++
	now := s.now()
	var out []cairn.GCRecord
	for _, k := range distinct(keys) {
		if _, has := s.gc.records[k]; has && !s.f.MarkReplaces {
			continue
		}
		if !s.f.MarkClaimed && s.claimed(k, now) {
			continue
		}
		r := cairn.GCRecord{Key: k, State: cairn.GCCandidate, Since: since, Version: s.version(k, s.gc.rev)}
		s.gc.records[k] = r
		out = append(out, r)
	}
	return out, nil
}

// BeginBlobDeletes implements cairn.BlobCollector.
func (s *Store) BeginBlobDeletes(ctx context.Context, recs []cairn.GCRecord) ([]cairn.GCRecord, error) {
	if err := checkRecords(recs); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gc.rev++
	rev := s.gc.rev
	now := s.now()
	seen := map[string]bool{}
	var chosen []cairn.GCRecord
	for _, r := range recs {
		if seen[r.Key] {
			continue
		}
		seen[r.Key] = true
		cur, ok := s.gc.records[r.Key]
		if !ok || cur.State != cairn.GCCandidate || cur.Version != r.Version && !s.f.BeginIgnoresVersion {
			continue
		}
		if !s.f.ClaimIgnoredByDelete && s.claimed(r.Key, now) {
			continue
		}
		chosen = append(chosen, cur)
	}
	out := make([]cairn.GCRecord, 0, len(chosen))
	for _, r := range chosen {
		r.State, r.Version = cairn.GCDeleting, s.version(r.Key, rev)
		s.gc.records[r.Key] = r
		out = append(out, r)
	}
	slices.SortFunc(out, byKey)
	return out, nil
}

// EndBlobDeletes implements cairn.BlobCollector.
func (s *Store) EndBlobDeletes(ctx context.Context, recs []cairn.GCRecord, deleted bool) error {
	if err := checkRecords(recs); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gc.rev++
	settled := false
	for _, r := range recs {
		cur, ok := s.gc.records[r.Key]
		if !ok || cur.State != cairn.GCDeleting || cur.Version != r.Version {
			continue
		}
		settled = true
		if deleted {
			s.removeRecord(r.Key)
			continue
		}
		cur.State, cur.Version = cairn.GCCandidate, s.version(r.Key, s.gc.rev)
		if s.f.EndLosesSince {
			cur.Since = s.now()
		}
		s.gc.records[r.Key] = cur
	}
	if settled {
		close(s.gc.settled)
		s.gc.settled = make(chan struct{})
	}
	return nil
}

// DropBlobRecords implements cairn.BlobCollector.
func (s *Store) DropBlobRecords(ctx context.Context, recs []cairn.GCRecord) error {
	if err := checkRecords(recs); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		cur, ok := s.gc.records[r.Key]
		if ok && cur.Version == r.Version && (cur.State == cairn.GCCandidate || s.f.DropDeleting) {
			s.removeRecord(r.Key)
		}
	}
	return nil
}
