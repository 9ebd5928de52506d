package keys

import (
	"encoding/binary"
	"errors"
	"math"
)

// ErrMalformed is returned when bytes are not a valid encoding.
var ErrMalformed = errors.New("keys: malformed encoding")

const (
	escByte  = 0x00
	escNext  = 0xFF // 0x00 0xFF is an escaped NUL
	termNext = 0x01 // 0x00 0x01 ends a string
)

// AppendString appends the order-preserving, prefix-free encoding of s to dst.
func AppendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == escByte {
			dst = append(dst, escByte, escNext)
		} else {
			dst = append(dst, s[i])
		}
	}
	return append(dst, escByte, termNext)
}

// String returns the encoding of s.
func String(s string) []byte { return AppendString(nil, s) }

// DecodeString decodes a string encoded by AppendString at the start of b and
// returns it with the bytes that follow. It returns ErrMalformed when b does
// not start with a valid encoding.
func DecodeString(b []byte) (s string, rest []byte, err error) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != escByte {
			out = append(out, b[i])
			continue
		}
		if i+1 >= len(b) {
			return "", nil, ErrMalformed
		}
		switch b[i+1] {
		case escNext:
			out = append(out, escByte)
			i++
		case termNext:
			return string(out), b[i+2:], nil
		default:
			return "", nil, ErrMalformed
		}
	}
	return "", nil, ErrMalformed
}

// AppendFloat64 appends the order-preserving 8-byte encoding of f. -0 is
// encoded as +0, so that equal numbers have equal encodings. NaN encodes above
// +Inf; callers reject NaN before encoding.
func AppendFloat64(dst []byte, f float64) []byte {
	if f == 0 {
		f = 0 // turns -0 into +0
	}
	bits := math.Float64bits(f)
	if bits&(1<<63) != 0 {
		bits = ^bits
	} else {
		bits |= 1 << 63
	}
	return binary.BigEndian.AppendUint64(dst, bits)
}

// Float64 returns the encoding of f.
func Float64(f float64) []byte { return AppendFloat64(nil, f) }

// DecodeFloat64 decodes a float64 encoded by AppendFloat64 at the start of b.
func DecodeFloat64(b []byte) (f float64, rest []byte, err error) {
	if len(b) < 8 {
		return 0, nil, ErrMalformed
	}
	bits := binary.BigEndian.Uint64(b)
	if bits&(1<<63) != 0 {
		bits &^= 1 << 63
	} else {
		bits = ^bits
	}
	return math.Float64frombits(bits), b[8:], nil
}

// AppendUint64 appends the 8-byte big-endian encoding of v.
func AppendUint64(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }

// DecodeUint64 decodes a uint64 encoded by AppendUint64 at the start of b.
func DecodeUint64(b []byte) (v uint64, rest []byte, err error) {
	if len(b) < 8 {
		return 0, nil, ErrMalformed
	}
	return binary.BigEndian.Uint64(b), b[8:], nil
}

// PrefixEnd returns the smallest key greater than every key that starts with
// prefix: the end of a range read over the prefix. It returns "\x00" for an
// empty prefix, which etcd reads as "to the end of the keyspace".
func PrefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}
