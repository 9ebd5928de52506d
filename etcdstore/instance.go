package etcdstore

import (
	"context"

	"github.com/cairnstore/cairn"
)

// Instances returns the instance store that lives under the same prefix: one
// key per record, so an upsert is a single put (a full replace) and the last
// write wins.
func (s *Store) Instances() cairn.InstanceStore { return instances{s} }

type instances struct{ s *Store }

// Get implements cairn.InstanceStore.
func (i instances) Get(ctx context.Context, key string) (*cairn.InstanceRecord, error) {
	if err := cairn.ValidateInstanceKey(key); err != nil {
		return nil, err
	}
	resp, err := i.s.client.Get(ctx, string(i.s.layout.Instance(key)))
	if err != nil {
		return nil, err
	}
	kv := first(resp)
	if kv == nil {
		return nil, nil
	}
	rec, err := decodeInstance(kv.Value)
	if err != nil {
		return nil, corrupt("instance record", kv.Key, err)
	}
	return &rec, nil
}

// Upsert implements cairn.InstanceStore.
func (i instances) Upsert(ctx context.Context, rec cairn.InstanceRecord) (err error) {
	defer definite("upsertInstance", &err)
	if err := cairn.ValidateInstanceRecord(&rec); err != nil {
		return err
	}
	_, err = i.s.client.Put(ctx, string(i.s.layout.Instance(rec.Key)), string(encodeInstance(&rec)))
	return err
}

// Delete implements cairn.InstanceStore.
func (i instances) Delete(ctx context.Context, key string) (err error) {
	defer definite("deleteInstance", &err)
	if err := cairn.ValidateInstanceKey(key); err != nil {
		return err
	}
	_, err = i.s.client.Delete(ctx, string(i.s.layout.Instance(key)))
	return err
}
