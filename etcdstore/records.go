package etcdstore

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
)

// The JSON of the records every append writes (the thread record, the index
// record and the checkpoint record's header) is built by hand: the bytes are
// exactly those encoding/json writes for the same struct (the tests compare
// them), without its reflection. A string that needs escaping, or a float
// that encoding/json writes with an exponent, is left to encoding/json.

// appendJSON appends the JSON of rec.
func (rec *threadRec) appendJSON(b []byte) []byte {
	b = append(b, '{')
	if rec.Head != "" {
		b = appendJSONString(append(b, `"head":`...), rec.Head)
		b = append(b, ',')
	}
	if rec.HeadSeq != 0 {
		b = strconv.AppendUint(append(b, `"headSeq":`...), rec.HeadSeq, 10)
		b = append(b, ',')
	}
	if rec.HeadCreatedAt != 0 {
		b = appendJSONFloat(append(b, `"headCreatedAt":`...), rec.HeadCreatedAt)
		b = append(b, ',')
	}
	b = strconv.AppendUint(append(b, `"lastSeq":`...), rec.LastSeq, 10)
	if rec.Floor != 0 {
		b = strconv.AppendUint(append(b, `,"floor":`...), rec.Floor, 10)
	}
	if rec.Op != "" {
		b = appendJSONString(append(b, `,"op":`...), rec.Op)
	}
	if rec.LocalReads {
		b = append(b, `,"localReads":true`...)
	}
	return append(b, '}')
}

// appendJSON appends the JSON of r.
func (r *idxRec) appendJSON(b []byte) []byte {
	b = appendJSONString(append(b, `{"thread":`...), r.Thread)
	b = appendJSONFloat(append(b, `,"createdAt":`...), r.CreatedAt)
	b = strconv.AppendUint(append(b, `,"seq":`...), r.Seq, 10)
	b = appendJSONString(append(b, `,"nonce":`...), r.Nonce)
	return append(b, '}')
}

// appendJSON appends the JSON of m (without its body).
func (m *ckptMeta) appendJSON(b []byte) []byte {
	b = strconv.AppendUint(append(b, `{"seq":`...), m.Seq, 10)
	if m.ParentID != "" {
		b = appendJSONString(append(b, `,"parent":`...), m.ParentID)
	}
	if m.ParentSeq != 0 {
		b = strconv.AppendUint(append(b, `,"parentSeq":`...), m.ParentSeq, 10)
	}
	if m.ParentCreatedAt != 0 {
		b = appendJSONFloat(append(b, `,"parentCreatedAt":`...), m.ParentCreatedAt)
	}
	b = appendJSONString(append(b, `,"nonce":`...), m.Nonce)
	if m.Shards != 0 {
		b = strconv.AppendUint(append(b, `,"shards":`...), uint64(m.Shards), 10)
	}
	if m.Chunks != 0 {
		b = strconv.AppendInt(append(b, `,"chunks":`...), int64(m.Chunks), 10)
	}
	b = strconv.AppendInt(append(b, `,"size":`...), int64(m.Size), 10)
	if m.Layout != 0 {
		b = strconv.AppendInt(append(b, `,"layout":`...), int64(m.Layout), 10)
	}
	if m.Root != "" {
		b = appendJSONString(append(b, `,"root":`...), m.Root)
	}
	if m.Packs != "" {
		b = appendJSONString(append(b, `,"packs":`...), m.Packs)
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7F || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s)
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONFloat appends f as encoding/json writes it. f is finite.
func appendJSONFloat(b []byte, f float64) []byte {
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		j, _ := json.Marshal(f)
		return append(b, j...)
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

// metaHeader returns what a checkpoint record's value holds before the body:
// the uvarint length of m's JSON, then the JSON.
func metaHeader(m ckptMeta) []byte {
	// The JSON goes after room for its length, which is then written just
	// before it: a header shorter than 16 KiB needs at most 2 bytes.
	const room = 2
	h := m.appendJSON(make([]byte, room, 320))
	n := uint64(len(h) - room)
	var l [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(l[:], n)
	if k > room {
		return append(l[:k], h[room:]...)
	}
	copy(h[room-k:], l[:k])
	return h[room-k:]
}
