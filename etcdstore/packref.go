package etcdstore

import (
	"context"
	"fmt"
	"math/bits"
	"slices"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// Reference chunks made from their leaves (root version 5; docs/design.md,
// "Packs: one object a checkpoint").
//
// In tree order (root versions 2 to 4) the reference chunk of a leaf holds
// the sorted distinct blob keys of the leaf's file entries that no earlier
// leaf holds: keys the leaf already holds, as 33 bytes of digest that do not
// compress, which were about 40% of what a packed turn stored new. A root of
// version 5 names such a chunk as it names every reference chunk, by the
// SHA-256 of its bytes and its key count, but instead of the chunk's place
// in a pack it gives the index of its leaf in the root's leaf list and a
// bitmap of the leaf's entries (bit i of byte i/8: entry i) whose keys the
// chunk holds. The chunk is not stored: a reader reads the leaf (verified
// against its own digest), makes the chunk from it (objDeriveRefChunk) and
// checks the result against the chunk's digest, so a read returns exactly
// the chunk that was split or fails naming it. Everything that reads
// reference chunks (the sweep's walk, the mirror, Verify) reads them
// through fetchParts, which does this; a chunk's identity, and so what the
// sweep and the mirror count, is that of every other version.
//
// The bitmap has exactly ceil(n/8) bytes for a leaf of n entries, no bit at
// or past n, and at least as many bits as the chunk has keys; each picked
// entry is a file with a blob key. Chunks of artifact keys no leaf holds stay
// members of packs, named by pack, offset and sizes as in version 4.

// objRootDerived is the version of a root whose leaves' reference chunks
// are made from the leaves.
const objRootDerived = 5

// writeDerivedRefs says whether packed roots with compressed members are
// written as version 5; tests clear it to write version 4.
var writeDerivedRefs = true

// refFrom is how a reference chunk is made from a leaf of its root: leaf is
// the leaf's index, pick the bitmap of the entries whose keys it holds.
type refFrom struct {
	leaf int
	pick string
}

// pickBitmap returns the bitmap of a leaf of n entries with the entries at
// offsets picked.
func pickBitmap(n int, picked []int32) string {
	b := make([]byte, (n+7)/8)
	for _, i := range picked {
		b[i/8] |= 1 << (i % 8)
	}
	return string(b)
}

// validPick reports whether pick is a bitmap of a leaf of n entries that
// picks at least keys entries (a chunk of keys distinct keys).
func validPick(pick string, n, keys int) bool {
	if len(pick) != (n+7)/8 || n%8 != 0 && pick[len(pick)-1]>>(n%8) != 0 {
		return false
	}
	c := 0
	for i := 0; i < len(pick); i++ {
		c += bits.OnesCount8(pick[i])
	}
	return c >= keys
}

// objDeriveRefChunk returns the reference chunk of the entries of leaf that
// pick names: the sorted distinct keys of those entries. It returns
// errCodec when leaf is not a leaf, pick is not a bitmap of its entries,
// picks none, or picks an entry that is not a file with a blob key.
func objDeriveRefChunk(leaf []byte, pick string) (object, error) {
	files, err := objDecodeLeaf(leaf)
	if err != nil {
		return object{}, err
	}
	if !validPick(pick, len(files), 1) {
		return object{}, errCodec
	}
	ks := make([]objSortKey, 0, len(files))
	for i := range files {
		if pick[i/8]>>(i%8)&1 == 0 {
			continue
		}
		if files[i].Kind != cairn.KindFile {
			return object{}, errCodec
		}
		k, err := objSortKeyOf(files[i].BlobKey)
		if err != nil {
			return object{}, errCodec
		}
		ks = append(ks, k)
	}
	slices.SortFunc(ks, objSortKey.compare)
	ks = slices.Compact(ks)
	if len(ks) > objRefMax {
		return object{}, errCodec
	}
	return objEncodeRefChunk(ks), nil
}

// fetchVerified is fetchParts by digest, with packs already read whole (by
// digest, not yet verified): their members are cut from those bytes instead
// of read by range. A reference chunk made from its leaf (root version 5) is
// made from the leaf, read as a part, and checked against its digest.
func (s *Store) fetchVerified(ctx context.Context, parts []objPart, whole map[keys.Digest][]byte) (map[keys.Digest][]byte, error) {
	read := make([]objPart, 0, len(parts))
	var derived []objPart
	cached := map[keys.Digest][]byte{}
	for _, p := range parts {
		switch b, ok := s.objCache.get(p.digest); {
		case p.at.base == nil:
			read = append(read, p)
		case ok:
			cached[p.digest] = b
		default:
			derived = append(derived, p)
			read = append(read, *p.at.base)
		}
	}
	got, err := s.fetchMembers(ctx, read, whole)
	if err != nil {
		return nil, err
	}
	for _, p := range derived {
		o, err := objDeriveRefChunk(got[p.at.base.digest], p.at.pick)
		if err == nil && o.digest != p.digest {
			err = errObjDigest
		}
		if err != nil {
			return nil, fmt.Errorf("etcdstore: %w", objError(p.digest, err))
		}
		s.objCache.put(ctx, p.digest, o.data)
		got[o.digest] = o.data
	}
	for d, b := range cached {
		got[d] = b
	}
	return got, nil
}
