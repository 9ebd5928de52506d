package etcdstore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/keys"
)

// The packed form of the capacity layout (root versions 3 to 6;
// docs/design.md, "Packs: one object a checkpoint").
//
// A checkpoint of the capacity layout names its body by a root, as in
// version 2, but the leaves, conversation chunks and reference chunks that
// its parent does not already have are not objects of their own: they are
// members of one pack (two when none stays where the parent has it: the
// leaves and their reference chunks apart), an object under objPrefix named
// by the SHA-256 of its bytes like every other, written (claimed, then put)
// with the root. A pack is
//
//	pack  'P' 1  member × (the member's bytes: a leaf, conversation chunk or reference chunk)
//	pack  'P' 2  member × (the member's bytes, or a zstd frame of them: packz.go)
//	pack  'P' 3  run × (consecutive members' bytes, or a zstd frame of them: packrun.go)
//
// with the reference chunks first, then the conversation chunks, then the
// leaves, so that the sweep reads a pack's reference chunks with one range
// read and a Get its leaves and conversation chunks with another. A packed
// root ('R' 3) is a version-2 root whose part lists carry, after each part's
// digest and count, where the part is: the index of its pack in a table of
// pack digests that comes first in the root (a uvarint count, then the
// 32-byte digests, distinct), the member's offset in the pack and its size
// (uvarints); a root of version 4 ('R' 4) adds the member's uncompressed
// size (packz.go); a root of version 5 makes the leaves' reference chunks
// from the leaves (packref.go), may store a leaf as a patch of another
// (packdelta.go), and has its packs hold the leaves before the
// conversation chunks; a root of version 6 names runs of members
// (packrun.go). Parts the parent has stay where the parent's root says;
// the root names at most objRootPacks packs, so a cold read is the root and
// at most objRootPacks range reads. When the parent's parts are spread over
// more packs, or a parent pack holds no more of the checkpoint's bytes than
// the new pack, its parts are copied into the new pack (the write-time
// repack, repackKeep): the new pack then holds what the dropped packs held
// for this checkpoint.
//
// Every member (a leaf stored as a patch once patched, a reference chunk
// made from its leaf once made) is verified against the digest the root
// names for it, so a
// range read returns exactly what was packed or fails naming the member. The
// sweep keeps a pack as long as one live root names it (a pack is live when
// any member is), so a pack shared by live and dead checkpoints is never
// deleted while a live checkpoint needs a member of it.

const (
	// objTypePack is the type byte of a pack.
	objTypePack = 'P'
	// objRootPacked is the version of a packed root.
	objRootPacked = 3
	// objRootPacks is the most packs a packed root names.
	objRootPacks = 3
	// objPackMax bounds offsets and sizes in a packed root (1 TiB).
	objPackMax = 1 << 40
)

// In the packed form a leaf ends after an entry that is at least the
// objPackLeafMin-th of its leaf and whose path hash has the bits of
// objPackLeafCutMask all set (one entry in 4): leaves of ~27 entries, whose
// sizes vary little. A changed entry rewrites its leaf, and the leaf a
// change falls in is picked in proportion to its size, so what matters is
// the mean size of the leaf that holds a given entry: ~31 entries when
// every entry with its low 4 bits set ends a leaf (sizes spread
// geometrically around 16), ~27 with the minimum. Since leaves are stored
// as patches against a base (packdelta.go) a changed entry costs about the
// same whatever its leaf's size, while the root names every leaf and its
// reference chunk (~80 bytes a leaf); so fewer, larger leaves store less:
// on BenchmarkPackedThread with the words conversation a turn stored 41.5
// KB with a minimum of 12 (leaves of ~15 entries; roots 11.0 KB, copies
// 17.7 KB) and 33.1 KB with 24 (roots 6.6 KB, copies 12.8 KB, new members
// 13.8 KB against 12.8), and on B20's conversation 18.2 and 15.7 KB; a
// minimum of 32 stored about as little as 24 on B20. Before patches the
// balance was the other way (324 KiB a checkpoint on B20 with leaves of
// ~64 entries, 235 KiB with ~16). The cut
// depends on the path and on the entry's place in its leaf, that is on
// where the leaf starts and what it holds, which is all splitTreeCut's
// reuse of the thread's last split needs; after an insertion or removal
// the cuts fall back in step at the first path that ends a leaf in both.
// Leaves cut by an earlier rule stay readable: no reader depends on where
// leaves end.
const (
	objPackLeafMin     = 24
	objPackLeafCutMask = 3
)

// objPackLeafCut is objLeafCut for the leaves of packs: n is the entries of
// the leaf up to and with the one with this path.
func objPackLeafCut(path string, n int) bool {
	if n < objPackLeafMin {
		return false
	}
	h := sha256.Sum256([]byte(path))
	return binary.BigEndian.Uint64(h[:8])&objPackLeafCutMask == objPackLeafCutMask
}

// writePacked says whether appends of the capacity layout write packed
// roots; tests clear it to write what stores wrote before packs.
var writePacked = true

// partLoc is where a part of a packed root is: size bytes at offset off of
// the pack with digest pack. The zero partLoc says the part is an object of
// its own (roots of versions 1 and 2).
type partLoc struct {
	pack      keys.Digest
	off, size int
	// raw is the size of the member uncompressed when it is stored as a
	// zstd frame (roots of version 4, packz.go); 0 when it is stored as it
	// is. In a root of version 6 (packrun.go) off, size and raw are those
	// of the member's run, and moff and msize the member's offset and size
	// in the run's bytes uncompressed; msize is 0 in older versions, where
	// a member is a run of its own.
	raw         int
	moff, msize int
	// from is 1 + the index, in its root's leaves, of the leaf a reference
	// chunk is made from (root version 5, packref.go), and pick the bitmap
	// of that leaf's entries whose keys the chunk holds; from is 0 for a
	// part that is a member or an object of its own.
	from int
	pick string
	// base is that leaf, in a decoded root.
	base *objPart
	// delta is, for a leaf stored as a patch (root version 5,
	// packdelta.go), where the leaf stored whole that the patch applies to
	// is; deltaBase is that leaf's bytes (kept by the writer only).
	delta     *partLoc
	deltaBase string
}

// inPack reports whether l is a member of a pack.
func (l partLoc) inPack() bool { return l.size > 0 }

// packed reports whether r is a packed root (versions 3 to 6): its parts
// are members of the packs r.packs.
func (r *objRoot) packed() bool { return packedVersion(r.version) }

// packedVersion reports whether a root of version v is packed.
func packedVersion(v byte) bool { return v >= objRootPacked && v <= objRootRuns }

// distinctDigests reports whether ds holds no digest twice.
func distinctDigests(ds []keys.Digest) bool {
	seen := make(map[keys.Digest]bool, len(ds))
	for _, d := range ds {
		if seen[d] {
			return false
		}
		seen[d] = true
	}
	return true
}

// namedObjects returns the bucket objects that a checkpoint naming the root
// with digest self references, each once: the root and, for a packed root,
// its packs; for roots of versions 1 and 2 the root and every leaf,
// conversation chunk and reference chunk. It is the one place that says
// which objects a checkpoint keeps alive (the sweep's walk and its mirror
// count references with it).
func (r *objRoot) namedObjects(self keys.Digest) []keys.Digest {
	if r.packed() {
		return append([]keys.Digest{self}, r.packs...)
	}
	return append([]keys.Digest{self}, r.allDigests()...)
}

// convObjects returns the bucket objects that a transcript naming the root
// with digest self references, each once: the root and the objects that
// hold its conversation chunks (their packs, for a packed root).
func (r *objRoot) convObjects(self keys.Digest) []keys.Digest {
	out := []keys.Digest{self}
	seen := map[keys.Digest]bool{self: true}
	for _, p := range r.conv {
		d := p.digest
		if r.packed() {
			d = p.at.pack
		}
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// packSplit is what a packed root is made from: the version-2 split of a
// checkpoint (its root, decoded, and the bytes of every leaf, conversation
// chunk and reference chunk by digest).
type packSplit struct {
	root  objRoot
	parts map[keys.Digest][]byte
	// fileRefs is how many of the root's reference chunks, the first ones,
	// are the leaves' (the others hold artifact keys no leaf holds).
	fileRefs int
	// from says, for each of those, how it is made from its leaf (nil when
	// the split does not say: the chunks are then members).
	from []refFrom
	// prev are, by the digest of a leaf, the leaf the thread's split
	// before had where it starts (splitMemo.prevLeaves): the version a
	// patch of it is made against (packdelta.go).
	prev map[keys.Digest]object
}

// newPackSplit returns the packSplit of a version-2 split: root is the
// encoded version-2 root, objs its other objects, fileRefs how many of its
// reference chunks, the first ones, its leaves hold, and from (nil, or one
// for each of those) how each is made from its leaf (splitMemo.refsFrom).
func newPackSplit(root object, objs []object, fileRefs int, from []refFrom) (*packSplit, error) {
	r, err := objDecodeRoot(root.data)
	if err != nil {
		return nil, err
	}
	if from != nil && len(from) != fileRefs {
		return nil, fmt.Errorf("etcdstore: %d reference chunks made from leaves, want %d", len(from), fileRefs)
	}
	ps := &packSplit{root: r, parts: make(map[keys.Digest][]byte, len(objs)), fileRefs: fileRefs, from: from}
	for _, o := range objs {
		ps.parts[o.digest] = o.data
	}
	return ps, nil
}

// packed is a packed root and its pack.
type packed struct {
	// pack are the new packs: none when every part is in the parent's
	// packs, two when none is (the files' parts apart), else one.
	pack []object
	root object
	// locs are where each part of the root is.
	locs map[keys.Digest]partLoc
	// inherits says the root names a pack of the parent's.
	inherits bool
	// packs are the packs the root names.
	packs []keys.Digest
}

// objects returns what to claim and put: the new packs and the root.
func (p *packed) objects() []object {
	return append(slices.Clone(p.pack), p.root)
}

// pack makes the packed root of ps. Parts that parent (the parent's parts,
// by digest) has stay where they are, in the objRootPacks-1 parent packs
// that hold the most of this checkpoint's bytes (all of them when there is
// nothing new to pack and they are at most objRootPacks); the others go into
// one new pack, reference chunks first, then conversation chunks, then
// leaves, each distinct part once. The result is a function of ps and
// parent.
func (ps *packSplit) pack(parent map[keys.Digest]partLoc) packed {
	r := ps.root
	order := [][]objPart{r.refs, r.conv, r.leaves}
	// In a root of version 5 the leaves' reference chunks are made from
	// the leaves and are not members; the leaves come before the
	// conversation, so that the sweep's range read of the chunks a pack
	// makes from its leaves does not span the conversation.
	derive := writePackVersion >= objPackCompressed && writeDerivedRefs && ps.from != nil
	fromLeaf := map[keys.Digest]partLoc{}
	leavesAt := 2 // the index of the leaves in order
	if derive {
		order, leavesAt = [][]objPart{r.refs, r.leaves, r.conv}, 1
		for i, f := range ps.from {
			d := r.refs[i].digest
			l := partLoc{from: f.leaf + 1, pick: f.pick}
			// The split made the chunk from these entries of this leaf
			// (splitMemo.refsFrom); one the parent did not make from
			// the same entries is made again here as a reader will, so
			// that the root never names one a reader refuses, and one
			// that does not come out is a member.
			if p, ok := parent[d]; !ok || p.from == 0 || p.pick != f.pick {
				if o, err := objDeriveRefChunk(ps.parts[r.leaves[f.leaf].digest], f.pick); err != nil || o.digest != d {
					continue
				}
			}
			fromLeaf[d] = l
		}
	}
	// inParent returns where the parent has the member d.
	inParent := func(d keys.Digest) (partLoc, bool) {
		l, ok := parent[d]
		return l, ok && l.inPack()
	}
	// How each part not left where it is goes into the new pack: plain
	// its bytes (a leaf's or its patch's), b and raw how a pack of version
	// 2 stores it alone (in version 3, in runs, b is only what the
	// choices below weigh: about what it adds to the pack).
	type member struct {
		plain, b []byte
		raw      int
	}
	runs := writePackVersion == objPackRuns
	compressed := func(b []byte) member {
		m := member{plain: b, b: b}
		switch {
		case runs:
			m.b = packEstimate(b)
		case writePackVersion == objPackCompressed:
			m.b, m.raw = packCompress(b)
		}
		return m
	}
	stored := map[keys.Digest]member{}
	store := func(d keys.Digest) member {
		m, ok := stored[d]
		if !ok {
			m = compressed(ps.parts[d])
			stored[d] = m
		}
		return m
	}
	// patchOf returns a leaf d stored as a patch, when a base it can be
	// patched against is in a pack for which keep holds and the patch is
	// at most half the leaf stored whole: the base the parent's version of
	// d (or d itself, in the parent) was patched against, else the
	// parent's version of d when the parent stored it whole. A patch grows
	// with the changes since its base; past half the leaf, the leaf is
	// stored whole and is the base of the next (BenchmarkPackedThread: 20.4
	// and 41.3 KB a turn over 20 turns, 29.0 and 72.7 over 100, against
	// 22.1, 45.7, 28.4 and 72.0 patching whenever smaller).
	patchOf := func(d keys.Digest, keep func(keys.Digest) bool) (member, partLoc, bool) {
		if !derive {
			return member{}, partLoc{}, false
		}
		var base partLoc
		var data string
		if l, ok := inParent(d); ok && l.delta != nil && keep(l.delta.pack) {
			base, data = *l.delta, l.deltaBase
		} else if q, ok := ps.prev[d]; !ok {
			return member{}, partLoc{}, false
		} else if lq, ok := inParent(q.digest); !ok {
			return member{}, partLoc{}, false
		} else if lq.delta != nil && keep(lq.delta.pack) {
			base, data = *lq.delta, lq.deltaBase
		} else if lq.delta == nil && keep(lq.pack) {
			base, data = lq.place(), string(q.data)
		} else {
			return member{}, partLoc{}, false
		}
		b := ps.parts[d]
		patch := leafPatch([]byte(data), b)
		if got, err := applyLeafPatch([]byte(data), patch); err != nil || !bytes.Equal(got, b) {
			return member{}, partLoc{}, false
		}
		m := compressed(patch)
		if 2*len(m.b) > len(store(d).b) {
			return member{}, partLoc{}, false
		}
		return m, partLoc{delta: &base, deltaBase: data}, true
	}
	anyPack := func(keys.Digest) bool { return true }
	isLeaf := map[keys.Digest]bool{}
	for _, p := range r.leaves {
		isLeaf[p.digest] = true
	}
	// The bytes of this checkpoint each parent pack holds, and the bytes of
	// the parts no parent pack holds, as stored (a leaf as a patch when its
	// base may stay named).
	held := map[keys.Digest]int{}
	seen := map[keys.Digest]bool{}
	fresh, freshBytes := 0, 0
	for _, parts := range order {
		for _, p := range parts {
			if seen[p.digest] {
				continue
			}
			seen[p.digest] = true
			if _, ok := fromLeaf[p.digest]; ok {
				continue
			}
			if l, ok := inParent(p.digest); ok {
				held[l.pack] += l.stored()
			} else if m, _, ok := patchOf(p.digest, anyPack); isLeaf[p.digest] && ok {
				fresh++
				freshBytes += len(m.b)
			} else {
				fresh++
				freshBytes += len(store(p.digest).b)
			}
		}
	}
	old := repackKeep(held, fresh, freshBytes)
	kept := make(map[keys.Digest]bool, len(old))
	for _, d := range old {
		kept[d] = true
	}
	out := packed{locs: make(map[keys.Digest]partLoc, len(seen))}
	// When no part stays where it is (the first checkpoint of a thread, or
	// one packed anew), the leaves and their reference chunks, which the
	// files alone decide, go into a pack of their own: threads that start
	// from the same files write the same pack and share it, as they shared
	// those parts as objects of their own before packs. The conversation
	// chunks and the artifacts' reference chunks go into a second pack.
	apart := len(old) == 0
	var w [2]*runWriter
	for g := range w {
		w[g] = &runWriter{runs: runs, data: []byte{objTypePack, writePackVersion}, locs: out.locs}
	}
	group := map[keys.Digest]int{}
	for k, parts := range order {
		// A run holds members of one kind.
		w[0].end()
		w[1].end()
		for i, p := range parts {
			if _, ok := out.locs[p.digest]; ok {
				continue
			}
			if l, ok := fromLeaf[p.digest]; ok {
				out.locs[p.digest] = l
				continue
			}
			if l, ok := inParent(p.digest); ok && kept[l.pack] && (l.delta == nil || kept[l.delta.pack]) {
				out.locs[p.digest] = l
				out.inherits = true
				continue
			}
			g := 0
			if apart && k != leavesAt && (k != 0 || i >= ps.fileRefs) {
				g = 1
			}
			m := store(p.digest)
			var at partLoc
			if k == leavesAt {
				if pm, l, ok := patchOf(p.digest, func(d keys.Digest) bool { return kept[d] }); ok {
					m, at = pm, l
				}
			}
			w[g].add(p.digest, m.plain, m.b, m.raw, at)
			group[p.digest] = g
		}
	}
	var packs []keys.Digest
	var made [2]keys.Digest
	for g := range w {
		w[g].end()
		if b := w[g].data; len(b) > 2 {
			o := objNewObject(b)
			out.pack = append(out.pack, o)
			packs = append(packs, o.digest)
			made[g] = o.digest
		}
	}
	for d, g := range group {
		l := out.locs[d]
		l.pack = made[g]
		out.locs[d] = l
	}
	packs = append(packs, old...)
	version := byte(objRootPacked)
	switch {
	case runs:
		version = objRootRuns
	case derive:
		version = objRootDerived
	case writePackVersion == objPackCompressed:
		version = objRootCompressed
	}
	pr := objRoot{version: version, convPresent: r.convPresent, artifacts: r.artifacts, packs: packs}
	at := func(in []objPart) []objPart {
		o := make([]objPart, len(in))
		for i, p := range in {
			o[i] = objPart{digest: p.digest, n: p.n, at: out.locs[p.digest]}
		}
		return o
	}
	pr.leaves, pr.conv, pr.refs = at(r.leaves), at(r.conv), at(r.refs)
	out.root = objNewObject(objEncodeRoot(&pr))
	out.packs = packs
	return out
}

// readRange reads n bytes at off of the object key: one range read when the
// bucket has them (bucket.RangeReader), else the whole object.
func (s *Store) readRange(ctx context.Context, key string, off, n int) ([]byte, error) {
	if rr, ok := s.objects.(bucket.RangeReader); ok {
		return rr.GetRange(ctx, key, int64(off), int64(n))
	}
	b, err := s.objects.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if off+n > len(b) {
		return nil, fmt.Errorf("%w: %d bytes at %d of an object of %d", bucket.ErrInvalidRange, n, off, len(b))
	}
	return b[off : off+n], nil
}

// fetchParts returns the verified bytes of parts, by object key: parts
// that are objects of their own (roots of versions 1 and 2) are read as in
// fetchObjects; the members of packs with one range read per pack, from
// the first member needed to the end of the last. Each member is verified
// against its digest; the cache serves and keeps members by digest.
func (s *Store) fetchParts(ctx context.Context, parts []objPart) (map[string][]byte, error) {
	got, err := s.fetchVerified(ctx, parts, nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(got))
	for d, b := range got {
		out[objectKey(d)] = b
	}
	return out, nil
}

// fetchMembers is fetchVerified for parts that are objects or members of
// packs (none made from a leaf): it returns their verified bytes by digest.
// Members are read with one range read per pack, from the first run needed
// to the end of the last; each run needed is decoded once (a member of a
// root of versions 3 to 5 is a run of its own) and its members cut from it
// and verified.
func (s *Store) fetchMembers(ctx context.Context, parts []objPart, whole map[keys.Digest][]byte) (map[keys.Digest][]byte, error) {
	out := make(map[keys.Digest][]byte, len(parts))
	var single []keys.Digest
	byPack := map[keys.Digest][]objPart{}
	var packs []keys.Digest
	seen := map[keys.Digest]bool{}
	seenBase := map[partLoc]bool{}
	for _, p := range parts {
		if seen[p.digest] {
			continue
		}
		seen[p.digest] = true
		if b, ok := s.objCache.get(p.digest); ok {
			out[p.digest] = b
			continue
		}
		if p.at.size == 0 {
			single = append(single, p.digest)
			continue
		}
		add := func(p objPart) {
			if byPack[p.at.pack] == nil {
				packs = append(packs, p.at.pack)
			}
			byPack[p.at.pack] = append(byPack[p.at.pack], p)
		}
		add(p)
		if l := p.at.delta; l != nil {
			// The base of a patched leaf: read with the members,
			// decoded, not verified on its own (n < 0 marks it).
			if at := l.place(); !seenBase[at] {
				seenBase[at] = true
				add(objPart{digest: p.digest, n: -1, at: at})
			}
		}
	}
	got, err := s.fetchObjects(ctx, single)
	if err != nil {
		return nil, err
	}
	for k, b := range got {
		out[k] = b
	}
	if s.objects == nil && len(packs) > 0 {
		return nil, fmt.Errorf("etcdstore: %w", objError(packs[0], fmt.Errorf("the store has no object bucket (Options.Objects)")))
	}
	members := make([]map[keys.Digest][]byte, len(packs))
	// The bases of patched leaves by place, and the patches by leaf.
	var mu sync.Mutex
	bases := map[partLoc][]byte{}
	patches := map[keys.Digest][]byte{}
	err = forEach(ctx, len(packs), objectParallel, func(ctx context.Context, i int) error {
		ps := byPack[packs[i]]
		// The runs of this pack the parts are in, each once: a run is
		// read and decoded once however many of its members are needed.
		runAt := map[runPlace]int{}
		var runs []runPlace
		var inRun [][]int
		from, to := ps[0].at.off, 0
		for j, p := range ps {
			rp := p.at.run()
			k, ok := runAt[rp]
			if !ok {
				k = len(runs)
				runAt[rp] = k
				runs = append(runs, rp)
				inRun = append(inRun, nil)
			}
			inRun[k] = append(inRun[k], j)
			from, to = min(from, rp.off), max(to, rp.off+rp.size)
		}
		var b []byte
		if w, ok := whole[packs[i]]; ok && to <= len(w) {
			b = w[from:to]
		} else {
			var err error
			if b, err = s.readRange(ctx, objectKey(packs[i]), from, to-from); err == nil && len(b) != to-from {
				err = fmt.Errorf("%w: %d bytes at %d, read %d", bucket.ErrInvalidRange, to-from, from, len(b))
			}
			if err != nil {
				return fmt.Errorf("etcdstore: %w", objError(packs[i], err))
			}
		}
		// Runs are decoded, and their members cut and verified, on every
		// core: decompressing and hashing them is what a cold read of a
		// large body spends its CPU on.
		got := make([][]byte, len(ps))
		err := forEach(ctx, len(runs), runtime.GOMAXPROCS(0), func(_ context.Context, k int) error {
			rp := runs[k]
			// The cache keeps the member, not the pack: packDecode and
			// cutMember copy.
			run, err := packDecode(b[rp.off-from:rp.off-from+rp.size], rp.raw)
			if err != nil && rp.raw > 0 && ps[inRun[k][0]].at.msize > 0 {
				// A run of several members (root version 6).
				return fmt.Errorf("etcdstore: pack %s: run at %d: %w", objectKey(packs[i]), rp.off, objError(ps[inRun[k][0]].digest, err))
			}
			if err == nil && onRunDecode != nil {
				onRunDecode()
			}
			for _, j := range inRun[k] {
				p := ps[j]
				var mb []byte
				if err == nil {
					mb, err = cutMember(run, p.at)
				}
				if err != nil {
					return fmt.Errorf("etcdstore: pack %s: %w", objectKey(packs[i]), objError(p.digest, err))
				}
				if p.n < 0 || p.at.delta != nil {
					mu.Lock()
					if p.n < 0 {
						bases[p.at] = mb
					} else {
						patches[p.digest] = mb
					}
					mu.Unlock()
					continue
				}
				if sha256.Sum256(mb) != p.digest {
					return fmt.Errorf("etcdstore: pack %s: %w", objectKey(packs[i]), objError(p.digest, errObjDigest))
				}
				got[j] = mb
			}
			return nil
		})
		if err != nil {
			return err
		}
		m := make(map[keys.Digest][]byte, len(ps))
		for j, p := range ps {
			if got[j] != nil {
				s.objCache.put(ctx, p.digest, got[j])
				m[p.digest] = got[j]
			}
		}
		members[i] = m
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, p := range parts {
		patch, ok := patches[p.digest]
		if !ok {
			continue
		}
		delete(patches, p.digest)
		b, err := applyLeafPatch(bases[p.at.delta.place()], patch)
		if err == nil && sha256.Sum256(b) != p.digest {
			err = errObjDigest
		}
		if err != nil {
			return nil, fmt.Errorf("etcdstore: pack %s: %w", objectKey(p.at.pack), objError(p.digest, err))
		}
		s.objCache.put(ctx, p.digest, b)
		out[p.digest] = b
	}
	for _, m := range members {
		for k, b := range m {
			out[k] = b
		}
	}
	return out, nil
}

// parsePacks decodes the packs hint of a checkpoint record: concatenated
// hex digests, at most objRootPacks of them.
func parsePacks(s string) ([]keys.Digest, error) {
	const n = 2 * keys.DigestLen
	if len(s)%n != 0 || len(s) > objRootPacks*n {
		return nil, fmt.Errorf("bad packs %q", s)
	}
	out := make([]keys.Digest, 0, len(s)/n)
	for i := 0; i < len(s); i += n {
		d, err := parseRoot(s[i : i+n])
		if err != nil {
			return nil, fmt.Errorf("bad packs %q", s)
		}
		out = append(out, d)
	}
	return out, nil
}

// repackRatio is the write-time repack's tier ratio: besides the packs it
// must drop, it copies a parent pack forward when the checkpoint's bytes in
// it are at most this many times the bytes the new pack holds so far.
const repackRatio = 1.25

// repackKeep returns the parent packs whose parts a new packed root leaves
// where they are, the most bytes held first (the write-time repack copies
// the parts of the others into the new pack); held are the bytes of the
// checkpoint each parent pack holds, fresh and freshBytes the parts no
// parent pack holds and their bytes. With no fresh part and at most objRootPacks parent packs it keeps
// them all. Otherwise it goes through the parent packs from the fewest
// bytes held to the most, copies those it must so that at most
// objRootPacks-1 remain, and then copies each pack but the one holding the
// most that holds at most repackRatio times what the new pack holds so far
// (a tier as small as the new pack is merged into it, as in a size-tiered
// compaction), and keeps the rest. Copying only what it must (the
// smallest) makes what is copied grow with every turn of a thread, as the
// newest pack keeps absorbing the one before; merging tiers of similar size
// copies less in total. The pack holding the most is copied only when it
// must be: merged by the tier rule it made every part of the checkpoint be
// copied at once (on BenchmarkPackedThread's words, twice in 20 turns, 130
// and 172 KB), and it is usually the thread's first pack, its files, which
// the tier rule merges once the checkpoint holds less of it than of another
// pack.
func repackKeep(held map[keys.Digest]int, fresh, freshBytes int) []keys.Digest {
	asc := make([]keys.Digest, 0, len(held))
	for d := range held {
		asc = append(asc, d)
	}
	slices.SortFunc(asc, func(a, b keys.Digest) int {
		if c := cmp.Compare(held[a], held[b]); c != 0 {
			return c
		}
		return bytes.Compare(a[:], b[:])
	})
	if fresh == 0 && len(asc) <= objRootPacks {
		slices.Reverse(asc)
		return asc
	}
	must := len(asc) - (objRootPacks - 1)
	acc := freshBytes
	var kept []keys.Digest
	for i, d := range asc {
		if i < must || i < len(asc)-1 && float64(held[d]) <= repackRatio*float64(acc) {
			acc += held[d]
			continue
		}
		kept = append(kept, d)
	}
	slices.Reverse(kept)
	return kept
}
