package cairn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cairnstore/cairn"
)

func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"", "a", " ", "\x00", "a/b", "é", "😀", surrogate, "\xff", "a\xc3", "\xc0\x80", "\uFFFD",
		strings.Repeat("a", cairn.MaxIDBytes), strings.Repeat("a", cairn.MaxIDBytes+1), strings.Repeat("é", cairn.MaxIDBytes/2+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := cairn.ValidateID(s, "id")
		valid := s != "" && utf8.ValidString(s) && len(s) <= cairn.MaxIDBytes
		if valid != (err == nil) {
			t.Fatalf("ValidateID(%q) = %v; valid UTF-8, non-empty and at most %d bytes: %v", s, err, cairn.MaxIDBytes, valid)
		}
		if err != nil && cairn.CodeOf(err) != cairn.CodeInvalidID {
			t.Fatalf("ValidateID(%q) = %v, want ErrInvalidID", s, err)
		}
	})
}

// drive is the drive prefix that the path rule of the contract rejects.
var drive = regexp.MustCompile(`^[A-Za-z]:([\\/]|$)`)

// specPath is the path rule as the contract states it, written independently
// of ValidatePath.
func specPath(p string) bool {
	if p == "" || strings.Contains(p, "\x00") || strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) ||
		drive.MatchString(p) || strings.Contains(p, `\`) {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

func FuzzValidatePath(f *testing.F) {
	for _, p := range pathsAccepted {
		f.Add(p)
	}
	for _, p := range pathsRejected {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := cairn.ValidatePath(p), specPath(p); got != want {
			t.Fatalf("ValidatePath(%q) = %v, the contract's rule says %v", p, got, want)
		}
	})
}

// knownCodes are the codes a store may return.
var knownCodes = map[cairn.Code]bool{
	cairn.CodeStaleHead: true, cairn.CodeParentMismatch: true, cairn.CodeDuplicateID: true,
	cairn.CodeWriterLost: true, cairn.CodeInvalidID: true, cairn.CodeInvalidEntry: true,
}

// view is what an Append may change, read back with exported fields only.
type view struct {
	head, fixtureHead string
	list, fixture     []cairn.Checkpoint
	got               *cairn.Checkpoint
	refs              []cairn.BlobReference
}

func readView(t *testing.T, s *cairn.MemoryStore, thread, id string) view {
	t.Helper()
	ctx := context.Background()
	var v view
	var err error
	if cairn.ValidateID(thread, "") == nil {
		if v.head, err = s.GetHead(ctx, thread); err != nil {
			t.Fatal(err)
		}
		l, err := s.List(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range l {
			v.list = append(v.list, exported(c))
		}
	}
	if cairn.ValidateID(id, "") == nil {
		c, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if c != nil {
			e := exported(*c)
			v.got = &e
		}
	}
	if v.fixtureHead, err = s.GetHead(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	l, err := s.List(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range l {
		v.fixture = append(v.fixture, exported(c))
	}
	if v.refs, err = s.ListBlobReferences(ctx); err != nil {
		t.Fatal(err)
	}
	return v
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	if a == nil || b == nil {
		return (a == nil || string(a) == "null") && (b == nil || string(b) == "null")
	}
	decode := func(raw []byte) (any, error) {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		err := d.Decode(&v)
		return v, err
	}
	va, ea := decode(a)
	vb, eb := decode(b)
	return ea == nil && eb == nil && reflect.DeepEqual(va, vb)
}

// FuzzCheckpointJSON decodes arbitrary JSON into a Checkpoint and appends it
// to a MemoryStore that holds the thread "t" with head "h". Nothing may panic;
// decoding fails only with ErrInvalidID; a failed Append returns a coded error
// and changes nothing; a successful one stores exactly the decoded checkpoint,
// whose JSON form decodes back to it.
func FuzzCheckpointJSON(f *testing.F) {
	f.Add([]byte(validCheckpointJSON(nil)))
	f.Add([]byte(validCheckpointJSON(map[string]string{"threadId": `"t"`, "parentCheckpointId": `"h"`, "id": `"n"`})))
	f.Add([]byte(validCheckpointJSON(map[string]string{"threadId": `"t"`, "id": `"h"`, "parentCheckpointId": `"h"`})))
	f.Add([]byte(validCheckpointJSON(map[string]string{"threadId": `"t"`})))
	f.Add([]byte(validCheckpointJSON(map[string]string{"createdAt": "null"})))
	f.Add([]byte(validCheckpointJSON(map[string]string{"files": file(`,"size":1.5`)})))
	f.Add([]byte(validCheckpointJSON(map[string]string{"files": `[{"path":"C:foo","kind":"dir"},{"path":"C:/x","kind":"dir"}]`})))
	f.Add([]byte(validCheckpointJSON(map[string]string{"files": `[{"path":"a/b","kind":"dir"},{"path":"a","kind":"file","blobKey":"` + keyA + `","size":0}]`})))
	f.Add([]byte(validCheckpointJSON(map[string]string{"artifacts": art(map[string]string{"blobKey": `"` + keyA + `"`})})))
	f.Add([]byte(validCheckpointJSON(map[string]string{"conversation": `[{"role":"user","content":"<&>\u2028"}]`, "label": `"l"`, "sourceRunId": `"r"`})))
	f.Add([]byte(`{"id":7}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"id":"\ud800","threadId":"t"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		s, err := cairn.NewMemoryStore(cairn.Options{Now: func() float64 { return 1000 }})
		if err != nil {
			t.Fatal(err)
		}
		fixture, err := s.AcquireWriter(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		h := cairn.Checkpoint{ID: "h", ThreadID: "t", CreatedAt: 1, Files: []cairn.Entry{{Path: "a", Kind: cairn.KindFile, BlobKey: keyA, Size: 1}}}
		if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: h, Writer: fixture.Writer}); err != nil {
			t.Fatal(err)
		}

		var c cairn.Checkpoint
		if err := c.UnmarshalJSON(data); err != nil {
			if cairn.CodeOf(err) != cairn.CodeInvalidID {
				t.Fatalf("UnmarshalJSON(%q) = %v, want an error with code %s", data, err, cairn.CodeInvalidID)
			}
			return
		}
		w := cairn.Writer{ThreadID: c.ThreadID}
		switch {
		case c.ThreadID == "t":
			w = fixture.Writer
		case cairn.ValidateID(c.ThreadID, "") == nil:
			l, err := s.AcquireWriter(ctx, c.ThreadID)
			if err != nil {
				t.Fatalf("AcquireWriter(%q): %v", c.ThreadID, err)
			}
			w = l.Writer
		}
		before := readView(t, s, c.ThreadID, c.ID)
		_, err = s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: c.ParentCheckpointID, Writer: w})
		after := readView(t, s, c.ThreadID, c.ID)
		if err != nil {
			var ce *cairn.Error
			if !errors.As(err, &ce) || !knownCodes[ce.Code] {
				t.Fatalf("Append returned %v (%T), want a *cairn.Error with a store code", err, err)
			}
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("a failed Append (%v) changed the store:\nbefore %+v\nafter  %+v", err, before, after)
			}
			return
		}
		want := exported(c)
		if after.got == nil || !reflect.DeepEqual(*after.got, want) {
			t.Fatalf("Get after Append = %+v, want %+v", after.got, want)
		}
		b, err := json.Marshal(*after.got)
		if err != nil {
			t.Fatalf("json.Marshal of a stored checkpoint: %v", err)
		}
		var back cairn.Checkpoint
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("json.Unmarshal(%s): %v", b, err)
		}
		if !sameJSON(back.Conversation, want.Conversation) {
			t.Fatalf("conversation %q came back from JSON as %q", want.Conversation, back.Conversation)
		}
		back.Conversation, want.Conversation = nil, nil
		if !reflect.DeepEqual(exported(back), want) {
			t.Fatalf("JSON round trip of %s gave %+v, want %+v", b, back, want)
		}
		if err := cairn.CheckCheckpointContent(&back); err != nil {
			t.Fatalf("the JSON form of a stored checkpoint is invalid: %v", err)
		}
	})
}
