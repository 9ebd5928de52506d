package server_test

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/cairnstore/cairn"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/internal/server"
)

// procedure is one method of the API, as the server's mux names it.
type procedure struct {
	path      string
	method    protoreflect.MethodDescriptor
	streaming bool // the server streams its answer
}

// procedures returns every method of every service of the API.
func procedures() []procedure {
	var out []procedure
	services := cairnv1.File_cairn_v1_cairn_proto.Services()
	for i := range services.Len() {
		methods := services.Get(i).Methods()
		for j := range methods.Len() {
			m := methods.Get(j)
			out = append(out, procedure{"/" + string(m.Parent().FullName()) + "/" + string(m.Name()), m, m.IsStreamingServer()})
		}
	}
	return out
}

// fillFields sets every field of m: strings to s, bytes to s's bytes,
// numbers from n (its largest value when n is 0), lists to n elements
// (each filled in turn), messages filled in turn. It returns the fields that
// are lists, maps or bytes: those that no bound of package cairn bounds.
func fillFields(m protoreflect.Message, s string, n int) (unbounded []protoreflect.FieldDescriptor) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if f.IsMap() {
			unbounded = append(unbounded, f)
			continue
		}
		value := func(set func(protoreflect.Value)) {
			switch f.Kind() {
			case protoreflect.StringKind:
				set(protoreflect.ValueOfString(s))
			case protoreflect.BytesKind:
				set(protoreflect.ValueOfBytes([]byte(s)))
			case protoreflect.DoubleKind:
				set(protoreflect.ValueOfFloat64(map[bool]float64{true: -math.MaxFloat64, false: float64(n)}[n == 0]))
			case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
				set(protoreflect.ValueOfInt64(map[bool]int64{true: math.MinInt64, false: int64(n)}[n == 0]))
			case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
				set(protoreflect.ValueOfInt32(map[bool]int32{true: math.MinInt32, false: int32(n)}[n == 0]))
			case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
				set(protoreflect.ValueOfUint64(map[bool]uint64{true: math.MaxUint64, false: uint64(n)}[n == 0]))
			case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
				set(protoreflect.ValueOfUint32(map[bool]uint32{true: math.MaxUint32, false: uint32(n)}[n == 0]))
			case protoreflect.BoolKind:
				set(protoreflect.ValueOfBool(true))
			case protoreflect.EnumKind:
				set(protoreflect.ValueOfEnum(protoreflect.EnumNumber(n)))
			}
		}
		switch {
		case f.IsList():
			unbounded = append(unbounded, f)
			l := m.Mutable(f).List()
			for range n {
				if f.Kind() == protoreflect.MessageKind {
					e := l.NewElement()
					fillFields(e.Message(), s, n)
					l.Append(e)
				} else {
					value(l.Append)
				}
			}
		case f.Kind() == protoreflect.MessageKind:
			unbounded = append(unbounded, fillFields(m.Mutable(f).Message(), s, n)...)
		default:
			if f.Kind() == protoreflect.BytesKind {
				unbounded = append(unbounded, f)
			}
			value(func(v protoreflect.Value) { m.Set(f, v) })
		}
	}
	return unbounded
}

// TestSmallRequestsAtEveryBound: the request of every procedure that is not
// a server.LargeProcedure, with every string field at the largest bound of
// package cairn and made of NUL bytes (which JSON escapes to six bytes
// each) and every number at its largest, fits server.SmallRequestBytes in
// the binary and the JSON form. A procedure whose request has a list or
// bytes has no such bound and must be a large one.
func TestSmallRequestsAtEveryBound(t *testing.T) {
	longest := max(cairn.MaxIDBytes, cairn.MaxNameBytes, cairn.MaxOwnerTokenBytes)
	for _, p := range procedures() {
		if server.LargeProcedure(p.path) {
			continue
		}
		t.Run(strings.TrimPrefix(p.path, "/cairn.v1."), func(t *testing.T) {
			msg := dynamicpb.NewMessage(p.method.Input())
			for _, f := range fillFields(msg, strings.Repeat("\x00", longest), 0) {
				t.Errorf("field %s has no bound: make the procedure a large one (largeProcedures)", f.FullName())
			}
			bin, err := proto.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			js, err := protojson.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d bytes binary, %d bytes JSON", len(bin), len(js))
			if n := max(len(bin), len(js)); n > server.SmallRequestBytes {
				t.Errorf("%d bytes at the bounds, more than SmallRequestBytes (%d)", n, server.SmallRequestBytes)
			}
		})
	}
}
