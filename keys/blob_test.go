package keys

import (
	"encoding/hex"
	"strings"
	"testing"
)

// parseDigestReference is parseDigest by the standard library.
func parseDigestReference(digits string) (Digest, bool) {
	var d Digest
	if len(digits) != 2*DigestLen || strings.ToLower(digits) != digits {
		return d, false
	}
	n, err := hex.Decode(d[:], []byte(digits))
	return d, err == nil && n == DigestLen
}

func TestParseDigestEveryByte(t *testing.T) {
	base := strings.Repeat("0123456789abcdef", 4)
	for pos := range len(base) {
		for c := range 256 {
			s := base[:pos] + string([]byte{byte(c)}) + base[pos+1:]
			d, ok := parseDigest(s)
			wd, wok := parseDigestReference(s)
			if ok != wok || ok && d != wd {
				t.Fatalf("parseDigest(%q) = %x, %v; want %x, %v", s, d, ok, wd, wok)
			}
		}
	}
}

func FuzzParseDigest(f *testing.F) {
	f.Add(strings.Repeat("0123456789abcdef", 4))
	f.Add(strings.Repeat("f", 64))
	f.Add(strings.Repeat("F", 64))
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseDigest(s)
		wd, wok := parseDigestReference(s)
		if ok != wok || ok && d != wd {
			t.Fatalf("parseDigest(%q) = %x, %v; want %x, %v", s, d, ok, wd, wok)
		}
	})
}
