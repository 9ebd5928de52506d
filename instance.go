package cairn

import (
	"context"
	"sync"
)

// MemoryInstanceStore is an InstanceStore kept in memory. It stores and returns
// copies, and is safe for concurrent use. The zero value is ready to use.
type MemoryInstanceStore struct {
	mu      sync.Mutex
	records map[string]InstanceRecord
}

var _ InstanceStore = (*MemoryInstanceStore)(nil)

// NewMemoryInstanceStore returns an empty MemoryInstanceStore.
func NewMemoryInstanceStore() *MemoryInstanceStore { return &MemoryInstanceStore{} }

// Get implements InstanceStore.
func (m *MemoryInstanceStore) Get(ctx context.Context, key string) (*InstanceRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidateInstanceKey(key); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.records[key]
	if !ok {
		return nil, nil
	}
	return &rec, nil
}

// Upsert implements InstanceStore.
func (m *MemoryInstanceStore) Upsert(ctx context.Context, rec InstanceRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateInstanceRecord(&rec); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.records == nil {
		m.records = map[string]InstanceRecord{}
	}
	m.records[rec.Key] = rec
	return nil
}

// Delete implements InstanceStore.
func (m *MemoryInstanceStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateInstanceKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.records, key)
	return nil
}
