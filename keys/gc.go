package keys

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// Blob is a blob key in compact form: its namespace and its digest. Encoded,
// it is 1 + DigestLen bytes, the namespace byte then the raw digest, so the
// encodings of two blobs never nest, and their byte order is the order of the
// blob keys (every sandbox-artifacts/ key before every sandbox-files/ key).
type Blob struct {
	// NS is the namespace: 0 for sandbox-artifacts/sha256/, 1 for
	// sandbox-files/sha256/, 2 for the store's body objects,
	// sandbox-meta/sha256/.
	NS     byte
	Digest Digest
}

// BlobLen is the length of an encoded Blob.
const BlobLen = 1 + DigestLen

// ParseBlob returns the compact form of a valid blob key of either namespace,
// or of a body object key (sandbox-meta/sha256/<64 hex>). ok is false for any
// other string.
func ParseBlob(key string) (b Blob, ok bool) {
	if strings.HasPrefix(key, objectPrefix) {
		d, ok := parseDigest(key[len(objectPrefix):])
		if !ok {
			return Blob{}, false
		}
		return Blob{NS: NSObject, Digest: d}, true
	}
	shard, d, ok := BlobShard(key)
	if !ok {
		return Blob{}, false
	}
	return Blob{NS: shard >> shardBits, Digest: d}, true
}

// Key returns the blob key b stands for.
func (b Blob) Key() string {
	if b.NS == NSObject {
		return objectPrefix + hex.EncodeToString(b.Digest[:])
	}
	return BlobKey(b.NS<<shardBits, b.Digest)
}

// AppendBlob appends the encoding of b to dst.
func AppendBlob(dst []byte, b Blob) []byte {
	dst = append(dst, b.NS)
	return append(dst, b.Digest[:]...)
}

// DecodeBlob decodes a Blob encoded by AppendBlob at the start of p and
// returns it with the bytes that follow.
func DecodeBlob(p []byte) (b Blob, rest []byte, err error) {
	if len(p) < BlobLen || p[0] > NSObject {
		return Blob{}, nil, ErrMalformed
	}
	b.NS = p[0]
	copy(b.Digest[:], p[1:BlobLen])
	return b, p[BlobLen:], nil
}

// GCRecords returns the prefix of every GC record.
func (l Layout) GCRecords() []byte { return l.key(tagGC, 0) }

// GCRecord returns the key of the sweeper's record of a blob.
func (l Layout) GCRecord(b Blob) []byte { return AppendBlob(l.key(tagGC, BlobLen), b) }

// DecodeGCRecord returns the blob of a GC record key.
func (l Layout) DecodeGCRecord(key []byte) (Blob, error) {
	rest, err := l.strip(key, tagGC)
	if err != nil {
		return Blob{}, err
	}
	b, rest, err := DecodeBlob(rest)
	if err != nil || len(rest) != 0 {
		return Blob{}, fmt.Errorf("%w: GC record key", ErrMalformed)
	}
	return b, nil
}

// Claims returns the prefix of every claim.
func (l Layout) Claims() []byte { return l.key(tagClaim, 0) }

// BlobClaims returns the prefix of every claim of one blob, by any writer.
func (l Layout) BlobClaims(b Blob) []byte { return AppendBlob(l.key(tagClaim, BlobLen), b) }

// Claim returns the key of the claim of a blob by the writer lease of a
// thread with the given fence.
func (l Layout) Claim(b Blob, thread string, fence uint64) []byte {
	k := AppendBlob(l.key(tagClaim, BlobLen+len(thread)+2+8), b)
	return AppendUint64(AppendString(k, thread), fence)
}

// ClaimKey is a decoded claim key.
type ClaimKey struct {
	Blob   Blob
	Thread string
	Fence  uint64
}

// DecodeClaim returns the parts of a claim key.
func (l Layout) DecodeClaim(key []byte) (ClaimKey, error) {
	var c ClaimKey
	rest, err := l.strip(key, tagClaim)
	if err != nil {
		return c, err
	}
	if c.Blob, rest, err = DecodeBlob(rest); err != nil {
		return c, fmt.Errorf("%w: claim key", ErrMalformed)
	}
	if c.Thread, rest, err = DecodeString(rest); err != nil {
		return c, fmt.Errorf("%w: claim key", ErrMalformed)
	}
	if c.Fence, rest, err = DecodeUint64(rest); err != nil || len(rest) != 0 {
		return c, fmt.Errorf("%w: claim key", ErrMalformed)
	}
	return c, nil
}
