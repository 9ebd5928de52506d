package etcdstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"slices"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// Body objects of the capacity layout (version 2 of the checkpoint record;
// docs/design.md, "Capacity: what etcd keeps per checkpoint").
//
// A large checkpoint keeps its body in the bucket as immutable,
// content-addressed objects that checkpoints, threads and forks share, and
// keeps in etcd only its header, the digest of its root object and the digests
// of its reference chunks. This file is the pure codec of those objects: it
// splits a body into objects and assembles a body from them, and it does no
// I/O of its own.
//
// An object is stored under objPrefix followed by the 64 lower-case hex digits
// of the SHA-256 of its bytes, and it starts with a type byte and a version
// byte. There are four types:
//
//	leaf                'L' 1    count  count × entry
//	conversation chunk  'C' 1    bytes
//	root                'R' 1|2  leaves  conversation  references  artifacts
//	reference chunk     'K' 1    count  count × key33
//
// (Roots of versions 3 to 6 name these objects as members of packs: pack.go,
// packz.go, packref.go, packdelta.go, packrun.go.)
//
// Integers are uvarints (sizes: varints) in their shortest form; strings are
// a uvarint length and the bytes, kept byte for byte (invalid UTF-8 too). An
// entry is, as in the record codec of codec.go, path, kind, blobKey (three
// strings) and size (a varint). An artifact is artifactId, name, mimeType
// (strings), size (a varint), blobKey (a string) and createdAt (8 big-endian
// bytes of its IEEE 754 bits).
//
// A root lists the leaves (uvarint count, then per leaf its 32-byte digest and
// its uvarint entry count, 1..512), then the conversation (one byte: 0 for a
// nil conversation, 1 for a present one, then for a present one a uvarint
// count of chunks and per chunk its 32-byte digest and its uvarint length,
// 1..65536; an empty conversation is present with no chunks), then the
// reference chunks (uvarint count, then per chunk its 32-byte digest and its
// uvarint key count, 1..512), then the artifacts inline (uvarint count, then
// the artifacts). It does not hold the checkpoint's header (id, thread,
// parent, createdAt, reason, label, run), so a fork and its source share the
// root.
//
// The root's version says how its reference chunks divide the checkpoint's
// distinct blob keys; in both, each key is in exactly one chunk:
//
//   - version 1 (key order): the keys sorted, cut where a key's digest says
//     (objRefCut), the chunks in key order. A change of 1% of the keys of a
//     large checkpoint touches about as many chunks as keys, because the
//     changed keys are spread over the whole order.
//   - version 2 (tree order, written since): one chunk per leaf that has
//     keys of its own, in leaf order: the sorted distinct keys of the leaf's
//     file entries that no earlier leaf holds; then the artifact keys that
//     no leaf holds, sorted and cut as in version 1. A changed entry
//     rewrites the chunk of its own leaf, and of the leaf that next holds a
//     key it no longer does or no longer first.
//
// Readers accept both versions; a version-1 root stays valid as it was
// written.
//
// A reference chunk holds blob keys in 33 bytes each: one namespace byte (0 for
// sandbox-artifacts/sha256/, 1 for sandbox-files/sha256/) and the 32 digest
// bytes. Keys in that form sort as the key strings do, and a chunk lists them
// strictly increasing.
//
// Decoders are strict: shortest varints, counts bounded by what is left, no
// trailing bytes, and every count and length within the limits below; they
// return an error on any other input and never panic.
//
// Leaves hold the files in the order the checkpoint gives them (the contract
// keeps that order, so they are not sorted by path), cut where a hash of the
// path says (objLeafCut); conversation chunks are cut by a gear hash of the
// bytes (objConvCut); reference chunks follow the root's version. These cut
// rules are
// part of the format: two writers of the same body produce the same objects, which is what
// lets checkpoints share them. Readers do not check where the cuts fall: the
// digests already make a read return exactly what was split.

// objPrefix is the bucket prefix of body objects.
const objPrefix = "sandbox-meta/sha256/"

// The type bytes and the format version of body objects.
const (
	objVersion = 1
	// objRootTree is the version of a root whose reference chunks follow
	// its leaves (version 1: in key order).
	objRootTree = 2
	objTypeLeaf = 'L'
	objTypeConv = 'C'
	objTypeRoot = 'R'
	objTypeRefs = 'K'
)

const (
	// objLeafMax is the most entries a leaf holds.
	objLeafMax = 512
	// objLeafCutMask: a leaf ends after an entry whose path hash has these
	// bits all set (one entry in 64 on average).
	objLeafCutMask = 63

	// Conversation chunks are 4 KiB to 64 KiB, about 16 KiB on average: a
	// chunk ends at the first byte, at least objConvMin bytes in, where the
	// gear hash of the 64 bytes ending there is below objConvThreshold (a
	// chance of 1 in 12 KiB a byte).
	objConvMin       = 4 << 10
	objConvMax       = 64 << 10
	objConvWindow    = 64
	objConvThreshold = (1<<64 - 1) / (12 << 10)

	// objRefMax is the most keys a reference chunk holds; a chunk ends after
	// a key whose last digest byte is below objRefCutBelow (one key in 64).
	objRefMax      = 512
	objRefCutBelow = 4
	// objRefKeyLen is the length of a key in a reference chunk.
	objRefKeyLen = 1 + keys.DigestLen
)

var (
	// errObjDigest reports an object whose bytes do not hash to its key.
	errObjDigest = errors.New("object bytes do not match the object's digest")
	// errObjBlobKey reports a blob key of neither namespace.
	errObjBlobKey = errors.New("not a blob key")
)

// object is one body object: its bucket key, the digest the key names and its
// bytes.
type object struct {
	key    string
	digest keys.Digest
	data   []byte
}

func objNewObject(data []byte) object {
	d := keys.Digest(sha256.Sum256(data))
	return object{key: objectKey(d), digest: d, data: data}
}

// refChunk is a reference chunk and the number of blob keys it holds.
type refChunk struct {
	object
	n int
}

// objectKey returns the bucket key of the object with digest d.
func objectKey(d keys.Digest) string {
	var b [len(objPrefix) + 2*keys.DigestLen]byte
	copy(b[:], objPrefix)
	hex.Encode(b[len(objPrefix):], d[:])
	return string(b[:])
}

// objPart names a leaf (n entries) or a conversation chunk (n bytes) in a
// root.
type objPart struct {
	digest keys.Digest
	n      int
	// at is where the part is in a packed root (version 3): a member of a
	// pack; in roots of versions 1 and 2 it is zero and the part is an
	// object of its own.
	at partLoc
}

// objRoot is a decoded root object.
type objRoot struct {
	// version is the root's version: objVersion (reference chunks in key
	// order) or objRootTree (in leaf order); zero encodes as objVersion.
	version     byte
	leaves      []objPart
	convPresent bool
	conv        []objPart
	// refs are the reference chunks (n: their key counts), in key order or
	// in leaf order, as version says.
	refs      []objPart
	artifacts []cairn.Artifact
	// packs are the packs whose members a packed root (version 3) names,
	// each once; nil for versions 1 and 2.
	packs []keys.Digest
}

// allDigests returns the distinct digests of every object r names: leaves,
// conversation chunks and reference chunks, in that order.
func (r *objRoot) allDigests() []keys.Digest {
	seen := make(map[keys.Digest]bool, len(r.leaves)+len(r.conv)+len(r.refs))
	var out []keys.Digest
	for _, parts := range [][]objPart{r.leaves, r.conv, r.refs} {
		for _, p := range parts {
			if !seen[p.digest] {
				seen[p.digest] = true
				out = append(out, p.digest)
			}
		}
	}
	return out
}

// refDigests returns the digests of r's reference chunks, in order.
func (r *objRoot) refDigests() []keys.Digest {
	out := make([]keys.Digest, len(r.refs))
	for i, p := range r.refs {
		out[i] = p.digest
	}
	return out
}

// objectKeys returns the distinct keys of the leaves and conversation chunks
// that r names, leaves first, in the order r names them: what a reader may
// fetch in parallel before it assembles the body.
func (r *objRoot) objectKeys() []string {
	seen := make(map[keys.Digest]bool, len(r.leaves)+len(r.conv))
	var out []string
	for _, parts := range [][]objPart{r.leaves, r.conv} {
		for _, p := range parts {
			if !seen[p.digest] {
				seen[p.digest] = true
				out = append(out, objectKey(p.digest))
			}
		}
	}
	return out
}

// objLeafCut reports whether a leaf ends after an entry with this path: when
// the first 8 bytes of the path's SHA-256, read as a big-endian uint64, have
// their low 6 bits set (that is, byte 7 of the digest does). The cut depends
// on the path alone, so changing an entry's blob key or size rewrites only its
// leaf, and inserting or removing an entry rewrites its leaf and at most
// merges or splits it with a neighbour. A run of objLeafMax entries without a
// cut is cut there (a run that long has probability about e^-8).
func objLeafCut(path string) bool {
	h := sha256.Sum256([]byte(path))
	return binary.BigEndian.Uint64(h[:8])&objLeafCutMask == objLeafCutMask
}

// objGear is the gear table of the conversation chunker: entry i is the first
// 8 bytes, big-endian, of SHA-256("cairn/gear/" + byte i). It is derived, not
// random, so every writer cuts the same chunks.
var objGear = func() (t [256]uint64) {
	for i := range t {
		h := sha256.Sum256(append([]byte("cairn/gear/"), byte(i)))
		t[i] = binary.BigEndian.Uint64(h[:8])
	}
	return t
}()

// objConvCut returns the length of the conversation chunk that starts at
// b[0]. With h(i) the gear hash of the 64 bytes ending at b[i],
//
//	h(i) = Σ_{k=0}^{63} objGear[b[i-k]] << k  (mod 2^64)
//
// the chunk ends after the first i ≥ objConvMin-1 with h(i) < objConvThreshold,
// after objConvMax bytes if there is none, or at the end of b. The cut depends
// only on the 64 bytes before it and on where the chunk started, so a
// conversation that grows at the end keeps every chunk but its last.
func objConvCut(b []byte) int {
	if len(b) <= objConvMin {
		return len(b)
	}
	limit := min(len(b), objConvMax)
	var h uint64
	// Bytes before the window of the first candidate shift out of h before
	// it is tested: start hashing 64 bytes before it.
	for _, c := range b[objConvMin-objConvWindow : objConvMin-1] {
		h = h<<1 + objGear[c]
	}
	for i := objConvMin - 1; i < limit; i++ {
		h = h<<1 + objGear[b[i]]
		if h < objConvThreshold {
			return i + 1
		}
	}
	return limit
}

// objConvChunks cuts a conversation into chunks (objConvCut) and calls fn
// with each chunk's object, encoded, and the bytes of the conversation it
// holds.
func objConvChunks(conv []byte, fn func(data []byte, n int)) {
	for rest := conv; len(rest) > 0; {
		n := objConvCut(rest)
		data := make([]byte, 2+n)
		data[0], data[1] = objTypeConv, objVersion
		copy(data[2:], rest[:n])
		fn(data, n)
		rest = rest[n:]
	}
}

// objRefCut reports whether a reference chunk ends after a key with digest d.
func objRefCut(d *keys.Digest) bool { return d[keys.DigestLen-1] < objRefCutBelow }

// splitCheckpointBody splits the body of c (files, conversation, artifacts)
// into its root (version 2), the leaves and conversation chunks the root
// names (each distinct object once, leaves first, in the order the root names
// them), and the reference chunks of c's distinct blob keys in the order the
// root names them (following the leaves). The result is a function of the
// body alone. It fails only on a blob key of neither namespace, which a
// validated checkpoint does not hold.
func splitCheckpointBody(c *cairn.Checkpoint) (root object, objs []object, refs []refChunk, err error) {
	return splitCheckpointBodyAt(c, objRootTree)
}

// splitCheckpointBodyAt is splitCheckpointBody with a root of the given
// version: objRootTree (splitTree), or objVersion (reference chunks in key
// order, as written before version 2).
func splitCheckpointBodyAt(c *cairn.Checkpoint, version byte) (root object, objs []object, refs []refChunk, err error) {
	if version == objRootTree {
		root, objs, refs, _, err = splitTree(c, nil)
		return root, objs, refs, err
	}
	refs, err = splitRefChunks(c)
	if err != nil {
		return object{}, nil, nil, err
	}
	r := objRoot{version: version}
	seen := make(map[keys.Digest]bool)
	add := func(data []byte) keys.Digest {
		o := objNewObject(data)
		if !seen[o.digest] {
			seen[o.digest] = true
			objs = append(objs, o)
		}
		return o.digest
	}
	start := 0
	for i := range c.Files {
		if i == len(c.Files)-1 || i+1-start == objLeafMax || objLeafCut(c.Files[i].Path) {
			r.leaves = append(r.leaves, objPart{digest: add(objEncodeLeaf(c.Files[start : i+1])), n: i + 1 - start})
			start = i + 1
		}
	}
	if c.Conversation != nil {
		r.convPresent = true
		objConvChunks(c.Conversation, func(data []byte, n int) { r.conv = append(r.conv, objPart{digest: add(data), n: n}) })
	}
	for _, rc := range refs {
		r.refs = append(r.refs, objPart{digest: rc.digest, n: rc.n})
	}
	r.artifacts = c.Artifacts
	return objNewObject(objEncodeRoot(&r)), objs, refs, nil
}

// splitRefChunks cuts the distinct blob keys of c (those of BlobKeys), sorted,
// into reference chunks: a chunk ends after a key for which objRefCut holds,
// after objRefMax keys, or at the last key. Each key is in exactly one chunk,
// and the cuts depend on the keys alone, so a change of a few keys rewrites
// only the chunks that hold them (and merges or splits at most a neighbour).
func splitRefChunks(c *cairn.Checkpoint) ([]refChunk, error) {
	ks := make([]objSortKey, 0, len(c.Files)+len(c.Artifacts))
	for i := range c.Files {
		if c.Files[i].Kind == cairn.KindFile {
			k, err := objSortKeyOf(c.Files[i].BlobKey)
			if err != nil {
				return nil, err
			}
			ks = append(ks, k)
		}
	}
	for i := range c.Artifacts {
		k, err := objSortKeyOf(c.Artifacts[i].BlobKey)
		if err != nil {
			return nil, err
		}
		ks = append(ks, k)
	}
	slices.SortFunc(ks, objSortKey.compare)
	return objCutRefChunks(nil, slices.Compact(ks)), nil
}

// objCutRefChunks appends to out the reference chunks of ks (sorted,
// distinct): a chunk ends after a key for which objRefCut holds, after
// objRefMax keys, or at the last key.
func objCutRefChunks(out []refChunk, ks []objSortKey) []refChunk {
	from := 0 // the first key of the chunk being filled
	for i := range ks {
		if n := i + 1 - from; i == len(ks)-1 || n == objRefMax || byte(ks[i].w[3]) < objRefCutBelow { // objRefCut
			out = append(out, refChunk{objEncodeRefChunk(ks[from : i+1]), n})
			from = i + 1
		}
	}
	return out
}

// objEncodeRefChunk returns the reference chunk of ks (sorted, distinct, 1 to
// objRefMax of them).
func objEncodeRefChunk(ks []objSortKey) object {
	data := make([]byte, 0, 2+binary.MaxVarintLen64+len(ks)*objRefKeyLen)
	data = append(data, objTypeRefs, objVersion)
	data = binary.AppendUvarint(data, uint64(len(ks)))
	for _, k := range ks {
		data = append(data, k.ns)
		for _, w := range k.w {
			data = binary.BigEndian.AppendUint64(data, w)
		}
	}
	return objNewObject(data)
}

// objSortKeyOf returns the sort key of blob key k.
func objSortKeyOf(k string) (objSortKey, error) {
	shard, d, ok := keys.BlobShard(k)
	if !ok {
		return objSortKey{}, fmt.Errorf("%w: %q", errObjBlobKey, k)
	}
	sk := objSortKey{ns: objNamespace(shard)}
	for i := range sk.w {
		sk.w[i] = binary.BigEndian.Uint64(d[8*i:])
	}
	return sk, nil
}

// objSortKey is a blob key as its namespace byte and its digest in four
// big-endian words, which compare in the key's byte order faster than the key
// strings do.
type objSortKey struct {
	ns byte
	w  [4]uint64
}

func (a objSortKey) compare(b objSortKey) int {
	if a.ns != b.ns {
		return int(a.ns) - int(b.ns)
	}
	for i := range a.w {
		if a.w[i] != b.w[i] {
			if a.w[i] < b.w[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// objNamespace maps a blob reference shard to its namespace byte: shards are
// numbered artifacts first, so the upper half is sandbox-files/.
func objNamespace(shard byte) byte {
	if shard >= keys.NumShards/2 {
		return 1
	}
	return 0
}

func objEncodeLeaf(files []cairn.Entry) []byte {
	size := 2 + objUvarintLen(uint64(len(files)))
	for i := range files {
		f := &files[i]
		size += objUvarintLen(uint64(len(f.Path))) + len(f.Path) + objUvarintLen(uint64(len(f.Kind))) + len(f.Kind) +
			objUvarintLen(uint64(len(f.BlobKey))) + len(f.BlobKey) + objUvarintLen(uint64(f.Size<<1^f.Size>>63))
	}
	e := encoder{b: make([]byte, 0, size)}
	e.b = append(e.b, objTypeLeaf, objVersion)
	e.uint(uint64(len(files)))
	for i := range files {
		f := &files[i]
		e.str(f.Path)
		e.str(string(f.Kind))
		e.str(f.BlobKey)
		e.int(f.Size)
	}
	return e.b
}

// objUvarintLen is the length of the uvarint encoding of x.
func objUvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// objHeader checks an object's type and version bytes and returns a decoder
// of the rest.
func objHeader(b []byte, typ byte) (decoder, bool) {
	if len(b) < 2 || b[0] != typ || b[1] != objVersion {
		return decoder{}, false
	}
	return decoder{b: b[2:]}, true
}

// objLeafCount returns the entry count a leaf declares.
func objLeafCount(b []byte) (int, error) {
	d, ok := objHeader(b, objTypeLeaf)
	if !ok {
		return 0, errCodec
	}
	n := d.count(4) // 3 strings and a varint: at least 4 bytes
	if d.err != nil || n < 1 || n > objLeafMax {
		return 0, errCodec
	}
	return n, nil
}

// objDecodeLeafInto decodes a leaf of exactly len(dst) entries into dst. It
// allocates one string for all the leaf's strings.
func objDecodeLeafInto(b []byte, dst []cairn.Entry) error {
	n, err := objLeafCount(b)
	if err != nil || n != len(dst) {
		return errCodec
	}
	d, _ := objHeader(b, objTypeLeaf)
	d.uint()
	d.text = string(d.b)
	d.base = len(d.b)
	for i := range dst {
		dst[i] = cairn.Entry{Path: d.str(), Kind: cairn.EntryKind(d.str()), BlobKey: d.str(), Size: d.int()}
	}
	if d.err != nil || len(d.b) != 0 {
		return errCodec
	}
	return nil
}

// objDecodeLeaf decodes a leaf.
func objDecodeLeaf(b []byte) ([]cairn.Entry, error) {
	n, err := objLeafCount(b)
	if err != nil {
		return nil, err
	}
	out := make([]cairn.Entry, n)
	if err := objDecodeLeafInto(b, out); err != nil {
		return nil, err
	}
	return out, nil
}

func objEncodeRoot(r *objRoot) []byte {
	e := encoder{b: make([]byte, 0, 16+(keys.DigestLen+3)*(len(r.leaves)+len(r.conv)+len(r.refs))+len(r.artifacts)*200)}
	version := r.version
	if version == 0 {
		version = objVersion
	}
	e.b = append(e.b, objTypeRoot, version)
	packed := packedVersion(version)
	var packIndex map[keys.Digest]int
	if packed {
		packIndex = make(map[keys.Digest]int, len(r.packs))
		e.uint(uint64(len(r.packs)))
		for i, d := range r.packs {
			packIndex[d] = i
			e.b = append(e.b, d[:]...)
		}
	}
	var runIndex map[runPlace]int
	if version >= objRootRuns {
		// The run table: each run once, in the order the places below
		// first name them (packrun.go).
		runIndex = map[runPlace]int{}
		var runs []runPlace
		use := func(l partLoc) {
			if _, ok := runIndex[l.run()]; !ok {
				runIndex[l.run()] = len(runs)
				runs = append(runs, l.run())
			}
		}
		for _, p := range r.leaves {
			use(p.at)
			if p.at.delta != nil {
				use(*p.at.delta)
			}
		}
		for _, p := range r.conv {
			use(p.at)
		}
		for _, p := range r.refs {
			if p.at.from == 0 {
				use(p.at)
			}
		}
		e.uint(uint64(len(runs)))
		for _, rp := range runs {
			e.uint(uint64(packIndex[rp.pack]))
			e.uint(uint64(rp.off))
			e.uint(uint64(rp.size))
			e.uint(uint64(rp.raw))
		}
	}
	loc := func(l partLoc) {
		if runIndex != nil {
			// A member of a pack of version 1 or 2, named from a
			// root of version 3 to 5, is its run.
			msize := l.msize
			if msize == 0 {
				msize = l.run().runLen()
			}
			e.uint(uint64(runIndex[l.run()]))
			e.uint(uint64(l.moff))
			e.uint(uint64(msize))
			return
		}
		e.uint(uint64(packIndex[l.pack]))
		e.uint(uint64(l.off))
		e.uint(uint64(l.size))
		if version >= objRootCompressed {
			e.uint(uint64(l.raw))
		}
	}
	parts := func(ps []objPart, refs bool) {
		e.uint(uint64(len(ps)))
		for _, p := range ps {
			e.b = append(e.b, p.digest[:]...)
			e.uint(uint64(p.n))
			if refs && version >= objRootDerived {
				// 1 + the leaf a chunk is made from and its bitmap, or 0
				// and the member's place (packref.go).
				e.uint(uint64(p.at.from))
				if p.at.from > 0 {
					e.b = append(e.b, p.at.pick...)
					continue
				}
			}
			if packed {
				loc(p.at)
			}
		}
	}
	leaves := func() {
		if version < objRootDerived {
			parts(r.leaves, false)
			return
		}
		// Each leaf's place, then 0 for a leaf stored whole, or 1 and
		// the place of the base its patch applies to (packdelta.go).
		e.uint(uint64(len(r.leaves)))
		for _, p := range r.leaves {
			e.b = append(e.b, p.digest[:]...)
			e.uint(uint64(p.n))
			loc(p.at)
			if p.at.delta == nil {
				e.b = append(e.b, 0)
				continue
			}
			e.b = append(e.b, 1)
			loc(*p.at.delta)
		}
	}
	leaves()
	if !r.convPresent {
		e.b = append(e.b, 0)
	} else {
		e.b = append(e.b, 1)
		parts(r.conv, false)
	}
	parts(r.refs, true)
	e.artifacts(r.artifacts)
	return e.b
}

// places is what the places of a packed root are decoded against: its
// packs, whether a place gives the member's uncompressed size (roots of
// versions 4 and 5) and, in a root of version 6, its run table and how
// many of its runs the places decoded so far name (packrun.go).
type places struct {
	packs []keys.Digest
	raw   bool
	runs  []runPlace
	// run says the root has a run table; used is how many of its runs,
	// the first ones, places have named.
	run  bool
	used int
}

// min is the fewest bytes a place takes.
func (pl *places) min() int {
	switch {
	case pl.run:
		return 3
	case pl.raw:
		return 4
	}
	return 3
}

// objDecodeRuns decodes the run table of a root of version 6: a uvarint
// count, then per run its pack index, the offset and stored size of its
// bytes in the pack and its size uncompressed: 0 (stored as it is) or
// 2..objMemberMax. No run is listed twice.
func objDecodeRuns(d *decoder, packs []keys.Digest) []runPlace {
	out := make([]runPlace, d.count(4))
	seen := make(map[runPlace]bool, len(out))
	for i := range out {
		pi, off, size, raw := d.uint(), d.uint(), d.uint(), d.uint()
		if d.err != nil || pi >= uint64(len(packs)) || off > objPackMax || size < 2 || size > objPackMax-off ||
			raw == 1 || raw > objMemberMax {
			d.fail()
			return nil
		}
		out[i] = runPlace{pack: packs[pi], off: int(off), size: int(size), raw: int(raw)}
		if seen[out[i]] {
			d.fail()
			return nil
		}
		seen[out[i]] = true
	}
	return out
}

// objParts decodes a list of (digest, n) with 1 ≤ n ≤ max, each followed,
// when pl is not nil (a packed root), by its place (objLoc).
func objParts(d *decoder, max uint64, pl *places) []objPart {
	return objPartsFrom(d, max, pl, nil)
}

// objPartsFrom is objParts for the reference chunks of a root of version 5
// or 6 when leaves is not nil: after its digest and count, each part gives
// 1 + the index in leaves of the leaf it is made from and the bitmap of
// that leaf's entries (validPick), or 0 and then its place as in objParts.
func objPartsFrom(d *decoder, max uint64, pl *places, leaves []objPart) []objPart {
	min := keys.DigestLen + 1
	switch {
	case leaves != nil:
		min += 2
	case pl != nil:
		min += pl.min()
	}
	out := make([]objPart, d.count(min))
	for i := range out {
		if out[i].digest, out[i].n = objDigestCount(d, max); d.err != nil {
			return nil
		}
		if leaves != nil {
			from := d.uint()
			if d.err != nil || from > uint64(len(leaves)) {
				d.fail()
				return nil
			}
			if from > 0 {
				base := leaves[from-1] // a copy: the part does not keep the root's leaves
				w := (base.n + 7) / 8
				if len(d.b) < w || !validPick(string(d.b[:w]), base.n, out[i].n) {
					d.fail()
					return nil
				}
				out[i].at = partLoc{from: int(from), pick: string(d.b[:w]), base: &base}
				d.b = d.b[w:]
				continue
			}
		}
		if pl != nil {
			out[i].at = objLoc(d, pl)
			if d.err != nil {
				return nil
			}
		}
	}
	return out
}

// objLoc decodes a member's place in a packed root: its pack index, offset
// and size and, in roots of versions 4 and 5, its uncompressed size: 0
// (stored as it is) or 2..objMemberMax. In a root of version 6 it is the
// index of its run, which is at most the number of runs named so far (the
// table lists runs in the order places first name them), and its offset
// and size (at least 2) within the run's bytes uncompressed.
func objLoc(d *decoder, pl *places) partLoc {
	if pl.run {
		ri, moff, msize := d.uint(), d.uint(), d.uint()
		if d.err != nil || ri >= uint64(len(pl.runs)) || ri > uint64(pl.used) {
			d.fail()
			return partLoc{}
		}
		rp := pl.runs[ri]
		if n := uint64(rp.runLen()); msize < 2 || msize > n || moff > n-msize {
			d.fail()
			return partLoc{}
		}
		if ri == uint64(pl.used) {
			pl.used++
		}
		return partLoc{pack: rp.pack, off: rp.off, size: rp.size, raw: rp.raw, moff: int(moff), msize: int(msize)}
	}
	pi, off, size := d.uint(), d.uint(), d.uint()
	if d.err != nil || pi >= uint64(len(pl.packs)) || off > objPackMax || size < 2 || size > objPackMax-off {
		d.fail()
		return partLoc{}
	}
	l := partLoc{pack: pl.packs[pi], off: int(off), size: int(size)}
	if pl.raw {
		n := d.uint()
		if d.err != nil || n == 1 || n > objMemberMax {
			d.fail()
			return partLoc{}
		}
		l.raw = int(n)
	}
	return l
}

// objDigestCount decodes a part's 32-byte digest and its count, 1..max.
func objDigestCount(d *decoder, max uint64) (keys.Digest, int) {
	var dg keys.Digest
	if len(d.b) < keys.DigestLen {
		d.fail()
		return dg, 0
	}
	copy(dg[:], d.b)
	d.b = d.b[keys.DigestLen:]
	n := d.uint()
	if d.err == nil && (n < 1 || n > max) {
		d.fail()
	}
	return dg, int(n)
}

// objDeltaLeaves decodes the leaves of a root of version 5 or 6: each a
// digest, an entry count (1..objLeafMax) and its place, then 0 for a leaf
// stored whole, or 1 and the place of its patch's base (packdelta.go).
func objDeltaLeaves(d *decoder, pl *places) []objPart {
	out := make([]objPart, d.count(keys.DigestLen+2+pl.min()))
	for i := range out {
		if out[i].digest, out[i].n = objDigestCount(d, objLeafMax); d.err != nil {
			return nil
		}
		out[i].at = objLoc(d, pl)
		if d.err != nil || len(d.b) == 0 || d.b[0] > 1 {
			d.fail()
			return nil
		}
		patched := d.b[0] == 1
		d.b = d.b[1:]
		if patched {
			base := objLoc(d, pl)
			if d.err != nil {
				return nil
			}
			out[i].at.delta = &base
		}
	}
	return out
}

// objDecodeRoot decodes a root object of any version (1 to 6).
func objDecodeRoot(b []byte) (objRoot, error) {
	if len(b) < 2 || b[0] != objTypeRoot || b[1] < objVersion || b[1] > objRootRuns {
		return objRoot{}, errCodec
	}
	d := decoder{b: b[2:]}
	r := objRoot{version: b[1]}
	var pl *places
	if r.packed() {
		r.packs = make([]keys.Digest, d.count(keys.DigestLen))
		for i := range r.packs {
			copy(r.packs[i][:], d.b)
			d.b = d.b[keys.DigestLen:]
		}
		if d.err != nil || !distinctDigests(r.packs) {
			return objRoot{}, errCodec
		}
		pl = &places{packs: r.packs, raw: r.version >= objRootCompressed}
		if r.version >= objRootRuns {
			pl.run = true
			if pl.runs = objDecodeRuns(&d, r.packs); d.err != nil {
				return objRoot{}, errCodec
			}
		}
	}
	if r.version >= objRootDerived {
		r.leaves = objDeltaLeaves(&d, pl)
	} else {
		r.leaves = objParts(&d, objLeafMax, pl)
	}
	if d.err != nil || len(d.b) == 0 {
		return objRoot{}, errCodec
	}
	switch d.b[0] {
	case 0:
		d.b = d.b[1:]
	case 1:
		d.b = d.b[1:]
		r.convPresent = true
		r.conv = objParts(&d, objConvMax, pl)
	default:
		return objRoot{}, errCodec
	}
	if d.err != nil {
		return objRoot{}, errCodec
	}
	var leaves []objPart
	if r.version >= objRootDerived {
		leaves = r.leaves
		if leaves == nil {
			leaves = []objPart{}
		}
	}
	r.refs = objPartsFrom(&d, objRefMax, pl, leaves)
	if d.err != nil || pl != nil && pl.used != len(pl.runs) {
		return objRoot{}, errCodec
	}
	r.artifacts = make([]cairn.Artifact, d.count(minArtifactBytes))
	if len(d.b) > 0 {
		d.text = string(d.b)
		d.base = len(d.b)
	}
	for i := range r.artifacts {
		r.artifacts[i] = d.artifact()
	}
	if d.err != nil || len(d.b) != 0 {
		return objRoot{}, errCodec
	}
	return r, nil
}

// objError names the object an error is about.
func objError(d keys.Digest, err error) error {
	return fmt.Errorf("body object %s: %w", objectKey(d), err)
}

// objFetchObject fetches the object with digest d and verifies that its bytes
// hash to its key.
func objFetchObject(fetch func(key string) ([]byte, error), d keys.Digest) ([]byte, error) {
	b, err := fetch(objectKey(d))
	if err != nil {
		return nil, objError(d, err)
	}
	if sha256.Sum256(b) != d {
		return nil, objError(d, errObjDigest)
	}
	return b, nil
}

// objFetcher fetches objects by digest, each at most once, and verifies that
// their bytes hash to their key.
type objFetcher struct {
	fetch func(key string) ([]byte, error)
	got   map[keys.Digest][]byte
}

func (f *objFetcher) get(d keys.Digest) ([]byte, error) {
	if b, ok := f.got[d]; ok {
		return b, nil
	}
	b, err := objFetchObject(f.fetch, d)
	if err != nil {
		return nil, err
	}
	if f.got == nil {
		f.got = make(map[keys.Digest][]byte)
	}
	f.got[d] = b
	return b, nil
}

// assembleCheckpointBody reads the body whose root has digest root: it
// fetches the root and every leaf and conversation chunk it names (each
// distinct object once; fetch may serve them from a cache, or from fetches
// started in parallel with the root's objectKeys), verifies that each object's
// bytes hash to its key, and decodes them, checking every type, version, count
// and length. It returns exactly the files, conversation (nil when it was
// nil) and artifacts that splitCheckpointBody was given, or an error that
// names the object that is missing or wrong. Files and artifacts are never
// nil. Memory is allocated in proportion to the bytes fetched, never to counts
// an object merely declares.
func assembleCheckpointBody(root keys.Digest, fetch func(key string) ([]byte, error)) (files []cairn.Entry, conv json.RawMessage, artifacts []cairn.Artifact, err error) {
	f := objFetcher{fetch: fetch}
	b, err := f.get(root)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := objDecodeRoot(b)
	if err != nil {
		return nil, nil, nil, objError(root, err)
	}
	return assembleBody(&r, f.get)
}

// objDecodeParallel is the fewest leaves a body decodes on more than one
// core: below it, starting the goroutines costs more than they save.
const objDecodeParallel = 16

// assembleBody decodes the body that root r names. get returns the bytes of
// each leaf and conversation chunk r names, verified against its digest
// (assembleBody hashes nothing), or an error; it is called from one
// goroutine, once per part in the order r names them. assembleBody checks
// every type, version, count and length and decodes the leaves straight into
// the result, on every core when there are many; it returns exactly the
// files, conversation (nil when it was nil) and artifacts that were split, or
// an error naming the part that is missing or wrong, and then no files.
// Files and artifacts are never nil. Memory is allocated in proportion to the
// bytes get returns, never to counts a part merely declares.
func assembleBody(r *objRoot, get func(d keys.Digest) ([]byte, error)) (files []cairn.Entry, conv json.RawMessage, artifacts []cairn.Artifact, err error) {
	leaves := make([][]byte, len(r.leaves))
	at := make([]int, len(r.leaves))
	total := 0
	for i, p := range r.leaves {
		if leaves[i], err = get(p.digest); err != nil {
			return nil, nil, nil, err
		}
		if n, err := objLeafCount(leaves[i]); err != nil || n != p.n {
			return nil, nil, nil, objError(p.digest, errCodec)
		}
		at[i] = total
		total += p.n
	}
	files = make([]cairn.Entry, total)
	decode := func(i int) error {
		p := r.leaves[i]
		if err := objDecodeLeafInto(leaves[i], files[at[i]:at[i]+p.n]); err != nil {
			return objError(p.digest, err)
		}
		return nil
	}
	if par := runtime.GOMAXPROCS(0); par > 1 && len(leaves) >= objDecodeParallel {
		err = forEach(context.Background(), len(leaves), par, func(_ context.Context, i int) error { return decode(i) })
	} else {
		for i := range leaves {
			if err = decode(i); err != nil {
				break
			}
		}
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if r.convPresent {
		chunks := make([][]byte, len(r.conv))
		total := 0
		for i, p := range r.conv {
			if chunks[i], err = get(p.digest); err != nil {
				return nil, nil, nil, err
			}
			if _, ok := objHeader(chunks[i], objTypeConv); !ok || len(chunks[i])-2 != p.n {
				return nil, nil, nil, objError(p.digest, errCodec)
			}
			total += p.n
		}
		conv = make(json.RawMessage, 0, total)
		for _, c := range chunks {
			conv = append(conv, c[2:]...)
		}
	}
	return files, conv, r.artifacts, nil
}

// objRefKey is a blob key as a reference chunk holds it.
type objRefKey [objRefKeyLen]byte

func (k *objRefKey) String() string {
	p := cairn.ArtifactBlobPrefix
	if k[0] == 1 {
		p = cairn.FileBlobPrefix
	}
	return p + hex.EncodeToString(k[1:])
}

// objDecodeRefKeys decodes a reference chunk into its keys, which it checks are
// of a known namespace and strictly increasing.
func objDecodeRefKeys(b []byte) ([]objRefKey, error) {
	d, ok := objHeader(b, objTypeRefs)
	if !ok {
		return nil, errCodec
	}
	n := d.count(objRefKeyLen)
	if d.err != nil || n < 1 || n > objRefMax || len(d.b) != n*objRefKeyLen {
		return nil, errCodec
	}
	out := make([]objRefKey, n)
	for i := range out {
		copy(out[i][:], d.b[i*objRefKeyLen:])
		if out[i][0] > 1 || i > 0 && bytes.Compare(out[i-1][:], out[i][:]) >= 0 {
			return nil, errCodec
		}
	}
	return out, nil
}

// decodeRefChunk decodes a reference chunk into its blob keys, in sorted
// order.
func decodeRefChunk(b []byte) ([]string, error) {
	ks, err := objDecodeRefKeys(b)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ks))
	for i := range ks {
		out[i] = ks[i].String()
	}
	return out, nil
}

// refListing is the reference chunks one live checkpoint lists: their
// digests in the order its root names them, and whether that order is key
// order (a version-1 root) or leaf order (version 2).
type refListing struct {
	chunks   []keys.Digest
	keyOrder bool
}

// countListings computes exact blob reference counts from the reference
// chunk lists of the live checkpoints (one listing per checkpoint). A key's
// count is the number of listings that name the chunk holding it, summed
// over the chunks that hold it; it is exact because within a listing a key
// is in exactly one chunk. For a listing in key order that is checked here
// (its chunks must hold strictly increasing keys). For a listing in leaf
// order the writer's split makes it so (each chunk holds only keys that no
// earlier chunk of the checkpoint holds); checking it here would cost a set
// of every key of every distinct root, the work this layout exists to
// avoid, so the walk does not, and Verify with Objects does (a key listed
// twice would be counted high, which keeps its blob, never low). Each
// distinct chunk is fetched once, in digest order, and verified as
// assembleCheckpointBody verifies objects. The result is sorted by key and
// holds only keys with a count above zero.
func countListings(listings []refListing, fetch func(key string) ([]byte, error)) ([]cairn.BlobReference, error) {
	listed := make(map[keys.Digest]int)
	var distinct []keys.Digest
	for _, l := range listings {
		for _, d := range l.chunks {
			if listed[d] == 0 {
				distinct = append(distinct, d)
			}
			listed[d]++
		}
	}
	slices.SortFunc(distinct, func(a, b keys.Digest) int { return bytes.Compare(a[:], b[:]) })
	type span struct{ first, last objRefKey }
	spans := make(map[keys.Digest]span, len(distinct))
	counts := make(map[objRefKey]int)
	for _, d := range distinct {
		b, err := objFetchObject(fetch, d)
		if err != nil {
			return nil, err
		}
		ks, err := objDecodeRefKeys(b)
		if err != nil {
			return nil, objError(d, err)
		}
		spans[d] = span{ks[0], ks[len(ks)-1]}
		for _, k := range ks {
			counts[k] += listed[d]
		}
	}
	for i, l := range listings {
		if !l.keyOrder {
			continue
		}
		for j := 1; j < len(l.chunks); j++ {
			if a, b := spans[l.chunks[j-1]].last, spans[l.chunks[j]].first; bytes.Compare(a[:], b[:]) >= 0 {
				return nil, fmt.Errorf("%w: listing %d: reference chunks %s and %s are out of order or overlap",
					errCodec, i, objectKey(l.chunks[j-1]), objectKey(l.chunks[j]))
			}
		}
	}
	sorted := make([]objRefKey, 0, len(counts))
	for k := range counts {
		sorted = append(sorted, k)
	}
	slices.SortFunc(sorted, func(a, b objRefKey) int { return bytes.Compare(a[:], b[:]) })
	out := make([]cairn.BlobReference, len(sorted))
	for i := range sorted {
		out[i] = cairn.BlobReference{Key: sorted[i].String(), References: counts[sorted[i]]}
	}
	return out, nil
}
