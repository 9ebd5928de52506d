package etcdstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/keys"
)

// runTestMembers are three members of one kind as an append writes them
// consecutively: leaves of a body (compressible together).
func runTestMembers(t testing.TB) [][]byte {
	t.Helper()
	c := cairn.Checkpoint{Files: objTestFiles(200, "")}
	_, objs, _, err := splitCheckpointBody(&c)
	if err != nil || len(objs) < 3 {
		t.Fatalf("split: %d objects, %v", len(objs), err)
	}
	return [][]byte{objs[0].data, objs[1].data, objs[2].data}
}

// countRunDecodes counts the runs fetchMembers decodes while t runs.
func countRunDecodes(t *testing.T) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	onRunDecode = func() { n.Add(1) }
	t.Cleanup(func() { onRunDecode = nil })
	return &n
}

// TestRunMemberDecoding reads members of a run through fetchParts, as every
// read of a root of version 6 does. The honest cases check that each member
// is cut at its own place (a reader that cuts at another offset fails the
// digest) and that the run is decoded once for all of them. A run whose
// frame would decode to other than the size the root states is refused
// before anything is decoded (errMemberSize), as is a place past the end of
// its run; a frame that decodes to other bytes of the stated size, or a
// member cut at a wrong place, fails the digest (errObjDigest). Every
// failure names the pack and the member, and nothing refused is cached.
func TestRunMemberDecoding(t *testing.T) {
	ctx := context.Background()
	ms := runTestMembers(t)
	run := bytes.Join(ms, nil)
	at := []int{0, len(ms[0]), len(ms[0]) + len(ms[1])}
	z := func(b []byte) []byte { s, _ := packCompress(b); return s }
	frame := z(run)
	if len(frame) >= len(run) {
		t.Fatal("the run does not compress")
	}
	other := bytes.Clone(run)
	other[at[1]+len(ms[1])/2] ^= 1
	for _, tc := range []struct {
		name   string
		stored []byte
		raw    int
		// moff and msize alter the place of member 1 (when not zero).
		dOff, msize int
		want        error // nil: every member
		decodes     int64
	}{
		{"Honest", frame, len(run), 0, 0, nil, 1},
		{"AsItIs", run, 0, 0, 0, nil, 1},
		{"OffsetOneOn", frame, len(run), 1, 0, errObjDigest, 1},
		{"OffsetOneBack", frame, len(run), -1, 0, errObjDigest, 1},
		{"SizeOneLess", frame, len(run), 0, len(ms[1]) - 1, errObjDigest, 1},
		{"PastTheRun", frame, len(run), 0, len(run), errMemberSize, 1},
		{"OtherBytes", z(other), len(run), 0, 0, errObjDigest, 1},
		{"FrameLarger", z(append(bytes.Clone(run), "more"...)), len(run), 0, 0, errMemberSize, 0},
		{"StatedLarger", frame, len(run) + 1, 0, 0, errMemberSize, 0},
		{"StatedSmaller", frame, len(run) - 1, 0, 0, errMemberSize, 0},
		{"NoContentSize", zstdStream(t, run), len(run), 0, 0, errMemberSize, 0},
		{"TwoFrames", append(z(run[:at[1]]), z(run[at[1]:])...), len(run), 0, 0, errMemberSize, 0},
		{"AboveTheCap", z(bytes.Repeat(run, objMemberMax/len(run)+1)), len(run), 0, 0, errMemberSize, 0},
		{"Truncated", frame[:len(frame)-3], len(run), 0, 0, errMemberSize, 0},
		{"CompressedAsItIs", frame, 0, 0, 0, errMemberSize, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			decodes := countRunDecodes(t)
			mem := bucket.NewMemory(nil)
			pack := append([]byte{objTypePack, objPackRuns}, tc.stored...)
			pd := keys.Digest(sha256.Sum256(pack))
			if err := mem.Put(ctx, objectKey(pd), pack); err != nil {
				t.Fatal(err)
			}
			s := &Store{objects: mem, objCache: newObjCache(1 << 20)}
			parts := make([]objPart, len(ms))
			for i, m := range ms {
				l := partLoc{pack: pd, off: 2, size: len(tc.stored), raw: tc.raw, moff: at[i], msize: len(m)}
				if i == 1 {
					l.moff += tc.dOff
					if tc.msize != 0 {
						l.msize = tc.msize
					}
				}
				parts[i] = objPart{digest: sha256.Sum256(m), n: 1, at: l}
			}
			got, err := s.fetchParts(ctx, parts)
			if n := decodes.Load(); n != tc.decodes {
				t.Fatalf("%d runs decoded, want %d", n, tc.decodes)
			}
			if tc.want == nil {
				if err != nil {
					t.Fatalf("fetchParts: %v; want the members", err)
				}
				for i, m := range ms {
					if !bytes.Equal(got[objectKey(parts[i].digest)], m) {
						t.Fatalf("member %d came back different", i)
					}
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), objectKey(pd)) || !strings.Contains(err.Error(), "body object") {
				t.Fatalf("fetchParts: %v; want %v naming the pack and a member", err, tc.want)
			}
			if tc.dOff != 0 || tc.msize != 0 {
				if !strings.Contains(err.Error(), objectKey(parts[1].digest)) {
					t.Fatalf("fetchParts: %v; want it to name member 1", err)
				}
			}
			for _, p := range parts {
				if _, ok := s.objCache.get(p.digest); ok {
					t.Fatal("a member of a refused read is in the cache")
				}
			}
		})
	}
}

// rawRootV6 is a root of version 6 written byte by byte: packs pack
// digests, the run table runs (pack index, offset, stored size, raw size
// each), and one leaf of one entry at each of places (run index, offset,
// size each), stored whole; no conversation, no reference chunks, no
// artifacts.
func rawRootV6(packs int, runs, places [][]uint64) []byte {
	b := []byte{objTypeRoot, objRootRuns}
	b = binary.AppendUvarint(b, uint64(packs))
	for i := range packs {
		b = append(b, bytes.Repeat([]byte{byte(i + 1)}, keys.DigestLen)...)
	}
	b = binary.AppendUvarint(b, uint64(len(runs)))
	for _, r := range runs {
		for _, x := range r {
			b = binary.AppendUvarint(b, x)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(places)))
	for i, p := range places {
		b = append(b, bytes.Repeat([]byte{byte(0x80 + i)}, keys.DigestLen)...)
		b = binary.AppendUvarint(b, 1)
		for _, x := range p {
			b = binary.AppendUvarint(b, x)
		}
		b = append(b, 0) // stored whole
	}
	return append(b, 0, 0, 0) // no conversation, no chunks, no artifacts
}

// TestRootVersion6Bounds checks the root decoder on the run table and the
// places of a root of version 6: a run names a pack of the root, a size of
// at least 2 and an uncompressed size of 0 or 2..objMemberMax, and is
// listed once; the table lists runs in the order the places first name
// them and every run a place names; a place names a run of the table and
// lies within the run's bytes uncompressed, at least 2 bytes long. Every
// root the decoder accepts encodes back to the same bytes.
func TestRootVersion6Bounds(t *testing.T) {
	run := []uint64{0, 2, 100, 400}
	for _, tc := range []struct {
		name   string
		packs  int
		runs   [][]uint64
		places [][]uint64
		ok     bool
	}{
		{"Valid", 1, [][]uint64{run}, [][]uint64{{0, 0, 10}, {0, 10, 390}}, true},
		{"TwoRuns", 2, [][]uint64{run, {1, 2, 50, 0}}, [][]uint64{{0, 0, 10}, {1, 0, 50}, {0, 10, 20}}, true},
		{"StoredAsItIs", 1, [][]uint64{{0, 2, 100, 0}}, [][]uint64{{0, 98, 2}}, true},
		{"AtTheCap", 1, [][]uint64{{0, 2, 100, objMemberMax}}, [][]uint64{{0, 0, objMemberMax}}, true},
		{"NoSuchRun", 1, [][]uint64{run}, [][]uint64{{1, 0, 10}}, false},
		{"NoSuchPack", 1, [][]uint64{{1, 2, 100, 400}}, [][]uint64{{0, 0, 10}}, false},
		{"RunUnnamed", 1, [][]uint64{run, {0, 102, 50, 0}}, [][]uint64{{0, 0, 10}}, false},
		{"RunsOutOfOrder", 1, [][]uint64{run, {0, 102, 50, 0}}, [][]uint64{{1, 0, 10}, {0, 0, 10}}, false},
		{"RunTwice", 1, [][]uint64{run, run}, [][]uint64{{0, 0, 10}, {1, 0, 10}}, false},
		{"PastTheRun", 1, [][]uint64{run}, [][]uint64{{0, 395, 10}}, false},
		{"PastAStoredRun", 1, [][]uint64{{0, 2, 100, 0}}, [][]uint64{{0, 99, 2}}, false},
		{"LongerThanTheRun", 1, [][]uint64{run}, [][]uint64{{0, 0, 401}}, false},
		{"OneByte", 1, [][]uint64{run}, [][]uint64{{0, 0, 1}}, false},
		{"RawOne", 1, [][]uint64{{0, 2, 100, 1}}, [][]uint64{{0, 0, 1}}, false},
		{"AboveTheCap", 1, [][]uint64{{0, 2, 100, objMemberMax + 1}}, [][]uint64{{0, 0, 10}}, false},
		{"SizeOne", 1, [][]uint64{{0, 2, 1, 400}}, [][]uint64{{0, 0, 10}}, false},
		{"PastThePackBound", 1, [][]uint64{{0, objPackMax, 100, 400}}, [][]uint64{{0, 0, 10}}, false},
		{"ShortTable", 1, [][]uint64{{0, 2, 100}}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := rawRootV6(tc.packs, tc.runs, tc.places)
			r, err := objDecodeRoot(b)
			if (err == nil) != tc.ok {
				t.Fatalf("objDecodeRoot: %v, want ok %v", err, tc.ok)
			}
			if err != nil {
				return
			}
			if !bytes.Equal(objEncodeRoot(&r), b) {
				t.Fatal("the decoded root encodes differently")
			}
			for i, p := range r.leaves {
				rp := tc.runs[tc.places[i][0]]
				want := partLoc{pack: r.packs[rp[0]], off: int(rp[1]), size: int(rp[2]), raw: int(rp[3]),
					moff: int(tc.places[i][1]), msize: int(tc.places[i][2])}
				if p.at != want {
					t.Fatalf("leaf %d at %+v, want %+v", i, p.at, want)
				}
			}
		})
	}
}

// TestRunWriter checks how the writer cuts members into runs: a run holds
// members of one kind, consecutive in the pack, at most objRunMax bytes
// uncompressed or one larger member; each member's place lies within its
// run and holds exactly its bytes; a run is stored compressed when that is
// smaller.
func TestRunWriter(t *testing.T) {
	c := capacityTurn("a", 1, 20000, 200000)
	root, objs, refs, _, err := splitTreeCut(&c, nil, objPackLeafCut)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		objs = append(objs, r.object)
	}
	byDigest := map[keys.Digest][]byte{}
	for _, o := range objs {
		byDigest[o.digest] = o.data
	}
	// Reference chunks as members (none made from its leaf): every kind
	// is in a run.
	ps, err := newPackSplit(root, objs, len(refs), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := ps.pack(nil)
	packs := map[keys.Digest][]byte{}
	for _, o := range p.pack {
		if o.data[1] != objPackRuns {
			t.Fatalf("pack version %d, want %d", o.data[1], objPackRuns)
		}
		packs[o.digest] = o.data
	}
	r, err := objDecodeRoot(p.root.data)
	if err != nil || r.version != objRootRuns {
		t.Fatalf("root version %d, %v; want %d", r.version, err, objRootRuns)
	}
	type runInfo struct {
		kinds   map[byte]bool
		members int
		bytes   int
	}
	runs := map[runPlace]*runInfo{}
	for _, part := range append(append(r.leaves, r.conv...), r.refs...) {
		l := part.at
		run, err := packDecode(packs[l.pack][l.off:l.off+l.size], l.raw)
		if err != nil {
			t.Fatal(err)
		}
		if l.raw > 0 && l.size >= l.raw {
			t.Fatalf("a run stored compressed in %d of its %d bytes", l.size, l.raw)
		}
		m, err := cutMember(run, l)
		if err != nil || !bytes.Equal(m, byDigest[part.digest]) {
			t.Fatalf("member %x cut from its run: %v, not its bytes", part.digest[:4], err)
		}
		ri := runs[l.run()]
		if ri == nil {
			ri = &runInfo{kinds: map[byte]bool{}, bytes: len(run)}
			runs[l.run()] = ri
		}
		ri.kinds[m[0]] = true
		ri.members++
	}
	many := 0
	for rp, ri := range runs {
		if len(ri.kinds) != 1 {
			t.Fatalf("run at %d holds members of kinds %v", rp.off, ri.kinds)
		}
		if ri.bytes > objRunMax && ri.members > 1 {
			t.Fatalf("run at %d holds %d members in %d bytes, above objRunMax", rp.off, ri.members, ri.bytes)
		}
		if ri.members > 1 {
			many++
		}
	}
	if n := len(r.leaves); len(runs) > n/8 || many == 0 {
		t.Fatalf("%d runs for %d leaves, %d of them with several members", len(runs), n, many)
	}
	t.Logf("%d leaves, %d conversation chunks, %d reference chunks in %d runs", len(r.leaves), len(r.conv), len(r.refs), len(runs))
}

// TestRunsCompatibility appends a thread whose first checkpoints are
// written with a frame a member (roots of version 5) and the next in runs
// (version 6), on the packs of the ones before, then forks, prunes and
// sweeps: every checkpoint reads back exactly from a fresh store in at most
// 1+objRootPacks reads, a root of version 6 names a pack of a root of
// version 5, Verify finds nothing wrong, the blob references are those of
// the live checkpoints, and the sweep keeps exactly what they name.
func TestRunsCompatibility(t *testing.T) {
	e := newV2Env(t)
	s := e.store(true, 0)
	w := e.writer(s, "a")
	t.Cleanup(func() { writePackVersion = objPackRuns })
	byID := map[string]cairn.Checkpoint{}
	var all []cairn.Checkpoint
	roots := map[string]objRoot{}
	packsOf := map[string][]keys.Digest{}
	for turn := 1; turn <= 6; turn++ {
		want := byte(objRootDerived)
		writePackVersion = objPackCompressed
		if turn > 3 {
			writePackVersion, want = objPackRuns, objRootRuns
		}
		c := capacityTurn("a", turn, 2000, 8000)
		all = append(all, c)
		byID[c.ID] = c
		before := memKeysOf(t, e.mem, cairn.ObjectPrefix)
		e.append(s, w, c)
		for _, k := range newMetaKeys(t, e.mem, before) {
			b, _ := e.mem.Get(e.ctx, k)
			d, _ := parseRoot(k[len(objPrefix):])
			switch b[0] {
			case objTypeRoot:
				r, err := objDecodeRoot(b)
				if err != nil || r.version != want {
					t.Fatalf("root of %s: version %d, %v; want %d", c.ID, r.version, err, want)
				}
				roots[c.ID] = r
			case objTypePack:
				if b[1] != writePackVersion {
					t.Fatalf("pack of %s: version %d, want %d", c.ID, b[1], writePackVersion)
				}
				packsOf[c.ID] = append(packsOf[c.ID], d)
			}
		}
		cold := &readCounter{Memory: e.mem}
		fresh, err := New(e.cli, e.prefix, Options{Objects: cold})
		if err != nil {
			t.Fatal(err)
		}
		got, err := fresh.Get(e.ctx, c.ID)
		fresh.Close()
		if err != nil {
			t.Fatal(err)
		}
		sameCheckpoint(t, "cold read", got, c)
		if n := cold.reads.Load(); n > 1+objRootPacks {
			t.Fatalf("a cold Get of %s read the bucket %d times", c.ID, n)
		}
	}
	mixed := false
	for _, id := range []string{"a-4", "a-5", "a-6"} {
		for _, p := range roots[id].packs {
			for _, old := range []string{"a-1", "a-2", "a-3"} {
				for _, q := range packsOf[old] {
					mixed = mixed || p == q
				}
			}
		}
	}
	if !mixed {
		t.Fatal("no root of version 6 names a pack of a root of version 5: the test does not cover the two forms in one root")
	}
	// Forks of a-2 and a-5; a-1..a-3 go, then the head a-6.
	live := []string{"a-4", "a-5", "f1-root", "f2-root"}
	liveCps := e.forkPruneCheck(t, s, w, map[string]string{"f1": "a-2", "f2": "a-5"}, 3, "a-6", live, byID)
	wantLive := e.putBlobs(all, liveCps)
	for _, id := range []string{"a-2", "a-4", "a-5"} {
		r := roots[id]
		b := objEncodeRoot(&r)
		wantLive[objectKey(sha256.Sum256(b))] = true
		for _, p := range r.packs {
			wantLive[objectKey(p)] = true
		}
	}
	e.sweepKeeps(s, wantLive, live, byID)
}

// TestRunsReadWhatTheyNeed reads one leaf of a large checkpoint written in
// runs from a fresh store: the read fetches that leaf's run, not the pack,
// and decodes one run.
func TestRunsReadWhatTheyNeed(t *testing.T) {
	e := newV2Env(t)
	s := e.store(true, 0)
	c := capacityTurn("a", 1, 20000, 8000)
	e.append(s, e.writer(s, "a"), c)
	var r objRoot
	for _, k := range memKeysOf(t, e.mem, cairn.ObjectPrefix) {
		if b, _ := e.mem.Get(e.ctx, k); b[0] == objTypeRoot {
			var err error
			if r, err = objDecodeRoot(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	decodes := countRunDecodes(t)
	leaf := r.leaves[len(r.leaves)/2]
	ranges := &rangeCounter{Memory: e.mem}
	fresh := &Store{objects: ranges, objCache: newObjCache(1 << 20)}
	got, err := fresh.fetchParts(e.ctx, []objPart{leaf})
	if err != nil || sha256.Sum256(got[objectKey(leaf.digest)]) != leaf.digest {
		t.Fatalf("fetchParts: %v", err)
	}
	if n := decodes.Load(); n != 1 {
		t.Fatalf("%d runs decoded for one leaf, want 1", n)
	}
	if ranges.bytes != int64(leaf.at.size) || leaf.at.raw > objRunMax {
		t.Fatalf("read %d bytes for a leaf in a run of %d (%d uncompressed)", ranges.bytes, leaf.at.size, leaf.at.raw)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	// Several leaves of one run: the run is decoded once.
	var same []objPart
	for _, p := range r.leaves {
		if p.at.run() == leaf.at.run() && p.at.delta == nil {
			same = append(same, p)
		}
	}
	rng.Shuffle(len(same), func(i, j int) { same[i], same[j] = same[j], same[i] })
	decodes.Store(0)
	fresh = &Store{objects: e.mem, objCache: newObjCache(1 << 20)}
	if _, err := fresh.fetchParts(e.ctx, same); err != nil || len(same) < 2 || decodes.Load() != 1 {
		t.Fatalf("%d leaves of one run: %v, %d runs decoded; want 1", len(same), err, decodes.Load())
	}
}

// rangeCounter adds up the bytes a store reads by range.
type rangeCounter struct {
	*bucket.Memory
	bytes int64
}

func (c *rangeCounter) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	c.bytes += n
	return c.Memory.GetRange(ctx, key, off, n)
}

// FuzzRunMembers checks that decoding a run and cutting a member from it
// never panics and never returns other than what the place states: a run
// of exactly its stated size (at most objMemberMax), a member of exactly
// its stated size within it.
func FuzzRunMembers(f *testing.F) {
	ms := runTestMembers(f)
	run := bytes.Join(ms, nil)
	frame, raw := packCompress(run)
	f.Add(frame, uint32(raw), uint32(len(ms[0])), uint32(len(ms[1])))
	f.Add(run, uint32(0), uint32(0), uint32(len(ms[0])))
	f.Add(frame, uint32(raw), uint32(raw-2), uint32(3))
	f.Fuzz(func(t *testing.T, stored []byte, raw, moff, msize uint32) {
		b, err := packDecode(stored, int(raw))
		if err != nil {
			return
		}
		if raw > 0 && (len(b) != int(raw) || raw > objMemberMax) {
			t.Fatalf("a run of %d bytes decoded to %d", raw, len(b))
		}
		m, err := cutMember(b, partLoc{moff: int(moff), msize: int(msize)})
		if err != nil {
			return
		}
		if msize > 0 && (len(m) != int(msize) || !bytes.Equal(m, b[moff:moff+msize])) {
			t.Fatalf("a member of %d bytes at %d cut as %d bytes", msize, moff, len(m))
		}
	})
}
