// Package hexdigest checks and decodes the 64 lower-case hex digits of a
// SHA-256 digest, as blob keys spell them. Every blob key of every append is
// checked and decoded, so it works on eight digits at a time, as one 64-bit
// word, with a few word operations instead of a table look-up per digit.
package hexdigest

import "encoding/binary"

// Size is the length of a digest in bytes; Digits the length of its hex form.
const (
	Size   = 32
	Digits = 2 * Size
)

// Valid reports whether s is Digits lower-case hex digits.
func Valid(s string) bool {
	if len(s) != Digits {
		return false
	}
	var bad uint64
	for i := 0; i < Digits; i += 8 {
		bad |= notHex(load64(s[i:]))
	}
	return bad == 0
}

// Decode decodes s into *d and reports whether s was Digits lower-case hex
// digits; *d is unspecified when it was not.
func Decode(s string, d *[Size]byte) bool {
	if len(s) != Digits {
		return false
	}
	var bad uint64
	for i := 0; i < Size; i += 4 {
		x := load64(s[2*i:])
		bad |= notHex(x)
		binary.LittleEndian.PutUint32(d[i:], hexBytes(x))
	}
	return bad == 0
}

// load64 returns the first 8 bytes of s as a little-endian word: s[0] is its
// low byte. The compiler makes it one load.
func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

const ones, high = 0x0101010101010101, 0x8080808080808080

// notHex is nonzero unless each of the eight bytes of x is a lower-case hex
// digit. Every byte below 0x80 plus (0x80 - lo) has its high bit set exactly
// when it is >= lo, and carries into no other byte.
func notHex(x uint64) uint64 {
	y := x &^ high
	digit := (y + ones*(0x80-'0')) &^ (y + ones*(0x80-'9'-1))
	letter := (y + ones*(0x80-'a')) &^ (y + ones*(0x80-'f'-1))
	return (digit|letter)&high ^ high | x&high
}

// hexBytes returns the four bytes that the eight lower-case hex digits of x
// (as load64 reads them) spell, the first in the low byte.
func hexBytes(x uint64) uint32 {
	// A digit's value is its low nibble; a letter (bit 6 set) adds 9.
	n := x&(ones*0x0F) + (x>>6)&ones*9
	// Pair the nibbles into bytes, then close up the gaps between them.
	t := (n<<4 | n>>8) & 0x00FF00FF00FF00FF
	t = (t | t>>8) & 0x0000FFFF0000FFFF
	return uint32(t | t>>16)
}
