package snapshot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
)

// FuzzStatCache: any file at the cache's path loads without a panic, and a
// cache is trusted only when its checksum holds: what loads from garbage
// finds nothing, and what loads from a valid file round-trips.
func FuzzStatCache(f *testing.F) {
	dir := f.TempDir()
	valid := filepath.Join(dir, "seed")
	c := &statCache{file: valid, body: statCacheBody{Root: "/ws"}}
	c.save([]*item{{path: "a", st: fileStat{Size: 1, Mtime: 1}, key: cairn.FileBlobPrefix + strings.Repeat("a", 64)}})
	seed, err := os.ReadFile(valid)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(statCacheMagic))
	f.Add([]byte(statCacheMagic + strings.Repeat("0", 64) + "\n{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "cache")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got := loadStatCache(p, "/ws")
		if len(got.body.Files) == 0 {
			return
		}
		// A cache that loaded had a valid checksum: saving it again and
		// loading gives the same entries.
		var items []*item
		for path, e := range got.body.Files {
			if len(e.Digest) != 64 {
				continue
			}
			items = append(items, &item{path: path, st: e.fileStat, key: cairn.FileBlobPrefix + e.Digest})
		}
		got.save(items)
		again := loadStatCache(p, "/ws")
		for _, it := range items {
			if again.body.Files[it.path].Digest != it.digest() {
				t.Fatalf("entry %q did not round-trip", it.path)
			}
		}
	})
}

// FuzzCheckManifest: restore's manifest check never panics, and accepts
// only paths that the store accepts too.
func FuzzCheckManifest(f *testing.F) {
	key := cairn.FileBlobPrefix + strings.Repeat("b", 64)
	f.Add("a/b", "a/c", "dir", int64(3))
	f.Add("C:x", "a", "a/b", int64(0))
	f.Add("a", "a", "", int64(-1))
	f.Fuzz(func(t *testing.T, p1, p2, d string, size int64) {
		files := []cairn.Entry{
			{Path: p1, Kind: cairn.KindFile, BlobKey: key, Size: size},
			{Path: p2, Kind: cairn.KindFile, BlobKey: key, Size: size},
			{Path: d, Kind: cairn.KindDir},
		}
		blobs, _, err := checkManifest(files)
		if err != nil {
			return
		}
		for _, e := range files {
			if !cairn.ValidatePath(e.Path) {
				t.Fatalf("restore accepted %q, which the store refuses", e.Path)
			}
		}
		if len(blobs) != 1 || len(blobs[0].paths) != 2 {
			t.Fatalf("blobs %+v", blobs)
		}
	})
}
