package etcdstore

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

var _ cairn.Bound = (*Store)(nil)

// bindingOnce caches a store's binding once etcd has answered.
type bindingOnce struct {
	mu sync.Mutex
	b  *cairn.Binding
}

// BucketBinding implements cairn.Bound: the cluster is "etcd-" and the
// cluster id of etcd's response header in 16 hex digits, the prefix is New's.
// The first call reads one key of the store (its own root) to learn the
// cluster id; later calls answer from memory. It returns etcd's errors.
func (s *Store) BucketBinding(ctx context.Context) (cairn.Binding, bool, error) {
	s.binding.mu.Lock()
	defer s.binding.mu.Unlock()
	if s.binding.b != nil {
		return *s.binding.b, true, nil
	}
	resp, err := s.client.Get(ctx, string(s.layout.Root()), clientv3.WithCountOnly())
	if err != nil {
		return cairn.Binding{}, false, fmt.Errorf("etcdstore: read the cluster id: %w", err)
	}
	b := cairn.Binding{Cluster: fmt.Sprintf("etcd-%016x", resp.Header.ClusterId), Prefix: s.prefix}
	s.binding.b = &b
	return b, true, nil
}

// bindObjects binds the store to its bucket for body objects before its first
// object write (bucket.BindStore).
func (s *Store) bindObjects(ctx context.Context) error {
	if err := bucket.BindStore(ctx, s, s.objects); err != nil {
		return fmt.Errorf("etcdstore: bind the bucket for body objects: %w", err)
	}
	return nil
}
