package conformance

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/cairnstore/cairn"
)

// contentCases check what a checkpoint may contain: createdAt, reason,
// label, conversation, entry paths and kinds, blob keys, sizes and artifacts.
func contentCases() []storeCase {
	return []storeCase{
		{"Content/RoundTrip", func(e *env) {
			c := cairn.Checkpoint{
				ID: "full", ThreadID: threadA, CreatedAt: 12.5, Reason: cairn.ReasonNamed,
				Label: "a label", SourceRunID: "run-7",
				Files: []cairn.Entry{
					file("src/main.go", fileKey(2)),
					dir("empty"),
					{Path: "big.bin", Kind: cairn.KindFile, BlobKey: fileKey(3), Size: cairn.MaxSafeInteger},
				},
				Conversation: json.RawMessage(`[{"role":"user","content":"hi"},{"role":"assistant","content":null}]`),
				Artifacts: []cairn.Artifact{
					{ArtifactID: "art-1", Name: "report.pdf", MimeType: "application/pdf", Size: 0, BlobKey: artifactKey(9), CreatedAt: -3.25},
				},
			}
			e.mustAppend(c, "")
			e.expectCheckpoint("full", c)
			l := e.list(threadA)
			if len(l) != 1 || !sameCheckpoint(l[0], c) {
				e.t.Errorf("List(thread-a) = %s, want [%s]", showList(l), show(c))
			}
		}},
		{"Content/ReasonLabelSourceRunIDVerbatim", func(e *env) {
			parent := ""
			for i, v := range []string{"automatic", "named", "fork-root", "whatever", "", "é\x00 "} {
				c := cp(fmt.Sprintf("r%d", i), parent, threadA)
				c.Reason, c.Label, c.SourceRunID = v, v, v
				e.mustAppend(c, parent)
				e.expectCheckpoint(c.ID, c)
				parent = c.ID
			}
		}},
		{"Content/CreatedAtAnyFinite", func(e *env) {
			parent := ""
			for i, f := range []float64{5, -1.5, 0, math.Copysign(0, -1), 0.1, 1e300, -1e300, math.SmallestNonzeroFloat64, math.MaxFloat64, 1.7e12 + 0.125} {
				c := cp(fmt.Sprintf("t%d", i), parent, threadA)
				c.CreatedAt = f
				e.mustAppend(c, parent)
				if got := e.get(c.ID); got == nil || got.CreatedAt != f {
					e.t.Errorf("createdAt %v did not round-trip: got %v", f, got)
				}
				parent = c.ID
			}
		}},
		{"Content/ConversationByteForByte", func(e *env) {
			convs := []string{
				"[ {\"role\": \"user\",\n  \"content\": \"<b>&amp;</b> \\u00e9 é\"} ]\n",
				"5",
				`"text"`,
				`{"nested":{"a":[1,2.50,3e2]},"b":true}`,
				"[]",
			}
			parent := ""
			for i, conv := range convs {
				c := cp(fmt.Sprintf("c%d", i), parent, threadA)
				c.Conversation = json.RawMessage(conv)
				e.mustAppend(c, parent)
				got := e.get(c.ID)
				if got == nil || string(got.Conversation) != conv {
					var g []byte
					if got != nil {
						g = got.Conversation
					}
					e.t.Errorf("conversation %q came back as %q", conv, g)
				}
				parent = c.ID
			}
			for _, c := range e.list(threadA) {
				var i int
				fmt.Sscanf(c.ID, "c%d", &i)
				if string(c.Conversation) != convs[i] {
					e.t.Errorf("List: conversation %q came back as %q", convs[i], c.Conversation)
				}
			}
		}},
		{"Content/NullConversation", func(e *env) {
			// nil stands for JSON null, so either form may come back.
			for i, conv := range []json.RawMessage{nil, json.RawMessage("null")} {
				id := fmt.Sprintf("n%d", i)
				c := cp(id, "", id)
				c.Conversation = conv
				e.mustAppend(c, "")
				got := e.get(id)
				if got == nil {
					e.t.Fatalf("Get(%s) = nil", id)
				}
				if got.Conversation != nil && string(got.Conversation) != "null" {
					e.t.Errorf("conversation %q came back as %q, want nil or null", conv, got.Conversation)
				}
			}
		}},
		{"Content/ConversationInvalid", func(e *env) {
			e.chain(threadA, "1")
			for _, conv := range []string{"", "{", "[1,]", "nul", `{"a":1}x`, "[\"\xff\"", "'x'", "NaN", "[1] [2]"} {
				e.row(rowName(conv), func(e *env) {
					c := cp("2", "1", threadA)
					c.Conversation = json.RawMessage(conv)
					e.appendFails("Append with conversation "+rowName(conv), cairn.ErrInvalidEntry, e.writer(threadA), c, "1")
				})
			}
		}},
		{"Entries/PathAccepted", func(e *env) {
			paths := []string{
				"C:foo", "c:foo/bar", "C:foo:bar", "ab:/c", "1:", ":", ":/x", "x/C:", "x/C:/y",
				"...", "..a", "a..", ".hidden", "a/.hidden", "a/...", "a b", " ", " / ", "é", "e\u0301",
				"a/b/c/d/e/f/g/h/i/j", "\t", "~", "-", "a\x01b", invalidUTF8, "\xff", strings.Repeat("s", 300),
			}
			for i, p := range paths {
				e.row(rowName(p), func(e *env) {
					th := fmt.Sprintf("p%d", i)
					c := withFiles(cp(th, "", th), file(p, fileKey(i+1)))
					e.mustAppend(c, "")
					e.expectCheckpoint(c.ID, c)
				})
			}
		}},
		{"Entries/PathRejected", func(e *env) {
			e.chain(threadA, "1")
			paths := []string{
				"", "/", "/a", "//a", "a//b", "a/", "a//", "./x", "x/.", "x/./y", "x/..", "../x", "a/../b", ".", "..",
				"C:", "z:", "C:/x", "C:/", "Z:/a/b", "C:\\x", "\\a", "a\\b", "a\\", "\\", "a\x00b", "\x00", "a/\x00",
			}
			for _, p := range paths {
				for _, kind := range []cairn.EntryKind{cairn.KindFile, cairn.KindDir} {
					e.row(rowName(p)+"/"+string(kind), func(e *env) {
						ent := dir(p)
						if kind == cairn.KindFile {
							ent = file(p, fileKey(7))
						}
						e.appendFails("path "+rowName(p), cairn.ErrInvalidEntry, e.writer(threadA), withFiles(cp("2", "1", threadA), ent), "1")
					})
				}
			}
		}},
		{"Entries/Tree", func(e *env) {
			e.chain(threadA, "1")
			type row struct {
				name  string
				files []cairn.Entry
				ok    bool
			}
			f := func(p string) cairn.Entry { return file(p, fileKey(len(p))) }
			rows := []row{
				{"FileThenFileBeneath", []cairn.Entry{f("a"), f("a/b")}, false},
				{"FileBeneathThenFile", []cairn.Entry{f("a/b"), f("a")}, false},
				{"FileThenDirBeneath", []cairn.Entry{f("a"), dir("a/b")}, false},
				{"DirBeneathThenFile", []cairn.Entry{dir("a/b"), f("a")}, false},
				{"FileThenDeepFile", []cairn.Entry{f("a"), f("a/b/c")}, false},
				{"DeepFileThenFile", []cairn.Entry{f("a/b/c"), f("a")}, false},
				{"DeepFileThenMiddleFile", []cairn.Entry{f("x"), f("a/b/c"), f("a/b")}, false},
				{"MiddleFileThenDeepDir", []cairn.Entry{f("a/b"), dir("a/b/c/d")}, false},
				{"FileBeneathThenDir", []cairn.Entry{f("a/b"), dir("a")}, true},
				{"DirThenFileBeneath", []cairn.Entry{dir("a"), f("a/b")}, true},
				{"DirThenDirBeneath", []cairn.Entry{dir("a"), dir("a/b")}, true},
				{"FileAndSiblingPrefix", []cairn.Entry{f("a"), f("ab/c"), f("a.txt"), f("abc")}, true},
				{"SiblingPrefixThenFile", []cairn.Entry{f("ab/c"), f("a")}, true},
				{"FilesUnderImplicitDirs", []cairn.Entry{f("a/b/c"), f("a/b/d"), f("a/e")}, true},
				{"DuplicateFile", []cairn.Entry{f("a"), f("a")}, false},
				{"DuplicateDir", []cairn.Entry{dir("a"), dir("a")}, false},
				{"DuplicateFileAndDir", []cairn.Entry{f("a"), dir("a")}, false},
				{"DuplicateDirAndFile", []cairn.Entry{dir("a"), f("a")}, false},
				{"DuplicateAfterOthers", []cairn.Entry{f("x/y"), f("z"), f("x/y")}, false},
				{"NoUnicodeNormalization", []cairn.Entry{f("\u00e9"), f("e\u0301")}, true},
				{"CaseSensitive", []cairn.Entry{f("A"), f("a")}, true},
			}
			for i, r := range rows {
				e.row(r.name, func(e *env) {
					if r.ok {
						th := fmt.Sprintf("tree%d", i)
						c := withFiles(cp(th, "", th), r.files...)
						e.mustAppend(c, "")
						e.expectCheckpoint(c.ID, c)
						return
					}
					e.appendFails(r.name, cairn.ErrInvalidEntry, e.writer(threadA), withFiles(cp("2", "1", threadA), r.files...), "1")
				})
			}
		}},
		{"Entries/DirWithFileFields", func(e *env) {
			e.chain(threadA, "1")
			rows := map[string]cairn.Entry{
				"BlobKey":        {Path: "d", Kind: cairn.KindDir, BlobKey: fileKey(1)},
				"InvalidBlobKey": {Path: "d", Kind: cairn.KindDir, BlobKey: "x"},
				"Size":           {Path: "d", Kind: cairn.KindDir, Size: 1},
				"NegativeSize":   {Path: "d", Kind: cairn.KindDir, Size: -1},
			}
			for _, name := range slices.Sorted(maps.Keys(rows)) {
				ent := rows[name]
				e.row(name, func(e *env) {
					e.appendFails("directory with "+name, cairn.ErrInvalidEntry, e.writer(threadA), withFiles(cp("2", "1", threadA), ent), "1")
				})
			}
			e.row("Plain", func(e *env) {
				c := withFiles(cp("2", "1", threadA), dir("d"), dir("e/f"))
				e.mustAppend(c, "1")
				e.expectCheckpoint("2", c)
			})
		}},
		{"Entries/UnknownKind", func(e *env) {
			e.chain(threadA, "1")
			for _, k := range []cairn.EntryKind{"symlink", "", "File", "DIR", "directory", "file ", "other"} {
				e.row(rowName(string(k)), func(e *env) {
					ent := cairn.Entry{Path: "x", Kind: k, BlobKey: fileKey(1), Size: 1}
					e.appendFails("kind "+rowName(string(k)), cairn.ErrInvalidEntry, e.writer(threadA), withFiles(cp("2", "1", threadA), ent), "1")
				})
			}
		}},
		{"Entries/FileBlobKey", func(e *env) {
			e.chain(threadA, "1")
			zeros := strings.Repeat("0", 64)
			bad := []string{
				"", cairn.FileBlobPrefix, cairn.FileBlobPrefix + zeros[:63], cairn.FileBlobPrefix + zeros + "0",
				hexKey(cairn.FileBlobPrefix, 'A'), cairn.FileBlobPrefix + "ABCDEF" + zeros[6:], hexKey(cairn.FileBlobPrefix, 'g'),
				hexKey(cairn.ArtifactBlobPrefix, '0'), "sandbox-files/sha512/" + zeros, "sandbox-files/SHA256/" + zeros,
				" " + cairn.FileBlobPrefix + zeros, cairn.FileBlobPrefix + zeros + "\n", "/" + cairn.FileBlobPrefix + zeros,
				cairn.FileBlobPrefix + invalidUTF8 + zeros[:61], zeros,
			}
			for _, k := range bad {
				e.row(rowName(k), func(e *env) {
					e.appendFails("blob key "+rowName(k), cairn.ErrInvalidEntry, e.writer(threadA), withFiles(cp("2", "1", threadA), file("x", k)), "1")
				})
			}
			e.row("AllHexDigits", func(e *env) {
				c := withFiles(cp("2", "1", threadA), file("x", cairn.FileBlobPrefix+strings.Repeat("0123456789abcdef", 4)))
				e.mustAppend(c, "1")
				e.expectCheckpoint("2", c)
			})
		}},
		{"Entries/Size", func(e *env) {
			e.chain(threadA, "1")
			for _, n := range []int64{-1, cairn.MaxSafeInteger + 1, math.MaxInt64, math.MinInt64} {
				e.row(fmt.Sprint(n), func(e *env) {
					ent := cairn.Entry{Path: "x", Kind: cairn.KindFile, BlobKey: fileKey(1), Size: n}
					e.appendFails(fmt.Sprintf("size %d", n), cairn.ErrInvalidEntry, e.writer(threadA), withFiles(cp("2", "1", threadA), ent), "1")
				})
			}
			for i, n := range []int64{0, 1, cairn.MaxSafeInteger} {
				e.row(fmt.Sprint(n), func(e *env) {
					th := fmt.Sprintf("size%d", i)
					c := withFiles(cp(th, "", th), cairn.Entry{Path: "x", Kind: cairn.KindFile, BlobKey: fileKey(1), Size: n})
					e.mustAppend(c, "")
					e.expectCheckpoint(th, c)
				})
			}
		}},
		{"Entries/OrderPreserved", func(e *env) {
			c := withFiles(cp("1", "", threadA), file("z", fileKey(1)), dir("m"), file("a", fileKey(2)), file("B", fileKey(1)))
			c.Artifacts = []cairn.Artifact{artifact("z", artifactKey(2)), artifact("a", artifactKey(1))}
			e.mustAppend(c, "")
			e.expectCheckpoint("1", c)
		}},
		{"Artifacts/Accepted", func(e *env) {
			rows := map[string][]cairn.Artifact{
				"DuplicateIDsAndKeys":         {artifact("x", artifactKey(1)), artifact("x", artifactKey(1))},
				"NegativeFractionalCreatedAt": {{ArtifactID: "a", Name: "n", MimeType: "m", Size: 0, BlobKey: artifactKey(2), CreatedAt: -0.5}},
				"MaxSafeSize":                 {{ArtifactID: "a", Name: "n", MimeType: "m", Size: cairn.MaxSafeInteger, BlobKey: artifactKey(3), CreatedAt: 0}},
				"UncheckedNameAndMimeType":    {{ArtifactID: "a/b\x00", Name: "\xff", MimeType: " ", Size: 1, BlobKey: artifactKey(4), CreatedAt: 1}},
			}
			for _, name := range slices.Sorted(maps.Keys(rows)) {
				arts := rows[name]
				e.row(name, func(e *env) {
					c := cp("a-"+name, "", name)
					c.Artifacts = arts
					e.mustAppend(c, "")
					e.expectCheckpoint(c.ID, c)
				})
			}
		}},
		{"Artifacts/Rejected", func(e *env) {
			e.chain(threadA, "1")
			ok := artifact("ok", artifactKey(1))
			edits := map[string]func(a *cairn.Artifact){
				"EmptyID":            func(a *cairn.Artifact) { a.ArtifactID = "" },
				"MalformedID":        func(a *cairn.Artifact) { a.ArtifactID = invalidUTF8 },
				"EmptyName":          func(a *cairn.Artifact) { a.Name = "" },
				"EmptyMimeType":      func(a *cairn.Artifact) { a.MimeType = "" },
				"EmptyBlobKey":       func(a *cairn.Artifact) { a.BlobKey = "" },
				"FilePrefix":         func(a *cairn.Artifact) { a.BlobKey = fileKey(1) },
				"UpperCaseHex":       func(a *cairn.Artifact) { a.BlobKey = hexKey(cairn.ArtifactBlobPrefix, 'F') },
				"ShortDigest":        func(a *cairn.Artifact) { a.BlobKey = a.BlobKey[:len(a.BlobKey)-1] },
				"LongDigest":         func(a *cairn.Artifact) { a.BlobKey += "0" },
				"NegativeSize":       func(a *cairn.Artifact) { a.Size = -1 },
				"UnsafeSize":         func(a *cairn.Artifact) { a.Size = cairn.MaxSafeInteger + 1 },
				"NaNCreatedAt":       func(a *cairn.Artifact) { a.CreatedAt = math.NaN() },
				"InfiniteCreatedAt":  func(a *cairn.Artifact) { a.CreatedAt = math.Inf(1) },
				"NegInfCreatedAt":    func(a *cairn.Artifact) { a.CreatedAt = math.Inf(-1) },
				"SecondOfTwoInvalid": nil,
			}
			for _, name := range slices.Sorted(maps.Keys(edits)) {
				edit := edits[name]
				e.row(name, func(e *env) {
					bad := ok
					arts := []cairn.Artifact{bad}
					if edit != nil {
						edit(&arts[0])
					} else {
						arts = append(arts, cairn.Artifact{ArtifactID: "second"})
					}
					c := cp("2", "1", threadA)
					c.Artifacts = arts
					e.appendFails("artifact "+name, cairn.ErrInvalidEntry, e.writer(threadA), c, "1")
				})
			}
		}},
	}
}
