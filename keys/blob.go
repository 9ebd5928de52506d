package keys

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
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
	return ns<<shardBits | d[0]>>(8-shardBits), true
}

// parseDigest decodes 64 lower-case hex digits.
func parseDigest(digits string) (d Digest, ok bool) {
	ok = decodeDigest(digits, &d)
	return d, ok
}

// decodeDigest decodes 64 lower-case hex digits into *d, and reports
// whether they were that.
//
// It takes eight digits at a time as one 64-bit word, which it checks
// (notHex) and decodes (hexBytes) with a few word operations instead of
// eight table look-ups: a checkpoint's blob keys are decoded on every
// append.
func decodeDigest(digits string, d *Digest) bool {
	if len(digits) != 2*DigestLen {
		return false
	}
	var bad uint64
	for i := 0; i < DigestLen; i += 4 {
		x := load64(digits[2*i:])
		bad |= notHex(x)
		binary.LittleEndian.PutUint32(d[i:], hexBytes(x))
	}
	return bad == 0
}

// load64 returns the first 8 bytes of s as a little-endian word: s[0] is its
// low byte. The compiler makes it one load.
func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

const ones, high = 0x0101010101010101, 0x8080808080808080

// notHex is nonzero unless each of the eight bytes of x is a lower-case hex
// digit. Every byte below 0x80 plus (0x80 - lo) has its high bit set exactly
// when it is >= lo, and carries into no other byte.
func notHex(x uint64) uint64 {
	y := x &^ high
	digit := (y + ones*(0x80-'0')) &^ (y + ones*(0x80-'9'-1))
	letter := (y + ones*(0x80-'a')) &^ (y + ones*(0x80-'f'-1))
	return (digit|letter)&high ^ high | x&high
}

// hexBytes returns the four bytes that the eight lower-case hex digits of x
// (as load64 reads them) spell, the first in the low byte.
func hexBytes(x uint64) uint32 {
	// A digit's value is its low nibble; a letter (bit 6 set) adds 9.
	n := x&(ones*0x0F) + (x>>6)&ones*9
	// Pair the nibbles into bytes, then close up the gaps between them.
	t := (n<<4 | n>>8) & 0x00FF00FF00FF00FF
	t = (t | t>>8) & 0x0000FFFF0000FFFF
	return uint32(t | t>>16)
}

// BlobKey returns the blob key of a digest in a shard's namespace.
func BlobKey(shard byte, d Digest) string {
	p := filePrefix
	if shard < NumShards/2 {
		p = artifactPrefix
	}
	return p + hex.EncodeToString(d[:])
}
