package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

// WorkspaceInfo describes the captured directory.
type WorkspaceInfo struct {
	Dir   string `json:"dir"`
	Files int    `json:"files"`
	Dirs  int    `json:"dirs"`
	Bytes int64  `json:"bytes"`
}

// scan returns the entries of dir, in path order, with their contents:
// directories (without the root) and regular files. Symlinks and other kinds
// are refused, as a capture does.
func scan(dir string) (entries []cairn.Entry, contents map[string][]byte, err error) {
	contents = map[string][]byte{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			entries = append(entries, cairn.Entry{Path: rel, Kind: cairn.KindDir})
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			contents[rel] = data
			entries = append(entries, cairn.Entry{Path: rel, Kind: cairn.KindFile, BlobKey: bucket.FileKey(data), Size: int64(len(data))})
		default:
			return fmt.Errorf("%s: only files and directories can be captured", rel)
		}
		return nil
	})
	slices.SortFunc(entries, func(a, b cairn.Entry) int {
		switch {
		case a.Path < b.Path:
			return -1
		case a.Path > b.Path:
			return 1
		}
		return 0
	})
	return entries, contents, err
}

// describe counts a directory's files, directories and bytes.
func describe(dir string) (WorkspaceInfo, error) {
	entries, _, err := scan(dir)
	info := WorkspaceInfo{Dir: dir}
	for _, e := range entries {
		if e.Kind == cairn.KindDir {
			info.Dirs++
			continue
		}
		info.Files++
		info.Bytes += e.Size
	}
	return info, err
}

// copyDir copies the files and directories of src into dst.
func copyDir(src, dst string) error {
	entries, contents, err := scan(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dst, filepath.FromSlash(e.Path))
		if e.Kind == cairn.KindDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(p, contents[e.Path], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// edit changes a thread's workspace for one turn, the way a coding agent's
// turn would: each thread's edits differ, so the files they change get blobs
// of their own while the files they leave alone share one blob.
func edit(dir, thread string, turn int) error {
	appendTo := func(rel, text string) error {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, werr := f.WriteString(text)
		return errors.Join(werr, f.Close())
	}
	write := func(rel, text string) error {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(text), 0o644)
	}
	switch turn {
	case 2:
		return errors.Join(
			appendTo("cmd/wordfreq/main.go", fmt.Sprintf("\n// %s, turn 2: print the total number of words after the list.\n", thread)),
			appendTo("README.md", fmt.Sprintf("\nThe %s branch of this workspace also prints the total.\n", thread)),
		)
	case 3:
		return errors.Join(
			write(fmt.Sprintf("notes/%s.md", thread), fmt.Sprintf("# Notes of %s\n\n- turn 3: split hyphenated words too\n- keep the ranking stable\n", thread)),
			appendTo("count/count.go", fmt.Sprintf("\n// %s, turn 3: hyphens separate words, as documented in docs/design.md.\n", thread)),
			os.Remove(filepath.Join(dir, "docs", "changelog.md")),
		)
	case 4:
		return errors.Join(
			appendTo("testdata/harbour.txt", fmt.Sprintf("\nThe %s boat came in last, after the harbour lights were lit.\n", thread)),
			appendTo("cmd/wordfreq/main.go", fmt.Sprintf("// %s, turn 4: -min now defaults to 3.\n", thread)),
		)
	}
	return fmt.Errorf("no edit for turn %d", turn)
}

// capture checkpoints a thread's workspace as a capture does: under the
// thread's writer lease it claims and uploads the blobs of its files and of
// its artifact, then appends the checkpoint. It returns the checkpoint and how many
// blobs it uploaded and found already present.
func (d *demo) capture(ctx context.Context, dir, thread string, turn int, artifact string) (*cairn.Checkpoint, bucket.UploadResult, error) {
	entries, contents, err := scan(dir)
	if err != nil {
		return nil, bucket.UploadResult{}, err
	}
	d.seq++
	cp := cairn.Checkpoint{
		ID:           fmt.Sprintf("%s-turn-%d", thread, turn),
		ThreadID:     thread,
		CreatedAt:    baseTime + float64(d.seq)*1000,
		Reason:       cairn.ReasonAutomatic,
		Files:        entries,
		Conversation: conversation(thread, turn),
	}
	var blobs []bucket.Blob
	for _, e := range entries {
		if e.Kind == cairn.KindFile {
			blobs = append(blobs, bucket.Blob{Key: e.BlobKey, Data: contents[e.Path]})
		}
	}
	if artifact != "" {
		b := bucket.ArtifactBlob([]byte(artifact))
		blobs = append(blobs, b)
		cp.Artifacts = []cairn.Artifact{{ArtifactID: cp.ID + "-report", Name: "test-report.txt", MimeType: "text/plain",
			Size: int64(len(b.Data)), BlobKey: b.Key, CreatedAt: cp.CreatedAt}}
	}
	lease, err := d.store.AcquireWriter(ctx, thread)
	if err != nil {
		return nil, bucket.UploadResult{}, fmt.Errorf("capture %s: %w", cp.ID, err)
	}
	defer lease.Release(context.WithoutCancel(ctx))
	head, err := d.store.GetHead(ctx, thread)
	if err != nil {
		return nil, bucket.UploadResult{}, err
	}
	// Claimed under the lease, then uploaded when missing: a sweeper
	// running now cannot delete what this capture reuses.
	up, err := bucket.UploadBlobs(ctx, d.store, lease.Writer, d.blobs, blobs)
	if err != nil {
		return nil, up, fmt.Errorf("capture %s: upload: %w", cp.ID, err)
	}
	cp.ParentCheckpointID = head
	if _, err := d.store.Append(ctx, cairn.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: lease.Writer}); err != nil {
		return nil, up, fmt.Errorf("capture %s: append: %w", cp.ID, err)
	}
	return &cp, up, nil
}

// conversation is the checkpoint's transcript: what was asked and answered up
// to this turn.
func conversation(thread string, turn int) json.RawMessage {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var msgs []message
	for t := 1; t <= turn; t++ {
		msgs = append(msgs,
			message{"user", fmt.Sprintf("%s, turn %d: %s", thread, t, tasks[(t-1)%len(tasks)])},
			message{"assistant", "Done; the tests pass."})
	}
	data, _ := json.Marshal(msgs)
	return data
}

var tasks = []string{
	"read the workspace and run the tests",
	"print the total number of words",
	"split hyphenated words and write notes",
	"make -min default to 3 and extend the sample text",
}

// testReport is the artifact a turn leaves: a small test log.
func testReport(thread string, turn, files int) string {
	return fmt.Sprintf("%s, turn %d\n$ go test ./...\nok  \texample.com/wordfreq/count\t0.01s\n(%d files in the workspace)\n", thread, turn, files)
}

// restore writes the files and directories of a checkpoint into dir, reading
// each blob from the bucket and checking it against its key.
func (d *demo) restore(ctx context.Context, cp *cairn.Checkpoint, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, e := range cp.Files {
		p := filepath.Join(dir, filepath.FromSlash(e.Path))
		if e.Kind == cairn.KindDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			continue
		}
		data, err := bucket.ReadBlob(ctx, d.blobs, e.BlobKey)
		if err != nil {
			return fmt.Errorf("restore %s of %s: %w", e.Path, cp.ID, err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// sameTree reports whether two directories hold the same paths with the same
// bytes, and names the first difference.
func sameTree(a, b string) (bool, string, error) {
	ea, ca, err := scan(a)
	if err != nil {
		return false, "", err
	}
	eb, cb, err := scan(b)
	if err != nil {
		return false, "", err
	}
	if len(ea) != len(eb) {
		return false, fmt.Sprintf("%d entries, want %d", len(eb), len(ea)), nil
	}
	for i := range ea {
		if ea[i].Path != eb[i].Path || ea[i].Kind != eb[i].Kind {
			return false, fmt.Sprintf("entry %s, want %s", path.Clean(eb[i].Path), ea[i].Path), nil
		}
		if !bytes.Equal(ca[ea[i].Path], cb[eb[i].Path]) {
			return false, "contents of " + ea[i].Path, nil
		}
	}
	return true, "", nil
}
