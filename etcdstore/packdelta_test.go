package etcdstore

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// TestLeafPatch checks that a patch made by leafPatch makes its leaf from
// its base.
func TestLeafPatch(t *testing.T) {
	leaf := objEncodeLeaf(objTestFiles(16, ""))
	changed := objTestFiles(16, "")
	changed[7].BlobKey = objTestFileKey("changed")
	for _, tc := range []struct {
		name     string
		base, to []byte
	}{
		{"OneEntryChanged", leaf, objEncodeLeaf(changed)},
		{"Same", leaf, leaf},
		{"Appended", leaf[:len(leaf)-40], leaf},
		{"Cut", leaf, leaf[:len(leaf)-40]},
		{"Prepended", leaf[40:], leaf},
		{"NothingInCommon", []byte("abc"), []byte("xyz")},
		{"EmptyBase", nil, leaf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := leafPatch(tc.base, tc.to)
			got, err := applyLeafPatch(tc.base, p)
			if err != nil || !bytes.Equal(got, tc.to) {
				t.Fatalf("applyLeafPatch(leafPatch): %d bytes, %v; want the %d bytes", len(got), err, len(tc.to))
			}
		})
	}
	if p := leafPatch(leaf, objEncodeLeaf(changed)); len(p) > len(leaf)/4 {
		t.Fatalf("a patch of one entry of 16 has %d bytes, the leaf %d", len(p), len(leaf))
	}
}

// TestApplyLeafPatchRefuses checks the patch decoder's rules.
func TestApplyLeafPatchRefuses(t *testing.T) {
	base := []byte("0123456789")
	for _, tc := range []struct {
		name  string
		patch []byte
		want  string
	}{
		{"CopyAll", []byte{10<<1 | 1, 0}, "0123456789"},
		{"AddThenCopy", []byte{2 << 1, 'x', 'y', 1<<1 | 1, 9}, "xy9"},
		{"Empty", nil, ""},
		{"CopyOfNothing", []byte{0<<1 | 1, 0}, ""},
		{"AddOfNothing", []byte{0}, ""},
		{"TwoAdds", []byte{1 << 1, 'x', 1 << 1, 'y'}, ""},
		{"CopyPastTheBase", []byte{2<<1 | 1, 9}, ""},
		{"CopyFromPastTheBase", []byte{1<<1 | 1, 11}, ""},
		{"LongVarint", []byte{1<<1 | 1 | 0x80, 0, 0}, ""},
		{"TruncatedAdd", []byte{3 << 1, 'x'}, ""},
		{"TruncatedCopy", []byte{1<<1 | 1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := applyLeafPatch(base, tc.patch)
			if tc.want == "" {
				if !errors.Is(err, errPatch) {
					t.Fatalf("applyLeafPatch: %q, %v; want %v", got, err, errPatch)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("applyLeafPatch: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func FuzzApplyLeafPatch(f *testing.F) {
	leaf := objEncodeLeaf(objTestFiles(16, ""))
	changed := objTestFiles(16, "")
	changed[3].BlobKey = objTestFileKey("x")
	f.Add(leaf, leafPatch(leaf, objEncodeLeaf(changed)))
	f.Add([]byte("0123456789"), []byte{2 << 1, 'x', 'y', 1<<1 | 1, 9})
	f.Add([]byte{}, []byte{0})
	f.Fuzz(func(t *testing.T, base, patch []byte) {
		got, err := applyLeafPatch(base, patch)
		if err != nil {
			return
		}
		if len(got) == 0 || len(got) > objMemberMax {
			t.Fatalf("a patch made %d bytes", len(got))
		}
	})
}

func FuzzLeafPatch(f *testing.F) {
	f.Add([]byte("L\x01abcdef"), []byte("L\x01abXdef"))
	f.Add([]byte{}, []byte("x"))
	f.Fuzz(func(t *testing.T, base, b []byte) {
		if len(b) == 0 {
			return
		}
		got, err := applyLeafPatch(base, leafPatch(base, b))
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("applyLeafPatch(leafPatch): %x, %v; want %x", got, err, b)
		}
	})
}

// TestRootVersion5Leaves checks the root decoder on the leaves of a root of
// version 5: a flag of 0 (stored whole) or 1 and the place of the base, in
// a pack the root names.
func TestRootVersion5Leaves(t *testing.T) {
	pack := keys.Digest{1}
	base := partLoc{pack: pack, off: 2, size: 40}
	for _, tc := range []struct {
		name string
		at   partLoc
		edit func([]byte) []byte
		ok   bool
	}{
		{"Whole", partLoc{pack: pack, off: 42, size: 10}, nil, true},
		{"Patched", partLoc{pack: pack, off: 42, size: 10, raw: 20, delta: &base}, nil, true},
		{"FlagTwo", partLoc{pack: pack, off: 42, size: 10}, func(b []byte) []byte { b[len(b)-4] = 2; return b }, false},
		{"BaseInNoPack", partLoc{pack: pack, off: 42, size: 10, delta: &base}, func(b []byte) []byte { b[len(b)-7] = 1; return b }, false},
		{"BaseOfOneByte", partLoc{pack: pack, off: 42, size: 10, delta: &base}, func(b []byte) []byte { b[len(b)-5] = 1; return b }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := objRoot{version: objRootDerived, packs: []keys.Digest{pack},
				leaves: []objPart{{digest: keys.Digest{2}, n: 1, at: tc.at}}}
			got, ok := rootRoundTrip(t, &r, tc.edit, tc.ok)
			if !ok {
				return
			}
			at := got.leaves[0].at
			if (at.delta == nil) != (tc.at.delta == nil) || at.delta != nil && *at.delta != *tc.at.delta {
				t.Fatalf("decoded base %+v, want %+v", at.delta, tc.at.delta)
			}
		})
	}
}

// TestPatchedLeafVerified appends two checkpoints of one thread, the second
// with leaves stored as patches, and alters one byte of a patch and then
// of its base in the bucket: each time a cold Get fails naming the leaf
// (with roots of version 6, whose members are in runs, the altered run
// fails to decode, naming the pack, the run and a member of it); and
// applies the patch to another leaf: the result fails the leaf's digest.
func TestPatchedLeafVerified(t *testing.T) {
	t.Cleanup(func() { writePackVersion = objPackRuns })
	for _, v := range []byte{objPackCompressed, objPackRuns} {
		for _, which := range []string{"Patch", "Base", "OtherBase"} {
			patchedLeafVerified(t, v, which)
		}
	}
}

func patchedLeafVerified(t *testing.T, version byte, which string) {
	t.Run(fmt.Sprintf("pack=%d/%s", version, which), func(t *testing.T) {
		writePackVersion = version
		e := newV2Env(t)
		s := e.store(true, 0)
		w := e.writer(s, "a")
		e.append(s, w, capacityTurn("a", 1, 1000, 8000))
		before := memKeysOf(t, e.mem, cairn.ObjectPrefix)
		c := capacityTurn("a", 2, 1000, 8000)
		e.append(s, w, c)
		var leaf *objPart
		var r objRoot
		for _, k := range newMetaKeys(t, e.mem, before) {
			b, _ := e.mem.Get(e.ctx, k)
			if b[0] != objTypeRoot {
				continue
			}
			var err error
			if r, err = objDecodeRoot(b); err != nil {
				t.Fatal(err)
			}
			for i := range r.leaves {
				if r.leaves[i].at.delta != nil {
					leaf = &r.leaves[i]
				}
			}
		}
		if leaf == nil {
			t.Fatal("no leaf is stored as a patch")
		}
		if got, err := e.store(true, 0).Get(e.ctx, c.ID); err != nil {
			t.Fatal(err)
		} else {
			sameCheckpoint(t, "patched", got, c)
		}
		if which == "OtherBase" {
			// The patch applied to another leaf stored whole, at
			// least as long: it applies, and the result fails the
			// leaf's digest.
			size := func(l partLoc) int {
				if l.msize > 0 {
					return l.msize
				}
				return max(l.raw, l.size)
			}
			bad := *leaf
			for _, p := range r.leaves {
				if p.at.delta == nil && p.at.place() != leaf.at.delta.place() && size(p.at) >= size(*leaf.at.delta) {
					other := p.at.place()
					bad.at.delta = &other
					break
				}
			}
			if bad.at.delta == leaf.at.delta {
				t.Fatal("no other base")
			}
			_, err := e.store(true, 0).fetchParts(e.ctx, []objPart{bad})
			if !errors.Is(err, errObjDigest) || !strings.Contains(err.Error(), objectKey(leaf.digest)) {
				t.Fatalf("fetchParts with another base: %v, want %v naming %s", err, errObjDigest, objectKey(leaf.digest))
			}
			return
		}
		at := leaf.at
		if which == "Base" {
			at = *leaf.at.delta
		}
		key := objectKey(at.pack)
		b, _ := e.mem.Get(e.ctx, key)
		b = bytes.Clone(b)
		b[at.off+at.size-1] ^= 1
		e.mem.Delete(e.ctx, []string{key})
		e.mem.Put(e.ctx, key, b)
		_, err := e.store(true, 0).Get(e.ctx, c.ID)
		if version == objPackRuns && at.raw > 0 {
			if !errors.Is(err, errMemberSize) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), fmt.Sprintf("run at %d", at.off)) {
				t.Fatalf("Get with an altered %s: %v, want %v naming the pack %s and the run at %d", which, err, errMemberSize, key, at.off)
			}
			return
		}
		if err == nil || !strings.Contains(err.Error(), objectKey(leaf.digest)) {
			t.Fatalf("Get with an altered %s: %v, want an error naming %s", which, err, objectKey(leaf.digest))
		}
	})
}
