package etcdstore

import (
	"fmt"

	"github.com/cairnstore/cairn/keys"
)

// Members compressed in runs (pack version 3, root version 6;
// docs/design.md, "Packs: one object a checkpoint").
//
// In a pack of version 2 each compressed member is a zstd frame of its
// own. A leaf of a large body is ~1.8 KB, and zstd's fixed cost a frame
// (its header, its tables, the decoder's state reset) is then most of what
// decompressing it costs: the 1,334 leaves of a 20,000-entry body decode in
// 7.6-8.9 ms as frames of their own and in 2.2-2.5 ms as one frame
// (BenchmarkMemberFrames). A pack of version 3 stores consecutive members
// of one kind (reference chunks, leaves, conversation chunks) written by one
// append as a run: their bytes concatenated, as one zstd frame when that is
// smaller and decodes under packDecode's rules, else as they are. A run
// holds at most objRunMax bytes uncompressed, or one member when that member
// alone is larger.
//
// A root of version 6 is a root of version 5 whose places name runs: after
// the pack table comes a run table (a uvarint count, then per run the index
// of its pack, the offset and stored size of its frame in the pack and its
// size uncompressed, 0 for a run stored as it is: uvarints), and a member's
// place (a part's, or the base of a patched leaf) is the index of its run,
// its offset in the run's uncompressed bytes and its size. The table lists
// each run once, in the order the root's places first name them, and names
// no run that no place names; a place lies within its run. What the root
// states bounds what a reader decodes, as in version 4: a run's frame must
// declare exactly the size the table states (at most objMemberMax), with no
// dictionary, and decodes into a buffer of that capacity it may not grow.
// Each run a read needs is read (with its pack's other runs, one range
// read a pack) and decoded once, however many of its members the read
// needs; each member cut from it is verified against the digest the root
// names for it, as in every version, so a read returns exactly what was
// packed or fails naming the member.
//
// objRunMax bounds what a reader that needs one member of a run decodes
// and, compressed, fetches besides it: 64 KiB is ~36 leaves, about 20 KB
// stored, far less than what a request costs in latency; and a body of
// 20,000 entries is ~37 runs, which decode and are cut in 1.3-1.4× the time
// of one frame of all of them (a frame a member: 3.6-5.0×), while a cold
// read still decodes its runs on every core. Runs of 256 KiB gained nothing
// measurable, runs of 16 KiB cost 1.4-1.6× as much (BenchmarkMemberFrames; see
// docs/performance.md).
const objRunMax = 64 << 10

// onRunDecode, when not nil, is called for each run fetchMembers decodes
// (tests count them).
var onRunDecode func()

// runPlace is the place of a run: the offset and stored size of its bytes
// in the pack pack, and its size uncompressed (0: stored as it is).
type runPlace struct {
	pack      keys.Digest
	off, size int
	raw       int
}

// run returns the place of the run l is in.
func (l partLoc) run() runPlace { return runPlace{pack: l.pack, off: l.off, size: l.size, raw: l.raw} }

// place returns l's place alone: its run and its place in the run, without
// how a reference chunk is made or what a leaf is patched against.
func (l partLoc) place() partLoc {
	return partLoc{pack: l.pack, off: l.off, size: l.size, raw: l.raw, moff: l.moff, msize: l.msize}
}

// runLen is the size of a run's bytes uncompressed.
func (r runPlace) runLen() int {
	if r.raw > 0 {
		return r.raw
	}
	return r.size
}

// stored returns about how many bytes of its pack the member at l takes:
// its run's stored size, for a member that is its run (roots of versions 3
// to 5), else its share of its run's.
func (l partLoc) stored() int {
	if l.msize == 0 {
		return l.size
	}
	if l.raw == 0 {
		return l.msize
	}
	return int((int64(l.msize)*int64(l.size) + int64(l.raw) - 1) / int64(l.raw))
}

// packEstimate returns bytes as long as b compressed alone, about what b
// adds to a run (the writer weighs members by it): the frame when it is
// smaller, else b.
func packEstimate(b []byte) []byte {
	if len(b) < 2 || len(b) > objMemberMax {
		return b
	}
	enc, err := zstdEncoder()
	if err != nil {
		return b
	}
	if z := enc.EncodeAll(b, make([]byte, 0, len(b))); len(z) < len(b) {
		return z
	}
	return b
}

// cutMember returns the member at l from the bytes of its run, decoded:
// the whole run for a member that is its run (msize 0), else a copy of its
// bytes in the run (a cached member does not keep its run).
func cutMember(run []byte, l partLoc) ([]byte, error) {
	if l.msize == 0 {
		return run, nil
	}
	if l.moff < 0 || l.msize > len(run) || l.moff > len(run)-l.msize {
		return nil, fmt.Errorf("%w: %d bytes at %d of a run of %d", errMemberSize, l.msize, l.moff, len(run))
	}
	return append([]byte(nil), run[l.moff:l.moff+l.msize]...), nil
}

// runWriter cuts the members of one pack into runs as they come, in pack
// order. With runs (pack version 3) a run ends before a member that would
// take it past objRunMax, and when end is called (between kinds); without,
// each member is a run of its own, as the caller stores it alone.
type runWriter struct {
	runs bool
	// data is the pack so far.
	data []byte
	// pending are the members of the run being filled and buf their
	// bytes.
	pending []keys.Digest
	at      []int
	buf     []byte
	// locs receives the place of each member, its pack left zero.
	locs map[keys.Digest]partLoc
}

// add appends member d, whose bytes uncompressed are b, and which a pack
// without runs stores as stored (a zstd frame of raw bytes, or b when raw
// is 0); at says, for a leaf stored as a patch, what the patch applies to
// (kept in its place).
func (w *runWriter) add(d keys.Digest, b, stored []byte, raw int, at partLoc) {
	if !w.runs {
		at.off, at.size, at.raw = len(w.data), len(stored), raw
		w.locs[d] = at
		w.data = append(w.data, stored...)
		return
	}
	if len(w.pending) > 0 && len(w.buf)+len(b) > objRunMax {
		w.end()
	}
	w.locs[d] = at
	w.pending = append(w.pending, d)
	w.at = append(w.at, len(w.buf))
	w.buf = append(w.buf, b...)
}

// end closes the run being filled, if any: it is stored compressed when
// that is smaller, and each of its members gets its place.
func (w *runWriter) end() {
	if len(w.pending) == 0 {
		return
	}
	stored, raw := packCompress(w.buf)
	off := len(w.data)
	w.data = append(w.data, stored...)
	for i, d := range w.pending {
		l := w.locs[d]
		l.off, l.size, l.raw = off, len(stored), raw
		l.moff = w.at[i]
		if i+1 < len(w.pending) {
			l.msize = w.at[i+1] - w.at[i]
		} else {
			l.msize = len(w.buf) - w.at[i]
		}
		w.locs[d] = l
	}
	w.pending, w.at, w.buf = w.pending[:0], w.at[:0], nil
}
