package etcdstore

import (
	"encoding/binary"
	"errors"
)

// Leaves stored as a patch of an earlier leaf (root version 5;
// docs/design.md, "Packs: one object a checkpoint").
//
// A turn that changes one entry of a leaf of ~16 entries used to store the
// whole leaf again: ~700 bytes compressed, most of them the 32-byte digests
// of the entries that did not change. In a root of version 5 a leaf may
// instead be stored as a patch of a base: another leaf stored whole, as a
// member of a pack the root names (its pack index, offset and sizes follow
// the leaf's own place in the root). A patch is a sequence of operations,
// each a uvarint x then:
//
//	x odd:  copy x>>1 bytes (at least 1) of the base, from the uvarint offset that follows
//	x even: add the x>>1 bytes (at least 1) that follow
//
// The leaf is the concatenation of what the operations produce, at most
// objMemberMax bytes; no two additions follow each other. A reader applies
// the patch to the base's bytes (which it does not need to verify on their
// own) and checks the result against the leaf's digest, so a read returns
// exactly the leaf that was split or fails naming it. A base is always a
// leaf stored whole: patches do not chain.
//
// A writer patches a leaf against the version of it that the parent stored
// whole (or against the base the parent's version was patched against),
// when the base's pack stays named by the new root and the patch is
// smaller; the patch copies the common prefix and suffix and adds what is
// between.

// errPatch reports a patch that is malformed or does not fit its base.
var errPatch = errors.New("malformed leaf patch")

// leafPatch returns the patch that makes b from base: the common prefix and
// suffix copied, the rest added.
func leafPatch(base, b []byte) []byte {
	p := 0
	for p < len(base) && p < len(b) && base[p] == b[p] {
		p++
	}
	s := 0
	for s < len(base)-p && s < len(b)-p && base[len(base)-1-s] == b[len(b)-1-s] {
		s++
	}
	var out []byte
	if p > 0 {
		out = binary.AppendUvarint(out, uint64(p)<<1|1)
		out = binary.AppendUvarint(out, 0)
	}
	if mid := b[p : len(b)-s]; len(mid) > 0 {
		out = binary.AppendUvarint(out, uint64(len(mid))<<1)
		out = append(out, mid...)
	}
	if s > 0 {
		out = binary.AppendUvarint(out, uint64(s)<<1|1)
		out = binary.AppendUvarint(out, uint64(len(base)-s))
	}
	return out
}

// applyLeafPatch returns the bytes patch makes of base. It returns errPatch
// for a patch that is empty, has an operation of no bytes, two additions in
// a row, a copy outside base, a varint not in its shortest form, or a
// result above objMemberMax.
func applyLeafPatch(base, patch []byte) ([]byte, error) {
	if len(patch) == 0 {
		return nil, errPatch
	}
	d := decoder{b: patch}
	var out []byte
	added := false
	for len(d.b) > 0 {
		x := d.uint()
		n := x >> 1
		if d.err != nil || n == 0 || n > objMemberMax-uint64(len(out)) {
			return nil, errPatch
		}
		if x&1 == 1 {
			off := d.uint()
			if d.err != nil || off > uint64(len(base)) || n > uint64(len(base))-off {
				return nil, errPatch
			}
			out = append(out, base[off:off+n]...)
			added = false
			continue
		}
		if added || n > uint64(len(d.b)) {
			return nil, errPatch
		}
		out = append(out, d.b[:n]...)
		d.b = d.b[n:]
		added = true
	}
	return out, nil
}
