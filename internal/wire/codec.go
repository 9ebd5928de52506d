package wire

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
)

// Codec is the binary protobuf codec ("proto") of the Connect API that the
// server and the Go client both install in place of Connect's default one.
// It encodes with package proto, as Connect's own codec does. It decodes the
// three messages that carry a whole checkpoint (AppendRequest,
// GetCheckpointResponse, ListCheckpointsResponse) without reflection and
// with a dozen allocations instead of several per entry: it copies the input
// into one string, of which every text field is a substring, and takes the
// entries, artifacts and their optional fields from one slice each.
//
// The fast decoding handles the encodings a protobuf encoder produces for
// this schema; any other input (an unknown field, a field of an unexpected
// wire type, a singular field given twice, which protobuf merges, malformed
// bytes) is decoded by proto.Unmarshal instead, so the result, and every
// error, is always proto.Unmarshal's (FuzzCodec compares the two).
//
// A decoded checkpoint's strings share one allocation: keeping any of them
// keeps the whole message's text alive.
type Codec struct{}

// Name implements connect.Codec.
func (Codec) Name() string { return "proto" }

// IsBinary reports that the encoding is binary.
func (Codec) IsBinary() bool { return true }

// Marshal implements connect.Codec.
func (c Codec) Marshal(m any) ([]byte, error) { return c.MarshalAppend(nil, m) }

// MarshalAppend appends the encoding of m to dst.
func (Codec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, errNotProto(m)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, pm)
}

// MarshalStable is Marshal with a deterministic order of map entries.
func (Codec) MarshalStable(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, errNotProto(m)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(pm)
}

// Unmarshal implements connect.Codec: it decodes data into m, merging into
// what m holds as proto.Unmarshal does.
func (Codec) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return errNotProto(m)
	}
	if fastTarget(m) && proto.Size(pm) == 0 {
		if decodeFast(data, m) {
			return nil
		}
		proto.Reset(pm)
	}
	if err := proto.Unmarshal(data, pm); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", m, err)
	}
	return nil
}

func errNotProto(m any) error { return fmt.Errorf("%T is not a protobuf message", m) }

func fastTarget(m any) bool {
	switch m.(type) {
	case *cairnv1.AppendRequest, *cairnv1.GetCheckpointResponse, *cairnv1.ListCheckpointsResponse:
		return true
	}
	return false
}

// decoder decodes the fast messages from data, whose copy s holds the text
// of every string field. A field's bytes are a subslice of data; its offset
// in data is cap(data) - cap(field), since slicing from the front keeps the
// end of the capacity.
type decoder struct {
	data []byte
	s    string
}

func (d *decoder) str(v []byte) string {
	i := cap(d.data) - cap(v)
	return d.s[i : i+len(v)]
}

// decodeFast decodes data into the empty fast message m; false means that
// data is outside the fast path and m must be reset and decoded by package
// proto.
func decodeFast(data []byte, m any) bool {
	d := &decoder{data: data, s: string(data)}
	switch m := m.(type) {
	case *cairnv1.AppendRequest:
		return d.appendRequest(data, m)
	case *cairnv1.GetCheckpointResponse:
		return d.holder(data, &m.Checkpoint)
	case *cairnv1.ListCheckpointsResponse:
		return d.holder(data, &m.Checkpoint)
	}
	return false
}

// field reads the next field's tag and, for a length-delimited field, its
// bytes; for a fixed64 field, its bits; for a varint, its value. ok is false
// at malformed input.
func field(b []byte) (num protowire.Number, typ protowire.Type, v []byte, x uint64, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, 0, nil, false
	}
	b = b[n:]
	switch typ {
	case protowire.BytesType:
		v, n = protowire.ConsumeBytes(b)
	case protowire.Fixed64Type:
		x, n = protowire.ConsumeFixed64(b)
	case protowire.VarintType:
		x, n = protowire.ConsumeVarint(b)
	default:
		return 0, 0, nil, 0, nil, false
	}
	if n < 0 {
		return 0, 0, nil, 0, nil, false
	}
	return num, typ, v, x, b[n:], true
}

// once marks field num seen in *seen; false when it was seen already.
func once(seen *uint32, num protowire.Number) bool {
	bit := uint32(1) << uint(num)
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

func (d *decoder) holder(b []byte, cp **cairnv1.Checkpoint) bool {
	var seen uint32
	for len(b) > 0 {
		num, typ, v, _, rest, ok := field(b)
		if !ok || num != 1 || typ != protowire.BytesType || !once(&seen, num) {
			return false
		}
		b = rest
		c := &cairnv1.Checkpoint{}
		if !d.checkpoint(v, c) {
			return false
		}
		*cp = c
	}
	return true
}

func (d *decoder) appendRequest(b []byte, m *cairnv1.AppendRequest) bool {
	var seen uint32
	for len(b) > 0 {
		num, typ, v, _, rest, ok := field(b)
		if !ok || num < 1 || num > 3 || typ != protowire.BytesType || !once(&seen, num) {
			return false
		}
		b = rest
		switch num {
		case 1:
			c := &cairnv1.Checkpoint{}
			if !d.checkpoint(v, c) {
				return false
			}
			m.Checkpoint = c
		case 2:
			s := d.str(v)
			m.ExpectedHeadId = &s
		case 3:
			w := &cairnv1.Writer{}
			if !d.writer(v, w) {
				return false
			}
			m.Writer = w
		}
	}
	return true
}

func (d *decoder) writer(b []byte, w *cairnv1.Writer) bool {
	var seen uint32
	for len(b) > 0 {
		num, typ, v, x, rest, ok := field(b)
		if !ok || num < 1 || num > 3 || !once(&seen, num) {
			return false
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType:
			w.ThreadId = d.str(v)
		case num == 2 && typ == protowire.BytesType:
			w.OwnerToken = d.str(v)
		case num == 3 && typ == protowire.VarintType:
			w.Fence = int64(x)
		default:
			return false
		}
	}
	return true
}

// checkpoint decodes a checkpoint in two passes: the first counts the
// entries and artifacts, so that they and their optional fields come from
// one slice each.
func (d *decoder) checkpoint(b []byte, c *cairnv1.Checkpoint) bool {
	files, arts := 0, 0
	for rest := b; len(rest) > 0; {
		num, _, _, _, r, ok := field(rest)
		if !ok {
			return false
		}
		rest = r
		switch num {
		case 8:
			files++
		case 10:
			arts++
		}
	}
	var (
		entries []cairnv1.Entry
		keys    []string
		sizes   []float64
		art     []cairnv1.Artifact
	)
	if files > 0 {
		entries, keys, sizes = make([]cairnv1.Entry, files), make([]string, files), make([]float64, files)
		c.Files = make([]*cairnv1.Entry, files)
	}
	if arts > 0 {
		art = make([]cairnv1.Artifact, arts)
		c.Artifacts = make([]*cairnv1.Artifact, arts)
	}
	var seen uint32
	fi, ai := 0, 0
	for len(b) > 0 {
		num, typ, v, x, rest, ok := field(b)
		if !ok || num < 1 || num > 10 {
			return false
		}
		b = rest
		if num != 8 && num != 10 && !once(&seen, num) {
			return false
		}
		if num == 4 {
			if typ != protowire.Fixed64Type {
				return false
			}
			c.CreatedAt = math.Float64frombits(x)
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		switch num {
		case 1:
			c.Id = d.str(v)
		case 2:
			c.ThreadId = d.str(v)
		case 3:
			s := d.str(v)
			c.ParentCheckpointId = &s
		case 5:
			c.Reason = d.str(v)
		case 6:
			s := d.str(v)
			c.Label = &s
		case 7:
			s := d.str(v)
			c.SourceRunId = &s
		case 8:
			e := &entries[fi]
			if !d.entry(v, e, &keys[fi], &sizes[fi]) {
				return false
			}
			c.Files[fi] = e
			fi++
		case 9:
			c.Conversation = append([]byte{}, v...)
		case 10:
			a := &art[ai]
			if !d.artifact(v, a) {
				return false
			}
			c.Artifacts[ai] = a
			ai++
		}
	}
	return true
}

func (d *decoder) entry(b []byte, e *cairnv1.Entry, key *string, size *float64) bool {
	var seen uint32
	for len(b) > 0 {
		num, typ, v, x, rest, ok := field(b)
		if !ok || num < 1 || num > 4 || !once(&seen, num) {
			return false
		}
		b = rest
		switch {
		case num == 4 && typ == protowire.Fixed64Type:
			*size = math.Float64frombits(x)
			e.Size = size
		case num == 4 || typ != protowire.BytesType:
			return false
		case num == 1:
			e.Path = d.str(v)
		case num == 2:
			e.Kind = d.str(v)
		case num == 3:
			*key = d.str(v)
			e.BlobKey = key
		}
	}
	return true
}

func (d *decoder) artifact(b []byte, a *cairnv1.Artifact) bool {
	var seen uint32
	for len(b) > 0 {
		num, typ, v, x, rest, ok := field(b)
		if !ok || num < 1 || num > 6 || !once(&seen, num) {
			return false
		}
		b = rest
		switch {
		case num == 4 || num == 6:
			if typ != protowire.Fixed64Type {
				return false
			}
			if num == 4 {
				a.Size = math.Float64frombits(x)
			} else {
				a.CreatedAt = math.Float64frombits(x)
			}
		case typ != protowire.BytesType:
			return false
		case num == 1:
			a.ArtifactId = d.str(v)
		case num == 2:
			a.Name = d.str(v)
		case num == 3:
			a.MimeType = d.str(v)
		case num == 5:
			a.BlobKey = d.str(v)
		}
	}
	return true
}
