package snapshot

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

// bufSize is the read buffer of each worker.
const bufSize = 128 << 10

// fileStat is what the stat cache and the change check compare.
type fileStat struct {
	Size  int64  `json:"s"`
	Mtime int64  `json:"m"` // nanoseconds since the Unix epoch
	Ctime int64  `json:"c"` // nanoseconds; 0 when unknown
	Ino   uint64 `json:"i"`
	Dev   uint64 `json:"d"`
}

func statOf(fi fs.FileInfo) fileStat {
	st := fileStat{Size: fi.Size(), Mtime: fi.ModTime().UnixNano()}
	sysStat(fi, &st)
	return st
}

// item is one blob source of a capture: a file of fsys or an artifact.
type item struct {
	path     string // the manifest path of a file; "" for an artifact
	fsys     fs.FS
	artifact *ArtifactSource
	size     int64
	st       fileStat
	key      string // the blob key, once hashed
}

// digest returns the hex SHA-256 in the item's key.
func (it *item) digest() string { return it.key[len(it.key)-64:] }

// setDigest sets the key from a hex SHA-256.
func (it *item) setDigest(d string) {
	if it.artifact != nil {
		it.key = cairn.ArtifactBlobPrefix + d
	} else {
		it.key = cairn.FileBlobPrefix + d
	}
}

// open opens the item's bytes. A file that does not open as an io.Seeker is
// read whole.
func (it *item) open() (io.ReadSeekCloser, error) {
	if it.artifact != nil {
		return it.artifact.Open()
	}
	f, err := it.fsys.Open(it.path)
	if err != nil {
		return nil, err
	}
	if rs, ok := f.(io.ReadSeekCloser); ok {
		return rs, nil
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	return nopCloser{bytes.NewReader(data)}, nil
}

// statNow returns the stat of an open file, when it has one.
func statNow(f io.ReadSeekCloser) (fileStat, bool) {
	s, ok := f.(interface{ Stat() (fs.FileInfo, error) })
	if !ok {
		return fileStat{}, false
	}
	fi, err := s.Stat()
	if err != nil {
		return fileStat{}, false
	}
	return statOf(fi), true
}

// fail returns an *Error about the item.
func (it *item) fail(code Code, msg string, err error) *Error {
	if it.artifact != nil {
		return &Error{Code: code, Message: "artifact " + quote(it.artifact.ArtifactID) + ": " + msg, Err: err}
	}
	return &Error{Code: code, Path: it.path, Message: msg, Err: err}
}

// CaptureDir captures the directory dir (see the package documentation for
// the rules) and the artifacts, uploads their blobs through up, and returns
// the manifest. It appends nothing: Save does, or the caller with the
// manifest's Files and Artifacts.
//
// It returns an *Error matching ErrInvalidWorkspace when dir is not a
// directory or a pattern is malformed, ErrUnsupportedEntry naming the first
// refused entry, ErrInvalidPath for a name no manifest can hold,
// ErrFileChanged naming a file that changed while it was captured; the
// store's errors of ClaimBlobs as they are (cairn.ErrWriterLost when
// up.Writer is not current); and the first I/O or bucket error. Nothing is
// appended on error; blobs already uploaded stay for a sweep to remove.
func CaptureDir(ctx context.Context, dir string, artifacts []ArtifactSource, up Uploader, opts *Options) (*Manifest, error) {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil, &Error{Code: CodeInvalidWorkspace, Message: "cannot capture " + quote(dir) + ": not a directory", Err: err}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, &Error{Code: CodeInvalidWorkspace, Message: "cannot capture " + quote(dir), Err: err}
	}
	return capture(ctx, rawDir(abs), abs, artifacts, up, opts)
}

// rawDir is os.DirFS without its check of names, which refuses names that
// are not valid UTF-8 although the operating system and the manifest allow
// them. Names come only from the directory's own listings.
type rawDir string

func (d rawDir) Open(name string) (fs.File, error) {
	if name == "." {
		return os.Open(string(d))
	}
	return os.Open(filepath.Join(string(d), filepath.FromSlash(name)))
}

// CaptureFS is CaptureDir on an fs.FS, whose root is the workspace root. The
// stat cache is not used. Files that open as io.Seeker (os.DirFS, embed.FS
// and fstest.MapFS files do) are streamed; others are read whole when they
// are uploaded. Its errors are those of CaptureDir.
func CaptureFS(ctx context.Context, fsys fs.FS, artifacts []ArtifactSource, up Uploader, opts *Options) (*Manifest, error) {
	return capture(ctx, fsys, "", artifacts, up, opts)
}

func capture(ctx context.Context, fsys fs.FS, root string, artifacts []ArtifactSource, up Uploader, opts *Options) (*Manifest, error) {
	if opts == nil {
		opts = &Options{}
	}
	if up.Bucket == nil || up.Claimer == nil {
		return nil, &Error{Code: CodeClaimsRequired, Message: "a capture needs a bucket and a cairn.BlobClaimer"}
	}
	f, err := newFilter(opts)
	if err != nil {
		return nil, err
	}
	dirs, files, err := walk(ctx, fsys, f)
	if err != nil {
		return nil, err
	}
	var cache *statCache
	if root != "" && opts.StatCache != "" {
		cache = loadStatCache(opts.StatCache, root)
	}
	items := files
	for i := range artifacts {
		a := &artifacts[i]
		if a.Open == nil {
			return nil, &Error{Code: CodeInvalidWorkspace, Message: "artifact " + quote(a.ArtifactID) + " has no Open"}
		}
		items = append(items, &item{artifact: a, size: -1})
	}
	m := &Manifest{}
	n := concurrency(opts)
	if err := hashAll(ctx, items, cache, n, opts.Progress, &m.Stats); err != nil {
		return nil, err
	}
	if err := uploadAll(ctx, up, items, n, newLookup(up.Bucket, opts.PutFirstMax), opts.Progress, &m.Stats); err != nil {
		return nil, err
	}
	entries := make([]cairn.Entry, 0, len(files)+len(dirs))
	for _, it := range files {
		entries = append(entries, cairn.Entry{Path: it.path, Kind: cairn.KindFile, BlobKey: it.key, Size: it.size})
		m.Stats.Files++
		m.Stats.Bytes += it.size
	}
	for _, d := range dirs {
		entries = append(entries, cairn.Entry{Path: d, Kind: cairn.KindDir})
	}
	m.Stats.Dirs = len(dirs)
	slices.SortFunc(entries, func(a, b cairn.Entry) int { return strings.Compare(a.Path, b.Path) })
	m.Files = entries
	for _, it := range items[len(files):] {
		a := it.artifact
		m.Artifacts = append(m.Artifacts, cairn.Artifact{ArtifactID: a.ArtifactID, Name: a.Name, MimeType: a.MimeType,
			Size: it.size, BlobKey: it.key, CreatedAt: a.CreatedAt})
	}
	slices.SortStableFunc(m.Artifacts, func(a, b cairn.Artifact) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.ArtifactID, b.ArtifactID))
	})
	if cache != nil {
		cache.save(files)
	}
	return m, nil
}

func concurrency(o *Options) int {
	if o.Concurrency > 0 {
		return o.Concurrency
	}
	return DefaultConcurrency
}

// restorable reports whether restore accepts p: the store's path rule and,
// as upstream's normalize(), no drive-like prefix at all.
func restorable(p string) bool {
	return cairn.ValidatePath(p) && !(len(p) >= 2 && p[1] == ':' && (p[0] >= 'a' && p[0] <= 'z' || p[0] >= 'A' && p[0] <= 'Z'))
}

// walk lists the tree: the directories that become entries (those with
// nothing captured under them) and an item per file.
func walk(ctx context.Context, fsys fs.FS, f *filter) ([]string, []*item, error) {
	var dirs []string
	var files []*item
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return &Error{Code: CodeInvalidWorkspace, Path: p, Message: "cannot read", Err: err}
		}
		if p == "." {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if f.excluded(p) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !restorable(p) {
			return &Error{Code: CodeInvalidPath, Path: p, Message: "the name cannot be restored (a backslash, NUL or drive-like prefix)"}
		}
		t := d.Type()
		switch {
		case d.IsDir():
			dirs = append(dirs, p)
			return nil
		case t&fs.ModeSymlink != 0:
			return &Error{Code: CodeUnsupportedEntry, Path: p, Message: "is a symlink; only regular files and directories can be captured"}
		case !t.IsRegular():
			return &Error{Code: CodeUnsupportedEntry, Path: p, Message: fmt.Sprintf("is a special file (%v); only regular files and directories can be captured", t)}
		}
		fi, err := d.Info()
		if err != nil {
			return &Error{Code: CodeInvalidWorkspace, Path: p, Message: "cannot stat", Err: err}
		}
		if !fi.Mode().IsRegular() {
			return &Error{Code: CodeUnsupportedEntry, Path: p, Message: fmt.Sprintf("is a special file (%v)", fi.Mode().Type())}
		}
		if fi.Mode().Perm()&0o111 != 0 {
			return &Error{Code: CodeUnsupportedEntry, Path: p, Message: fmt.Sprintf("is executable (mode %v); executable files cannot be captured", fi.Mode().Perm())}
		}
		if !f.included(p) {
			return nil
		}
		files = append(files, &item{path: p, fsys: fsys, size: fi.Size(), st: statOf(fi)})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	// A directory is an entry only when nothing under it was captured.
	full := make(map[string]bool)
	mark := func(p string) {
		for d := path.Dir(p); d != "." && !full[d]; d = path.Dir(d) {
			full[d] = true
		}
	}
	for _, it := range files {
		mark(it.path)
	}
	for _, d := range dirs {
		mark(d)
	}
	empty := dirs[:0]
	for _, d := range dirs {
		if !full[d] {
			empty = append(empty, d)
		}
	}
	return empty, files, nil
}

// hashAll sets the digest (and, for artifacts, the size) of every item,
// from the stat cache or by reading it.
func hashAll(ctx context.Context, items []*item, cache *statCache, n int, progress func(Progress), stats *CaptureStats) error {
	var total int64
	var todo []*item
	for _, it := range items {
		if it.artifact == nil && cache != nil {
			if d, ok := cache.lookup(it.path, it.st); ok {
				it.setDigest(d)
				continue
			}
		}
		todo = append(todo, it)
		total += max(it.size, 0)
	}
	meter := newMeter(progress, PhaseHash, len(todo), total)
	bufs := make([][]byte, n)
	var hashedBytes atomic.Int64
	err := forEach(ctx, n, todo, func(ctx context.Context, w int, it *item) error {
		if bufs[w] == nil {
			bufs[w] = make([]byte, bufSize)
		}
		got, err := hashItem(ctx, it, bufs[w], meter)
		hashedBytes.Add(got)
		return err
	})
	if err != nil {
		return err
	}
	meter.finish()
	stats.Hashed += len(todo)
	stats.HashedBytes += hashedBytes.Load()
	return nil
}

// hashItem reads the item once, hashing it, and checks that it did not
// change meanwhile. It returns the bytes read.
func hashItem(ctx context.Context, it *item, buf []byte, meter *meter) (int64, error) {
	f, err := it.open()
	if err != nil {
		return 0, it.fail(CodeInvalidWorkspace, "cannot open", err)
	}
	defer f.Close()
	if it.artifact == nil {
		if st, ok := statNow(f); ok && !sameContent(st, it.st) {
			return 0, it.fail(CodeFileChanged, "changed between the walk and its read", nil)
		}
	}
	h := sha256.New()
	var read int64
	for {
		if err := ctx.Err(); err != nil {
			return read, err
		}
		k, err := f.Read(buf)
		h.Write(buf[:k])
		read += int64(k)
		if it.size >= 0 {
			meter.bytes(int64(k))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return read, it.fail(CodeInvalidWorkspace, "cannot read", err)
		}
	}
	if it.artifact != nil {
		it.size = read
	} else {
		if read != it.size {
			return read, it.fail(CodeFileChanged, fmt.Sprintf("changed while it was read: %d bytes, its stat said %d", read, it.size), nil)
		}
		if st, ok := statNow(f); ok && !sameContent(st, it.st) {
			return read, it.fail(CodeFileChanged, "changed while it was read (its size or mtime moved)", nil)
		}
	}
	it.setDigest(hex.EncodeToString(h.Sum(nil)))
	meter.file(0)
	return read, nil
}

// sameContent reports whether two stats of one file promise the same bytes.
func sameContent(a, b fileStat) bool { return a.Size == b.Size && a.Mtime == b.Mtime }

// uploadAll claims every distinct key for the writer that the parent does
// not reference and uploads each one the bucket lacks, a key only after its
// claim.
func uploadAll(ctx context.Context, up Uploader, items []*item, n int, look *lookup, progress func(Progress), stats *CaptureStats) error {
	todo := slices.Clone(items)
	slices.SortFunc(todo, func(a, b *item) int { return strings.Compare(a.key, b.key) })
	todo = slices.CompactFunc(todo, func(a, b *item) bool { return a.key == b.key })
	if up.Parent != nil {
		// The parent's references protect its keys under this lease.
		inherited := up.Parent.BlobKeys()
		todo = slices.DeleteFunc(todo, func(it *item) bool {
			_, ok := slices.BinarySearch(inherited, it.key)
			if ok {
				stats.Inherited++
			}
			return ok
		})
	}
	if len(todo) > 0 {
		// Before the first claim: the bucket must name every store that
		// relies on its bytes (bucket.Bind).
		if err := bucket.BindStore(ctx, up.Claimer, up.Bucket); err != nil {
			return err
		}
	}
	var total int64
	for _, it := range todo {
		total += it.size
	}
	meter := newMeter(progress, PhaseUpload, len(todo), total)
	var mu sync.Mutex
	feed := func(ctx context.Context, send func(*item) bool) error {
		return claimAhead(ctx, up, todo, send)
	}
	err := forEachFed(ctx, min(n, len(todo)), feed, func(ctx context.Context, w int, it *item) error {
		created, err := uploadItem(ctx, up.Bucket, it, look, meter)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if created {
			stats.Uploaded++
			stats.UploadedBytes += it.size
		} else {
			stats.Present++
		}
		return nil
	})
	if err != nil {
		return err
	}
	meter.finish()
	return nil
}

// Claim batches: the first is small, so that uploads start soon; each
// next one twice as large, up to claimBatchMax.
const (
	claimBatchFirst = 60
	claimBatchMax   = 960
)

// claimAhead claims the keys of todo for the writer, in batches, and sends
// the items of each batch on once it is claimed: claimed before the bucket
// is consulted, so a sweep cannot delete what the capture finds there
// (docs/design.md). The next batch is claimed while the items of the one
// before are uploaded. It returns the first error of a claim.
func claimAhead(ctx context.Context, up Uploader, todo []*item, send func(*item) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	claimed := make(chan []*item, 1)
	errc := make(chan error, 1)
	go func() {
		defer close(claimed)
		size := claimBatchFirst
		for rest := todo; len(rest) > 0; size = min(2*size, claimBatchMax) {
			batch := rest[:min(size, len(rest))]
			rest = rest[len(batch):]
			keys := make([]string, len(batch))
			for i, it := range batch {
				keys[i] = it.key
			}
			if err := bucket.ClaimKeys(ctx, up.Claimer, up.Writer, keys); err != nil {
				errc <- err
				return
			}
			select {
			case claimed <- batch:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() {
		cancel()
		for range claimed {
		}
	}()
	for batch := range claimed {
		for _, it := range batch {
			if !send(it) {
				return nil
			}
		}
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// lookup decides, file by file, whether a capture heads a key before it
// puts the bytes, from what the recent lookups found (Options.PutFirstMax).
type lookup struct {
	max int64 // the largest file put first; -1: none

	mu      sync.Mutex
	recent  [32]bool // whether each of the last lookups found the key absent
	n, next int      // lookups in recent; the slot of the next
	absent  int      // of those, found absent
}

func newLookup(b Blobs, max int64) *lookup {
	switch {
	case max < 0 || !bucket.PutsFindExisting(b):
		max = -1
	case max == 0:
		max = DefaultPutFirstMax
	}
	return &lookup{max: max}
}

// headFirst reports whether a file of size bytes is to be headed first:
// it is when it is too large to be put first or when no more than half of
// the recent lookups found their key absent (so the first lookups head).
func (l *lookup) headFirst(size int64) bool {
	if size > l.max {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return 2*l.absent <= l.n
}

// found records what a lookup, by head or by a put, found.
func (l *lookup) found(absent bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == len(l.recent) {
		if l.recent[l.next] {
			l.absent--
		}
	} else {
		l.n++
	}
	l.recent[l.next] = absent
	if absent {
		l.absent++
	}
	l.next = (l.next + 1) % len(l.recent)
}

// uploadItem puts the item's bytes unless the bucket holds its key, heading
// the key first when look says so.
func uploadItem(ctx context.Context, b Blobs, it *item, look *lookup, meter *meter) (bool, error) {
	key := it.key
	headed := look.headFirst(it.size)
	if headed {
		_, err := b.Head(ctx, key)
		if err == nil {
			look.found(false)
			meter.file(it.size)
			return false, nil
		} else if !errors.Is(err, bucket.ErrNotFound) {
			return false, err
		}
		look.found(true)
	}
	f, err := it.open()
	if err != nil {
		return false, it.fail(CodeInvalidWorkspace, "cannot open", err)
	}
	defer f.Close()
	vr := &verifyReader{r: f, size: it.size, want: it.digest(), h: sha256.New(), it: it, meter: meter}
	var created bool
	if sp, ok := b.(bucket.StreamPutter); ok {
		created, err = sp.PutIfAbsentFrom(ctx, key, vr, it.size)
	} else {
		var data []byte
		data, err = io.ReadAll(vr)
		if err == nil {
			created, err = b.PutIfAbsent(ctx, key, data)
		}
	}
	if vr.changed != nil {
		return false, vr.changed
	}
	if err != nil {
		return false, err
	}
	if !headed {
		look.found(created)
	}
	meter.file(it.size - vr.counted)
	return created, nil
}

// verifyReader reads exactly size bytes and hashes them as they pass; the
// read that would deliver the last byte fails instead when the bytes do not
// hash to want, so a put never completes with bytes other than the key's.
// Seek to the start begins again.
type verifyReader struct {
	r       io.ReadSeeker
	size    int64
	want    string
	h       hash.Hash
	n       int64
	lost    bool // positioned somewhere unhashed; reads fail until a rewind
	changed error
	it      *item
	meter   *meter
	counted int64 // bytes reported to the meter
}

func (v *verifyReader) Read(p []byte) (int, error) {
	if v.lost {
		return 0, errors.New("snapshot: read after a seek away from the start")
	}
	if v.n >= v.size {
		if v.changed != nil {
			return 0, v.changed
		}
		return 0, io.EOF
	}
	if rem := v.size - v.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	k, err := v.r.Read(p)
	v.h.Write(p[:k])
	v.n += int64(k)
	if v.n > v.counted {
		v.meter.bytes(v.n - v.counted)
		v.counted = v.n
	}
	if v.n == v.size {
		if hex.EncodeToString(v.h.Sum(nil)) != v.want {
			v.changed = v.it.fail(CodeFileChanged, "changed during the capture: the bytes uploaded are not the bytes hashed", nil)
			return 0, v.changed
		}
		return k, nil
	}
	if err == io.EOF {
		v.changed = v.it.fail(CodeFileChanged, fmt.Sprintf("changed during the capture: it ended after %d of %d bytes", v.n, v.size), nil)
		return k, v.changed
	}
	return k, err
}

func (v *verifyReader) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = v.n + offset
	case io.SeekEnd:
		abs = v.size + offset
	default:
		return 0, errors.New("snapshot: invalid whence")
	}
	if abs == v.n && !v.lost {
		return abs, nil
	}
	if _, err := v.r.Seek(abs, io.SeekStart); err != nil {
		return 0, err
	}
	v.n = abs
	v.lost = abs != 0
	if abs == 0 {
		v.h.Reset()
	}
	return abs, nil
}
