package keys

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// NonceLen is the length of the random nonce that names one write's chunks and
// reference records.
const NonceLen = 16

// Nonce identifies the keys one write stages, so that two writers that race
// for the same position never overwrite each other's staged keys.
type Nonce [NonceLen]byte

// String returns the nonce in hex.
func (n Nonce) String() string { return hex.EncodeToString(n[:]) }

// Tags: the byte after the encoded prefix (and, for 't', after the encoded
// thread) that says which kind of key follows.
const (
	tagThread     = 'n' // thread record: head, sequence numbers, prune floor
	tagThreadData = 't' // per-thread keys, followed by the encoded thread id
	tagRef        = 'r' // blob reference records, sharded by blob key
	tagIndex      = 'i' // checkpoint id -> where it lives
	tagInstance   = 's' // instance store records
	tagLock       = 'l' // sweeper election and other locks
	tagGC         = 'g' // the sweeper's record of a blob key (online sweep)
	tagClaim      = 'q' // a writer lease's claim of a blob key (online sweep)

	subCheckpoint      = 'c'
	subChunk           = 'k'
	subTranscript      = 'm'
	subTranscriptChunk = 'M'
	subWriterOwner     = 'w'
	subWriterExpiry    = 'x'
	subReadPermit      = 'p'
)

// Layout builds the etcd keys of one store. All keys start with the store's
// encoded prefix. The zero Layout is the layout of the empty prefix.
type Layout struct {
	root []byte
}

// NewLayout returns the layout of a store whose keys live under prefix. The
// prefix is encoded like an identifier, so different prefixes never nest.
func NewLayout(prefix string) Layout {
	return Layout{root: String(prefix)}
}

// Root returns the bytes every key of the layout starts with.
func (l Layout) Root() []byte { return clone(l.root) }

func (l Layout) key(tag byte, n int) []byte {
	b := make([]byte, 0, len(l.root)+1+n)
	b = append(b, l.root...)
	return append(b, tag)
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// Threads returns the prefix of all thread records.
func (l Layout) Threads() []byte { return l.key(tagThread, 0) }

// Thread returns the key of a thread's record.
func (l Layout) Thread(thread string) []byte {
	return AppendString(l.key(tagThread, len(thread)+2), thread)
}

// DecodeThread returns the thread id of a thread record key.
func (l Layout) DecodeThread(key []byte) (string, error) {
	rest, err := l.strip(key, tagThread)
	if err != nil {
		return "", err
	}
	t, rest, err := DecodeString(rest)
	if err != nil || len(rest) != 0 {
		return "", fmt.Errorf("%w: thread key", ErrMalformed)
	}
	return t, nil
}

func (l Layout) strip(key []byte, tag byte) ([]byte, error) {
	n := len(l.root)
	if len(key) <= n || string(key[:n]) != string(l.root) || key[n] != tag {
		return nil, fmt.Errorf("%w: key outside the layout", ErrMalformed)
	}
	return key[n+1:], nil
}

// threadData returns the prefix of a thread's own keys, followed by sub.
func (l Layout) threadData(thread string, sub byte, n int) []byte {
	b := AppendString(l.key(tagThreadData, len(thread)+3+n), thread)
	return append(b, sub)
}

// ThreadData returns the prefix of every per-thread key of a thread.
func (l Layout) ThreadData(thread string) []byte {
	return AppendString(l.key(tagThreadData, len(thread)+2), thread)
}

// Checkpoints returns the prefix of a thread's checkpoint records. A range read
// over it returns them in the contract's list order: by createdAt, then by the
// bytes of the id.
func (l Layout) Checkpoints(thread string) []byte { return l.threadData(thread, subCheckpoint, 0) }

// Checkpoint returns the key of a checkpoint record.
func (l Layout) Checkpoint(thread string, createdAt float64, id string) []byte {
	b := AppendFloat64(l.threadData(thread, subCheckpoint, 8+len(id)+2), createdAt)
	return AppendString(b, id)
}

// DecodeCheckpoint returns the parts of a checkpoint record key.
func (l Layout) DecodeCheckpoint(key []byte) (thread string, createdAt float64, id string, err error) {
	rest, err := l.strip(key, tagThreadData)
	if err != nil {
		return "", 0, "", err
	}
	if thread, rest, err = DecodeString(rest); err != nil || len(rest) == 0 || rest[0] != subCheckpoint {
		return "", 0, "", fmt.Errorf("%w: checkpoint key", ErrMalformed)
	}
	if createdAt, rest, err = DecodeFloat64(rest[1:]); err != nil {
		return "", 0, "", err
	}
	if id, rest, err = DecodeString(rest); err != nil || len(rest) != 0 {
		return "", 0, "", fmt.Errorf("%w: checkpoint key", ErrMalformed)
	}
	return thread, createdAt, id, nil
}

// Chunks returns the prefix of all checkpoint chunks of a thread.
func (l Layout) Chunks(thread string) []byte { return l.threadData(thread, subChunk, 0) }

// SeqChunks returns the prefix of the chunks staged for sequence number seq of
// a thread, by any writer.
func (l Layout) SeqChunks(thread string, seq uint64) []byte {
	return AppendUint64(l.threadData(thread, subChunk, 8), seq)
}

// CheckpointChunks returns the prefix of the chunks one write staged.
func (l Layout) CheckpointChunks(thread string, seq uint64, n Nonce) []byte {
	return append(l.SeqChunks(thread, seq), n[:]...)
}

// Chunk returns the key of chunk i of one write.
func (l Layout) Chunk(thread string, seq uint64, n Nonce, i int) []byte {
	return binary.BigEndian.AppendUint32(l.CheckpointChunks(thread, seq, n), uint32(i))
}

// Transcript returns the key of a thread's transcript record.
func (l Layout) Transcript(thread string) []byte { return l.threadData(thread, subTranscript, 0) }

// TranscriptChunks returns the prefix of all transcript chunks of a thread.
func (l Layout) TranscriptChunks(thread string) []byte {
	return l.threadData(thread, subTranscriptChunk, 0)
}

// TranscriptWriteChunks returns the prefix of the transcript chunks one write
// staged.
func (l Layout) TranscriptWriteChunks(thread string, n Nonce) []byte {
	return append(l.threadData(thread, subTranscriptChunk, NonceLen), n[:]...)
}

// TranscriptChunk returns the key of transcript chunk i of one write.
func (l Layout) TranscriptChunk(thread string, n Nonce, i int) []byte {
	return binary.BigEndian.AppendUint32(l.TranscriptWriteChunks(thread, n), uint32(i))
}

// WriterOwner returns the key that holds the owner token of a thread's writer
// lease. Its mod revision is the lease's fence.
func (l Layout) WriterOwner(thread string) []byte { return l.threadData(thread, subWriterOwner, 0) }

// WriterExpiry returns the key that holds the expiry of a thread's writer
// lease, encoded with AppendFloat64.
func (l Layout) WriterExpiry(thread string) []byte { return l.threadData(thread, subWriterExpiry, 0) }

// ReadPermit returns the key of a thread's read permit: while a member's
// state holds it, that member may serve the thread's checkpoint records
// without asking the leader (etcdstore's local reads). A deletion of
// checkpoints removes it first and waits for every member to apply that.
func (l Layout) ReadPermit(thread string) []byte { return l.threadData(thread, subReadPermit, 0) }

// Index returns the key that records where a checkpoint id lives.
func (l Layout) Index(id string) []byte {
	return AppendString(l.key(tagIndex, len(id)+2), id)
}

// Indexes returns the prefix of every index record.
func (l Layout) Indexes() []byte { return l.key(tagIndex, 0) }

// DecodeIndex returns the checkpoint id of an index record key.
func (l Layout) DecodeIndex(key []byte) (string, error) {
	rest, err := l.strip(key, tagIndex)
	if err != nil {
		return "", err
	}
	id, rest, err := DecodeString(rest)
	if err != nil || len(rest) != 0 {
		return "", fmt.Errorf("%w: index key", ErrMalformed)
	}
	return id, nil
}

// Instance returns the key of an instance store record.
func (l Layout) Instance(key string) []byte {
	return AppendString(l.key(tagInstance, len(key)+2), key)
}

// Locks returns the prefix under which locks and elections live.
func (l Layout) Locks() []byte { return l.key(tagLock, 0) }

// Refs returns the prefix of every blob reference record.
func (l Layout) Refs() []byte { return l.key(tagRef, 0) }

// RefShard returns the prefix of the reference records of one shard.
func (l Layout) RefShard(shard byte) []byte { return append(l.key(tagRef, 1), shard) }

// RefThread returns the prefix of one thread's reference records in a shard.
func (l Layout) RefThread(shard byte, thread string) []byte {
	return AppendString(l.RefShard(shard), thread)
}

// RefSeq returns the prefix of the reference records, in one shard, of the
// checkpoint at sequence number seq of a thread.
func (l Layout) RefSeq(shard byte, thread string, seq uint64) []byte {
	return AppendUint64(l.RefThread(shard, thread), seq)
}

// Ref returns the key of part number part of one write's reference record in
// a shard.
func (l Layout) Ref(shard byte, thread string, seq uint64, n Nonce, part int) []byte {
	b := append(l.RefSeq(shard, thread, seq), n[:]...)
	return binary.BigEndian.AppendUint16(b, uint16(part))
}

// RefKey is a decoded reference record key.
type RefKey struct {
	Shard  byte
	Thread string
	Seq    uint64
	Nonce  Nonce
	Part   int
}

// DecodeRef returns the parts of a reference record key.
func (l Layout) DecodeRef(key []byte) (RefKey, error) {
	var r RefKey
	rest, err := l.strip(key, tagRef)
	if err != nil || len(rest) == 0 {
		return r, fmt.Errorf("%w: reference key", ErrMalformed)
	}
	r.Shard = rest[0]
	if r.Thread, rest, err = DecodeString(rest[1:]); err != nil {
		return r, err
	}
	if r.Seq, rest, err = DecodeUint64(rest); err != nil {
		return r, err
	}
	if len(rest) != NonceLen+2 {
		return r, fmt.Errorf("%w: reference key", ErrMalformed)
	}
	copy(r.Nonce[:], rest)
	r.Part = int(binary.BigEndian.Uint16(rest[NonceLen:]))
	return r, nil
}

// Kind names the kind of record key is, for reports of what holds space:
// "thread", "checkpoint", "chunk", "transcript", "writer", "index", "ref",
// "instance", "lock", "gc", "claim", "thread-other", or "" for a key outside
// the layout or of no known kind.
func (l Layout) Kind(key []byte) string {
	n := len(l.root)
	if len(key) <= n || string(key[:n]) != string(l.root) {
		return ""
	}
	switch key[n] {
	case tagThread:
		return "thread"
	case tagRef:
		return "ref"
	case tagIndex:
		return "index"
	case tagInstance:
		return "instance"
	case tagLock:
		return "lock"
	case tagGC:
		return "gc"
	case tagClaim:
		return "claim"
	case tagThreadData:
		_, rest, err := DecodeString(key[n+1:])
		if err != nil || len(rest) == 0 {
			return ""
		}
		switch rest[0] {
		case subCheckpoint:
			return "checkpoint"
		case subChunk:
			return "chunk"
		case subTranscript, subTranscriptChunk:
			return "transcript"
		case subWriterOwner, subWriterExpiry:
			return "writer"
		}
		return "thread-other"
	}
	return ""
}
