package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// ListBlobReferences implements cairn.Store. It reads every reference record
// at one etcd revision; if that revision is compacted while it reads, it
// starts again at a newer one, so the result is always exact at one revision.
func (s *Store) ListBlobReferences(ctx context.Context) ([]cairn.BlobReference, error) {
	for {
		var out []cairn.BlobReference
		err := s.WalkBlobReferences(ctx, func(r cairn.BlobReference) error {
			out = append(out, r)
			return nil
		})
		if errors.Is(err, rpctypes.ErrCompacted) {
			s.log.Debug("etcdstore: blob references compacted while reading; reading again")
			continue
		}
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = []cairn.BlobReference{}
		}
		return out, nil
	}
}

// WalkBlobReferences implements cairn.BlobReferenceWalker. It pins the etcd
// revision of its first read and reads every later page at that revision, one
// shard at a time, so it holds one shard's digests (32 bytes per reference in
// the shard) at a time, never the whole list. If the pinned revision is
// compacted before the walk ends, it returns an error wrapping
// rpctypes.ErrCompacted; it never mixes two revisions.
func (s *Store) WalkBlobReferences(ctx context.Context, fn func(cairn.BlobReference) error) error {
	return s.walkRefs(ctx, 0, fn)
}

// walkRefs walks the blob references at revision rev, or, when rev is 0, at
// the revision of its first read.
func (s *Store) walkRefs(ctx context.Context, rev int64, fn func(cairn.BlobReference) error) error {
	var digests []keys.Digest
	limit := int64(256)
	for shard := range byte(keys.NumShards) {
		digests = digests[:0]
		prefix := s.layout.RefShard(shard)
		start, end := string(prefix), string(keys.PrefixEnd(prefix))
		for {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			resp, err := s.client.Get(ctx, start, opts...)
			if err != nil {
				return fmt.Errorf("etcdstore: read blob references at revision %d: %w", rev, err)
			}
			if rev == 0 {
				rev = resp.Header.Revision
			}
			size := 0
			for _, kv := range resp.Kvs {
				size += len(kv.Value)
				if kv.Lease != 0 {
					continue // staged by a write not yet published
				}
				if len(kv.Value)%keys.DigestLen != 0 {
					return corrupt("reference record", kv.Key, fmt.Errorf("length %d", len(kv.Value)))
				}
				for i := 0; i < len(kv.Value); i += keys.DigestLen {
					digests = append(digests, keys.Digest(kv.Value[i:i+keys.DigestLen]))
				}
			}
			// Keep pages around a few MiB whatever the record sizes.
			switch {
			case size < 1<<20 && limit < 8192:
				limit *= 2
			case size > 8<<20 && limit > 16:
				limit /= 2
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
		slices.SortFunc(digests, func(a, b keys.Digest) int { return bytes.Compare(a[:], b[:]) })
		for i := 0; i < len(digests); {
			j := i + 1
			for j < len(digests) && digests[j] == digests[i] {
				j++
			}
			if err := fn(cairn.BlobReference{Key: keys.BlobKey(shard, digests[i]), References: j - i}); err != nil {
				return err
			}
			i = j
		}
	}
	return nil
}
