package cairn_test

import (
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
)

// naiveEntriesValid is the entry rule of the contract (B §2.3) written the
// obvious way, quadratic, as the reference for FuzzValidateEntries.
func naiveEntriesValid(files []cairn.Entry) bool {
	var earlier []cairn.Entry
	for _, e := range files {
		if len(e.Path) > cairn.MaxPathBytes || !cairn.ValidatePath(e.Path) {
			return false
		}
		for _, p := range earlier {
			if p.Path == e.Path {
				return false // duplicate
			}
			if p.Kind == cairn.KindFile && strings.HasPrefix(e.Path, p.Path+"/") {
				return false // beneath an earlier file
			}
			if e.Kind == cairn.KindFile && strings.HasPrefix(p.Path, e.Path+"/") {
				return false // a file above an earlier entry
			}
		}
		switch e.Kind {
		case cairn.KindFile:
			if !cairn.IsFileBlobKey(e.BlobKey) || e.Size < 0 || e.Size > cairn.MaxSafeInteger {
				return false
			}
		case cairn.KindDir:
			if e.BlobKey != "" || e.Size != 0 {
				return false
			}
		default:
			return false
		}
		earlier = append(earlier, e)
	}
	return true
}

// FuzzValidateEntries checks ValidateEntries, which avoids quadratic work,
// against the naive rule. Each line of the input is an entry: "f path" for a
// file, "d path" for a directory, anything else for an unknown kind.
func FuzzValidateEntries(f *testing.F) {
	for _, seed := range []string{
		"f a\nf a/b", "f a/b\nf a", "f a/b\nd a", "d a\nf a/b", "f x/a\nf x/b\nf x", "f x/a\nd x/b\nf x/b/c",
		"f a/b/c\nf a/b/d\nf a/b", "d a\nd a", "f C:foo\nf C:/x", "f a//b", "f ./x", "q a", "f a/b\nf a/c\nf a/b/c",
		"f " + strings.Repeat("a", cairn.MaxPathBytes), "f " + strings.Repeat("a", cairn.MaxPathBytes+1),
	} {
		f.Add(seed)
	}
	key := "sandbox-files/sha256/" + strings.Repeat("0", 64)
	f.Fuzz(func(t *testing.T, spec string) {
		var files []cairn.Entry
		for line := range strings.SplitSeq(spec, "\n") {
			if len(line) < 2 {
				continue
			}
			e := cairn.Entry{Path: line[2:]}
			switch line[0] {
			case 'f':
				e.Kind, e.BlobKey, e.Size = cairn.KindFile, key, 1
			case 'd':
				e.Kind = cairn.KindDir
			default:
				e.Kind = cairn.EntryKind(line[:1])
			}
			files = append(files, e)
		}
		got := cairn.ValidateEntries(files) == nil
		if want := naiveEntriesValid(files); got != want {
			t.Fatalf("ValidateEntries(%q) valid = %v, the contract's rule says %v", spec, got, want)
		}
	})
}
