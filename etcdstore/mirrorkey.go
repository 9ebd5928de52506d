package etcdstore

import (
	"encoding/hex"
	"strings"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/hexdigest"
	"github.com/cairnstore/cairn/keys"
)

// The mirror counts, and its file stores, every key in a packed form of 33
// or 34 bytes instead of a bucket key's 80 to 85: a node id as it is (a byte
// 0, the role, the digest), and a bucket key as a tag for its prefix followed
// by its digest's 32 bytes. A sync rewrites the count pages that its changes
// reach, and a change of a few percent of the counts reaches nearly every
// page, so what a sync writes follows the size of an entry: packed keys halve
// the counts' pages and the children's.
//
// The tags are in the order of the prefixes they stand for (artifacts, files,
// objects), and lower-case hex in the order of its bytes, so that packed keys
// sort as the bucket keys do: Live reads the counts in the walk's order.
const (
	packArtifact byte = 1 // cairn.ArtifactBlobPrefix
	packFile     byte = 2 // cairn.FileBlobPrefix
	packObject   byte = 3 // objPrefix

	packedLen = 1 + keys.DigestLen
	nodeLen   = 2 + keys.DigestLen
)

// packDigest is the packed form of the key with tag and digest d.
func packDigest(tag byte, d keys.Digest) string {
	var b [packedLen]byte
	b[0] = tag
	copy(b[1:], d[:])
	return string(b[:])
}

// packBlob is the packed form of keys.BlobKey(shard, d).
func packBlob(shard byte, d keys.Digest) string {
	if shard < keys.NumShards/2 {
		return packDigest(packArtifact, d)
	}
	return packDigest(packFile, d)
}

// packKey returns the packed form of a blob key or a body object's key (the
// 64 digits in lower case), and false for any other string.
func packKey(k string) (string, bool) {
	var d keys.Digest
	if shard, ok := keys.ParseBlobKey(k, &d); ok {
		return packBlob(shard, d), true
	}
	if digits, ok := strings.CutPrefix(k, objPrefix); ok && hexdigest.Decode(digits, (*[keys.DigestLen]byte)(&d)) {
		return packDigest(packObject, d), true
	}
	return "", false
}

// unpackKey returns the bucket key of a packed key, and false for a node id
// or any string that is not a packed key.
func unpackKey(p string) (string, bool) {
	if len(p) != packedLen {
		return "", false
	}
	d := keys.Digest([]byte(p[1:]))
	switch p[0] {
	case packArtifact:
		return cairn.ArtifactBlobPrefix + hex.EncodeToString(d[:]), true
	case packFile:
		return cairn.FileBlobPrefix + hex.EncodeToString(d[:]), true
	case packObject:
		return objectKey(d), true
	}
	return "", false
}

// packedSize returns the length of the packed key or node id that b starts
// with, or 0 if it starts with neither.
func packedSize(b []byte) int {
	switch {
	case len(b) == 0:
		return 0
	case b[0] == 0:
		if len(b) < nodeLen {
			return 0
		}
		switch b[1] {
		case nodeRoot, nodeTranscript, nodeChunk:
			return nodeLen
		}
		return 0
	case b[0] >= packArtifact && b[0] <= packObject && len(b) >= packedLen:
		return packedLen
	}
	return 0
}
