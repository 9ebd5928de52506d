package cairn

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// entriesOf builds entries from lines as FuzzValidateEntries does: "f path"
// for a file, "d path" for a directory, anything else for an unknown kind.
func entriesOf(spec string, sorted bool) []Entry {
	var files []Entry
	for line := range strings.SplitSeq(spec, "\n") {
		if len(line) < 2 {
			continue
		}
		e := Entry{Path: line[2:]}
		switch line[0] {
		case 'f':
			e.Kind, e.BlobKey, e.Size = KindFile, pathKey(e.Path), 1
		case 'd':
			e.Kind = KindDir
		case 'k':
			e.Kind, e.BlobKey = KindFile, "bad key" // a file with an invalid key
		default:
			e.Kind = EntryKind(line[:1])
		}
		files = append(files, e)
	}
	if sorted {
		slices.SortStableFunc(files, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	}
	return files
}

// pathKey is the blob key of a file entry of entriesOf: its path's digest.
func pathKey(path string) string {
	d := sha256.Sum256([]byte(path))
	return FileBlobPrefix + hex.EncodeToString(d[:])
}

// checkSortedPath compares ValidateEntries, which checks entries in order
// without a map while it can, with the map's check of every entry: the same
// error, or none. Decoding the blob keys on the way changes no outcome, and
// when the entries are valid every file's digest is its key's.
func checkSortedPath(t *testing.T, files []Entry) {
	t.Helper()
	got, want := fmt.Sprint(ValidateEntries(files)), fmt.Sprint(validateEntriesFrom(files, 0))
	if got != want {
		t.Fatalf("ValidateEntries(%+v) = %s; the map alone says %s", files, got, want)
	}
	ds := make([][32]byte, len(files))
	err := validateEntries(files, ds)
	if fmt.Sprint(err) != want {
		t.Fatalf("validateEntries(%+v) with digests = %v; without, %s", files, err, want)
	}
	for i, e := range files {
		if err == nil && e.Kind == KindFile && ds[i] != sha256.Sum256([]byte(e.Path)) {
			t.Fatalf("entry %d (%q): digest %x, its key is %s", i, e.Path, ds[i], e.BlobKey)
		}
	}
}

var sortedSeeds = []string{
	"f a\nf a.txt\nf a/b", "f a\nd a-b\nf a/b", "f a\nf a.b\nf a.b/c", "f a\nf a.b\nf a/c", "d a\nf a/b\nf a/b/c",
	"f x/a\nf x/b\nf x", "f a/b/c\nf a/b/d\nf a/b", "d a\nd a", "f a\nf a\x00b/c", "f a b\nf a/c", "f a\nk a.c\nf a/b",
	"f src/a.go\nf src/b.go\nf src/b.go/x", "f a\nf a!\nf a!!\nf a!!!\nf a!!!/x", "q a\nf b", "f a\nf b\nf a/c", "f b\nd c\nf a\nf c/d",
}

func TestValidateSortedEntries(t *testing.T) {
	for _, seed := range sortedSeeds {
		checkSortedPath(t, entriesOf(seed, false))
		checkSortedPath(t, entriesOf(seed, true))
	}
	// More files open at once than the chain holds: "a", "a!", "a!!", ...
	var lines []string
	for n := range 2 * maxFileChain {
		lines = append(lines, "f a"+strings.Repeat("!", n))
	}
	for _, tail := range []string{"", "f a!/x", "f a" + strings.Repeat("!", 2*maxFileChain-1) + "/x", "f b"} {
		checkSortedPath(t, entriesOf(strings.Join(append(lines, tail), "\n"), false))
	}
}

func FuzzValidateSortedEntries(f *testing.F) {
	for _, seed := range sortedSeeds {
		f.Add(seed, true)
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, spec string, sorted bool) {
		checkSortedPath(t, entriesOf(spec, sorted))
	})
}

// hasHexDigest accepts exactly the keys whose digits are all lower-case hex.
func TestHasHexDigestEveryByte(t *testing.T) {
	base := strings.Repeat("0123456789abcdef", 4)
	for pos := range len(base) {
		for c := range 256 {
			d := base[:pos] + string([]byte{byte(c)}) + base[pos+1:]
			want := c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
			if got := hasHexDigest(FileBlobPrefix+d, FileBlobPrefix); got != want {
				t.Fatalf("hasHexDigest(%q) = %v, want %v", d, got, want)
			}
		}
	}
}
