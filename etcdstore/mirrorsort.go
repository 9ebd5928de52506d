package etcdstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// pendSpill is how many expanded entries finish holds in memory before it
// writes them to a file of its own (a variable for the tests): 2^18
// entries, 10 MiB. A 1% churn changes ~5 counts a kept checkpoint, so the
// expanded change outgrows it at about 5·10^4 kept checkpoints.
var pendSpill = 1 << 18

// pendRecLen is the size of an entry in the spill file: the key's length,
// the key, padded to nodeLen, and the change (int32, big-endian).
const pendRecLen = 1 + nodeLen + 4

// A pendSorter sorts and sums the expanded change of counts in key order
// with bounded memory. Entries go to memory; when pendSpill of them are
// held, they are sorted and written, grouped by their part (the key's first
// two bytes, or three for a node id, whose first byte is 0), to a spill
// file, unlinked as soon as it is made. The parts are ranges of keys in key
// order, so the change comes out a part at a time, each read back, sorted
// and summed, in key order over all: an external bucket sort. Node ids and
// bucket keys are digests, so a part holds about 1/256 of the entries of
// its kind. A change that fits in memory never touches the file.
type pendSorter struct {
	path     string // the mirror file's: the spill file is made beside it
	unlinked bool
	mem      []pendEntry
	f        *os.File
	off      int64
	runs     map[string][]pendRun // part → where its entries are in the file
	todo     []string             // the parts not yet returned, in key order
	done     bool                 // the in-memory change was returned
}

// A pendRun is a run of entries of one part in the spill file.
type pendRun struct {
	off int64
	n   int
}

func newPendSorter(path string) *pendSorter {
	return &pendSorter{path: path}
}

// pendPart is the part of a key in a pendSorter.
func pendPart(k []byte) string {
	if len(k) > 0 && k[0] == 0 && len(k) >= 3 {
		return string(k[:3])
	}
	return string(k[:min(len(k), 2)])
}

func comparePend(a, b pendEntry) int { return bytes.Compare(a.key(), b.key()) }

// add adds one key's change. Errors: the spill file could not be written.
func (s *pendSorter) add(k []byte, d int) error {
	var e pendEntry
	e.n = uint8(copy(e.k[:], k))
	e.d = int32(d)
	s.mem = append(s.mem, e)
	if len(s.mem) < pendSpill {
		return nil
	}
	return s.spill()
}

// spill writes the entries held in memory to the spill file, grouped by
// part, and empties memory.
func (s *pendSorter) spill() error {
	if len(s.mem) == 0 {
		return nil
	}
	if s.f == nil {
		f, err := os.CreateTemp(filepath.Dir(s.path), filepath.Base(s.path)+".expand-*")
		if err != nil {
			return err
		}
		// Unlinked at once where the system allows it: a crash leaves
		// nothing behind. Elsewhere close removes it.
		s.unlinked = os.Remove(f.Name()) == nil
		s.f, s.runs = f, map[string][]pendRun{}
	}
	es := sumPend(s.mem)
	buf := make([]byte, 0, 64<<10)
	for len(es) > 0 {
		p := pendPart(es[0].key())
		n := 1
		for n < len(es) && pendPart(es[n].key()) == p {
			n++
		}
		s.runs[p] = append(s.runs[p], pendRun{off: s.off + int64(len(buf)), n: n})
		for _, e := range es[:n] {
			buf = append(buf, e.n)
			buf = append(buf, e.k[:]...)
			buf = binary.BigEndian.AppendUint32(buf, uint32(e.d))
			if len(buf) >= cap(buf)-pendRecLen {
				if _, err := s.f.WriteAt(buf, s.off); err != nil {
					return err
				}
				s.off += int64(len(buf))
				buf = buf[:0]
			}
		}
		es = es[n:]
	}
	if _, err := s.f.WriteAt(buf, s.off); err != nil {
		return err
	}
	s.off += int64(len(buf))
	s.mem = s.mem[:0]
	return nil
}

// sumPend sorts es in place, sums the changes of each key and returns the
// keys whose change is not zero, in es's memory.
func sumPend(es []pendEntry) []pendEntry {
	slices.SortFunc(es, comparePend)
	out := es[:0]
	for _, e := range es {
		if len(out) > 0 && bytes.Equal(out[len(out)-1].key(), e.key()) {
			out[len(out)-1].d += e.d
			continue
		}
		out = append(out, e)
	}
	return slices.DeleteFunc(out, func(e pendEntry) bool { return e.d == 0 })
}

// next returns the next keys of the change in key order, summed, none with
// a change of zero (perhaps no key), or false when the change has been
// handed out in full. Before the first call, the entries still in memory go
// to the spill file if it was made. Errors: the
// spill file could not be written or read, or holds what was not written
// (ErrMirror).
func (s *pendSorter) next() ([]pendEntry, bool, error) {
	if s.f == nil {
		if s.done {
			return nil, false, nil
		}
		s.done = true
		return sumPend(s.mem), true, nil
	}
	if s.todo == nil {
		if err := s.spill(); err != nil {
			return nil, false, err
		}
		s.todo = make([]string, 0, len(s.runs))
		for p := range s.runs {
			s.todo = append(s.todo, p)
		}
		slices.Sort(s.todo)
	}
	if len(s.todo) == 0 {
		return nil, false, nil
	}
	p := s.todo[0]
	s.todo = s.todo[1:]
	s.mem = s.mem[:0]
	for _, r := range s.runs[p] {
		b := make([]byte, r.n*pendRecLen)
		if _, err := s.f.ReadAt(b, r.off); err != nil {
			return nil, false, err
		}
		for ; len(b) > 0; b = b[pendRecLen:] {
			var e pendEntry
			e.n = b[0]
			copy(e.k[:], b[1:1+nodeLen])
			e.d = int32(binary.BigEndian.Uint32(b[1+nodeLen:]))
			if e.n == 0 || int(e.n) > nodeLen || pendPart(e.key()) != p {
				return nil, false, fmt.Errorf("%w: the expanded change's spill file holds what was not written", ErrMirror)
			}
			s.mem = append(s.mem, e)
		}
	}
	delete(s.runs, p)
	return sumPend(s.mem), true, nil
}

// close removes the spill file, if any.
func (s *pendSorter) close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	if !s.unlinked {
		err = errors.Join(err, os.Remove(s.f.Name()))
	}
	s.f = nil
	return err
}

// A pendIter hands out a pendSorter's change one key at a time, in key
// order, reading a part at a time.
type pendIter struct {
	s   *pendSorter
	cur []pendEntry
}

// peek returns the next key's entry, valid until the next pop, or nil when
// no key is left. Errors: those of pendSorter.next.
func (it *pendIter) peek() (*pendEntry, error) {
	for len(it.cur) == 0 {
		cur, ok, err := it.s.next()
		if err != nil || !ok {
			return nil, err
		}
		it.cur = cur
	}
	return &it.cur[0], nil
}

// pop moves past the entry peek returned.
func (it *pendIter) pop() { it.cur = it.cur[1:] }
