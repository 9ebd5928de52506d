package etcdstore

import (
	"encoding/binary"
	"slices"
	"sync"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// The split of a version-2 body remembers, per thread, its leaves and their
// reference chunks, so that the split of the next checkpoint of the thread
// (which usually changes a few entries) reuses the encoded leaves and chunks
// it finds unchanged instead of cutting, encoding and hashing every entry
// again. It is a cache of computation only: a leaf is reused when the new
// entries encode to exactly its bytes (compared, not hashed), and a chunk
// when its leaf is reused and the same entries of it hold keys first seen
// there; the result is byte for byte the split without the memo.

// splitMemo is what one split leaves for the next.
type splitMemo struct {
	leaves []memoLeaf
	// byFirst maps the path of a leaf's first entry to its index in leaves.
	byFirst map[string]int
	files   int
}

// memoLeaf is one leaf of a split and its reference chunk.
type memoLeaf struct {
	leaf object
	n    int
	// atCut says the leaf's last path is a cut (objLeafCut).
	atCut bool
	// firsts are the offsets in the leaf of the entries whose keys no
	// earlier entry of the checkpoint holds: the keys of its chunk.
	firsts []int32
	// chunk is the leaf's reference chunk, nil when it has none.
	chunk *refChunk
}

// splitMemoFiles bounds the entries the memos of a store describe together
// (about 180 bytes each: the leaf bytes, the chunk, the offsets, so about 23
// MiB). The memo of a checkpoint of more than half as many entries is not
// kept; when a memo would pass the bound, the others are dropped.
const splitMemoFiles = 1 << 17

// splitMemos are a store's memos by thread.
type splitMemos struct {
	mu    sync.Mutex
	m     map[string]*splitMemo
	files int
}

func (s *splitMemos) get(thread string) *splitMemo {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[thread]
}

func (s *splitMemos) put(thread string, m *splitMemo) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.m[thread]; ok {
		s.files -= old.files
		delete(s.m, thread)
	}
	if m.files > splitMemoFiles/2 {
		return
	}
	if s.m == nil || s.files+m.files > splitMemoFiles {
		s.m, s.files = map[string]*splitMemo{}, 0
	}
	s.m[thread] = m
	s.files += m.files
}

// splitTree is splitCheckpointBody (a version-2 root): with memo, the
// split of an earlier checkpoint, it reuses what it can of it. It returns
// the memo of this split.
func splitTree(c *cairn.Checkpoint, memo *splitMemo) (root object, objs []object, refs []refChunk, next *splitMemo, err error) {
	return splitTreeCut(c, memo, func(path string, _ int) bool { return objLeafCut(path) })
}

// splitTreeCut is splitTree with leaves cut after an entry for which cut
// holds, given its path and n, the entries of the leaf up to and with it
// (objLeafCut for root versions 1 and 2, objPackLeafCut for packs). A cut
// that depends on n as well as the path still depends only on where the
// leaf starts and what it holds, which is what the memo's reuse needs.
func splitTreeCut(c *cairn.Checkpoint, memo *splitMemo, cut func(path string, n int) bool) (root object, objs []object, refs []refChunk, next *splitMemo, err error) {
	next = &splitMemo{byFirst: make(map[string]int), files: len(c.Files)}
	r := objRoot{version: objRootTree}
	seen := make(map[keys.Digest]bool)
	add := func(o object) keys.Digest {
		if !seen[o.digest] {
			seen[o.digest] = true
			objs = append(objs, o)
		}
		return o.digest
	}
	keySeen := make(map[string]struct{}, len(c.Files))
	var ks []objSortKey
	var firsts []int32
	for s := 0; s < len(c.Files); {
		var reuse *memoLeaf
		if memo != nil {
			if j, ok := memo.byFirst[c.Files[s].Path]; ok {
				m := &memo.leaves[j]
				// The leaf ends where it did if it ended at a cut or at
				// objLeafMax entries, or if the files end there too.
				end := s + m.n
				if end <= len(c.Files) && (m.atCut || m.n == objLeafMax || end == len(c.Files)) && objLeafEqual(m.leaf.data, c.Files[s:end]) {
					reuse = m
				}
			}
		}
		ml := memoLeaf{}
		if reuse != nil {
			ml.leaf, ml.n, ml.atCut = reuse.leaf, reuse.n, reuse.atCut
		} else {
			i := s
			for {
				ml.atCut = cut(c.Files[i].Path, i+1-s)
				if ml.atCut || i == len(c.Files)-1 || i+1-s == objLeafMax {
					break
				}
				i++
			}
			ml.n = i + 1 - s
			ml.leaf = objNewObject(objEncodeLeaf(c.Files[s : i+1]))
		}
		files := c.Files[s : s+ml.n]
		firsts = firsts[:0]
		for i := range files {
			if files[i].Kind != cairn.KindFile {
				continue
			}
			if _, ok := keySeen[files[i].BlobKey]; !ok {
				keySeen[files[i].BlobKey] = struct{}{}
				firsts = append(firsts, int32(i))
			}
		}
		ml.firsts = slices.Clone(firsts)
		switch {
		case reuse != nil && slices.Equal(firsts, reuse.firsts):
			ml.chunk = reuse.chunk
		case len(firsts) > 0:
			ks = ks[:0]
			for _, i := range firsts {
				k, err := objSortKeyOf(files[i].BlobKey)
				if err != nil {
					return object{}, nil, nil, nil, err
				}
				ks = append(ks, k)
			}
			slices.SortFunc(ks, objSortKey.compare)
			ks = slices.Compact(ks)
			ml.chunk = &refChunk{objEncodeRefChunk(ks), len(ks)}
		}
		r.leaves = append(r.leaves, objPart{digest: add(ml.leaf), n: ml.n})
		if ml.chunk != nil {
			refs = append(refs, *ml.chunk)
		}
		next.byFirst[files[0].Path] = len(next.leaves)
		next.leaves = append(next.leaves, ml)
		s += ml.n
	}
	if c.Conversation != nil {
		r.convPresent = true
		objConvChunks(c.Conversation, func(data []byte, n int) { r.conv = append(r.conv, objPart{digest: add(objNewObject(data)), n: n}) })
	}
	ks = ks[:0]
	for i := range c.Artifacts {
		if _, ok := keySeen[c.Artifacts[i].BlobKey]; ok {
			continue
		}
		k, err := objSortKeyOf(c.Artifacts[i].BlobKey)
		if err != nil {
			return object{}, nil, nil, nil, err
		}
		ks = append(ks, k)
	}
	slices.SortFunc(ks, objSortKey.compare)
	refs = objCutRefChunks(refs, slices.Compact(ks))
	for _, rc := range refs {
		r.refs = append(r.refs, objPart{digest: rc.digest, n: rc.n})
	}
	r.artifacts = c.Artifacts
	return objNewObject(objEncodeRoot(&r)), objs, refs, next, nil
}

// objLeafEqual reports whether files encode to exactly the leaf b, without
// encoding them.
func objLeafEqual(b []byte, files []cairn.Entry) bool {
	if len(b) < 2 || b[0] != objTypeLeaf || b[1] != objVersion {
		return false
	}
	b = b[2:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n != uint64(len(files)) {
		return false
	}
	b = b[k:]
	str := func(s string) bool {
		n, k := binary.Uvarint(b)
		if k <= 0 || n != uint64(len(s)) || len(b)-k < len(s) || string(b[k:k+len(s)]) != s {
			return false
		}
		b = b[k+len(s):]
		return true
	}
	for i := range files {
		f := &files[i]
		if !str(f.Path) || !str(string(f.Kind)) || !str(f.BlobKey) {
			return false
		}
		v, k := binary.Varint(b)
		if k <= 0 || v != f.Size {
			return false
		}
		b = b[k:]
	}
	return len(b) == 0
}

// refsFrom returns how the reference chunks of the leaves of the split of
// m, the first ones of its root, are made from their leaves (packref.go).
func (m *splitMemo) refsFrom() []refFrom {
	out := make([]refFrom, 0, len(m.leaves))
	for i := range m.leaves {
		if l := &m.leaves[i]; l.chunk != nil {
			out = append(out, refFrom{leaf: i, pick: pickBitmap(l.n, l.firsts)})
		}
	}
	return out
}

// prevLeaves returns, by the digest of each leaf of the split of m that
// prev (the thread's split before, nil for none) did not have, the leaf
// prev had starting at the same path: the version a patch of it is made
// against (packdelta.go).
func (m *splitMemo) prevLeaves(prev *splitMemo) map[keys.Digest]object {
	out := map[keys.Digest]object{}
	if prev == nil {
		return out
	}
	for path, i := range m.byFirst {
		if j, ok := prev.byFirst[path]; ok && prev.leaves[j].leaf.digest != m.leaves[i].leaf.digest {
			out[m.leaves[i].leaf.digest] = prev.leaves[j].leaf
		}
	}
	return out
}

// leafRefs returns how many reference chunks the leaves of the split of m
// have: the first ones of its root.
func (m *splitMemo) leafRefs() int {
	n := 0
	for i := range m.leaves {
		if m.leaves[i].chunk != nil {
			n++
		}
	}
	return n
}
