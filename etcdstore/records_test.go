package etcdstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"
)

var recordStrings = []string{"", "a", "thread-1", "é", "\x00", "a\"b", "a\\b", "<>&", "\u2028", "\xff", "\x7f", "a\x1fb", "0123456789abcdef0123456789abcdef"}

var recordFloats = []float64{0, 1, -1, 1.5, 1.7e12, 1e20, 1e21, 123456789012345678901234, 1e-6, 1e-7, -1e-7, 5e-324, math.MaxFloat64, -math.MaxFloat64, 0.1, 1700000000000.123}

// checkRecordJSON compares the hand-built JSON of the records holding these
// values with encoding/json's.
func checkRecordJSON(t *testing.T, s string, f float64, u uint64, n int) {
	t.Helper()
	same := func(what string, got []byte, v any) {
		t.Helper()
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
	}
	for _, rec := range []threadRec{
		{LastSeq: u},
		{Head: s, HeadSeq: u, HeadCreatedAt: f, LastSeq: u, Floor: u, Op: s},
		{Head: s, HeadCreatedAt: f, Op: s},
		{Head: s, HeadSeq: u, LastSeq: u, Op: s, LocalReads: true},
		{LastSeq: u, Floor: u, LocalReads: true},
	} {
		same("thread record", rec.appendJSON(nil), rec)
	}
	idx := idxRec{Thread: s, CreatedAt: f, Seq: u, Nonce: s}
	same("index record", idx.appendJSON(nil), idx)
	for _, m := range []ckptMeta{
		{Seq: u, Nonce: s, Size: n},
		{Seq: u, ParentID: s, ParentSeq: u, ParentCreatedAt: f, Nonce: s, Shards: uint32(u), Chunks: n, Size: n, Layout: n, Root: s},
	} {
		same("checkpoint header", m.appendJSON(nil), m)
		h := metaHeader(m)
		l, k := binary.Uvarint(h)
		want, _ := json.Marshal(m)
		if k <= 0 || l != uint64(len(h)-k) || !bytes.Equal(h[k:], want) {
			t.Errorf("metaHeader: %q, want the length and %s", h, want)
		}
	}
}

func TestRecordJSON(t *testing.T) {
	for _, s := range recordStrings {
		for _, f := range recordFloats {
			for _, u := range []uint64{0, 1, 127, 128, math.MaxUint32, math.MaxUint64} {
				checkRecordJSON(t, s, f, u, int(u&0xFFFF))
				checkRecordJSON(t, s, -f, u, -int(u&0xFFFF))
			}
		}
	}
	// A header longer than 16 KiB has a 3-byte length.
	long := string(bytes.Repeat([]byte("x"), 20000))
	checkRecordJSON(t, long, 1, 1, 1)
}

func FuzzRecordJSON(f *testing.F) {
	for _, s := range recordStrings {
		f.Add(s, 1.5, uint64(7), 3)
	}
	f.Fuzz(func(t *testing.T, s string, x float64, u uint64, n int) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return // records hold finite numbers only
		}
		checkRecordJSON(t, s, x, u, n)
	})
}
