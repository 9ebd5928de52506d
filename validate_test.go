package cairn_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
)

const surrogate = "\xed\xa0\x80" // U+D800 in CESU-8: invalid UTF-8

// expectCode checks that err matches want, or is nil when want is nil.
func expectCode(t *testing.T, what string, err error, want *cairn.Error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Errorf("%s: got %v, want no error", what, err)
	case want != nil && !errors.Is(err, want):
		t.Errorf("%s: got %v, want %s", what, err, want.Code)
	}
}

func TestValidateID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"a", true}, {" ", true}, {"\x00", true}, {"a/b", true}, {"/", true}, {"é", true}, {"😀", true},
		{"\uFFFD", true}, {strings.Repeat("x", cairn.MaxIDBytes), true}, {strings.Repeat("\x00", cairn.MaxIDBytes), true}, {".", true},
		{strings.Repeat("x", cairn.MaxIDBytes+1), false}, {strings.Repeat("é", cairn.MaxIDBytes/2) + "x", false},
		{"", false}, {surrogate, false}, {"\xff", false}, {"a\xc3", false}, {"\xc0\x80", false}, {"ok" + surrogate, false},
	} {
		err := cairn.ValidateID(tc.id, "id")
		if tc.ok {
			expectCode(t, "ValidateID("+shortQ(tc.id)+")", err, nil)
		} else {
			expectCode(t, "ValidateID("+shortQ(tc.id)+")", err, cairn.ErrInvalidID)
		}
	}
}

func shortQ(s string) string {
	if len(s) > 20 {
		s = s[:20] + "..."
	}
	return strings.ReplaceAll(strings.ReplaceAll(string(mustJSON(s)), "\\u0000", "\\0"), "\n", "\\n")
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// pathsAccepted and pathsRejected are the path examples of the contract.
var (
	pathsAccepted = []string{
		"a", "a/b", "C:foo", "c:foo/bar", "C:foo:bar", "ab:/c", "1:", ":", "x/C:", "...", "..a", "a..", ".hidden",
		"a/.hidden", "a b", " ", "é", "e\u0301", surrogate, "\xff", "~", strings.Repeat("a/", 100) + "z",
	}
	pathsRejected = []string{
		"", "/", "/a", "a//b", "a/", "./x", "x/.", "x/..", "../x", "a/../b", ".", "..", "C:", "z:", "C:/x", "C:/",
		"C:\\x", "\\a", "a\\b", "a\\", "a\x00b", "\x00",
	}
)

func TestValidatePath(t *testing.T) {
	for _, p := range pathsAccepted {
		if !cairn.ValidatePath(p) {
			t.Errorf("ValidatePath(%s) = false, want true", shortQ(p))
		}
	}
	for _, p := range pathsRejected {
		if cairn.ValidatePath(p) {
			t.Errorf("ValidatePath(%s) = true, want false", shortQ(p))
		}
	}
}

func TestBlobKeyForms(t *testing.T) {
	hex := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		key            string
		file, artifact bool
	}{
		{cairn.FileBlobPrefix + hex, true, false},
		{cairn.ArtifactBlobPrefix + hex, false, true},
		{cairn.FileBlobPrefix + strings.ToUpper(hex), false, false},
		{cairn.FileBlobPrefix + hex[:63], false, false},
		{cairn.FileBlobPrefix + hex + "0", false, false},
		{cairn.FileBlobPrefix + hex[:63] + "g", false, false},
		{cairn.ArtifactBlobPrefix + hex[:62] + "A0", false, false},
		{cairn.FileBlobPrefix, false, false},
		{"", false, false},
		{hex, false, false},
		{"x" + cairn.FileBlobPrefix + hex, false, false},
		{cairn.FileBlobPrefix + surrogate + hex[:61], false, false},
	} {
		if got := cairn.IsFileBlobKey(tc.key); got != tc.file {
			t.Errorf("IsFileBlobKey(%q) = %v, want %v", tc.key, got, tc.file)
		}
		if got := cairn.IsArtifactBlobKey(tc.key); got != tc.artifact {
			t.Errorf("IsArtifactBlobKey(%q) = %v, want %v", tc.key, got, tc.artifact)
		}
	}
}

func TestValidateCreatedAt(t *testing.T) {
	for _, f := range []float64{0, -1, 1.5, math.Copysign(0, -1), math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64} {
		expectCode(t, "ValidateCreatedAt", cairn.ValidateCreatedAt(f, "createdAt"), nil)
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		expectCode(t, "ValidateCreatedAt", cairn.ValidateCreatedAt(f, "createdAt"), cairn.ErrInvalidEntry)
	}
}

var keyB = cairn.FileBlobPrefix + strings.Repeat("b", 64)

func fileEntry(p string) cairn.Entry {
	return cairn.Entry{Path: p, Kind: cairn.KindFile, BlobKey: keyA, Size: 1}
}
func dirEntry(p string) cairn.Entry { return cairn.Entry{Path: p, Kind: cairn.KindDir} }

func TestValidateEntries(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []cairn.Entry
		ok    bool
	}{
		{"Nil", nil, true},
		{"Empty", []cairn.Entry{}, true},
		{"FileAndDir", []cairn.Entry{fileEntry("a"), dirEntry("b")}, true},
		{"FileThenFileBeneath", []cairn.Entry{fileEntry("a"), fileEntry("a/b")}, false},
		{"FileBeneathThenFile", []cairn.Entry{fileEntry("a/b"), fileEntry("a")}, false},
		{"DeepBeneathThenFile", []cairn.Entry{fileEntry("a/b/c/d"), fileEntry("a/b")}, false},
		{"DirBeneathThenFile", []cairn.Entry{dirEntry("a/b"), fileEntry("a")}, false},
		{"FileBeneathThenDir", []cairn.Entry{fileEntry("a/b"), dirEntry("a")}, true},
		{"DirThenFileBeneath", []cairn.Entry{dirEntry("a"), fileEntry("a/b")}, true},
		{"PrefixIsNotAncestor", []cairn.Entry{fileEntry("ab/c"), fileEntry("a"), fileEntry("a.b")}, true},
		{"DuplicatePath", []cairn.Entry{fileEntry("a"), dirEntry("b"), fileEntry("a")}, false},
		{"DuplicateDir", []cairn.Entry{dirEntry("a"), dirEntry("a")}, false},
		{"BadPath", []cairn.Entry{fileEntry("a/")}, false},
		{"DirWithBlobKey", []cairn.Entry{{Path: "d", Kind: cairn.KindDir, BlobKey: keyA}}, false},
		{"DirWithSize", []cairn.Entry{{Path: "d", Kind: cairn.KindDir, Size: 1}}, false},
		{"UnknownKind", []cairn.Entry{{Path: "a", Kind: "symlink", BlobKey: keyA, Size: 1}}, false},
		{"EmptyKind", []cairn.Entry{{Path: "a", BlobKey: keyA, Size: 1}}, false},
		{"FileWithoutKey", []cairn.Entry{{Path: "a", Kind: cairn.KindFile, Size: 1}}, false},
		{"FileWithArtifactKey", []cairn.Entry{{Path: "a", Kind: cairn.KindFile, BlobKey: artA, Size: 1}}, false},
		{"SizeZero", []cairn.Entry{{Path: "a", Kind: cairn.KindFile, BlobKey: keyA}}, true},
		{"SizeMaxSafe", []cairn.Entry{{Path: "a", Kind: cairn.KindFile, BlobKey: keyA, Size: cairn.MaxSafeInteger}}, true},
		{"SizeNegative", []cairn.Entry{{Path: "a", Kind: cairn.KindFile, BlobKey: keyA, Size: -1}}, false},
		{"SizeUnsafe", []cairn.Entry{{Path: "a", Kind: cairn.KindFile, BlobKey: keyA, Size: cairn.MaxSafeInteger + 1}}, false},
		{"SameKeyTwice", []cairn.Entry{fileEntry("a"), fileEntry("b")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cairn.ValidateEntries(tc.files)
			if tc.ok {
				expectCode(t, "ValidateEntries", err, nil)
			} else {
				expectCode(t, "ValidateEntries", err, cairn.ErrInvalidEntry)
			}
		})
	}
}

func TestValidateArtifacts(t *testing.T) {
	ok := cairn.Artifact{ArtifactID: "x", Name: "n", MimeType: "m", Size: 1, BlobKey: artA, CreatedAt: 1}
	expectCode(t, "valid", cairn.ValidateArtifacts([]cairn.Artifact{ok, ok}), nil)
	expectCode(t, "nil", cairn.ValidateArtifacts(nil), nil)
	loose := ok
	loose.Name, loose.MimeType, loose.CreatedAt, loose.Size = "\xff", " ", -1.5, 0
	expectCode(t, "unchecked name and mime type", cairn.ValidateArtifacts([]cairn.Artifact{loose}), nil)
	for name, edit := range map[string]func(a *cairn.Artifact){
		"EmptyID":     func(a *cairn.Artifact) { a.ArtifactID = "" },
		"MalformedID": func(a *cairn.Artifact) { a.ArtifactID = surrogate },
		"EmptyName":   func(a *cairn.Artifact) { a.Name = "" },
		"EmptyMime":   func(a *cairn.Artifact) { a.MimeType = "" },
		"FileKey":     func(a *cairn.Artifact) { a.BlobKey = keyA },
		"UpperKey":    func(a *cairn.Artifact) { a.BlobKey = strings.ToUpper(a.BlobKey) },
		"Negative":    func(a *cairn.Artifact) { a.Size = -1 },
		"Unsafe":      func(a *cairn.Artifact) { a.Size = cairn.MaxSafeInteger + 1 },
		"NaN":         func(a *cairn.Artifact) { a.CreatedAt = math.NaN() },
		"Inf":         func(a *cairn.Artifact) { a.CreatedAt = math.Inf(-1) },
	} {
		bad := ok
		edit(&bad)
		expectCode(t, name, cairn.ValidateArtifacts([]cairn.Artifact{ok, bad}), cairn.ErrInvalidEntry)
	}
}

func TestValidateConversation(t *testing.T) {
	for _, c := range []json.RawMessage{nil, json.RawMessage("null"), json.RawMessage(" [ ] "), json.RawMessage(`{"a":1}`), json.RawMessage("5")} {
		expectCode(t, "ValidateConversation("+string(c)+")", cairn.ValidateConversation(c), nil)
	}
	for _, c := range []json.RawMessage{{}, json.RawMessage("{"), json.RawMessage("[1,]"), json.RawMessage("[1] [2]"), json.RawMessage("undefined")} {
		expectCode(t, "ValidateConversation("+string(c)+")", cairn.ValidateConversation(c), cairn.ErrInvalidEntry)
	}
}

func validAppend() cairn.AppendInput {
	return cairn.AppendInput{
		Checkpoint: cairn.Checkpoint{
			ID: "2", ThreadID: "t", ParentCheckpointID: "1", CreatedAt: 2,
			Files: []cairn.Entry{fileEntry("a")}, Conversation: json.RawMessage("[]"),
			Artifacts: []cairn.Artifact{{ArtifactID: "x", Name: "n", MimeType: "m", Size: 1, BlobKey: artA, CreatedAt: 1}},
		},
		ExpectedHeadID: "1",
		Writer:         cairn.Writer{ThreadID: "t", OwnerToken: "o", Fence: 1},
	}
}

// TestCheckAppendInputOrder combines two faults in each input: only the
// error of the earlier check in the contract's order is right.
func TestCheckAppendInputOrder(t *testing.T) {
	type edit = func(in *cairn.AppendInput)
	threadID := func(v string) edit { return func(in *cairn.AppendInput) { in.Checkpoint.ThreadID = v } }
	writerThread := func(v string) edit { return func(in *cairn.AppendInput) { in.Writer.ThreadID = v } }
	id := func(v string) edit { return func(in *cairn.AppendInput) { in.Checkpoint.ID = v } }
	expected := func(v string) edit { return func(in *cairn.AppendInput) { in.ExpectedHeadID = v } }
	parent := func(v string) edit { return func(in *cairn.AppendInput) { in.Checkpoint.ParentCheckpointID = v } }
	createdAt := func(in *cairn.AppendInput) { in.Checkpoint.CreatedAt = math.NaN() }
	entries := func(in *cairn.AppendInput) { in.Checkpoint.Files = []cairn.Entry{fileEntry("/a")} }
	artifacts := func(in *cairn.AppendInput) { in.Checkpoint.Artifacts = []cairn.Artifact{{}} }
	conversation := func(in *cairn.AppendInput) { in.Checkpoint.Conversation = json.RawMessage("{") }
	for _, tc := range []struct {
		name  string
		edits []edit
		want  *cairn.Error
	}{
		{"Valid", nil, nil},
		{"RootOnEmptyThread", []edit{expected(""), parent("")}, nil},
		{"InvalidThreadBeforeWriterMismatch", []edit{threadID(""), writerThread("t")}, cairn.ErrInvalidID},
		{"InvalidThreadBeforeInvalidWriterThread", []edit{threadID(surrogate), writerThread("")}, cairn.ErrInvalidID},
		{"InvalidWriterThreadBeforeEntries", []edit{writerThread(surrogate), entries}, cairn.ErrInvalidID},
		{"InvalidIDBeforeMismatch", []edit{id(""), writerThread("other")}, cairn.ErrInvalidID},
		{"InvalidExpectedBeforeMismatch", []edit{expected(surrogate), writerThread("other")}, cairn.ErrInvalidID},
		{"InvalidParentBeforeCreatedAt", []edit{parent("\xff"), createdAt}, cairn.ErrInvalidID},
		{"MismatchBeforeCreatedAt", []edit{writerThread("other"), createdAt}, cairn.ErrWriterLost},
		{"MismatchBeforeEntries", []edit{writerThread("other"), entries}, cairn.ErrWriterLost},
		{"MismatchBeforeArtifacts", []edit{writerThread("other"), artifacts}, cairn.ErrWriterLost},
		{"MismatchBeforeConversation", []edit{writerThread("other"), conversation}, cairn.ErrWriterLost},
		{"CreatedAt", []edit{createdAt}, cairn.ErrInvalidEntry},
		{"Entries", []edit{entries}, cairn.ErrInvalidEntry},
		{"Artifacts", []edit{artifacts}, cairn.ErrInvalidEntry},
		{"Conversation", []edit{conversation}, cairn.ErrInvalidEntry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := validAppend()
			for _, e := range tc.edits {
				e(&in)
			}
			err := cairn.CheckAppendInput(&in)
			expectCode(t, "CheckAppendInput", err, tc.want)
			var d cairn.BlobDigests
			if got := cairn.CheckAppendInputDigests(&in, &d); fmt.Sprint(got) != fmt.Sprint(err) {
				t.Errorf("CheckAppendInputDigests: %v; CheckAppendInput: %v", got, err)
			}
		})
	}
}

// CheckAppendInputDigests decodes every blob key it accepts, in arrays it
// reuses, whatever the order of the entries.
func TestCheckAppendInputDigests(t *testing.T) {
	digest := func(k string) (d [32]byte) {
		b, err := hex.DecodeString(k[strings.LastIndexByte(k, '/')+1:])
		if err != nil || copy(d[:], b) != 32 {
			t.Fatalf("key %q", k)
		}
		return d
	}
	key := func(prefix string, i int) string {
		d := sha256.Sum256([]byte{byte(i)})
		return prefix + hex.EncodeToString(d[:])
	}
	d := cairn.BlobDigests{Files: make([][32]byte, 1, 50), Artifacts: make([][32]byte, 9)}
	for _, order := range []string{"Sorted", "Unsorted"} {
		in := validAppend()
		c := &in.Checkpoint
		c.Files = []cairn.Entry{{Path: "d", Kind: cairn.KindDir}}
		for i := range 40 {
			c.Files = append(c.Files, cairn.Entry{Path: fmt.Sprintf("d/f%02d", i), Kind: cairn.KindFile, BlobKey: key(cairn.FileBlobPrefix, i)})
		}
		c.Artifacts = nil
		for i := range 3 {
			c.Artifacts = append(c.Artifacts, cairn.Artifact{ArtifactID: "a", Name: "n", MimeType: "m", BlobKey: key(cairn.ArtifactBlobPrefix, 100+i)})
		}
		if order == "Unsorted" {
			slices.Reverse(c.Files)
		}
		if err := cairn.CheckAppendInputDigests(&in, &d); err != nil {
			t.Fatalf("%s: %v", order, err)
		}
		if len(d.Files) != len(c.Files) || len(d.Artifacts) != len(c.Artifacts) {
			t.Fatalf("%s: %d and %d digests for %d files and %d artifacts", order, len(d.Files), len(d.Artifacts), len(c.Files), len(c.Artifacts))
		}
		for i, e := range c.Files {
			if e.Kind == cairn.KindFile && d.Files[i] != digest(e.BlobKey) {
				t.Errorf("%s: file %q: digest %x", order, e.Path, d.Files[i])
			}
		}
		for i, a := range c.Artifacts {
			if d.Artifacts[i] != digest(a.BlobKey) {
				t.Errorf("%s: artifact %d: digest %x", order, i, d.Artifacts[i])
			}
		}
	}
}

func TestWriterRecord(t *testing.T) {
	rec := &cairn.WriterRecord{OwnerToken: "o", Fence: 2, ExpiresAt: 100}
	w := cairn.Writer{ThreadID: "t", OwnerToken: "o", Fence: 2}
	if !rec.Current(w, 99.999) || !rec.Live(99.999) {
		t.Error("a lease before its expiry is not current")
	}
	if rec.Current(w, 100) || rec.Live(100) {
		t.Error("a lease is current at expiresAt == now")
	}
	if rec.Current(cairn.Writer{ThreadID: "t", OwnerToken: "x", Fence: 2}, 0) || rec.Current(cairn.Writer{ThreadID: "t", OwnerToken: "o", Fence: 3}, 0) {
		t.Error("a writer with another token or fence is current")
	}
	var none *cairn.WriterRecord
	if none.Current(w, 0) || none.Live(0) {
		t.Error("a nil record is current")
	}
}

func TestAppendViewCheckOrder(t *testing.T) {
	live := &cairn.WriterRecord{OwnerToken: "o", Fence: 1, ExpiresAt: 100}
	for _, tc := range []struct {
		name   string
		view   cairn.AppendView
		parent string
		now    float64
		want   *cairn.Error
	}{
		{"Valid", cairn.AppendView{Writer: live, Head: "1"}, "1", 0, nil},
		{"NoLease", cairn.AppendView{Head: "1"}, "1", 0, cairn.ErrWriterLost},
		{"ExpiredAtBoundaryBeforeDuplicate", cairn.AppendView{Writer: live, IDTaken: true, Head: "1"}, "1", 100, cairn.ErrWriterLost},
		{"OtherTokenBeforeStaleHead", cairn.AppendView{Writer: &cairn.WriterRecord{OwnerToken: "x", Fence: 1, ExpiresAt: 100}, Head: "9"}, "1", 0, cairn.ErrWriterLost},
		{"DuplicateBeforeStaleHead", cairn.AppendView{Writer: live, IDTaken: true, Head: "9"}, "1", 0, cairn.ErrDuplicateID},
		{"DuplicateBeforeParentMismatch", cairn.AppendView{Writer: live, IDTaken: true, Head: "1"}, "", 0, cairn.ErrDuplicateID},
		{"StaleHeadBeforeParentMismatch", cairn.AppendView{Writer: live, Head: "9"}, "8", 0, cairn.ErrStaleHead},
		{"ParentMismatch", cairn.AppendView{Writer: live, Head: "1"}, "", 0, cairn.ErrParentMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := validAppend()
			in.Checkpoint.ParentCheckpointID = tc.parent
			expectCode(t, "AppendView.Check", tc.view.Check(&in, tc.now), tc.want)
		})
	}
}

func TestDeleteHeadChecks(t *testing.T) {
	w := cairn.Writer{ThreadID: "t", OwnerToken: "o", Fence: 1}
	live := &cairn.WriterRecord{OwnerToken: "o", Fence: 1, ExpiresAt: 100}
	for _, tc := range []struct {
		name string
		in   cairn.DeleteHeadInput
		want *cairn.Error
	}{
		{"Valid", cairn.DeleteHeadInput{ThreadID: "t", CheckpointID: "1", Writer: w}, nil},
		{"InvalidThreadBeforeMismatch", cairn.DeleteHeadInput{ThreadID: "", CheckpointID: "1", Writer: w}, cairn.ErrInvalidID},
		{"InvalidCheckpoint", cairn.DeleteHeadInput{ThreadID: "t", CheckpointID: surrogate, Writer: w}, cairn.ErrInvalidID},
		{"InvalidWriterThread", cairn.DeleteHeadInput{ThreadID: "t", CheckpointID: "1", Writer: cairn.Writer{}}, cairn.ErrInvalidID},
		{"Mismatch", cairn.DeleteHeadInput{ThreadID: "t", CheckpointID: "1", Writer: cairn.Writer{ThreadID: "u"}}, cairn.ErrWriterLost},
	} {
		expectCode(t, "CheckDeleteHeadInput/"+tc.name, cairn.CheckDeleteHeadInput(&tc.in), tc.want)
	}
	in := cairn.DeleteHeadInput{ThreadID: "t", CheckpointID: "1", Writer: w}
	for _, tc := range []struct {
		name string
		view cairn.DeleteHeadView
		now  float64
		want *cairn.Error
	}{
		{"Valid", cairn.DeleteHeadView{Writer: live, Head: "1", HeadExists: true}, 0, nil},
		{"ExpiredBeforeNotHead", cairn.DeleteHeadView{Writer: live, Head: "2", HeadExists: true}, 100, cairn.ErrWriterLost},
		{"NotHead", cairn.DeleteHeadView{Writer: live, Head: "2", HeadExists: true}, 0, cairn.ErrNotHead},
		{"EmptyThread", cairn.DeleteHeadView{Writer: live}, 0, cairn.ErrNotHead},
		{"HeadMissing", cairn.DeleteHeadView{Writer: live, Head: "1"}, 0, cairn.ErrNotHead},
	} {
		expectCode(t, "DeleteHeadView.Check/"+tc.name, tc.view.Check(&in, tc.now), tc.want)
	}
}

func TestCheckDeleteCheckpointsInput(t *testing.T) {
	w := cairn.Writer{ThreadID: "t", OwnerToken: "o", Fence: 1}
	for _, keep := range []float64{1, 2, 1e6, cairn.MaxSafeInteger} {
		in := cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: keep, Writer: w}
		expectCode(t, "valid keep", cairn.CheckDeleteCheckpointsInput(&in), nil)
	}
	for _, keep := range []float64{0, -1, 0.5, 1.5, math.NaN(), math.Inf(1), math.Inf(-1), cairn.MaxSafeInteger + 1, math.Copysign(0, -1)} {
		in := cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: keep, Writer: w}
		expectCode(t, "invalid keep", cairn.CheckDeleteCheckpointsInput(&in), cairn.ErrInvalidEntry)
	}
	for _, tc := range []struct {
		name string
		in   cairn.DeleteCheckpointsInput
		want *cairn.Error
	}{
		{"InvalidThreadBeforeMismatch", cairn.DeleteCheckpointsInput{ThreadID: "", Keep: 0, Writer: w}, cairn.ErrInvalidID},
		{"InvalidWriterThreadBeforeKeep", cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: 0, Writer: cairn.Writer{ThreadID: surrogate}}, cairn.ErrInvalidID},
		{"MismatchBeforeKeep", cairn.DeleteCheckpointsInput{ThreadID: "t", Keep: 0, Writer: cairn.Writer{ThreadID: "u"}}, cairn.ErrWriterLost},
	} {
		expectCode(t, tc.name, cairn.CheckDeleteCheckpointsInput(&tc.in), tc.want)
	}
}

func TestForkChecks(t *testing.T) {
	valid := func() cairn.ForkInput {
		return cairn.ForkInput{SourceThreadID: "s", SourceCheckpointID: "c", DestinationThreadID: "d", DestinationCheckpointID: "r",
			CreatedAt: 1, Writer: cairn.Writer{ThreadID: "d", OwnerToken: "o", Fence: 1}}
	}
	for _, tc := range []struct {
		name string
		edit func(in *cairn.ForkInput)
		want *cairn.Error
	}{
		{"Valid", func(*cairn.ForkInput) {}, nil},
		{"InvalidSourceThread", func(in *cairn.ForkInput) { in.SourceThreadID = "" }, cairn.ErrInvalidID},
		{"InvalidSourceCheckpoint", func(in *cairn.ForkInput) { in.SourceCheckpointID = surrogate }, cairn.ErrInvalidID},
		{"InvalidDestinationThread", func(in *cairn.ForkInput) { in.DestinationThreadID = "" }, cairn.ErrInvalidID},
		{"InvalidDestinationCheckpoint", func(in *cairn.ForkInput) { in.DestinationCheckpointID = "\xff" }, cairn.ErrInvalidID},
		{"InvalidWriterThread", func(in *cairn.ForkInput) { in.Writer.ThreadID = "" }, cairn.ErrInvalidID},
		{"InvalidIDBeforeCreatedAt", func(in *cairn.ForkInput) { in.SourceThreadID, in.CreatedAt = "", math.NaN() }, cairn.ErrInvalidID},
		{"CreatedAtBeforeSameThread", func(in *cairn.ForkInput) { in.DestinationThreadID, in.CreatedAt = "s", math.Inf(1) }, cairn.ErrInvalidEntry},
		{"SameThread", func(in *cairn.ForkInput) { in.DestinationThreadID = "s" }, cairn.ErrForkSourceThreadMismatch},
	} {
		in := valid()
		tc.edit(&in)
		expectCode(t, "CheckForkInput/"+tc.name, cairn.CheckForkInput(&in), tc.want)
	}
	live := &cairn.WriterRecord{OwnerToken: "o", Fence: 1, ExpiresAt: 100}
	for _, tc := range []struct {
		name   string
		view   cairn.ForkView
		writer string
		now    float64
		want   *cairn.Error
	}{
		{"Valid", cairn.ForkView{SourceThread: "s", Writer: live}, "d", 0, nil},
		{"MissingSourceBeforeWriter", cairn.ForkView{Writer: nil, DestinationUsed: true}, "x", 0, cairn.ErrForkSourceNotFound},
		{"SourceMismatchBeforeWriter", cairn.ForkView{SourceThread: "other"}, "x", 0, cairn.ErrForkSourceThreadMismatch},
		{"WriterThreadBeforeDestination", cairn.ForkView{SourceThread: "s", Writer: live, DestinationUsed: true}, "x", 0, cairn.ErrWriterLost},
		{"ExpiredBeforeDestination", cairn.ForkView{SourceThread: "s", Writer: live, DestinationUsed: true}, "d", 100, cairn.ErrWriterLost},
		{"DestinationUsed", cairn.ForkView{SourceThread: "s", Writer: live, DestinationUsed: true}, "d", 0, cairn.ErrForkDestinationNotEmpty},
	} {
		in := valid()
		in.Writer.ThreadID = tc.writer
		expectCode(t, "ForkView.Check/"+tc.name, tc.view.Check(&in, tc.now), tc.want)
	}
}

func TestForkRoot(t *testing.T) {
	src := cairn.Checkpoint{
		ID: "c", ThreadID: "s", ParentCheckpointID: "p", CreatedAt: 1, Reason: cairn.ReasonNamed, Label: "l", SourceRunID: "r",
		Files: []cairn.Entry{fileEntry("a")}, Conversation: json.RawMessage(`[1]`),
		Artifacts: []cairn.Artifact{{ArtifactID: "x", Name: "n", MimeType: "m", BlobKey: artA}},
	}
	in := cairn.ForkInput{DestinationThreadID: "d", DestinationCheckpointID: "r", CreatedAt: -2}
	root := cairn.ForkRoot(&src, &in)
	want := cairn.Checkpoint{ID: "r", ThreadID: "d", CreatedAt: -2, Reason: cairn.ReasonForkRoot, Files: src.Files, Conversation: src.Conversation, Artifacts: src.Artifacts}
	if !reflectEqual(root, want) {
		t.Errorf("ForkRoot = %+v, want %+v", root, want)
	}
	root.Files[0].Path, root.Artifacts[0].Name, root.Conversation[0] = "x", "x", 'x'
	if src.Files[0].Path != "a" || src.Artifacts[0].Name != "n" || string(src.Conversation) != "[1]" {
		t.Error("ForkRoot shares memory with the source")
	}
}

func reflectEqual(a, b cairn.Checkpoint) bool {
	return string(mustJSON(a)) == string(mustJSON(b)) && a.Label == b.Label && a.SourceRunID == b.SourceRunID
}

func TestCheckpointClone(t *testing.T) {
	c := cairn.Checkpoint{ID: "1", Files: []cairn.Entry{fileEntry("a")}, Conversation: json.RawMessage(`[1]`), Artifacts: []cairn.Artifact{{Name: "n"}}}
	d := c.Clone()
	d.Files[0].Path, d.Artifacts[0].Name, d.Conversation[0] = "x", "x", 'x'
	if c.Files[0].Path != "a" || c.Artifacts[0].Name != "n" || string(c.Conversation) != "[1]" {
		t.Error("Clone shares memory with the original")
	}
	if e := (&cairn.Checkpoint{}).Clone(); e.Files != nil || e.Artifacts != nil || e.Conversation != nil {
		t.Errorf("Clone of nil lists = %+v, want nil lists", e)
	}
	if e := (&cairn.Checkpoint{Conversation: json.RawMessage{}}).Clone(); e.Conversation == nil {
		t.Error("Clone turned an empty, non-nil conversation into nil (null)")
	}
}

func TestCheckpointBlobKeys(t *testing.T) {
	c := cairn.Checkpoint{
		Files:     []cairn.Entry{{Path: "a", Kind: cairn.KindFile, BlobKey: keyB}, {Path: "b", Kind: cairn.KindFile, BlobKey: keyA}, {Path: "c", Kind: cairn.KindFile, BlobKey: keyB}, dirEntry("d")},
		Artifacts: []cairn.Artifact{{BlobKey: artA}, {BlobKey: artA}},
	}
	if got, want := c.BlobKeys(), []string{artA, keyA, keyB}; !slices.Equal(got, want) {
		t.Errorf("BlobKeys = %q, want %q", got, want)
	}
	if got := (&cairn.Checkpoint{Files: []cairn.Entry{dirEntry("d")}}).BlobKeys(); len(got) != 0 {
		t.Errorf("BlobKeys of directories = %q, want none", got)
	}
}

func TestSortCheckpoints(t *testing.T) {
	cs := []cairn.Checkpoint{{ID: "\U00010000", CreatedAt: 1}, {ID: "b", CreatedAt: -1.5}, {ID: "\uE000", CreatedAt: 1}, {ID: "a", CreatedAt: -1.5}, {ID: "z", CreatedAt: 0.5}}
	cairn.SortCheckpoints(cs)
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	if want := []string{"a", "b", "z", "\uE000", "\U00010000"}; !slices.Equal(ids, want) {
		t.Errorf("SortCheckpoints order %q, want %q", ids, want)
	}
}

func TestCheckpointString(t *testing.T) {
	c := cairn.Checkpoint{ID: "2", ThreadID: "t", ParentCheckpointID: "1", CreatedAt: 1.5, Files: []cairn.Entry{fileEntry("a")}}
	if got, want := c.String(), `checkpoint "2" (thread "t", parent "1", createdAt 1.5, 1 files, 0 artifacts)`; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
