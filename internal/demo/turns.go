package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/snapshot"
)

// WorkspaceInfo describes the captured directory.
type WorkspaceInfo struct {
	Dir   string `json:"dir"`
	Files int    `json:"files"`
	Dirs  int    `json:"dirs"`
	Bytes int64  `json:"bytes"`
}

// describe counts a directory's files, directories and bytes.
func describe(dir string) (WorkspaceInfo, error) {
	info := WorkspaceInfo{Dir: dir}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case p == dir:
		case d.IsDir():
			info.Dirs++
		default:
			fi, err := d.Info()
			if err != nil {
				return err
			}
			info.Files++
			info.Bytes += fi.Size()
		}
		return nil
	})
	return info, err
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

// capture checkpoints a thread's workspace with snapshot.Save: under the
// thread's writer lease it claims and uploads the blobs of its files and of
// its artifact, then appends the checkpoint at the head. It returns the
// checkpoint and what the capture uploaded and found already present.
func (d *demo) capture(ctx context.Context, dir, thread string, turn int, artifact string) (*cairn.Checkpoint, snapshot.CaptureStats, error) {
	d.seq++
	id := fmt.Sprintf("%s-turn-%d", thread, turn)
	createdAt := baseTime + float64(d.seq)*1000
	in := snapshot.SaveInput{
		ThreadID: thread, Dir: dir, ID: id, Reason: cairn.ReasonAutomatic,
		CreatedAt: createdAt, Conversation: conversation(thread, turn),
	}
	if artifact != "" {
		in.Artifacts = []snapshot.ArtifactSource{snapshot.ArtifactBytes(id+"-report", "test-report.txt", "text/plain", createdAt, []byte(artifact))}
	}
	res, err := snapshot.Save(ctx, d.store, d.blobs, in)
	if err != nil {
		return nil, snapshot.CaptureStats{}, fmt.Errorf("capture %s: %w", id, err)
	}
	return &res.Checkpoint, res.Stats, nil
}

// restore writes the files and directories of a checkpoint into dir with
// snapshot.Restore, which checks every blob against its key first.
func (d *demo) restore(ctx context.Context, cp *cairn.Checkpoint, dir string) error {
	if _, err := snapshot.Restore(ctx, d.blobs, cp, dir, nil); err != nil {
		return fmt.Errorf("restore %s: %w", cp.ID, err)
	}
	return nil
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

// sameTree reports whether two directories hold the same paths with the same
// bytes, and names the first difference.
func sameTree(a, b string) (bool, string, error) {
	read := func(root string) (map[string][]byte, error) {
		out := map[string][]byte{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == root {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			if d.IsDir() {
				out[rel+"/"] = nil
				return nil
			}
			data, err := os.ReadFile(p)
			out[rel] = data
			return err
		})
		return out, err
	}
	ta, err := read(a)
	if err != nil {
		return false, "", err
	}
	tb, err := read(b)
	if err != nil {
		return false, "", err
	}
	for p, data := range ta {
		got, ok := tb[p]
		if !ok {
			return false, "missing " + p, nil
		}
		if !bytes.Equal(got, data) {
			return false, "contents of " + p, nil
		}
	}
	for p := range tb {
		if _, ok := ta[p]; !ok {
			return false, "extra " + p, nil
		}
	}
	return true, "", nil
}
