package keys_test

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn/keys"
)

var stringSeeds = []string{
	"", "a", "b", "a\x00", "a\x00\x00", "a\x00\xff", "a\x01", "\x00", "\xff", "a/b", "a/", "é", "e\u0301",
	"\uE000", "\U00010000", "😀", "thread-1", "tenant-a/", "tenant-a/b/", "\x00\x01", "\x00\xff\x00\x01",
}

func TestStringRoundTripOrderPrefix(t *testing.T) {
	for _, a := range stringSeeds {
		for _, b := range stringSeeds {
			checkStrings(t, a, b)
		}
	}
}

func checkStrings(t *testing.T, a, b string) {
	t.Helper()
	ea, eb := keys.String(a), keys.String(b)
	got, rest, err := keys.DecodeString(append(ea, 'z'))
	if err != nil || got != a || string(rest) != "z" {
		t.Fatalf("DecodeString(String(%q)) = %q, %q, %v", a, got, rest, err)
	}
	if want := strings.Compare(a, b); bytes.Compare(ea, eb) != want {
		t.Fatalf("order: compare(%q, %q) = %d, encodings compare %d", a, b, want, bytes.Compare(ea, eb))
	}
	if a != b && (bytes.HasPrefix(ea, eb) || bytes.HasPrefix(eb, ea)) {
		t.Fatalf("prefix: encodings of %q and %q nest", a, b)
	}
}

func FuzzString(f *testing.F) {
	for _, s := range stringSeeds {
		f.Add(s, "x"+s)
	}
	f.Fuzz(func(t *testing.T, a, b string) { checkStrings(t, a, b) })
}

func FuzzDecodeString(f *testing.F) {
	f.Add([]byte("a\x00\x01"))
	f.Add([]byte("\x00\xff\x00"))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, rest, err := keys.DecodeString(b)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode to exactly the bytes consumed.
		if enc := keys.String(s); !bytes.Equal(enc, b[:len(b)-len(rest)]) {
			t.Fatalf("DecodeString(%q) = %q, which encodes to %q", b, s, enc)
		}
	})
}

var floatSeeds = []float64{math.Inf(-1), -math.MaxFloat64, -1e300, -2.5, -1, -math.SmallestNonzeroFloat64, 0, math.SmallestNonzeroFloat64, 0.5, 1, 2, 10, 1e300, math.MaxFloat64, math.Inf(1)}

func TestFloat64(t *testing.T) {
	for _, a := range floatSeeds {
		for _, b := range floatSeeds {
			checkFloats(t, a, b)
		}
	}
	if !bytes.Equal(keys.Float64(math.Copysign(0, -1)), keys.Float64(0)) {
		t.Fatal("-0 and +0 encode differently")
	}
}

func checkFloats(t *testing.T, a, b float64) {
	t.Helper()
	if math.IsNaN(a) || math.IsNaN(b) {
		return
	}
	ea, eb := keys.Float64(a), keys.Float64(b)
	got, _, err := keys.DecodeFloat64(ea)
	if err != nil || got != a {
		t.Fatalf("DecodeFloat64(Float64(%v)) = %v, %v", a, got, err)
	}
	if want := cmp.Compare(a, b); bytes.Compare(ea, eb) != want {
		t.Fatalf("order: compare(%v, %v) = %d, encodings compare %d", a, b, want, bytes.Compare(ea, eb))
	}
}

func FuzzFloat64(f *testing.F) {
	for i, a := range floatSeeds {
		f.Add(a, floatSeeds[(i+3)%len(floatSeeds)])
	}
	f.Fuzz(func(t *testing.T, a, b float64) { checkFloats(t, a, b) })
}

func TestUint64Order(t *testing.T) {
	vals := []uint64{0, 1, 255, 256, 1 << 32, math.MaxUint64}
	for _, a := range vals {
		for _, b := range vals {
			if bytes.Compare(keys.AppendUint64(nil, a), keys.AppendUint64(nil, b)) != cmp.Compare(a, b) {
				t.Fatalf("uint64 order broken for %d, %d", a, b)
			}
		}
	}
}

// checkpointOrder is the contract's list order.
func checkpointOrder(a, b [2]any) int {
	if c := cmp.Compare(a[0].(float64), b[0].(float64)); c != 0 {
		return c
	}
	return strings.Compare(a[1].(string), b[1].(string))
}

func TestCheckpointKeysListOrder(t *testing.T) {
	l := keys.NewLayout("p/")
	var items [][2]any
	for _, f := range []float64{-1, 0, 0.5, 1, 2} {
		for _, id := range []string{"a", "B", "é", "😀", "\uE000", "\U00010000", "a\x00", "a/b"} {
			items = append(items, [2]any{f, id})
		}
	}
	byKey := slices.Clone(items)
	slices.SortFunc(byKey, func(a, b [2]any) int {
		return bytes.Compare(l.Checkpoint("t", a[0].(float64), a[1].(string)), l.Checkpoint("t", b[0].(float64), b[1].(string)))
	})
	byContract := slices.Clone(items)
	slices.SortFunc(byContract, checkpointOrder)
	if !slices.Equal(byKey, byContract) {
		t.Fatalf("key order %v differs from list order %v", byKey, byContract)
	}
	for _, it := range items {
		k := l.Checkpoint("t", it[0].(float64), it[1].(string))
		th, f, id, err := l.DecodeCheckpoint(k)
		if err != nil || th != "t" || f != it[0] || id != it[1] {
			t.Fatalf("DecodeCheckpoint = %q %v %q %v, want %v", th, f, id, err, it)
		}
		if !bytes.HasPrefix(k, l.Checkpoints("t")) {
			t.Fatalf("checkpoint key outside its thread's range")
		}
	}
}

// FuzzLayoutIsolation checks that no key of one (prefix, thread) pair falls in
// a range that belongs to a different pair.
func FuzzLayoutIsolation(f *testing.F) {
	f.Add("tenant-a/", "tenant-a/b/", "t", "t")
	f.Add("", "\x00", "a", "a\x00")
	f.Add("p", "p", "thread", "thread/x")
	f.Fuzz(func(t *testing.T, p1, p2, t1, t2 string) {
		if p1 == p2 && t1 == t2 {
			return
		}
		l1, l2 := keys.NewLayout(p1), keys.NewLayout(p2)
		if p1 != p2 && (bytes.HasPrefix(l1.Root(), l2.Root()) || bytes.HasPrefix(l2.Root(), l1.Root())) {
			t.Fatalf("roots of %q and %q nest", p1, p2)
		}
		ranges2 := [][]byte{l2.ThreadData(t2), l2.Thread(t2), l2.RefThread(3, t2)}
		keys1 := [][]byte{
			l1.Checkpoint(t1, 1, "id"), l1.Chunk(t1, 1, keys.Nonce{}, 0), l1.Transcript(t1), l1.WriterOwner(t1),
			l1.WriterExpiry(t1), l1.ReadPermit(t1), l1.Thread(t1), l1.Ref(3, t1, 1, keys.Nonce{}, 0),
			l1.Claim(keys.Blob{NS: 1}, t1, 1), l1.GCRecord(keys.Blob{}),
		}
		for _, k := range keys1 {
			for _, r := range ranges2 {
				if bytes.HasPrefix(k, r) {
					t.Fatalf("key %q of (%q, %q) lies in range %q of (%q, %q)", k, p1, t1, r, p2, t2)
				}
			}
		}
		if got, err := l1.DecodeThread(l1.Thread(t1)); err != nil || got != t1 {
			t.Fatalf("DecodeThread = %q, %v", got, err)
		}
		n := keys.Nonce{1, 2, 3}
		r, err := l1.DecodeRef(l1.Ref(7, t1, 42, n, 3))
		if err != nil || r != (keys.RefKey{Shard: 7, Thread: t1, Seq: 42, Nonce: n, Part: 3}) {
			t.Fatalf("DecodeRef = %+v, %v", r, err)
		}
	})
}

func TestBlobShardOrder(t *testing.T) {
	var blobKeys []string
	for i := range 200 {
		d := sha256.Sum256([]byte(fmt.Sprint(i)))
		ns := "sandbox-files/sha256/"
		if i%3 == 0 {
			ns = "sandbox-artifacts/sha256/"
		}
		blobKeys = append(blobKeys, ns+fmt.Sprintf("%x", d))
	}
	type sd struct {
		s byte
		d keys.Digest
	}
	var parsed []sd
	for _, k := range blobKeys {
		s, d, ok := keys.BlobShard(k)
		if !ok || keys.BlobKey(s, d) != k || s >= keys.NumShards {
			t.Fatalf("BlobShard(%q) = %d, %x, %v", k, s, d, ok)
		}
		parsed = append(parsed, sd{s, d})
	}
	slices.SortFunc(parsed, func(a, b sd) int {
		if c := cmp.Compare(a.s, b.s); c != 0 {
			return c
		}
		return bytes.Compare(a.d[:], b.d[:])
	})
	slices.Sort(blobKeys)
	for i, p := range parsed {
		if keys.BlobKey(p.s, p.d) != blobKeys[i] {
			t.Fatalf("shard order differs from key order at %d", i)
		}
	}
	for _, bad := range []string{"sandbox-files/sha256/" + strings.Repeat("A", 64), "sandbox-files/sha256/" + strings.Repeat("a", 63), "x", "sandbox-files/sha256/" + strings.Repeat("g", 64)} {
		if _, _, ok := keys.BlobShard(bad); ok {
			t.Fatalf("BlobShard accepted %q", bad)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct{ in, want string }{{"a", "b"}, {"a\xff", "b"}, {"\xff\xff", "\x00"}, {"", "\x00"}} {
		if got := string(keys.PrefixEnd([]byte(c.in))); got != c.want {
			t.Errorf("PrefixEnd(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
