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
	var ns byte
	var digits string
	switch {
	case strings.HasPrefix(key, artifactPrefix):
		ns, digits = 0, key[len(artifactPrefix):]
	case strings.HasPrefix(key, filePrefix):
		ns, digits = 1, key[len(filePrefix):]
	default:
		return 0, d, false
	}
	if len(digits) != 2*DigestLen {
		return 0, d, false
	}
	bad := byte(0)
	for i := range DigestLen {
		hi, lo := hexValue[digits[2*i]], hexValue[digits[2*i+1]]
		bad |= hi | lo
		d[i] = hi<<4 | lo&0x0F
	}
	if bad&0xF0 != 0 {
		return 0, d, false
	}
	return ns<<shardBits | d[0]>>(8-shardBits), d, true
}

// hexValue maps a lower-case hex digit to its value and any other byte to
// 0xFF.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xFF
	}
	for c := byte('0'); c <= '9'; c++ {
		t[c] = c - '0'
	}
	for c := byte('a'); c <= 'f'; c++ {
		t[c] = c - 'a' + 10
	}
	return t
}()

// BlobKey returns the blob key of a digest in a shard's namespace.
func BlobKey(shard byte, d Digest) string {
	p := filePrefix
	if shard < NumShards/2 {
		p = artifactPrefix
	}
	return p + hex.EncodeToString(d[:])
}
