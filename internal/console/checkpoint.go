package console

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kylelemons/godebug/diff"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/snapshot"
)

// Bounds of the checkpoint page.
const (
	// treeRows is the most rows of one directory the tree shows at once.
	treeRows = 500
	// changeRows is the most changed paths listed.
	changeRows = 500
	// maxDiffBytes is the largest file the diff reads; larger ones are
	// compared by size and digest.
	maxDiffBytes = 1 << 20
)

type treeRow struct {
	Name  string
	Path  string
	Dir   bool
	Size  int64
	Files int
	// Mark is "added", "changed", "removed" or "" against the parent; for
	// a directory, "changed" when any path under it differs.
	Mark   string
	Digest string
}

type changeRow struct {
	Path    string
	Kind    string
	OldSize int64
	NewSize int64
}

type diffRow struct {
	// OldNo and NewNo are line numbers (0: no line on that side).
	OldNo, NewNo int
	Old, New     string
	Kind         string // "same", "changed", "added", "removed"
}

type fileDiff struct {
	Path             string
	OldSize, NewSize int64
	OldDigest        string
	NewDigest        string
	Binary           bool
	TooLarge         bool
	Unavailable      string
	Rows             []diffRow
}

type crumb struct{ Name, Dir string }

type checkpointData struct {
	CP           *cairn.Checkpoint
	Parent       string
	ParentPruned bool
	Files        int
	Bytes        int64
	Dir          string
	Crumbs       []crumb
	Tree         []treeRow
	TreeMore     int
	NextFrom     int
	Changes      []changeRow
	ChangesMore  int
	Added        int
	Changed      int
	Removed      int
	Diff         *fileDiff
	Messages     []message
	RawConv      string
	Artifacts    []cairn.Artifact
	HasBucket    bool
}

// checkpointPage shows one checkpoint: its fields, one directory of its
// file tree with the marks against its parent, the changed paths, one
// file's diff (?diff=PATH), its conversation and its artifacts. It reads
// the checkpoint and its parent, and from the bucket only the two versions
// of the file whose diff it shows.
func (c *Console) checkpointPage(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	cp, parent, ok := c.checkpointAndParent(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	d := checkpointData{CP: cp, Parent: cp.ParentCheckpointID, Dir: cleanDir(q.Get("dir")), HasBucket: c.blobs != nil}
	d.ParentPruned = cp.ParentCheckpointID != "" && parent == nil
	for _, e := range cp.Files {
		if e.Kind == cairn.KindFile {
			d.Files++
			d.Bytes += e.Size
		}
	}
	var changes []snapshot.Change
	marks := map[string]string{}
	if parent != nil {
		changes = snapshot.Diff(*parent, *cp)
		for _, ch := range changes {
			k := markOf(ch.Kind)
			marks[ch.Path] = k
			switch k {
			case "added":
				d.Added++
			case "removed":
				d.Removed++
			default:
				d.Changed++
			}
			if len(d.Changes) < changeRows {
				d.Changes = append(d.Changes, changeRow{Path: ch.Path, Kind: k, OldSize: ch.Old.Size, NewSize: ch.New.Size})
			}
		}
		d.ChangesMore = len(changes) - len(d.Changes)
	}
	from, _ := strconv.Atoi(q.Get("from"))
	d.Tree, d.TreeMore = tree(cp, changes, marks, d.Dir, max(from, 0))
	if d.TreeMore > 0 {
		d.NextFrom = max(from, 0) + treeRows
	}
	d.Crumbs = crumbs(d.Dir)
	if p := q.Get("diff"); p != "" {
		fd, err := c.fileDiff(r.Context(), cp, parent, p)
		if err != nil {
			c.failErr(w, r, fmt.Sprintf("the diff of %q", p), err)
			return
		}
		d.Diff = fd
	}
	d.Messages, d.RawConv = parseConversation(cp.Conversation)
	d.Artifacts = cp.Artifacts
	c.render(w, r, http.StatusOK, "checkpoint", t, "Checkpoint "+cp.ID, d)
}

// checkpointAndParent reads the checkpoint of the path and its parent (nil
// when it is a root or was pruned), answering the error page itself when
// it cannot.
func (c *Console) checkpointAndParent(w http.ResponseWriter, r *http.Request) (*cairn.Checkpoint, *cairn.Checkpoint, bool) {
	t := tenantOf(r)
	id := r.PathValue("id")
	st := c.cfg.Stores[t]
	cp, err := st.Get(r.Context(), id)
	if err != nil {
		c.failErr(w, r, fmt.Sprintf("checkpoint %q", id), err)
		return nil, nil, false
	}
	if cp == nil {
		c.fail(w, r, t, http.StatusNotFound, fmt.Sprintf("There is no checkpoint %q: it never existed, or it was pruned or deleted. A thread's page lists its checkpoints.", id))
		return nil, nil, false
	}
	var parent *cairn.Checkpoint
	if cp.ParentCheckpointID != "" {
		if parent, err = st.Get(r.Context(), cp.ParentCheckpointID); err != nil {
			c.failErr(w, r, fmt.Sprintf("checkpoint %q", cp.ParentCheckpointID), err)
			return nil, nil, false
		}
	}
	return cp, parent, true
}

func markOf(k snapshot.ChangeKind) string {
	switch k {
	case snapshot.Added:
		return "added"
	case snapshot.Removed:
		return "removed"
	}
	return "changed"
}

// cleanDir makes ?dir= a directory path without leading slash, ending in
// "/", or "" for the root.
func cleanDir(d string) string {
	d = strings.Trim(d, "/")
	if d == "" {
		return ""
	}
	return d + "/"
}

func crumbs(dir string) []crumb {
	out := []crumb{{Name: "(root)", Dir: ""}}
	acc := ""
	for _, part := range strings.Split(strings.TrimSuffix(dir, "/"), "/") {
		if part == "" {
			continue
		}
		acc += part + "/"
		out = append(out, crumb{Name: part, Dir: acc})
	}
	return out
}

// tree returns the rows of one directory: its subdirectories (with the
// files and bytes under them, marked changed when a path under them
// differs) and its entries, then the removed entries, sorted by name,
// from the row from on, at most treeRows, and how many rows follow.
func tree(cp *cairn.Checkpoint, changes []snapshot.Change, marks map[string]string, dir string, from int) ([]treeRow, int) {
	subs := map[string]*treeRow{}
	var rows []treeRow
	for _, e := range cp.Files {
		rest, ok := strings.CutPrefix(e.Path, dir)
		if !ok || rest == "" {
			continue
		}
		if i := strings.IndexByte(rest, '/'); i >= 0 && i < len(rest)-1 {
			name := rest[:i]
			s := subs[name]
			if s == nil {
				s = &treeRow{Name: name, Path: dir + name, Dir: true}
				subs[name] = s
			}
			if e.Kind == cairn.KindFile {
				s.Files++
				s.Size += e.Size
			}
			if marks[e.Path] != "" {
				s.Mark = "changed"
			}
			continue
		}
		row := treeRow{Name: strings.TrimSuffix(rest, "/"), Path: e.Path, Dir: e.Kind == cairn.KindDir, Size: e.Size, Mark: marks[e.Path]}
		if row.Dir {
			if s := subs[row.Name]; s == nil {
				subs[row.Name] = &treeRow{Name: row.Name, Path: dir + row.Name, Dir: true, Mark: row.Mark}
			}
			continue
		}
		row.Digest = digestOf(e.BlobKey)
		rows = append(rows, row)
	}
	for _, ch := range changes {
		if ch.Kind != snapshot.Removed {
			continue
		}
		rest, ok := strings.CutPrefix(ch.Path, dir)
		if !ok || rest == "" {
			continue
		}
		if i := strings.IndexByte(rest, '/'); i >= 0 && i < len(rest)-1 {
			name := rest[:i]
			if s := subs[name]; s != nil {
				s.Mark = "changed"
			} else {
				subs[name] = &treeRow{Name: name, Path: dir + name, Dir: true, Mark: "removed"}
			}
			continue
		}
		if ch.Old.Kind == cairn.KindDir {
			if subs[rest] == nil {
				subs[rest] = &treeRow{Name: rest, Path: dir + rest, Dir: true, Mark: "removed"}
			}
			continue
		}
		rows = append(rows, treeRow{Name: rest, Path: ch.Path, Size: ch.Old.Size, Mark: "removed", Digest: digestOf(ch.Old.BlobKey)})
	}
	dirs := make([]treeRow, 0, len(subs))
	for _, s := range subs {
		dirs = append(dirs, *s)
	}
	slices.SortFunc(dirs, func(a, b treeRow) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(rows, func(a, b treeRow) int { return strings.Compare(a.Name, b.Name) })
	all := append(dirs, rows...)
	if from >= len(all) {
		return nil, 0
	}
	all = all[from:]
	if len(all) > treeRows {
		return all[:treeRows], len(all) - treeRows
	}
	return all, 0
}

// digestOf returns the hex digest of a blob key.
func digestOf(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[i+1:]
	}
	return key
}

// fileDiff compares the file at p in parent (absent when nil) and cp: side
// by side, line by line, when both sides are text of at most maxDiffBytes;
// by size and digest otherwise.
func (c *Console) fileDiff(ctx context.Context, cp, parent *cairn.Checkpoint, p string) (*fileDiff, error) {
	find := func(x *cairn.Checkpoint) *cairn.Entry {
		if x == nil {
			return nil
		}
		for i := len(x.Files) - 1; i >= 0; i-- {
			if x.Files[i].Path == p && x.Files[i].Kind == cairn.KindFile {
				return &x.Files[i]
			}
		}
		return nil
	}
	oldE, newE := find(parent), find(cp)
	if oldE == nil && newE == nil {
		return nil, notFound(fmt.Sprintf("There is no file %q in checkpoint %q or its parent.", p, cp.ID))
	}
	fd := &fileDiff{Path: p}
	if oldE != nil {
		fd.OldSize, fd.OldDigest = oldE.Size, digestOf(oldE.BlobKey)
	}
	if newE != nil {
		fd.NewSize, fd.NewDigest = newE.Size, digestOf(newE.BlobKey)
	}
	if c.blobs == nil {
		fd.Unavailable = "this server has no bucket, so file contents cannot be shown"
		return fd, nil
	}
	if fd.OldSize > maxDiffBytes || fd.NewSize > maxDiffBytes {
		fd.TooLarge = true
		return fd, nil
	}
	read := func(e *cairn.Entry) ([]byte, error) {
		if e == nil {
			return nil, nil
		}
		if e.Size == 0 {
			return []byte{}, nil
		}
		return c.blobs.Get(ctx, e.BlobKey)
	}
	oldB, err := read(oldE)
	if err == nil && oldE != nil && newE != nil && oldE.BlobKey == newE.BlobKey {
		fd.Rows = sideBySide(oldB, oldB)
		return fd, nil
	}
	var newB []byte
	if err == nil {
		newB, err = read(newE)
	}
	if err != nil {
		if errors.Is(err, bucket.ErrNotFound) {
			fd.Unavailable = "a version of the file is missing from the bucket"
			return fd, nil
		}
		return nil, err
	}
	if !isText(oldB) || !isText(newB) {
		fd.Binary = true
		return fd, nil
	}
	fd.Rows = sideBySide(oldB, newB)
	return fd, nil
}

// isText says whether b is UTF-8 without NUL bytes.
func isText(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	s := strings.TrimSuffix(string(b), "\n")
	return strings.Split(s, "\n")
}

// sideBySide pairs the lines of a and b: equal lines side by side, and
// in each run of changes between two equal lines the removed lines beside
// the added lines that replaced them.
func sideBySide(a, b []byte) []diffRow {
	var rows []diffRow
	on, nn := 1, 1
	var dels, adds []string
	flush := func() {
		for i := range max(len(dels), len(adds)) {
			row := diffRow{Kind: "changed"}
			if i < len(dels) {
				row.Old, row.OldNo = dels[i], on
				on++
			} else {
				row.Kind = "added"
			}
			if i < len(adds) {
				row.New, row.NewNo = adds[i], nn
				nn++
			} else {
				row.Kind = "removed"
			}
			rows = append(rows, row)
		}
		dels, adds = dels[:0], adds[:0]
	}
	la, lb := splitLines(a), splitLines(b)
	if slices.Equal(la, lb) {
		// DiffChunks answers nothing for equal sides.
		for i, l := range la {
			rows = append(rows, diffRow{Kind: "same", Old: l, New: l, OldNo: i + 1, NewNo: i + 1})
		}
		return rows
	}
	for _, ch := range diff.DiffChunks(la, lb) {
		dels = append(dels, ch.Deleted...)
		adds = append(adds, ch.Added...)
		if len(ch.Equal) == 0 {
			continue
		}
		flush()
		for _, l := range ch.Equal {
			rows = append(rows, diffRow{Kind: "same", Old: l, New: l, OldNo: on, NewNo: nn})
			on++
			nn++
		}
	}
	flush()
	return rows
}

// download sends one file of the checkpoint (?path=) as an attachment.
func (c *Console) download(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	cp, _, ok := c.checkpointAndParent(w, r)
	if !ok {
		return
	}
	p := r.URL.Query().Get("path")
	var e *cairn.Entry
	for i := range cp.Files {
		if cp.Files[i].Path == p && cp.Files[i].Kind == cairn.KindFile {
			e = &cp.Files[i]
		}
	}
	if e == nil {
		c.fail(w, r, t, http.StatusNotFound, fmt.Sprintf("Checkpoint %q has no file %q.", cp.ID, p))
		return
	}
	c.sendBlob(w, r, path.Base(p), e.BlobKey, e.Size)
}

// downloadArtifact sends one artifact of the checkpoint (?id=).
func (c *Console) downloadArtifact(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	cp, _, ok := c.checkpointAndParent(w, r)
	if !ok {
		return
	}
	id := r.URL.Query().Get("id")
	for _, a := range cp.Artifacts {
		if a.ArtifactID == id {
			c.sendBlob(w, r, a.Name, a.BlobKey, a.Size)
			return
		}
	}
	c.fail(w, r, t, http.StatusNotFound, fmt.Sprintf("Checkpoint %q has no artifact %q.", cp.ID, id))
}

func (c *Console) sendBlob(w http.ResponseWriter, r *http.Request, name, key string, size int64) {
	if c.blobs == nil {
		c.fail(w, r, tenantOf(r), http.StatusNotFound, "This server has no bucket, so file contents cannot be downloaded.")
		return
	}
	var data []byte
	if size > 0 {
		var err error
		if data, err = c.blobs.Get(r.Context(), key); err != nil {
			c.failErr(w, r, "the file's blob", err)
			return
		}
	}
	attach(w, name)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data)
}

// attach makes the answer a download named name, whatever bytes the name
// holds.
func attach(w http.ResponseWriter, name string) {
	if name == "" || name == "." || name == "/" {
		name = "file"
	}
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
}

// tarball streams the checkpoint's tree as a tar archive: its directories
// and files, read from the bucket one at a time.
func (c *Console) tarball(w http.ResponseWriter, r *http.Request) {
	cp, _, ok := c.checkpointAndParent(w, r)
	if !ok {
		return
	}
	if c.blobs == nil {
		c.fail(w, r, tenantOf(r), http.StatusNotFound, "This server has no bucket, so file contents cannot be downloaded.")
		return
	}
	attach(w, cp.ID+".tar")
	w.Header().Set("Content-Type", "application/x-tar")
	tw := tar.NewWriter(w)
	for _, e := range cp.Files {
		name := strings.TrimPrefix(e.Path, "/")
		if e.Kind == cairn.KindDir {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755}); err != nil {
				return
			}
			continue
		}
		var data []byte
		if e.Size > 0 {
			var err error
			if data, err = c.blobs.Get(r.Context(), e.BlobKey); err != nil {
				// The status is sent: end the stream short, which the
				// client sees as a truncated archive.
				c.log.Error("console tar: reading a blob failed; the archive is cut short", "checkpoint", cp.ID, "key", e.BlobKey, "error", err)
				return
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))}); err != nil {
			return
		}
		if _, err := tw.Write(data); err != nil {
			return
		}
	}
	_ = tw.Close()
}
