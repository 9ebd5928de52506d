package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

// stagingInfix names the staging directories of Restore: a directory
// .<target>.cairn-restore-<random> beside the target.
const stagingInfix = ".cairn-restore-"

// lockSuffix names the lock file of Restore: .<target>.cairn-restore.lock
// beside the target, there while a restore into the target runs.
const lockSuffix = ".cairn-restore.lock"

// errTargetBusy is lockTarget's error while another restore holds the lock.
var errTargetBusy = errors.New("another restore into this directory is running")

// blob is one distinct key of a manifest being restored.
type blob struct {
	key    string
	size   int64
	paths  []string // the file entries that use it, in manifest order
	staged string   // its staged file
}

// Restore writes the files and empty directories of cp into dir, creating
// dir when it does not exist, with the guarantee the package documentation
// states. Files are written with mode 0644 and directories with 0755.
// Options.Include is ignored; Options.Exclude and the default excludes name
// the paths of dir that are left alone.
//
// Before it touches dir it returns an *Error matching ErrInvalidPath for a
// manifest path restore refuses (or a duplicate, or a file under a file),
// ErrMissingBlob naming the path of a blob the bucket lacks, ErrInvalidBlob
// naming the path of a blob whose bytes do not hash to its key or whose
// length is not the entry's size, ErrInvalidWorkspace when dir is not a
// directory or a pattern is malformed, ErrWorkspaceBusy while another
// Restore into dir runs (in this process or another: the lock is a
// flock(2) on .<dir>.cairn-restore.lock beside dir, gone with its holder);
// and I/O, bucket and ctx errors. After that point only I/O errors remain
// possible.
func Restore(ctx context.Context, r Blobs, cp *cairn.Checkpoint, dir string, opts *Options) (RestoreStats, error) {
	if opts == nil {
		opts = &Options{}
	}
	f, err := newFilter(opts)
	if err != nil {
		return RestoreStats{}, err
	}
	blobs, dirs, err := checkManifest(cp.Files)
	if err != nil {
		return RestoreStats{}, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return RestoreStats{}, &Error{Code: CodeInvalidWorkspace, Message: "cannot restore into " + quote(dir), Err: err}
	}
	fi, err := os.Stat(abs)
	exists := err == nil
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return RestoreStats{}, &Error{Code: CodeInvalidWorkspace, Message: "cannot restore into " + quote(dir), Err: err}
	case exists && !fi.IsDir():
		return RestoreStats{}, &Error{Code: CodeInvalidWorkspace, Message: "cannot restore into " + quote(dir) + ": not a directory"}
	case exists:
		// A symlink to a directory: restore into the directory, and keep
		// the link.
		if abs, err = filepath.EvalSymlinks(abs); err != nil {
			return RestoreStats{}, &Error{Code: CodeInvalidWorkspace, Message: "cannot restore into " + quote(dir), Err: err}
		}
	}
	parent, base := filepath.Dir(abs), filepath.Base(abs)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return RestoreStats{}, &Error{Code: CodeInvalidWorkspace, Message: "cannot restore into " + quote(dir), Err: err}
	}
	// One restore into a target at a time: a second one would remove the
	// first one's staging directory as a leftover, or mix two trees.
	unlock, err := lockTarget(parent, base)
	if errors.Is(err, errTargetBusy) {
		return RestoreStats{}, &Error{Code: CodeWorkspaceBusy, Message: "cannot restore into " + quote(dir) + ": " + err.Error()}
	}
	if err != nil {
		return RestoreStats{}, &Error{Code: CodeInvalidWorkspace, Message: "cannot lock " + quote(dir) + " for the restore", Err: err}
	}
	defer unlock()
	removeStaleStaging(parent, base)
	staging, err := os.MkdirTemp(parent, "."+base+stagingInfix)
	if err != nil {
		return RestoreStats{}, &Error{Code: CodeInvalidWorkspace, Message: "cannot make a staging directory beside " + quote(dir), Err: err}
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(staging)
		}
	}()
	// An absent or empty target gets the staged tree: each blob is
	// downloaded straight to its first path in it. Otherwise the blobs are
	// staged by key and moved into the target once all are verified.
	empty := !exists || isEmptyDir(abs)
	tree := abs
	if empty {
		tree = filepath.Join(staging, "tree")
		if err := stageTree(tree, blobs); err != nil {
			return RestoreStats{}, err
		}
	} else {
		dir := filepath.Join(staging, "blobs")
		if err := os.Mkdir(dir, 0o700); err != nil {
			return RestoreStats{}, err
		}
		for _, b := range blobs {
			b.staged = filepath.Join(dir, b.key[strings.LastIndexByte(b.key, '/')+1:])
		}
	}
	if err := downloadAll(ctx, r, blobs, concurrency(opts), opts.Progress); err != nil {
		return RestoreStats{}, err
	}
	// Every blob is staged and verified: only now is the target touched.
	var stats RestoreStats
	if !empty {
		if stats.Removed, err = removeStale(abs, cp.Files, f); err != nil {
			return stats, err
		}
	}
	if err := place(tree, blobs, dirs, empty, opts.Progress, &stats); err != nil {
		return stats, err
	}
	if empty {
		// One rename: the target goes from absent or empty to complete.
		if err := syscall.Rename(tree, abs); err != nil {
			return stats, &os.LinkError{Op: "rename", Old: tree, New: abs, Err: err}
		}
	}
	done = true
	if err := os.RemoveAll(staging); err != nil {
		return stats, err
	}
	if opts.StatCache != "" {
		recordRestored(opts.StatCache, abs, blobs)
	}
	return stats, nil
}

// checkManifest runs restore's checks of the manifest and returns its
// distinct blobs, sorted by key, and its directory entries.
func checkManifest(files []cairn.Entry) ([]*blob, []string, error) {
	kinds := make(map[string]cairn.EntryKind, len(files))
	byKey := make(map[string]*blob)
	var dirs []string
	for _, e := range files {
		if !restorable(e.Path) || strings.HasSuffix(e.Path, "/") {
			return nil, nil, &Error{Code: CodeInvalidPath, Path: e.Path, Message: "the path cannot be restored"}
		}
		if _, dup := kinds[e.Path]; dup {
			return nil, nil, &Error{Code: CodeInvalidPath, Path: e.Path, Message: "the manifest names the path twice"}
		}
		kinds[e.Path] = e.Kind
		switch e.Kind {
		case cairn.KindDir:
			dirs = append(dirs, e.Path)
		case cairn.KindFile:
			if !cairn.IsFileBlobKey(e.BlobKey) {
				return nil, nil, &Error{Code: CodeInvalidBlob, Path: e.Path, Key: e.BlobKey, Message: "the entry's key is not a file content key"}
			}
			if e.Size < 0 {
				return nil, nil, &Error{Code: CodeInvalidBlob, Path: e.Path, Key: e.BlobKey, Message: "negative size"}
			}
			b := byKey[e.BlobKey]
			if b == nil {
				b = &blob{key: e.BlobKey, size: e.Size}
				byKey[e.BlobKey] = b
			} else if b.size != e.Size {
				return nil, nil, &Error{Code: CodeInvalidBlob, Path: e.Path, Key: e.BlobKey,
					Message: fmt.Sprintf("size %d, but %q gives the same blob size %d", e.Size, b.paths[0], b.size)}
			}
			b.paths = append(b.paths, e.Path)
		default:
			return nil, nil, &Error{Code: CodeInvalidPath, Path: e.Path, Message: fmt.Sprintf("unknown entry kind %q", e.Kind)}
		}
	}
	for p := range kinds {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if kinds[d] == cairn.KindFile {
				return nil, nil, &Error{Code: CodeInvalidPath, Path: p, Message: fmt.Sprintf("is under the file %q", d)}
			}
		}
	}
	blobs := make([]*blob, 0, len(byKey))
	for _, b := range byKey {
		blobs = append(blobs, b)
	}
	slices.SortFunc(blobs, func(a, b *blob) int { return strings.Compare(a.key, b.key) })
	return blobs, dirs, nil
}

// downloadAll stages every blob under staging and verifies it.
func downloadAll(ctx context.Context, r Blobs, blobs []*blob, n int, progress func(Progress)) error {
	var total int64
	for _, b := range blobs {
		total += b.size
	}
	meter := newMeter(progress, PhaseDownload, len(blobs), total)
	bufs := make([][]byte, n)
	err := forEach(ctx, n, blobs, func(ctx context.Context, w int, b *blob) error {
		if bufs[w] == nil {
			bufs[w] = make([]byte, bufSize)
		}
		got, err := download(ctx, r, b, bufs[w], meter)
		if err != nil {
			return err
		}
		meter.file(b.size - got)
		return nil
	})
	if err != nil {
		return err
	}
	meter.finish()
	return nil
}

// download writes one blob to its staged file, checking its length and hash.
// It returns the bytes written.
func download(ctx context.Context, r Blobs, b *blob, buf []byte, meter *meter) (int64, error) {
	var body io.ReadCloser
	var err error
	if sr, ok := r.(bucket.StreamReader); ok {
		body, _, err = sr.GetStream(ctx, b.key)
	} else {
		var data []byte
		data, err = r.Get(ctx, b.key)
		body = io.NopCloser(bytes.NewReader(data))
	}
	if errors.Is(err, bucket.ErrNotFound) {
		return 0, &Error{Code: CodeMissingBlob, Path: b.paths[0], Key: b.key, Message: "the bucket has no blob for it", Err: err}
	}
	if err != nil {
		return 0, fmt.Errorf("snapshot: download %q: %w", b.paths[0], err)
	}
	defer body.Close()
	f, err := os.OpenFile(b.staged, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	h := sha256.New()
	var n int64
	// One byte more than the size, to see a blob that is too long.
	src := io.LimitReader(body, b.size+1)
	for {
		if err := ctx.Err(); err != nil {
			f.Close()
			return n, err
		}
		k, rerr := src.Read(buf)
		if k > 0 {
			h.Write(buf[:k])
			if _, err := f.Write(buf[:k]); err != nil {
				f.Close()
				return n, err
			}
			n += int64(k)
			meter.bytes(int64(k))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			f.Close()
			return n, fmt.Errorf("snapshot: download %q: %w", b.paths[0], rerr)
		}
	}
	if err := f.Close(); err != nil {
		return n, err
	}
	if n != b.size {
		return n, &Error{Code: CodeInvalidBlob, Path: b.paths[0], Key: b.key,
			Message: fmt.Sprintf("the blob's length is not the entry's size %d (read %d)", b.size, n)}
	}
	if d := hex.EncodeToString(h.Sum(nil)); cairn.FileBlobPrefix+d != b.key {
		return n, &Error{Code: CodeInvalidBlob, Path: b.paths[0], Key: b.key, Message: "the blob's bytes hash to " + d}
	}
	return n, nil
}

// isEmptyDir reports whether dir is a directory without entries.
func isEmptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && err == io.EOF
}

// removeStaleStaging removes staging directories of earlier restores of
// base that did not finish.
func removeStaleStaging(parent, base string) {
	matches, _ := filepath.Glob(filepath.Join(parent, "."+globEscape(base)+stagingInfix+"*"))
	for _, m := range matches {
		os.RemoveAll(m)
	}
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// removeStale removes what dir holds that the manifest does not, except the
// paths the filter excludes (and the directories that hold them), and anything in the way of an entry (a file
// where a directory goes, a directory or symlink where a file goes). It
// returns how many entries it removed.
func removeStale(dir string, files []cairn.Entry, f *filter) (int, error) {
	want := make(map[string]cairn.EntryKind, len(files))
	for _, e := range files {
		want[e.Path] = e.Kind
		for d := path.Dir(e.Path); d != "."; d = path.Dir(d) {
			if _, ok := want[d]; ok {
				break
			}
			want[d] = cairn.KindDir
		}
	}
	removed := 0
	var staleDirs []string
	fsys := rawDir(dir)
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		kind, ok := want[p]
		switch {
		case ok && kind == cairn.KindDir && d.IsDir():
			return nil
		case ok && kind == cairn.KindFile && d.Type().IsRegular():
			return nil // replaced by a rename
		case !ok && f.excluded(p):
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		case !ok && d.IsDir():
			// Stale, but it may hold excluded paths: empty it, and remove
			// it afterwards if nothing is left.
			staleDirs = append(staleDirs, p)
			return nil
		}
		// Stale, or in the way of an entry of another kind.
		if err := os.RemoveAll(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
			return err
		}
		removed++
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	for _, p := range slices.Backward(staleDirs) {
		if os.Remove(filepath.Join(dir, filepath.FromSlash(p))) == nil {
			removed++
		}
	}
	return removed, err
}

// place makes the directories and moves the staged blobs to their paths
// under tree: a blob used by several paths is copied for all but the last.
func place(tree string, blobs []*blob, dirs []string, inTree bool, progress func(Progress), stats *RestoreStats) error {
	var files int
	var total int64
	for _, b := range blobs {
		files += len(b.paths)
		total += b.size * int64(len(b.paths))
	}
	meter := newMeter(progress, PhaseWrite, files, total)
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(tree, filepath.FromSlash(d)), 0o755); err != nil {
			return err
		}
		stats.Dirs++
	}
	made := map[string]bool{}
	for _, b := range blobs {
		for i, p := range b.paths {
			dst := filepath.Join(tree, filepath.FromSlash(p))
			var err error
			switch {
			case inTree && i == 0:
				// Downloaded to its place (stageTree).
			case inTree:
				err = copyFile(b.staged, dst, made)
			case i == len(b.paths)-1:
				if err = mkdirOnce(filepath.Dir(dst), made); err == nil {
					err = os.Rename(b.staged, dst)
				}
			default:
				err = copyFile(b.staged, dst, made)
			}
			if err != nil {
				return err
			}
			stats.Files++
			stats.Bytes += b.size
			meter.file(b.size)
		}
	}
	meter.finish()
	return nil
}

// stageTree makes the directories of tree that hold the first path of each
// blob, and sets each blob's staged file to that path.
func stageTree(tree string, blobs []*blob) error {
	if err := os.Mkdir(tree, 0o755); err != nil {
		return err
	}
	made := map[string]bool{tree: true}
	for _, b := range blobs {
		b.staged = filepath.Join(tree, filepath.FromSlash(b.paths[0]))
		if err := mkdirOnce(filepath.Dir(b.staged), made); err != nil {
			return err
		}
	}
	return nil
}

// mkdirOnce makes dir and its parents unless made says it did already.
func mkdirOnce(dir string, made map[string]bool) error {
	if made[dir] {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	made[dir] = true
	return nil
}

// copyFile copies src to a new file beside dst, then renames it over dst;
// it makes dst's directory first unless made says it did.
func copyFile(src, dst string, made map[string]bool) error {
	if err := mkdirOnce(filepath.Dir(dst), made); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+stagingInfix)
	if err != nil {
		return err
	}
	_, cerr := io.Copy(out, in)
	err = errors.Join(cerr, out.Chmod(0o644), out.Close())
	if err == nil {
		err = os.Rename(out.Name(), dst)
	}
	if err != nil {
		os.Remove(out.Name())
	}
	return err
}

// recordRestored writes the stat cache for the restored files, so that
// capturing the tree again hashes nothing. Failures are ignored.
func recordRestored(file, root string, blobs []*blob) {
	c := &statCache{file: file, body: statCacheBody{Root: root}}
	var items []*item
	for _, b := range blobs {
		for _, p := range b.paths {
			fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(p)))
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			items = append(items, &item{path: p, st: statOf(fi), key: b.key})
		}
	}
	c.save(items)
}
