// Package keys encodes cairn's identifiers and numbers into etcd keys.
//
// Three properties hold for every encoding here, and the fuzz tests check them:
//
//   - Injective: different values have different encodings, and Decode
//     returns the value that was encoded.
//   - Order-preserving: comparing two encodings byte by byte gives the order of
//     the values (strings by their bytes, which for valid UTF-8 is code-point
//     order; float64 numerically; uint64 numerically).
//   - Prefix-free: no encoding of one value is a prefix of the encoding of
//     another, so a range read over the encoding of one identifier never
//     returns the keys of another, whatever bytes (NUL and '/' included) the
//     identifiers contain.
//
// A string is encoded as its bytes with each 0x00 replaced by 0x00 0xFF,
// followed by the terminator 0x00 0x01. A float64 is encoded as 8 big-endian
// bytes of its IEEE 754 bits, with the sign bit flipped for positive numbers
// and every bit flipped for negative ones; -0 is encoded as +0. A uint64 is 8
// big-endian bytes.
//
// Layout builds every key of a store under one prefix, itself encoded as a
// string, so that two stores with different prefixes (say "tenant-a/" and
// "tenant-a/b/") never see each other's keys, while the literal prefix still
// starts every key (for etcd role permissions on a prefix).
package keys
