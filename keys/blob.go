package keys

import (
	"encoding/hex"
	"strings"
)

// The blob key namespaces, in the byte order of their keys: every
// sandbox-artifacts/ key sorts before every sandbox-files/ key.
const (
	artifactPrefix = "sandbox-artifacts/sha256/"
	filePrefix     = "sandbox-files/sha256/"
)

// NumShards is the number of blob reference shards: one per namespace and
// first hex digit of the digest. Shards are numbered in the byte order of the
// keys they hold, so reading the shards in order yields keys in order.
const NumShards = 32

// DigestLen is the length of a blob key's SHA-256 digest.
const DigestLen = 32

// Digest is the SHA-256 digest named by a blob key.
type Digest [DigestLen]byte

// BlobShard returns the shard and the digest of a valid blob key of either
// namespace. ok is false for any other string.
func BlobShard(key string) (shard byte, d Digest, ok bool) {
	var ns byte
	var hexDigits string
	switch {
	case strings.HasPrefix(key, artifactPrefix):
		ns, hexDigits = 0, key[len(artifactPrefix):]
	case strings.HasPrefix(key, filePrefix):
		ns, hexDigits = 1, key[len(filePrefix):]
	default:
		return 0, d, false
	}
	if len(hexDigits) != 2*DigestLen || strings.ToLower(hexDigits) != hexDigits {
		return 0, d, false
	}
	if _, err := hex.Decode(d[:], []byte(hexDigits)); err != nil {
		return 0, d, false
	}
	return ns<<4 | d[0]>>4, d, true
}

// BlobKey returns the blob key of a digest in a shard's namespace.
func BlobKey(shard byte, d Digest) string {
	p := filePrefix
	if shard < NumShards/2 {
		p = artifactPrefix
	}
	return p + hex.EncodeToString(d[:])
}
