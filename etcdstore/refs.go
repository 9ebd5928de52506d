package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
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
	return s.walkRefs(ctx, 0, false, fn)
}

// walkRefs walks the blob references at revision rev, or, when rev is 0, at
// the revision of its first read: those of version-1 checkpoints, from their
// reference records, merged with those of the capacity layout, counted from
// the reference chunks of the roots in shard keys.RootShard. A key that
// checkpoints of both layouts reference counts both. With objects, the keys
// of every live body object follow the blob keys (they sort after them),
// each counted once per checkpoint or transcript that names it.
func (s *Store) walkRefs(ctx context.Context, rev int64, objects bool, fn func(cairn.BlobReference) error) error {
	v2, objs, err := s.objectRefs(ctx, &rev, objects)
	if err != nil {
		return err
	}
	i := 0
	emit := func(r cairn.BlobReference) error {
		for ; i < len(v2) && v2[i].Key < r.Key; i++ {
			if err := fn(v2[i]); err != nil {
				return err
			}
		}
		if i < len(v2) && v2[i].Key == r.Key {
			r.References += v2[i].References
			i++
		}
		return fn(r)
	}
	if err := s.walkBlobShards(ctx, rev, emit); err != nil {
		return err
	}
	for _, r := range append(v2[i:], objs...) {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// objectRefs reads, at *rev (pinning it when 0), the roots that the
// checkpoints of the capacity layout name, and returns the blob references
// their reference chunks hold (sorted, exact) and, with objects, a reference
// for every object those checkpoints and the transcripts name (sorted). Each
// distinct root and reference chunk is fetched once.
func (s *Store) objectRefs(ctx context.Context, rev *int64, objects bool) (refs, objs []cairn.BlobReference, err error) {
	roots := map[keys.Digest]int{}
	scan := func(shard byte, into map[keys.Digest]int) error {
		return s.scanAt(ctx, rev, s.layout.RefShard(shard), func(kv *mvccpb.KeyValue) error {
			if kv.Lease != 0 {
				return nil // staged by a write not yet published
			}
			if len(kv.Value) != keys.DigestLen {
				return corrupt("root reference record", kv.Key, fmt.Errorf("length %d", len(kv.Value)))
			}
			into[keys.Digest(kv.Value)]++
			return nil
		})
	}
	if err := scan(keys.RootShard, roots); err != nil {
		return nil, nil, fmt.Errorf("etcdstore: read root references at revision %d: %w", *rev, err)
	}
	transcripts := map[keys.Digest]int{}
	if objects {
		if err := scan(keys.TranscriptShard, transcripts); err != nil {
			return nil, nil, fmt.Errorf("etcdstore: read transcript references at revision %d: %w", *rev, err)
		}
	}
	if len(roots) == 0 && len(transcripts) == 0 {
		return nil, nil, nil
	}
	distinct := make([]keys.Digest, 0, len(roots)+len(transcripts))
	for d := range roots {
		distinct = append(distinct, d)
	}
	for d := range transcripts {
		if roots[d] == 0 {
			distinct = append(distinct, d)
		}
	}
	decoded := make([]objRoot, len(distinct))
	if err := forEach(ctx, len(distinct), objectParallel, func(ctx context.Context, i int) (err error) {
		decoded[i], err = s.root(ctx, distinct[i])
		return err
	}); err != nil {
		return nil, nil, err
	}
	var listings []refListing
	var chunks []objPart
	seen := map[keys.Digest]bool{}
	named := map[keys.Digest]int{}
	for i, d := range distinct {
		r := &decoded[i]
		l := refListing{chunks: r.refDigests(), keyOrder: r.version == objVersion}
		for range roots[d] {
			listings = append(listings, l)
		}
		for _, c := range r.refs {
			if !seen[c.digest] {
				seen[c.digest] = true
				chunks = append(chunks, c)
			}
		}
		if objects {
			if roots[d] > 0 {
				for _, o := range r.namedObjects(d) {
					named[o] += roots[d]
				}
			}
			if transcripts[d] > 0 {
				for _, o := range r.convObjects(d) {
					named[o] += transcripts[d]
				}
			}
		}
	}
	got, err := s.fetchParts(ctx, chunks)
	if err != nil {
		return nil, nil, err
	}
	refs, err = countListings(listings, func(key string) ([]byte, error) {
		if b, ok := got[key]; ok {
			return b, nil
		}
		return nil, bucket.ErrNotFound
	})
	if err != nil {
		return nil, nil, fmt.Errorf("etcdstore: count the references of version-2 checkpoints: %w", err)
	}
	if objects {
		ds := make([]keys.Digest, 0, len(named))
		for d := range named {
			ds = append(ds, d)
		}
		slices.SortFunc(ds, func(a, b keys.Digest) int { return bytes.Compare(a[:], b[:]) })
		objs = make([]cairn.BlobReference, len(ds))
		for i, d := range ds {
			objs[i] = cairn.BlobReference{Key: objectKey(d), References: named[d]}
		}
	}
	return refs, objs, nil
}

// walkBlobShards walks the reference records of version-1 checkpoints,
// shard by shard, at rev (pinned at the first read when 0).
func (s *Store) walkBlobShards(ctx context.Context, rev int64, fn func(cairn.BlobReference) error) error {
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
