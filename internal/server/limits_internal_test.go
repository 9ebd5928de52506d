package server

import (
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/cairnstore/cairn"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
)

// TestSmallRequestsAtEveryBound: the request of every procedure outside
// largeProcedures, with every string field at the largest bound of package
// cairn and made of NUL bytes (which JSON escapes to six bytes each) and
// every number at its largest, fits SmallRequestBytes in the binary and the
// JSON form. A procedure whose request has a list or bytes field has no such
// bound and must be in largeProcedures.
func TestSmallRequestsAtEveryBound(t *testing.T) {
	longest := max(cairn.MaxIDBytes, cairn.MaxNameBytes, cairn.MaxOwnerTokenBytes)
	services := cairnv1.File_cairn_v1_cairn_proto.Services()
	for i := range services.Len() {
		methods := services.Get(i).Methods()
		for j := range methods.Len() {
			m := methods.Get(j)
			procedure := "/" + string(m.Parent().FullName()) + "/" + string(m.Name())
			if slices.Contains(largeProcedures, procedure) {
				continue
			}
			t.Run(string(m.Parent().Name())+"/"+string(m.Name()), func(t *testing.T) {
				msg := dynamicpb.NewMessage(m.Input())
				fillAtBound(t, msg, strings.Repeat("\x00", longest))
				bin, err := proto.Marshal(msg)
				if err != nil {
					t.Fatal(err)
				}
				js, err := protojson.Marshal(msg)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d bytes binary, %d bytes JSON", len(bin), len(js))
				if n := max(len(bin), len(js)); n > SmallRequestBytes {
					t.Errorf("%d bytes at the bounds, more than SmallRequestBytes (%d)", n, SmallRequestBytes)
				}
			})
		}
	}
}

// fillAtBound sets every field of m: strings to s, numbers to their
// largest, messages filled in turn. It fails on a list, a map or bytes.
func fillAtBound(t *testing.T, m protoreflect.Message, s string) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if f.IsList() || f.IsMap() || f.Kind() == protoreflect.BytesKind {
			t.Errorf("field %s has no bound: list the procedure in largeProcedures", f.FullName())
			continue
		}
		switch f.Kind() {
		case protoreflect.StringKind:
			m.Set(f, protoreflect.ValueOfString(s))
		case protoreflect.MessageKind:
			fillAtBound(t, m.Mutable(f).Message(), s)
		case protoreflect.DoubleKind:
			m.Set(f, protoreflect.ValueOfFloat64(-math.MaxFloat64))
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			m.Set(f, protoreflect.ValueOfInt64(math.MinInt64))
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			m.Set(f, protoreflect.ValueOfInt32(math.MinInt32))
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			m.Set(f, protoreflect.ValueOfUint64(math.MaxUint64))
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			m.Set(f, protoreflect.ValueOfUint32(math.MaxUint32))
		case protoreflect.BoolKind:
			m.Set(f, protoreflect.ValueOfBool(true))
		case protoreflect.EnumKind:
			m.Set(f, protoreflect.ValueOfEnum(1))
		default:
			t.Errorf("field %s of kind %v: fillAtBound does not know it", f.FullName(), f.Kind())
		}
	}
}
