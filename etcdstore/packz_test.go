package etcdstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/keys"
)

// packzTestMembers are members of every kind: a leaf, a conversation
// chunk, a reference chunk (random digests: incompressible) and a tiny
// object.
func packzTestMembers(t testing.TB) map[string][]byte {
	t.Helper()
	c := cairn.Checkpoint{Files: objTestFiles(40, "")}
	_, objs, refs, err := splitCheckpointBody(&c)
	if err != nil {
		t.Fatal(err)
	}
	conv := append([]byte{objTypeConv, objVersion}, objTestConversation(rand.New(rand.NewPCG(1, 2)), 16<<10)...)
	return map[string][]byte{"Leaf": objs[0].data, "Conversation": conv, "References": refs[0].data, "Tiny": {objTypeConv, objVersion, 'x'}}
}

// TestPackMemberRoundTrip checks that every member packCompress stores
// decodes to itself, that compressible members are stored compressed and
// incompressible ones as they are.
func TestPackMemberRoundTrip(t *testing.T) {
	for name, b := range packzTestMembers(t) {
		t.Run(name, func(t *testing.T) {
			stored, raw := packCompress(b)
			switch {
			case name == "Leaf" || name == "Conversation":
				if raw != len(b) || len(stored) >= len(b) {
					t.Fatalf("stored %d of %d bytes, raw %d: want compressed", len(stored), len(b), raw)
				}
			case raw != 0 || !bytes.Equal(stored, b):
				t.Fatalf("stored %d of %d bytes, raw %d: want as it is", len(stored), len(b), raw)
			}
			got, err := packDecode(stored, raw)
			if err != nil || !bytes.Equal(got, b) {
				t.Fatalf("packDecode: %d bytes, %v; want the member", len(got), err)
			}
		})
	}
}

// zstdStream compresses b with a streaming encoder, which writes no
// content size.
func zstdStream(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	// A flush before the end writes the frame header before the size is
	// known.
	if _, err := w.Write(b[:len(b)/2]); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b[len(b)/2:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var h zstd.Header
	if err := h.Decode(buf.Bytes()); err != nil || h.HasFCS {
		t.Fatalf("a streamed frame: header %+v, %v; want one without a content size", h, err)
	}
	return buf.Bytes()
}

// TestPackedMemberDecoding reads compressed members through fetchParts, as
// every read of a packed body does: a member is returned only when its
// frame declares and decodes to exactly the size its root states and the
// decoded bytes hash to its digest. A frame that would produce more than
// the root states is refused before anything is decoded (errMemberSize, not
// the digest check), and one that decodes to other bytes of the stated
// size fails the digest check (errObjDigest).
func TestPackedMemberDecoding(t *testing.T) {
	ctx := context.Background()
	member := packzTestMembers(t)["Conversation"]
	other := bytes.Clone(member)
	other[len(other)/2] ^= 1
	z := func(b []byte) []byte { s, _ := packCompress(b); return s }
	frame := z(member)
	for _, tc := range []struct {
		name   string
		stored []byte
		raw    int
		want   error // nil: the member
	}{
		{"Honest", frame, len(member), nil},
		{"AsItIs", member, 0, nil},
		{"OtherBytes", z(other), len(member), errObjDigest},
		{"FrameLarger", z(append(bytes.Clone(member), "more"...)), len(member), errMemberSize},
		{"StatedLarger", frame, len(member) + 1, errMemberSize},
		{"StatedSmaller", frame, len(member) - 1, errMemberSize},
		{"NoContentSize", zstdStream(t, member), len(member), errMemberSize},
		{"TwoFrames", append(z(member[:len(member)/2]), z(member[len(member)/2:])...), len(member), errMemberSize},
		{"AboveTheCap", z(bytes.Repeat(member, objMemberMax/len(member)+1)), len(member), errMemberSize},
		{"Truncated", frame[:len(frame)-3], len(member), errMemberSize},
		{"NotZstd", bytes.Repeat([]byte{7}, 40), len(member), errMemberSize},
		{"CompressedAsItIs", frame, 0, errObjDigest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := bucket.NewMemory(nil)
			pack := append([]byte{objTypePack, objPackCompressed}, tc.stored...)
			pd := keys.Digest(sha256.Sum256(pack))
			if err := mem.Put(ctx, objectKey(pd), pack); err != nil {
				t.Fatal(err)
			}
			s := &Store{objects: mem, objCache: newObjCache(1 << 20)}
			d := keys.Digest(sha256.Sum256(member))
			got, err := s.fetchParts(ctx, []objPart{{digest: d, n: len(member) - 2, at: partLoc{pack: pd, off: 2, size: len(tc.stored), raw: tc.raw}}})
			if tc.want == nil {
				if err != nil || !bytes.Equal(got[objectKey(d)], member) {
					t.Fatalf("fetchParts: %v; want the member", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), objectKey(pd)) || !strings.Contains(err.Error(), objectKey(d)) {
				t.Fatalf("fetchParts: %v; want %v naming the pack and the member", err, tc.want)
			}
			if _, ok := s.objCache.get(d); ok {
				t.Fatal("a refused member is in the cache")
			}
		})
	}
}

// FuzzPackDecode checks that packDecode never panics, never returns other
// than exactly the stated size, and that every member packCompress stores
// decodes to itself.
func FuzzPackDecode(f *testing.F) {
	for _, b := range packzTestMembers(f) {
		stored, raw := packCompress(b)
		f.Add(stored, raw, b)
	}
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd}, 10, []byte("xx"))
	f.Fuzz(func(t *testing.T, stored []byte, raw int, member []byte) {
		out, err := packDecode(stored, raw)
		if err == nil && raw != 0 && (len(out) != raw || raw > objMemberMax) {
			t.Fatalf("packDecode returned %d bytes for a stated %d", len(out), raw)
		}
		s, r := packCompress(member)
		got, err := packDecode(s, r)
		if err != nil || !bytes.Equal(got, member) {
			t.Fatalf("a member packCompress stored (raw %d) decodes to %d bytes, %v", r, len(got), err)
		}
	})
}

// TestRootVersion4Bounds checks the root decoder's bounds on the stated
// uncompressed size of a member: 0 (as it is) or 2 to objMemberMax.
func TestRootVersion4Bounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  int
		ok   bool
	}{
		{"AsItIs", 0, true},
		{"One", 1, false},
		{"Two", 2, true},
		{"Cap", objMemberMax, true},
		{"AboveTheCap", objMemberMax + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pack := keys.Digest{1}
			r := objRoot{version: objRootCompressed, packs: []keys.Digest{pack},
				leaves: []objPart{{digest: keys.Digest{2}, n: 1, at: partLoc{pack: pack, off: 2, size: 10, raw: tc.raw}}}}
			got, err := objDecodeRoot(objEncodeRoot(&r))
			if (err == nil) != tc.ok {
				t.Fatalf("objDecodeRoot: %v, want ok %v", err, tc.ok)
			}
			if err == nil && got.leaves[0].at != r.leaves[0].at {
				t.Fatalf("decoded %+v, want %+v", got.leaves[0].at, r.leaves[0].at)
			}
		})
	}
}

// TestRepackKeep checks the write-time repack's choice of the parent packs
// a new root keeps: at most objRootPacks-1 when it writes a pack, the ones
// holding the most, and none but the one holding the most that holds at
// most repackRatio times what the new pack holds by the time it is
// considered.
func TestRepackKeep(t *testing.T) {
	a, b, c := keys.Digest{1}, keys.Digest{2}, keys.Digest{3}
	for _, tc := range []struct {
		name              string
		held              map[keys.Digest]int
		fresh, freshBytes int
		want              []keys.Digest
	}{
		{"NothingNewKeepsAll", map[keys.Digest]int{a: 100, b: 10, c: 1}, 0, 0, []keys.Digest{a, b, c}},
		{"FirstCheckpoint", map[keys.Digest]int{}, 5, 100, nil},
		{"SmallNewKeepsLarge", map[keys.Digest]int{a: 1000, b: 100}, 1, 10, []keys.Digest{a, b}},
		{"TierAsSmallAsTheNewPackIsMerged", map[keys.Digest]int{a: 1000, b: 10}, 1, 10, []keys.Digest{a}},
		{"MustDropTheSmallest", map[keys.Digest]int{a: 1000, b: 500, c: 50}, 1, 10, []keys.Digest{a, b}},
		{"MergesUpTheTiers", map[keys.Digest]int{a: 1000, b: 60, c: 50}, 1, 10, []keys.Digest{a}},
		{"TheLargestOnlyWhenItMust", map[keys.Digest]int{a: 100, b: 60}, 1, 500, []keys.Digest{a}},
		{"TierRatio", map[keys.Digest]int{a: 1000, b: 124, c: 10}, 1, 90, []keys.Digest{a}},
		{"AboveTheTierRatio", map[keys.Digest]int{a: 1000, b: 126, c: 10}, 1, 90, []keys.Digest{a, b}},
		{"NothingNewButFourPacks", map[keys.Digest]int{a: 1000, b: 500, c: 50, {4}: 40}, 0, 0, []keys.Digest{a, b}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := repackKeep(tc.held, tc.fresh, tc.freshBytes)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("repackKeep: %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRepackCopyBounded checks on a thread of the capacity workload that
// what the write-time repack copies a turn grows far slower than the
// thread: over 100 turns at most 3.5 times what it is over 20, where the
// thread grows 5 times. With leaves of ~27 entries the tiers copy 12.8,
// 19.8, 28.1 and 39.4 KB a turn over 20, 40, 60 and 100 turns (3.1 times;
// with leaves of ~15 entries 17.7, 24.1, 27.5 and 43.6 KB, 2.5 times, from
// more a turn over 20). Copying only the packs it must (the smallest)
// grows about linearly: 26, 49, 68 and 103 KB with leaves of ~15 entries,
// 4 times.
func TestRepackCopyBounded(t *testing.T) {
	_, c20, _ := packThreadCost(t, false, 20)
	_, c100, _ := packThreadCost(t, false, 100)
	per20, per100 := float64(c20)/19, float64(c100)/99
	t.Logf("copied a turn: %.0f B over 20 turns, %.0f B over 100", per20, per100)
	if per100 > 3.5*per20 {
		t.Fatalf("the repack copies %.0f B a turn over 100 turns against %.0f B over 20", per100, per20)
	}
}
