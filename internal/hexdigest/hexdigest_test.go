package hexdigest

import (
	"encoding/hex"
	"strings"
	"testing"
)

// reference is Decode by the standard library.
func reference(s string) ([Size]byte, bool) {
	var d [Size]byte
	if len(s) != Digits || strings.ToLower(s) != s {
		return d, false
	}
	n, err := hex.Decode(d[:], []byte(s))
	return d, err == nil && n == Size
}

// Every byte value at every position: Valid and Decode agree with the
// standard library.
func TestEveryByte(t *testing.T) {
	base := strings.Repeat("0123456789abcdef", 4)
	for pos := range len(base) {
		for c := range 256 {
			s := base[:pos] + string([]byte{byte(c)}) + base[pos+1:]
			var d [Size]byte
			ok := Decode(s, &d)
			wd, wok := reference(s)
			if ok != wok || ok && d != wd {
				t.Fatalf("Decode(%q) = %x, %v; want %x, %v", s, d, ok, wd, wok)
			}
			if v := Valid(s); v != wok {
				t.Fatalf("Valid(%q) = %v, want %v", s, v, wok)
			}
		}
	}
}

func TestLength(t *testing.T) {
	base := strings.Repeat("ab", Size)
	for _, s := range []string{"", base[:Digits-1], base + "a", base + base} {
		var d [Size]byte
		if Valid(s) || Decode(s, &d) {
			t.Errorf("%d digits accepted", len(s))
		}
	}
}
