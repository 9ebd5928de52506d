package etcdstore

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Compressed members of packs (pack version 2, root version 4; docs/design.md,
// "Packs: one object a checkpoint").
//
// A pack of version 2 holds each member either as it is or as one zstd
// frame of its own, so that a range read still fetches just the members it
// needs. A root of version 4 says which, per part: after the pack index,
// offset and size of the member as stored, the size of its bytes
// uncompressed (raw), 0 for a member stored as it is. The digest the root
// names is, as in every version, the SHA-256 of the member's uncompressed
// bytes (the leaf, conversation chunk or reference chunk as an object of its
// own), checked after decompression: what is compressed and how changes no
// part's identity, and a read returns exactly what was packed or fails
// naming the member.
//
// The decoder never produces more than the root states: raw is at most
// objMemberMax, the frame must declare exactly raw bytes of content and no
// dictionary, and decompression writes into a buffer of capacity raw that it
// may not grow (zstd.WithDecodeAllCapLimit), so a frame that would expand
// further fails instead of allocating. A writer compresses a member only when
// the frame is smaller and decodes under these rules (packCompress), so it
// never writes what a reader refuses.

const (
	// objPackCompressed is the version of a pack whose members may be
	// compressed; objRootCompressed the version of the root that names them.
	objPackCompressed = 2
	objRootCompressed = 4
	// objPackRuns is the version of a pack whose members are compressed in
	// runs (packrun.go); objRootRuns the version of the root that names
	// them.
	objPackRuns = 3
	objRootRuns = 6
	// objMemberMax bounds the uncompressed size of a compressed member: a
	// leaf of objLeafMax entries with paths of cairn.MaxPathBytes is about
	// 2.1 MiB, every other part is smaller. Larger members are stored as
	// they are.
	objMemberMax = 4 << 20
)

// writePackVersion is the version of the packs appends write: objPackRuns
// (roots of version 6, members compressed in runs), or, which tests set to
// write what stores wrote before, objPackCompressed (roots of version 4 or
// 5, a frame a member) or objVersion (roots of version 3, members as they
// are).
var writePackVersion byte = objPackRuns

// errMemberSize reports a compressed member whose frame does not decode to
// exactly the size its root states.
var errMemberSize = errors.New("compressed pack member does not decode to its stated size")

// The encoder and decoder are made once, with fixed options; EncodeAll and
// DecodeAll may be called concurrently and start no goroutines.
var (
	zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
		return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression),
			zstd.WithEncoderCRC(false), zstd.WithEncoderConcurrency(1))
	})
	zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
		return zstd.NewReader(nil, zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderMaxMemory(objMemberMax),
			zstd.WithDecoderMaxWindow(objMemberMax), zstd.WithDecoderConcurrency(4))
	})
)

// packCompress returns how member b is stored in a pack of version 2: a
// zstd frame and len(b) when that is smaller and decodes back to b under
// packDecode's rules; otherwise (or without an encoder) b itself and 0.
func packCompress(b []byte) (stored []byte, raw int) {
	if len(b) < 2 || len(b) > objMemberMax {
		return b, 0
	}
	enc, err := zstdEncoder()
	if err != nil {
		return b, 0
	}
	z := enc.EncodeAll(b, make([]byte, 0, len(b)))
	if len(z) >= len(b) {
		return b, 0
	}
	if got, err := packDecode(z, len(b)); err != nil || !bytes.Equal(got, b) {
		return b, 0
	}
	return z, len(b)
}

// zstdFrameOK checks that z starts with a zstd frame header that declares
// exactly raw bytes of content and no dictionary.
func zstdFrameOK(z []byte, raw int) error {
	var h zstd.Header
	if err := h.Decode(z); err != nil {
		return fmt.Errorf("%w: %v", errMemberSize, err)
	}
	if h.Skippable || !h.HasFCS || h.FrameContentSize != uint64(raw) || h.DictionaryID != 0 {
		return errMemberSize
	}
	return nil
}

// packDecode returns the bytes of a member as stored (stored) whose root
// states raw: stored itself (copied) when raw is 0, else its zstd frame
// decoded, which must be exactly raw bytes (at most objMemberMax). The
// caller checks the result against the member's digest.
func packDecode(stored []byte, raw int) ([]byte, error) {
	if raw == 0 {
		return append([]byte(nil), stored...), nil
	}
	if raw < 2 || raw > objMemberMax {
		return nil, errMemberSize
	}
	if err := zstdFrameOK(stored, raw); err != nil {
		return nil, err
	}
	dec, err := zstdDecoder()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMemberSize, err)
	}
	out, err := dec.DecodeAll(stored, make([]byte, 0, raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMemberSize, err)
	}
	if len(out) != raw {
		return nil, errMemberSize
	}
	return out, nil
}
