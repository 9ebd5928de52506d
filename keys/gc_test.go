package keys_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn/keys"
)

func testBlobKeys() []string {
	var out []string
	for i := range 64 {
		ns := "sandbox-files/sha256/"
		if i%3 == 0 {
			ns = "sandbox-artifacts/sha256/"
		}
		out = append(out, ns+fmt.Sprintf("%x", sha256.Sum256([]byte(fmt.Sprint(i)))))
	}
	out = append(out, "sandbox-files/sha256/"+strings.Repeat("0", 64), "sandbox-files/sha256/"+strings.Repeat("f", 64),
		"sandbox-artifacts/sha256/"+strings.Repeat("0", 64), "sandbox-artifacts/sha256/"+strings.Repeat("f", 64),
		"sandbox-meta/sha256/"+strings.Repeat("0", 64), "sandbox-meta/sha256/"+strings.Repeat("f", 64))
	return out
}

func TestBlobRoundTripAndOrder(t *testing.T) {
	l := keys.NewLayout("p/")
	blobKeys := testBlobKeys()
	var gcKeys [][]byte
	for _, k := range blobKeys {
		b, ok := keys.ParseBlob(k)
		if !ok || b.Key() != k {
			t.Fatalf("ParseBlob(%q) = %+v, %v", k, b, ok)
		}
		enc := keys.AppendBlob(nil, b)
		if len(enc) != keys.BlobLen {
			t.Fatalf("encoded blob has %d bytes", len(enc))
		}
		got, rest, err := keys.DecodeBlob(append(enc, 'z'))
		if err != nil || got != b || string(rest) != "z" {
			t.Fatalf("DecodeBlob = %+v, %q, %v", got, rest, err)
		}
		g := l.GCRecord(b)
		if !bytes.HasPrefix(g, l.GCRecords()) {
			t.Fatal("GC record key outside the GC records")
		}
		if got, err := l.DecodeGCRecord(g); err != nil || got != b {
			t.Fatalf("DecodeGCRecord = %+v, %v", got, err)
		}
		gcKeys = append(gcKeys, g)
	}
	// GC records and claims sort like the blob keys they name.
	idx := make([]int, len(blobKeys))
	for i := range idx {
		idx[i] = i
	}
	byKey, byEnc := slices.Clone(idx), slices.Clone(idx)
	slices.SortFunc(byKey, func(a, b int) int { return strings.Compare(blobKeys[a], blobKeys[b]) })
	slices.SortFunc(byEnc, func(a, b int) int { return bytes.Compare(gcKeys[a], gcKeys[b]) })
	if !slices.Equal(byKey, byEnc) {
		t.Fatal("GC record order differs from blob key order")
	}
	for _, bad := range []string{"sandbox-files/sha256/" + strings.Repeat("A", 64), "x", "sandbox-files/" + strings.Repeat("a", 64),
		"sandbox-meta/sha256/" + strings.Repeat("A", 64), "sandbox-meta/sha256/" + strings.Repeat("a", 63)} {
		if _, ok := keys.ParseBlob(bad); ok {
			t.Fatalf("ParseBlob accepted %q", bad)
		}
	}
	for _, bad := range [][]byte{nil, {0}, append([]byte{3}, make([]byte, 32)...), make([]byte, 32)} {
		if _, _, err := keys.DecodeBlob(bad); err == nil {
			t.Fatalf("DecodeBlob accepted %x", bad)
		}
	}
}

func checkClaim(t *testing.T, prefix string, b keys.Blob, thread string, fence uint64) {
	t.Helper()
	l := keys.NewLayout(prefix)
	k := l.Claim(b, thread, fence)
	if !bytes.HasPrefix(k, l.BlobClaims(b)) || !bytes.HasPrefix(l.BlobClaims(b), l.Claims()) {
		t.Fatalf("claim key %q outside its blob's claims", k)
	}
	c, err := l.DecodeClaim(k)
	if err != nil || c != (keys.ClaimKey{Blob: b, Thread: thread, Fence: fence}) {
		t.Fatalf("DecodeClaim = %+v, %v", c, err)
	}
	// No claim of one blob lies in the range of another, and claims and GC
	// records never share a range.
	other := b
	other.Digest[31] ^= 1
	if bytes.HasPrefix(k, l.BlobClaims(other)) || bytes.HasPrefix(k, l.GCRecords()) || bytes.HasPrefix(l.GCRecord(b), l.Claims()) {
		t.Fatalf("claim key %q lies in a foreign range", k)
	}
	if _, err := l.DecodeGCRecord(k); err == nil {
		t.Fatal("a claim key decodes as a GC record")
	}
	if _, err := l.DecodeClaim(l.GCRecord(b)); err == nil {
		t.Fatal("a GC record key decodes as a claim")
	}
	if _, err := l.DecodeClaim(k[:len(k)-1]); err == nil {
		t.Fatal("a truncated claim key decodes")
	}
}

func TestClaimKeys(t *testing.T) {
	for _, k := range testBlobKeys()[:8] {
		b, _ := keys.ParseBlob(k)
		for _, th := range stringSeeds {
			for _, f := range []uint64{0, 1, 1 << 40, 1<<64 - 1} {
				checkClaim(t, "tenant-a/", b, th, f)
			}
		}
	}
}

func FuzzClaimKey(f *testing.F) {
	f.Add("p/", byte(0), []byte{1, 2, 3}, "thread", uint64(7))
	f.Add("", byte(1), []byte{}, "a\x00", uint64(0))
	f.Add("tenant-a/", byte(3), bytes.Repeat([]byte{0xff}, 32), "\x00\x01", uint64(1<<63))
	f.Fuzz(func(t *testing.T, prefix string, ns byte, digest []byte, thread string, fence uint64) {
		b := keys.Blob{NS: ns & 1}
		copy(b.Digest[:], digest)
		checkClaim(t, prefix, b, thread, fence)
	})
}

// FuzzDecodeClaim checks that whatever decodes as a claim or GC record key
// encodes back to the same bytes.
func FuzzDecodeClaim(f *testing.F) {
	l := keys.NewLayout("p/")
	b, _ := keys.ParseBlob(testBlobKeys()[0])
	f.Add(l.Claim(b, "t", 3))
	f.Add(l.GCRecord(b))
	f.Add(append(l.BlobClaims(b), 0))
	f.Fuzz(func(t *testing.T, k []byte) {
		if c, err := l.DecodeClaim(k); err == nil {
			if enc := l.Claim(c.Blob, c.Thread, c.Fence); !bytes.Equal(enc, k) {
				t.Fatalf("DecodeClaim(%q) = %+v, which encodes to %q", k, c, enc)
			}
		}
		if g, err := l.DecodeGCRecord(k); err == nil {
			if enc := l.GCRecord(g); !bytes.Equal(enc, k) {
				t.Fatalf("DecodeGCRecord(%q) = %+v, which encodes to %q", k, g, enc)
			}
		}
	})
}
