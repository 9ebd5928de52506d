package etcdstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// Checkpoint bodies and instance records are stored in a small binary
// encoding rather than JSON: every string field is kept byte for byte (JSON
// would replace invalid UTF-8, which the contract lets paths, names and labels
// hold), the conversation is kept byte for byte (encoding/json would compact
// it), and decoding 20,000 entries costs a few milliseconds.
//
// The encoding is a version byte followed by fields in a fixed order. A string
// or byte slice is a uvarint length and the bytes; a float64 is 8 big-endian
// bytes of its IEEE 754 bits; an integer is a varint.

const codecVersion = 1

var errCodec = errors.New("malformed record")

type encoder struct{ b []byte }

func (e *encoder) str(s string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) raw(b []byte) {
	if b == nil {
		e.b = append(e.b, 0)
		return
	}
	e.b = append(e.b, 1)
	e.b = binary.AppendUvarint(e.b, uint64(len(b)))
	e.b = append(e.b, b...)
}

func (e *encoder) f64(f float64) { e.b = binary.BigEndian.AppendUint64(e.b, math.Float64bits(f)) }
func (e *encoder) int(n int64)   { e.b = binary.AppendVarint(e.b, n) }
func (e *encoder) uint(n uint64) { e.b = binary.AppendUvarint(e.b, n) }

type decoder struct {
	b   []byte
	err error
	// text, when set, is string(b) as it was when base was len(b): str
	// slices its strings out of it instead of allocating each.
	text string
	base int
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errCodec
	}
	d.b = nil
}

// A varint whose last byte is 0 (other than 0 itself) is a longer form of a
// shorter one: the decoder refuses it, so that every value has exactly one
// encoding.
func (d *decoder) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n > 1 && d.b[n-1] == 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 || n > 1 && d.b[n-1] == 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) str() string {
	if d.text == "" {
		return string(d.bytes())
	}
	b := d.bytes()
	if d.err != nil {
		return ""
	}
	end := d.base - len(d.b)
	return d.text[end-len(b) : end]
}

func (d *decoder) raw() []byte {
	if len(d.b) == 0 {
		d.fail()
		return nil
	}
	present := d.b[0]
	d.b = d.b[1:]
	switch present {
	case 0:
		return nil
	case 1:
		return bytes.Clone(d.bytes())
	}
	d.fail()
	return nil
}

func (d *decoder) f64() float64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	f := math.Float64frombits(binary.BigEndian.Uint64(d.b))
	d.b = d.b[8:]
	return f
}

// count reads a list length, refusing one that cannot fit in what is left.
func (d *decoder) count(minItem int) int {
	n := d.uint()
	if d.err != nil || n > uint64(len(d.b)/minItem) {
		d.fail()
		return 0
	}
	return int(n)
}

// encodeCheckpoint returns the stored form of c. The conversation comes
// first, so that decoding can turn everything after it into one string and
// slice every string field out of it.
func encodeCheckpoint(c *cairn.Checkpoint) []byte { return encodeCheckpointAfter(c, 0) }

// encodeCheckpointAfter returns room bytes followed by the stored form of c:
// the room lets a checkpoint record's header go in front of the body without
// copying the body (see newCheckpoint.recordValue).
func encodeCheckpointAfter(c *cairn.Checkpoint, room int) []byte {
	return encodeCheckpointInto(nil, c, room)
}

// encodeCheckpointInto is encodeCheckpointAfter into the array of dst when it
// is large enough: room bytes (of any value), then the stored form of c.
func encodeCheckpointInto(dst []byte, c *cairn.Checkpoint, room int) []byte {
	need := room + 256 + len(c.Conversation) + len(c.Files)*120
	if cap(dst) < need {
		dst = make([]byte, room, need)
	}
	e := encoder{b: dst[:room]}
	e.b = append(e.b, codecVersion)
	e.raw(c.Conversation)
	e.str(c.ID)
	e.str(c.ThreadID)
	e.str(c.ParentCheckpointID)
	e.f64(c.CreatedAt)
	e.str(c.Reason)
	e.str(c.Label)
	e.str(c.SourceRunID)
	e.uint(uint64(len(c.Files)))
	for _, f := range c.Files {
		e.str(f.Path)
		e.str(string(f.Kind))
		e.str(f.BlobKey)
		e.int(f.Size)
	}
	e.artifacts(c.Artifacts)
	return e.b
}

// artifacts encodes a list of artifacts: a count, then each artifact's
// fields in order. The body codec and the root object share it.
func (e *encoder) artifacts(as []cairn.Artifact) {
	e.uint(uint64(len(as)))
	for _, a := range as {
		e.str(a.ArtifactID)
		e.str(a.Name)
		e.str(a.MimeType)
		e.int(a.Size)
		e.str(a.BlobKey)
		e.f64(a.CreatedAt)
	}
}

// artifact decodes one artifact as encoder.artifacts writes it.
func (d *decoder) artifact() cairn.Artifact {
	return cairn.Artifact{ArtifactID: d.str(), Name: d.str(), MimeType: d.str(), Size: d.int(), BlobKey: d.str(), CreatedAt: d.f64()}
}

// minArtifactBytes is the smallest encoded artifact: 4 empty strings, a
// varint and a float64.
const minArtifactBytes = 13

// decodeCheckpoint decodes what encodeCheckpoint wrote. It returns an error,
// never panics, on any other input. It allocates the conversation, one string
// for all the other fields, and the two slices.
func decodeCheckpoint(b []byte) (cairn.Checkpoint, error) {
	if len(b) == 0 || b[0] != codecVersion {
		return cairn.Checkpoint{}, errCodec
	}
	d := decoder{b: b[1:]}
	var c cairn.Checkpoint
	c.Conversation = d.raw()
	if d.err != nil {
		return cairn.Checkpoint{}, errCodec
	}
	d.text = string(d.b)
	d.base = len(d.b)
	c.ID = d.str()
	c.ThreadID = d.str()
	c.ParentCheckpointID = d.str()
	c.CreatedAt = d.f64()
	c.Reason = d.str()
	c.Label = d.str()
	c.SourceRunID = d.str()
	c.Files = make([]cairn.Entry, d.count(4)) // 3 strings and a varint: at least 4 bytes
	for i := range c.Files {
		c.Files[i] = cairn.Entry{Path: d.str(), Kind: cairn.EntryKind(d.str()), BlobKey: d.str(), Size: d.int()}
	}
	c.Artifacts = make([]cairn.Artifact, d.count(minArtifactBytes))
	for i := range c.Artifacts {
		c.Artifacts[i] = d.artifact()
	}
	if d.err != nil || len(d.b) != 0 {
		return cairn.Checkpoint{}, errCodec
	}
	return c, nil
}

// encodeInstance returns the stored form of an instance record.
func encodeInstance(r *cairn.InstanceRecord) []byte {
	e := encoder{b: []byte{codecVersion}}
	for _, s := range []string{r.Key, r.Provider, r.ProviderSandboxID, r.LatestSnapshotID, r.ThreadID, r.LatestRunID} {
		e.str(s)
	}
	e.f64(r.UpdatedAt)
	return e.b
}

func decodeInstance(b []byte) (cairn.InstanceRecord, error) {
	if len(b) == 0 || b[0] != codecVersion {
		return cairn.InstanceRecord{}, errCodec
	}
	d := decoder{b: b[1:]}
	r := cairn.InstanceRecord{Key: d.str(), Provider: d.str(), ProviderSandboxID: d.str(), LatestSnapshotID: d.str(),
		ThreadID: d.str(), LatestRunID: d.str(), UpdatedAt: d.f64()}
	if d.err != nil || len(d.b) != 0 {
		return cairn.InstanceRecord{}, errCodec
	}
	return r, nil
}

// refParts returns, for each shard the checkpoint uses, its sorted distinct
// digests split into parts of at most refPartBytes, and the shard mask. It
// decodes each key once, and leaves out any key that is not a blob key (none,
// in a validated checkpoint).
func refParts(c *cairn.Checkpoint) (parts [keys.NumShards][][]byte, mask uint32) {
	var valid cairn.Checkpoint
	var d cairn.BlobDigests
	for _, e := range c.Files {
		var dg keys.Digest
		if shard, ok := keys.ParseBlobKey(e.BlobKey, &dg); ok && e.Kind == cairn.KindFile && shard >= keys.NumShards/2 {
			valid.Files, d.Files = append(valid.Files, e), append(d.Files, dg)
		}
	}
	for _, a := range c.Artifacts {
		var dg keys.Digest
		if shard, ok := keys.ParseBlobKey(a.BlobKey, &dg); ok && shard < keys.NumShards/2 {
			valid.Artifacts, d.Artifacts = append(valid.Artifacts, a), append(d.Artifacts, dg)
		}
	}
	return refPartsFrom(&valid, &d, &encodeBufs{})
}

// refPartsFrom is refParts from the digests of c's blob keys, as
// cairn.CheckAppendInputDigests decoded them, in the arrays of bufs: the
// parts are slices of bufs.sorted, which holds them until bufs is used again.
func refPartsFrom(c *cairn.Checkpoint, d *cairn.BlobDigests, bufs *encodeBufs) (parts [keys.NumShards][][]byte, mask uint32) {
	// A counting sort on (namespace, first byte) orders the digests by shard
	// and nearly by value; sorting each of its small buckets finishes it.
	const fileBuckets = int(keys.NSFile) << 8
	var count [2 * 256]int32
	for i := range c.Files {
		if c.Files[i].Kind == cairn.KindFile {
			count[fileBuckets|int(d.Files[i][0])]++
		}
	}
	for i := range d.Artifacts {
		count[d.Artifacts[i][0]]++
	}
	var start [len(count) + 1]int32
	for b, n := range count {
		start[b+1] = start[b] + n
	}
	n := int(start[len(count)])
	sorted := slices.Grow(bufs.sorted[:0], n)[:n]
	next := start
	for i := range c.Files {
		if c.Files[i].Kind == cairn.KindFile {
			b := fileBuckets | int(d.Files[i][0])
			sorted[next[b]] = d.Files[i]
			next[b]++
		}
	}
	for i := range d.Artifacts {
		b := d.Artifacts[i][0]
		sorted[next[b]] = d.Artifacts[i]
		next[b]++
	}
	for b := range count {
		if count[b] > 1 {
			sortDigests(sorted[start[b]:start[b+1]])
		}
	}
	// The parts are the sorted digests themselves, seen as bytes: a
	// [32]byte has no padding, so a run of them is a run of bytes.
	per := refPartBytes / keys.DigestLen
	for shard := range keys.NumShards {
		// The shard's buckets are contiguous: its namespace, and first bytes
		// whose top bits are the shard's.
		lo, hi := shardRange(byte(shard))
		ds := slices.Compact(sorted[start[lo]:start[hi]])
		if len(ds) == 0 {
			continue
		}
		mask |= 1 << shard
		for len(ds) > 0 {
			n := min(per, len(ds))
			parts[shard] = append(parts[shard], unsafe.Slice(&ds[0][0], n*keys.DigestLen))
			ds = ds[n:]
		}
	}
	bufs.sorted = sorted
	return parts, mask
}

// sortDigests sorts the few digests of one bucket of refPartsFrom (about
// one in a bucket, rarely more than four) by insertion.
func sortDigests(ds []keys.Digest) {
	for i := 1; i < len(ds); i++ {
		for j := i; j > 0 && compareDigests(ds[j-1], ds[j]) > 0; j-- {
			ds[j-1], ds[j] = ds[j], ds[j-1]
		}
	}
}

// encodeBufs are the arrays that encoding a checkpoint and its reference
// records needs; an append takes them from bufPool and gives them back when
// its requests are done, so that a steady stream of appends does not
// allocate them again each time.
type encodeBufs struct {
	digests cairn.BlobDigests
	body    []byte
	sorted  []keys.Digest // the reference records' digests, in order
}

var bufPool = sync.Pool{New: func() any { return new(encodeBufs) }}

// maxPooledBytes bounds the arrays kept in bufPool: those of a large
// checkpoint are left to the collector.
const maxPooledBytes = 256 << 10

func (b *encodeBufs) release() {
	if cap(b.body) > maxPooledBytes || cap(b.sorted)*keys.DigestLen > maxPooledBytes {
		return
	}
	bufPool.Put(b)
}

// shardRange returns the buckets [lo, hi) of a shard.
func shardRange(shard byte) (lo, hi int) {
	perShard := 256 / (keys.NumShards / 2)
	ns, i := int(shard)/(keys.NumShards/2), int(shard)%(keys.NumShards/2)
	lo = ns<<8 | i*perShard
	return lo, lo + perShard
}

// compareDigests orders digests by their bytes, comparing them as four
// big-endian words, which is much faster than bytes.Compare.
func compareDigests(a, b keys.Digest) int {
	for i := 0; i < keys.DigestLen; i += 8 {
		x, y := binary.BigEndian.Uint64(a[i:]), binary.BigEndian.Uint64(b[i:])
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// shardsOf lists the shards in a mask, in order: the blob shards, then
// keys.RootShard.
func shardsOf(mask uint32) []byte {
	var out []byte
	for s := range keys.RootShard + 1 {
		if mask&(1<<s) != 0 {
			out = append(out, s)
		}
	}
	return out
}
