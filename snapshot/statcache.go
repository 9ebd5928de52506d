package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"time"
)

// statCacheMagic begins every stat cache file; the line after it is the hex
// SHA-256 of the JSON body that follows.
const statCacheMagic = "cairn-statcache 1\n"

type statCacheBody struct {
	Root string `json:"root"`
	// Written is when the cache was written, in nanoseconds: an entry whose
	// mtime is in the same second or later is not trusted (a write in that
	// second may not have moved the mtime), as git treats a "racily clean"
	// index entry.
	Written int64                     `json:"written"`
	Files   map[string]statCacheEntry `json:"files"`
}

type statCacheEntry struct {
	fileStat
	Digest string `json:"h"`
}

// statCache is the loaded cache of one root.
type statCache struct {
	file string
	body statCacheBody
}

// loadStatCache reads the cache at file for root. Anything wrong with the file
// (missing, unreadable, a checksum mismatch, another root) gives an empty
// cache.
func loadStatCache(file, root string) *statCache {
	c := &statCache{file: file, body: statCacheBody{Root: root}}
	data, err := os.ReadFile(file)
	if err != nil || !bytes.HasPrefix(data, []byte(statCacheMagic)) {
		return c
	}
	rest := data[len(statCacheMagic):]
	nl := bytes.IndexByte(rest, '\n')
	if nl != 64 {
		return c
	}
	sum := sha256.Sum256(rest[nl+1:])
	if hex.EncodeToString(sum[:]) != string(rest[:nl]) {
		return c
	}
	var body statCacheBody
	if json.Unmarshal(rest[nl+1:], &body) != nil || body.Root != root {
		return c
	}
	c.body = body
	return c
}

// lookup returns the digest recorded for path when its stat is unchanged and
// was not racy when recorded.
func (c *statCache) lookup(path string, st fileStat) (string, bool) {
	e, ok := c.body.Files[path]
	if !ok || e.fileStat != st || len(e.Digest) != 64 {
		return "", false
	}
	if st.Mtime/int64(time.Second) >= c.body.Written/int64(time.Second) {
		return "", false
	}
	return e.Digest, true
}

// save writes the cache for the captured files, replacing the file
// atomically. A failure to write is ignored: the cache is an optimisation,
// and a later capture hashes again.
func (c *statCache) save(files []*item) {
	body := statCacheBody{Root: c.body.Root, Written: time.Now().UnixNano(), Files: make(map[string]statCacheEntry, len(files))}
	for _, it := range files {
		body.Files[it.path] = statCacheEntry{fileStat: it.st, Digest: it.digest()}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return
	}
	sum := sha256.Sum256(data)
	out := append([]byte(statCacheMagic+hex.EncodeToString(sum[:])+"\n"), data...)
	tmp, err := os.CreateTemp(filepath.Dir(c.file), filepath.Base(c.file)+".tmp-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(out)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), c.file) != nil {
		os.Remove(tmp.Name())
	}
}
