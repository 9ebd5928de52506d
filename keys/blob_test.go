package keys

import (
	"encoding/hex"
	"strings"
	"testing"
)

// parseDigestReference is parseDigest by the standard library. (Every
// byte at every position is tested in internal/hexdigest.)
func parseDigestReference(digits string) (Digest, bool) {
	var d Digest
	if len(digits) != 2*DigestLen || strings.ToLower(digits) != digits {
		return d, false
	}
	n, err := hex.Decode(d[:], []byte(digits))
	return d, err == nil && n == DigestLen
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
