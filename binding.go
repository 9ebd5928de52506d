package cairn

import "context"

// Binding names a store that writes to a bucket: the cluster that keeps its
// records and its prefix there. Several stores may write to one bucket, and
// blob keys are content addressed, so the same key may be referenced by any
// of them; a sweep of the bucket may delete only what none of them
// references. Every store that writes to a bucket records its Binding there
// first (bucket.Bind), and a sweep refuses to delete in a bucket that holds
// a binding it does not cover (docs/design.md, "A bucket shared by several
// stores").
type Binding struct {
	// Cluster names the cluster that holds the store's records: for an
	// etcd store "etcd-" and etcd's cluster id in 16 hex digits. It is 1 to
	// 64 bytes of ASCII letters, digits, '.', '_' and '-'.
	Cluster string `json:"cluster"`
	// Prefix is the store's key prefix in that cluster; any bytes.
	Prefix string `json:"prefix"`
}

// Bound is implemented by a store that records its binding in the buckets it
// writes (the etcd store, and a memory store given Options.Binding).
type Bound interface {
	// BucketBinding returns the store's binding, and false when the store
	// has none (a memory store without Options.Binding). It may read the
	// store (an etcd store asks etcd for its cluster id once); its errors
	// are the store's.
	BucketBinding(ctx context.Context) (Binding, bool, error)
}
