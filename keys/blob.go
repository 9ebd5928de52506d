package keys

import (
	"encoding/hex"
	"strings"

	"github.com/cairnstore/cairn/internal/hexdigest"
)

// The blob key namespaces, in the byte order of their keys: every
// sandbox-artifacts/ key sorts before every sandbox-files/ key.
const (
	artifactPrefix = "sandbox-artifacts/sha256/"
	filePrefix     = "sandbox-files/sha256/"
	// objectPrefix is the namespace of the store's own body objects (the
	// capacity layout); they are not blob keys of checkpoints, so BlobShard
	// refuses them, but claims and GC records name them like blobs.
	objectPrefix = "sandbox-meta/sha256/"
)

// The namespaces of a Blob, in the byte order of their keys.
const (
	NSArtifact byte = 0
	NSFile     byte = 1
	NSObject   byte = 2
)

// RootShard is the reference shard of the capacity layout: the record of a
// version-2 checkpoint in it holds the digest of the checkpoint's root
// object. TranscriptShard holds, per thread, the root whose conversation a
// transcript names. Neither holds blob digests, and walks of blob references
// read them apart from shards 0 to NumShards-1.
const (
	RootShard       byte = NumShards
	TranscriptShard byte = NumShards + 1
)

// NumShards is the number of blob reference shards: two per namespace, one
// for digests whose first bit is 0 and one for those whose first bit is 1.
// Shards are numbered in the byte order of the keys they hold, so reading the
// shards in order yields keys in order.
const NumShards = 2 << shardBits

// shardBits is how many leading bits of a digest pick its shard within its
// namespace. More shards hold fewer references each (what a walk of the
// references holds in memory at once), but a checkpoint writes one record per
// shard it uses.
const shardBits = 1

// DigestLen is the length of a blob key's SHA-256 digest.
const DigestLen = 32

// Digest is the SHA-256 digest named by a blob key.
type Digest [DigestLen]byte

// BlobShard returns the shard and the digest of a valid blob key of either
// namespace. ok is false for any other string, upper-case hex included.
func BlobShard(key string) (shard byte, d Digest, ok bool) {
	shard, ok = ParseBlobKey(key, &d)
	return shard, d, ok
}

// ParseBlobKey is BlobShard decoding the digest into *d, for a caller that
// decodes many keys into an array of its own. *d is unspecified when ok is
// false.
func ParseBlobKey(key string, d *Digest) (shard byte, ok bool) {
	var ns byte
	var digits string
	switch {
	case strings.HasPrefix(key, artifactPrefix):
		ns, digits = 0, key[len(artifactPrefix):]
	case strings.HasPrefix(key, filePrefix):
		ns, digits = 1, key[len(filePrefix):]
	default:
		return 0, false
	}
	if !decodeDigest(digits, d) {
		return 0, false
	}
	return DigestShard(ns, d), true
}

// DigestShard returns the shard of a digest in a namespace of blob keys
// (NSArtifact or NSFile).
func DigestShard(ns byte, d *Digest) byte { return ns<<shardBits | d[0]>>(8-shardBits) }

// parseDigest decodes 64 lower-case hex digits.
func parseDigest(digits string) (d Digest, ok bool) {
	ok = decodeDigest(digits, &d)
	return d, ok
}

// decodeDigest decodes 64 lower-case hex digits into *d, and reports
// whether they were that.
func decodeDigest(digits string, d *Digest) bool {
	return hexdigest.Decode(digits, (*[DigestLen]byte)(d))
}

// BlobKey returns the blob key of a digest in a shard's namespace.
func BlobKey(shard byte, d Digest) string {
	p := filePrefix
	if shard < NumShards/2 {
		p = artifactPrefix
	}
	return p + hex.EncodeToString(d[:])
}
