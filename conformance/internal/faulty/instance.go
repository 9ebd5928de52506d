package faulty

import (
	"context"
	"strings"
	"sync"

	"github.com/cairnstore/cairn"
)

// InstanceFaults selects the mistakes of an InstanceStore.
type InstanceFaults struct {
	MergeUpsert    bool // Upsert keeps optional fields the new record leaves empty
	ShareRecords   bool // Get returns the stored record itself
	DeletePrefix   bool // Delete removes every key that starts with the key
	MissingAsEmpty bool // Get of a missing key returns an empty record
	Unbounded      bool // keys and fields past their bounds are accepted
}

// InstanceStore is an in-memory cairn.InstanceStore with switchable faults.
type InstanceStore struct {
	f    InstanceFaults
	mu   sync.Mutex
	recs map[string]*cairn.InstanceRecord
}

// NewInstanceStore returns an empty store with the given faults.
func NewInstanceStore(f InstanceFaults) *InstanceStore {
	return &InstanceStore{f: f, recs: map[string]*cairn.InstanceRecord{}}
}

// Get implements cairn.InstanceStore.
func (s *InstanceStore) Get(ctx context.Context, key string) (*cairn.InstanceRecord, error) {
	if err := s.checkKey(key); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.recs[key]
	switch {
	case !ok && s.f.MissingAsEmpty:
		return &cairn.InstanceRecord{Key: key}, nil
	case !ok:
		return nil, nil
	case s.f.ShareRecords:
		return rec, nil
	}
	out := *rec
	return &out, nil
}

// Upsert implements cairn.InstanceStore.
func (s *InstanceStore) Upsert(ctx context.Context, rec cairn.InstanceRecord) error {
	if err := s.checkKey(rec.Key); err != nil {
		return err
	}
	for _, f := range []string{rec.Provider, rec.ProviderSandboxID, rec.LatestSnapshotID, rec.ThreadID, rec.LatestRunID} {
		if !s.f.Unbounded && len(f) > cairn.MaxNameBytes {
			return cairn.NewError(cairn.CodeInvalidEntry, "a field of %d bytes", len(f))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.recs[rec.Key]; ok && s.f.MergeUpsert {
		if rec.LatestSnapshotID == "" {
			rec.LatestSnapshotID = old.LatestSnapshotID
		}
		if rec.LatestRunID == "" {
			rec.LatestRunID = old.LatestRunID
		}
	}
	s.recs[rec.Key] = &rec
	return nil
}

// Delete implements cairn.InstanceStore.
func (s *InstanceStore) Delete(ctx context.Context, key string) error {
	if err := s.checkKey(key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.recs {
		if k == key || s.f.DeletePrefix && strings.HasPrefix(k, key) {
			delete(s.recs, k)
		}
	}
	return nil
}

// checkKey refuses a key past cairn.MaxIDBytes, unless the store is
// unbounded.
func (s *InstanceStore) checkKey(key string) error {
	if !s.f.Unbounded && len(key) > cairn.MaxIDBytes {
		return cairn.NewError(cairn.CodeInvalidID, "a key of %d bytes", len(key))
	}
	return nil
}
