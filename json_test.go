package cairn_test

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
)

var (
	keyA = cairn.FileBlobPrefix + strings.Repeat("a", 64)
	artA = cairn.ArtifactBlobPrefix + strings.Repeat("a", 64)
)

// fields decodes a JSON object into its raw fields.
func fields(t *testing.T, b []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s is not a JSON object: %v", b, err)
	}
	return m
}

func keys(m map[string]json.RawMessage) []string { return slices.Sorted(maps.Keys(m)) }

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal(%v): %v", v, err)
	}
	return b
}

// exported returns c with only its exported fields, so that a decoded
// checkpoint compares equal to the one that was encoded.
func exported(c cairn.Checkpoint) cairn.Checkpoint {
	out := c
	out.Files = nil
	for _, f := range c.Files {
		out.Files = append(out.Files, cairn.Entry{Path: f.Path, Kind: f.Kind, BlobKey: f.BlobKey, Size: f.Size})
	}
	out.Artifacts = nil
	for _, a := range c.Artifacts {
		out.Artifacts = append(out.Artifacts, cairn.Artifact{ArtifactID: a.ArtifactID, Name: a.Name, MimeType: a.MimeType, Size: a.Size, BlobKey: a.BlobKey, CreatedAt: a.CreatedAt})
	}
	return out
}

func TestCheckpointWireShape(t *testing.T) {
	root := cairn.Checkpoint{ID: "1", ThreadID: "t", CreatedAt: 1.5, Reason: cairn.ReasonAutomatic}
	m := fields(t, mustMarshal(t, root))
	if got, want := keys(m), []string{"artifacts", "conversation", "createdAt", "files", "id", "parentCheckpointId", "reason", "threadId"}; !slices.Equal(got, want) {
		t.Errorf("root checkpoint keys %q, want %q", got, want)
	}
	for k, want := range map[string]string{"parentCheckpointId": "null", "files": "[]", "artifacts": "[]", "conversation": "null", "createdAt": "1.5", "id": `"1"`, "threadId": `"t"`, "reason": `"automatic"`} {
		if string(m[k]) != want {
			t.Errorf("%s = %s, want %s", k, m[k], want)
		}
	}

	full := cairn.Checkpoint{
		ID: "2", ThreadID: "t", ParentCheckpointID: "1", CreatedAt: -3, Reason: cairn.ReasonNamed,
		Label: "l", SourceRunID: "r",
		Files:        []cairn.Entry{{Path: "a", Kind: cairn.KindFile, BlobKey: keyA, Size: 0}, {Path: "d", Kind: cairn.KindDir}},
		Conversation: json.RawMessage(`[{"role":"user","content":"hi"}]`),
		Artifacts:    []cairn.Artifact{{ArtifactID: "x", Name: "n", MimeType: "m", Size: 2, BlobKey: artA, CreatedAt: 4}},
	}
	m = fields(t, mustMarshal(t, full))
	for k, want := range map[string]string{"parentCheckpointId": `"1"`, "label": `"l"`, "sourceRunId": `"r"`, "conversation": `[{"role":"user","content":"hi"}]`} {
		if string(m[k]) != want {
			t.Errorf("%s = %s, want %s", k, m[k], want)
		}
	}
	var files []map[string]json.RawMessage
	if err := json.Unmarshal(m["files"], &files); err != nil {
		t.Fatal(err)
	}
	if got := keys(files[0]); !slices.Equal(got, []string{"blobKey", "kind", "path", "size"}) {
		t.Errorf("file entry keys %q", got)
	}
	if string(files[0]["size"]) != "0" {
		t.Errorf("a file of size 0 has size %s, want 0", files[0]["size"])
	}
	if got := keys(files[1]); !slices.Equal(got, []string{"kind", "path"}) {
		t.Errorf("dir entry keys %q, want [kind path]", got)
	}
	var arts []map[string]json.RawMessage
	if err := json.Unmarshal(m["artifacts"], &arts); err != nil {
		t.Fatal(err)
	}
	if got := keys(arts[0]); !slices.Equal(got, []string{"artifactId", "blobKey", "createdAt", "mimeType", "name", "size"}) {
		t.Errorf("artifact keys %q", got)
	}
}

func TestOtherWireShapes(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{cairn.Writer{ThreadID: "t", OwnerToken: "o", Fence: 3}, `{"threadId":"t","ownerToken":"o","fence":3}`},
		{cairn.BlobReference{Key: "k", References: 2}, `{"key":"k","references":2}`},
		{cairn.AppendResult{HeadID: "h"}, `{"headId":"h"}`},
		{cairn.InstanceRecord{Key: "k", Provider: "p", ProviderSandboxID: "s", ThreadID: "t", UpdatedAt: 1},
			`{"key":"k","provider":"p","providerSandboxId":"s","threadId":"t","updatedAt":1}`},
		{cairn.InstanceRecord{Key: "k", Provider: "p", ProviderSandboxID: "s", LatestSnapshotID: "snap", ThreadID: "t", LatestRunID: "run", UpdatedAt: 1.5},
			`{"key":"k","provider":"p","providerSandboxId":"s","latestSnapshotId":"snap","threadId":"t","latestRunId":"run","updatedAt":1.5}`},
	} {
		if got := string(mustMarshal(t, tc.v)); got != tc.want {
			t.Errorf("json.Marshal(%+v) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

func TestCheckpointJSONRoundTrip(t *testing.T) {
	for _, c := range []cairn.Checkpoint{
		{ID: "1", ThreadID: "t", CreatedAt: 1, Reason: "automatic"},
		{
			ID: "é/2\x00", ThreadID: "t t", ParentCheckpointID: "1", CreatedAt: -0.125, Reason: "whatever",
			Label: "l", SourceRunID: "r",
			Files: []cairn.Entry{
				{Path: "z", Kind: cairn.KindFile, BlobKey: keyA, Size: cairn.MaxSafeInteger},
				{Path: "a/b", Kind: cairn.KindDir},
				{Path: "C:foo", Kind: cairn.KindFile, BlobKey: keyA, Size: 0},
			},
			Conversation: json.RawMessage(`{"any":["json",1,null]}`),
			Artifacts:    []cairn.Artifact{{ArtifactID: "x", Name: "n", MimeType: "m", Size: 0, BlobKey: artA, CreatedAt: -1}},
		},
	} {
		b := mustMarshal(t, c)
		var got cairn.Checkpoint
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("json.Unmarshal(%s): %v", b, err)
		}
		if !reflect.DeepEqual(exported(got), exported(c)) {
			t.Errorf("round trip of %s gave %+v, want %+v", b, got, c)
		}
		if err := cairn.CheckCheckpointContent(&got); err != nil {
			t.Errorf("the decoded form of a valid checkpoint is invalid: %v", err)
		}
		if again := mustMarshal(t, got); string(again) != string(b) {
			t.Errorf("second encoding %s differs from the first %s", again, b)
		}
	}
}

// validCheckpointJSON is a valid checkpoint; the decoding cases replace one
// field of it.
func validCheckpointJSON(replace map[string]string) string {
	f := map[string]string{
		"id": `"1"`, "threadId": `"t"`, "parentCheckpointId": "null", "createdAt": "1", "reason": `"automatic"`,
		"files":        `[{"path":"a","kind":"file","blobKey":"` + keyA + `","size":1},{"path":"d","kind":"dir"}]`,
		"conversation": `[]`,
		"artifacts":    `[{"artifactId":"x","name":"n","mimeType":"m","size":1,"blobKey":"` + artA + `","createdAt":2}]`,
	}
	for k, v := range replace {
		if v == "" {
			delete(f, k)
		} else {
			f[k] = v
		}
	}
	parts := []string{}
	for _, k := range slices.Sorted(maps.Keys(f)) {
		parts = append(parts, `"`+k+`":`+f[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func file(extra string) string {
	return `[{"path":"a","kind":"file","blobKey":"` + keyA + `"` + extra + `}]`
}

func art(replace map[string]string) string {
	f := map[string]string{"artifactId": `"x"`, "name": `"n"`, "mimeType": `"m"`, "size": "1", "blobKey": `"` + artA + `"`, "createdAt": "2"}
	for k, v := range replace {
		if v == "" {
			delete(f, k)
		} else {
			f[k] = v
		}
	}
	parts := []string{}
	for _, k := range slices.Sorted(maps.Keys(f)) {
		parts = append(parts, `"`+k+`":`+f[k])
	}
	return "[{" + strings.Join(parts, ",") + "}]"
}

// TestCheckpointJSONDecoding checks the errors of decoding: ErrInvalidID from
// UnmarshalJSON for data that is not an object or an identifier that is not a
// string, and ErrInvalidEntry from validation for every other bad field.
func TestCheckpointJSONDecoding(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		want *cairn.Error // nil: decodes to a valid checkpoint
	}{
		{"Valid", validCheckpointJSON(nil), nil},
		{"ParentAbsent", validCheckpointJSON(map[string]string{"parentCheckpointId": ""}), nil},
		{"ConversationAbsent", validCheckpointJSON(map[string]string{"conversation": ""}), nil},
		{"SizeOneZero", validCheckpointJSON(map[string]string{"files": file(`,"size":1.0`)}), nil},
		{"SizeExponent", validCheckpointJSON(map[string]string{"files": file(`,"size":1e3`)}), nil},
		{"SizeNegativeZero", validCheckpointJSON(map[string]string{"files": file(`,"size":-0`)}), nil},
		{"SizeMaxSafe", validCheckpointJSON(map[string]string{"files": file(`,"size":9007199254740991`)}), nil},
		{"LabelNotString", validCheckpointJSON(map[string]string{"label": "5"}), nil},
		{"ReasonNotString", validCheckpointJSON(map[string]string{"reason": "{}"}), nil},

		{"NotAnObject", `[]`, cairn.ErrInvalidID},
		{"Null", `null`, cairn.ErrInvalidID},
		{"Number", `5`, cairn.ErrInvalidID},
		{"Truncated", `{"id":"1"`, cairn.ErrInvalidID},
		{"IDNumber", validCheckpointJSON(map[string]string{"id": "7"}), cairn.ErrInvalidID},
		{"ThreadIDBool", validCheckpointJSON(map[string]string{"threadId": "true"}), cairn.ErrInvalidID},
		{"ParentObject", validCheckpointJSON(map[string]string{"parentCheckpointId": "{}"}), cairn.ErrInvalidID},
		{"IDNull", validCheckpointJSON(map[string]string{"id": "null"}), cairn.ErrInvalidID},
		{"ThreadIDAbsent", validCheckpointJSON(map[string]string{"threadId": ""}), cairn.ErrInvalidID},
		{"IDEmpty", validCheckpointJSON(map[string]string{"id": `""`}), cairn.ErrInvalidID},

		{"CreatedAtString", validCheckpointJSON(map[string]string{"createdAt": `"1"`}), cairn.ErrInvalidEntry},
		{"CreatedAtNull", validCheckpointJSON(map[string]string{"createdAt": "null"}), cairn.ErrInvalidEntry},
		{"CreatedAtAbsent", validCheckpointJSON(map[string]string{"createdAt": ""}), cairn.ErrInvalidEntry},
		{"CreatedAtOverflow", validCheckpointJSON(map[string]string{"createdAt": "1e400"}), cairn.ErrInvalidEntry},
		{"FilesObject", validCheckpointJSON(map[string]string{"files": "{}"}), cairn.ErrInvalidEntry},
		{"FilesNull", validCheckpointJSON(map[string]string{"files": "null"}), cairn.ErrInvalidEntry},
		{"FilesAbsent", validCheckpointJSON(map[string]string{"files": ""}), cairn.ErrInvalidEntry},
		{"FilesString", validCheckpointJSON(map[string]string{"files": `"a"`}), cairn.ErrInvalidEntry},
		{"EntryNull", validCheckpointJSON(map[string]string{"files": "[null]"}), cairn.ErrInvalidEntry},
		{"EntryNumber", validCheckpointJSON(map[string]string{"files": "[1]"}), cairn.ErrInvalidEntry},
		{"PathNumber", validCheckpointJSON(map[string]string{"files": `[{"path":1,"kind":"dir"}]`}), cairn.ErrInvalidEntry},
		{"PathNull", validCheckpointJSON(map[string]string{"files": `[{"path":null,"kind":"dir"}]`}), cairn.ErrInvalidEntry},
		{"KindAbsent", validCheckpointJSON(map[string]string{"files": `[{"path":"a"}]`}), cairn.ErrInvalidEntry},
		{"KindNumber", validCheckpointJSON(map[string]string{"files": `[{"path":"a","kind":1}]`}), cairn.ErrInvalidEntry},
		{"KindSymlink", validCheckpointJSON(map[string]string{"files": `[{"path":"a","kind":"symlink"}]`}), cairn.ErrInvalidEntry},
		{"SizeAbsent", validCheckpointJSON(map[string]string{"files": file(``)}), cairn.ErrInvalidEntry},
		{"SizeNull", validCheckpointJSON(map[string]string{"files": file(`,"size":null`)}), cairn.ErrInvalidEntry},
		{"SizeString", validCheckpointJSON(map[string]string{"files": file(`,"size":"1"`)}), cairn.ErrInvalidEntry},
		{"SizeFraction", validCheckpointJSON(map[string]string{"files": file(`,"size":1.5`)}), cairn.ErrInvalidEntry},
		{"SizeNegative", validCheckpointJSON(map[string]string{"files": file(`,"size":-1`)}), cairn.ErrInvalidEntry},
		{"SizeUnsafe", validCheckpointJSON(map[string]string{"files": file(`,"size":9007199254740992`)}), cairn.ErrInvalidEntry},
		{"BlobKeyNumber", validCheckpointJSON(map[string]string{"files": `[{"path":"a","kind":"file","blobKey":1,"size":1}]`}), cairn.ErrInvalidEntry},
		{"BlobKeyAbsent", validCheckpointJSON(map[string]string{"files": `[{"path":"a","kind":"file","size":1}]`}), cairn.ErrInvalidEntry},
		{"DirSizeZero", validCheckpointJSON(map[string]string{"files": `[{"path":"d","kind":"dir","size":0}]`}), cairn.ErrInvalidEntry},
		{"DirBlobKeyNull", validCheckpointJSON(map[string]string{"files": `[{"path":"d","kind":"dir","blobKey":null}]`}), cairn.ErrInvalidEntry},
		{"ArtifactsObject", validCheckpointJSON(map[string]string{"artifacts": "{}"}), cairn.ErrInvalidEntry},
		{"ArtifactsAbsent", validCheckpointJSON(map[string]string{"artifacts": ""}), cairn.ErrInvalidEntry},
		{"ArtifactNull", validCheckpointJSON(map[string]string{"artifacts": "[null]"}), cairn.ErrInvalidEntry},
		{"ArtifactIDNumber", validCheckpointJSON(map[string]string{"artifacts": art(map[string]string{"artifactId": "5"})}), cairn.ErrInvalidEntry},
		{"ArtifactNameAbsent", validCheckpointJSON(map[string]string{"artifacts": art(map[string]string{"name": ""})}), cairn.ErrInvalidEntry},
		{"ArtifactSizeNull", validCheckpointJSON(map[string]string{"artifacts": art(map[string]string{"size": "null"})}), cairn.ErrInvalidEntry},
		{"ArtifactSizeFraction", validCheckpointJSON(map[string]string{"artifacts": art(map[string]string{"size": "0.5"})}), cairn.ErrInvalidEntry},
		{"ArtifactCreatedAtNull", validCheckpointJSON(map[string]string{"artifacts": art(map[string]string{"createdAt": "null"})}), cairn.ErrInvalidEntry},
		{"ArtifactCreatedAtAbsent", validCheckpointJSON(map[string]string{"artifacts": art(map[string]string{"createdAt": ""})}), cairn.ErrInvalidEntry},
		{"ArtifactCreatedAtString", validCheckpointJSON(map[string]string{"artifacts": art(map[string]string{"createdAt": `"2"`})}), cairn.ErrInvalidEntry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Call the method itself: json.Unmarshal rejects bad syntax
			// before it calls UnmarshalJSON.
			var c cairn.Checkpoint
			err := c.UnmarshalJSON([]byte(tc.data))
			if err == nil {
				in := cairn.AppendInput{Checkpoint: c, Writer: cairn.Writer{ThreadID: c.ThreadID}}
				err = cairn.CheckAppendInput(&in)
			}
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("%s: %v, want a valid checkpoint", tc.data, err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("%s: got %v, want %s", tc.data, err, tc.want.Code)
			}
			var ce *cairn.Error
			if err != nil && !errors.As(err, &ce) {
				t.Errorf("%s: error %v is not a *cairn.Error", tc.data, err)
			}
		})
	}
}

func TestCheckpointJSONKeepsConversationBytes(t *testing.T) {
	conv := "[ {\"a\" :  1} ,\n 2 ]"
	var c cairn.Checkpoint
	if err := json.Unmarshal([]byte(validCheckpointJSON(map[string]string{"conversation": conv})), &c); err != nil {
		t.Fatal(err)
	}
	if string(c.Conversation) != conv {
		t.Errorf("decoded conversation %q, want %q", c.Conversation, conv)
	}
	if err := json.Unmarshal([]byte(validCheckpointJSON(map[string]string{"conversation": "null"})), &c); err != nil {
		t.Fatal(err)
	}
	if c.Conversation != nil {
		t.Errorf("a null conversation decoded as %q, want nil", c.Conversation)
	}
}
