package etcdstore

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// pendKey returns a node id (3 node types) or a packed bucket key (2 tags)
// whose digest starts with the bytes of r.
func pendKey(r *rand.Rand) []byte {
	var k []byte
	if r.IntN(3) == 0 {
		k = append(k, 0, byte(1+r.IntN(3)))
	} else {
		k = append(k, byte(1+r.IntN(2)))
	}
	for len(k) < packedLen && (k[0] != 0 || len(k) < nodeLen) {
		k = append(k, byte(r.IntN(256)))
	}
	return k
}

// TestPendSorter checks that the expanded change comes out of the sorter
// in key order, summed per key, without the keys whose changes sum to zero,
// whether it fits in memory or is sorted through the spill file a part at
// a time; that the spill file is gone once the sorter is closed; and that
// a spill file that does not hold what was written is an error.
func TestPendSorter(t *testing.T) {
	defer func(s int) { pendSpill = s }(pendSpill)
	for _, c := range []struct {
		name          string
		entries, uniq int
		spill         int
	}{
		{"empty", 0, 1, 1 << 18},
		{"in memory", 5000, 800, 1 << 18},
		{"spilled once", 5000, 800, 4000},
		{"spilled often", 20000, 3000, 37},
		{"every entry spilled", 300, 100, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			pendSpill = c.spill
			r := rand.New(rand.NewPCG(1, uint64(c.entries)))
			ks := make([][]byte, c.uniq)
			for i := range ks {
				ks[i] = pendKey(r)
			}
			want := map[string]int{}
			path := filepath.Join(t.TempDir(), "mirror.db")
			s := newPendSorter(path)
			for range c.entries {
				k := ks[r.IntN(len(ks))]
				d := r.IntN(5) - 2
				want[string(k)] += d
				if err := s.add(k, d); err != nil {
					t.Fatal(err)
				}
			}
			var got []pendEntry
			for {
				part, ok, err := s.next()
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				got = append(got, part...)
			}
			if !slices.IsSortedFunc(got, comparePend) {
				t.Fatal("the change is not in key order")
			}
			for i := 1; i < len(got); i++ {
				if bytes.Equal(got[i-1].key(), got[i].key()) {
					t.Fatalf("key %x comes out twice", got[i].key())
				}
			}
			n := 0
			for k, d := range want {
				if d != 0 {
					n++
				}
				i, ok := slices.BinarySearchFunc(got, []byte(k), func(e pendEntry, k []byte) int { return bytes.Compare(e.key(), k) })
				switch {
				case d == 0 && ok:
					t.Fatalf("key %x: change %d, want none (the changes sum to 0)", k, got[i].d)
				case d != 0 && (!ok || int(got[i].d) != d):
					t.Fatalf("key %x: change %v, want %d", k, ok && int(got[i].d) == d, d)
				}
			}
			if len(got) != n {
				t.Fatalf("%d keys, want %d", len(got), n)
			}
			if (s.f != nil) != (c.entries >= c.spill) {
				t.Fatalf("spill file made: %v, with %d entries and a budget of %d", s.f != nil, c.entries, c.spill)
			}
			if err := s.close(); err != nil {
				t.Fatal(err)
			}
			if left, _ := filepath.Glob(path + ".expand-*"); len(left) != 0 {
				t.Fatalf("spill files left: %v", left)
			}
		})
	}
	t.Run("spill file damaged", func(t *testing.T) {
		pendSpill = 10
		r := rand.New(rand.NewPCG(2, 2))
		s := newPendSorter(filepath.Join(t.TempDir(), "mirror.db"))
		defer s.close()
		for range 100 {
			if err := s.add(pendKey(r), 1); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.f.WriteAt(bytes.Repeat([]byte{0xee}, 200), 0); err != nil {
			t.Fatal(err)
		}
		var err error
		for ok := true; ok && err == nil; {
			_, ok, err = s.next()
		}
		if !errors.Is(err, ErrMirror) {
			t.Fatalf("a damaged spill file: %v, want ErrMirror", err)
		}
	})
	t.Run("no place for the spill file", func(t *testing.T) {
		pendSpill = 1
		s := newPendSorter(filepath.Join(t.TempDir(), "gone", "mirror.db"))
		if err := s.add(pendKey(rand.New(rand.NewPCG(3, 3))), 1); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a spill file in a missing directory: %v", err)
		}
	})
}
