package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/snapshot"
)

// filterFlags registers the flags that choose which paths a capture takes
// and a restore leaves alone, and the transfer concurrency.
func filterFlags(s *cli.Set, o *snapshot.Options) {
	s.Var(cli.List{L: &o.Include}, "include", "comma-separated patterns: capture only the files that match one (path.Match; a pattern without / matches any segment)")
	s.Var(cli.List{L: &o.Exclude}, "exclude", "comma-separated patterns to leave out, with everything under them; they win over --include")
	s.BoolVar(&o.NoDefaultExcludes, "no-default-excludes", false, "also take .git, node_modules and .env* (left out by default)")
	s.IntVar(&o.Concurrency, "concurrency", 0, fmt.Sprintf("files transferred at once (0: %d)", snapshot.DefaultConcurrency))
	o.StatCache = "auto"
	s.StringVar(&o.StatCache, "stat-cache", o.StatCache, "file that remembers each file's digest by its stat, so that a re-capture hashes only changed files; auto: one per directory under the user cache directory; off: none")
}

// resolveStatCache turns the --stat-cache value into the file for dir:
// "off" gives none, "auto" a file under the user cache directory named by
// the SHA-256 of dir's absolute path (none when there is no cache
// directory), anything else the path given.
func resolveStatCache(o *snapshot.Options, dir string) {
	switch o.StatCache {
	case "off":
		o.StatCache = ""
	case "auto":
		o.StatCache = ""
		abs, err := filepath.Abs(dir)
		if err != nil {
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			return
		}
		sum := sha256.Sum256([]byte(abs))
		caches := filepath.Join(cache, "cairn", "stat-cache")
		if os.MkdirAll(caches, 0o700) == nil {
			o.StatCache = filepath.Join(caches, hex.EncodeToString(sum[:16]))
		}
	}
}

// filterEnv are the flags of filterFlags that fall back to CAIRN_ variables.
var filterEnv = []string{"include", "exclude", "no-default-excludes", "concurrency", "stat-cache"}

// checkConcurrency refuses a negative --concurrency.
func checkConcurrency(o *snapshot.Options) error {
	if o.Concurrency < 0 {
		return cli.Usagef("--concurrency must be 0 (the default) or more, got %d", o.Concurrency)
	}
	return nil
}

// progressTo returns a progress callback that draws on a terminal, and the
// function that ends its line; both do nothing when stderr is not one.
func progressTo(c *call) (func(snapshot.Progress), func()) {
	b := newBar(c.p.stderr, c.p.terminal)
	return b.event, b.finish
}

var captureCmd = &command{
	name: "capture", args: "--thread THREAD [flags] DIR", nargs: 1, store: true,
	ids:     []string{"thread", "id"},
	env:     append([]string{"thread"}, filterEnv...),
	summary: "capture a directory into a new checkpoint at the thread's head, print its id",
	help: `Captures DIR (every file and empty directory, without .git, node_modules and
.env*) into content-addressed blobs in the bucket, uploading only the bytes the
bucket lacks, and appends a checkpoint at the head of THREAD under the
thread's writer lease, as upstream's snapshots.save does. It prints the new
checkpoint's id on standard output; a progress bar goes to standard error
when that is a terminal. Symlinks, executables and other special files are
refused with the path named. When another writer appends first, it re-reads
the head and appends again.

Example:
  cairn capture --thread t1 ./workspace
  cairn capture --thread t1 --label "tests pass" --exclude '*.log,dist' ./workspace`,
	setup: func(s *cli.Set) func(context.Context, *call) error {
		var in snapshot.SaveInput
		s.StringVar(&in.ThreadID, "thread", "", "thread to append to (required)")
		s.StringVar(&in.Label, "label", "", "label of the checkpoint")
		s.StringVar(&in.Reason, "reason", cairn.ReasonNamed, "reason of the checkpoint: named, automatic, or any word")
		s.StringVar(&in.ID, "id", "", "id of the new checkpoint (empty: a random UUID)")
		s.StringVar(&in.SourceRunID, "run-id", "", "source run id to record")
		filterFlags(s, &in.Options)
		return func(ctx context.Context, c *call) error {
			if in.ThreadID == "" {
				return cli.Usagef("--thread (or %s) is required: the thread to append the checkpoint to", cli.EnvName("thread"))
			}
			if err := checkConcurrency(&in.Options); err != nil {
				return err
			}
			if err := c.open(ctx); err != nil {
				return err
			}
			in.Dir = c.args[0]
			resolveStatCache(&in.Options, in.Dir)
			var finish func()
			in.Options.Progress, finish = progressTo(c)
			res, err := snapshot.Save(ctx, c.store, c.blobs, in)
			finish()
			if err != nil {
				return fmt.Errorf("capture %s into thread %q: %w", in.Dir, in.ThreadID, err)
			}
			st := res.Stats
			fmt.Fprintf(c.p.stderr, "captured %s: %s, %s, %s; hashed %d; uploaded %s (%s), %d already in the bucket\n",
				in.Dir, plural(st.Files, "file"), formatBytes(st.Bytes), plural(st.Dirs, "empty directory"),
				st.Hashed, plural(st.Uploaded, "blob"), formatBytes(st.UploadedBytes), st.Present)
			fmt.Fprintln(c.p.stdout, res.Checkpoint.ID)
			return nil
		}
	},
}

var restoreCmd = &command{
	name: "restore", args: "[flags] CHECKPOINT DIR", nargs: 2, store: true, env: filterEnv,
	ids:     []string{"CHECKPOINT"},
	summary: "write a checkpoint's files into a directory",
	help: `Writes the files and empty directories of CHECKPOINT into DIR, creating it
when missing. Every blob is downloaded and checked against its key and size
before DIR is touched, so a missing or corrupt blob leaves DIR as it was.
Files of DIR that the checkpoint lacks are removed, except the paths a
capture leaves out (.git, node_modules, .env* and --exclude).

Example:
  cairn restore 7b0c5f0e-9d1e-4c55-b8a4-0d6f8f3f2a10 ./workspace
  cairn restore --exclude dist $(cairn log -o json t1 | jq -r '.[0].id') ./ws`,
	setup: func(s *cli.Set) func(context.Context, *call) error {
		var opts snapshot.Options
		filterFlags(s, &opts)
		return func(ctx context.Context, c *call) error {
			if err := checkConcurrency(&opts); err != nil {
				return err
			}
			if len(opts.Include) > 0 {
				return cli.Usagef("--include applies to capture; a restore writes every file of the checkpoint")
			}
			if err := c.open(ctx); err != nil {
				return err
			}
			id, dir := c.args[0], c.args[1]
			resolveStatCache(&opts, dir)
			cp, err := getCheckpoint(ctx, c.store, id)
			if err != nil {
				return err
			}
			var finish func()
			opts.Progress, finish = progressTo(c)
			st, err := snapshot.Restore(ctx, c.blobs, cp, dir, &opts)
			finish()
			if err != nil {
				return fmt.Errorf("restore %s into %s: %w", id, dir, err)
			}
			fmt.Fprintf(c.p.stderr, "restored %s into %s: %s, %s, %s; removed %s\n",
				id, dir, plural(st.Files, "file"), formatBytes(st.Bytes), plural(st.Dirs, "empty directory"), plural(st.Removed, "stale entry"))
			return nil
		}
	},
}

var forkCmd = &command{
	name: "fork", args: "--thread NEW [flags] CHECKPOINT", nargs: 1, store: true,
	ids:     []string{"thread", "id", "CHECKPOINT"},
	summary: "start a new thread from a checkpoint, print the new root's id",
	help: `Starts the empty thread NEW from CHECKPOINT: one atomic step copies the
checkpoint as NEW's root (reason fork-root) and its conversation as NEW's
transcript, as upstream's snapshots.fork does. No bytes are copied; the root
references the same blobs. It prints the new root's id.

Example:
  cairn fork --thread t1-experiment 7b0c5f0e-9d1e-4c55-b8a4-0d6f8f3f2a10`,
	setup: func(s *cli.Set) func(context.Context, *call) error {
		var in snapshot.ForkInput
		s.StringVar(&in.DestinationThreadID, "thread", "", "the new thread (required; must have no checkpoint)")
		s.StringVar(&in.DestinationCheckpointID, "id", "", "id of the new root (empty: a random UUID)")
		return func(ctx context.Context, c *call) error {
			if in.DestinationThreadID == "" {
				return cli.Usagef("--thread is required: the new thread to fork into")
			}
			if err := c.open(ctx); err != nil {
				return err
			}
			in.SourceCheckpointID = c.args[0]
			root, err := snapshot.Fork(ctx, c.store, in)
			if err != nil {
				return fmt.Errorf("fork %s into thread %q: %w", in.SourceCheckpointID, in.DestinationThreadID, err)
			}
			fmt.Fprintln(c.p.stdout, root.ID)
			return nil
		}
	},
}

var diffCmd = &command{
	name: "diff", args: "[flags] CHECKPOINT1 CHECKPOINT2", nargs: 2, store: true,
	ids:     []string{"CHECKPOINT1", "CHECKPOINT2"},
	summary: "list the paths that differ between two checkpoints",
	help: `Lists the files and empty directories that differ between the manifests of
CHECKPOINT1 and CHECKPOINT2, sorted by path, like git diff --name-status:
A (only in CHECKPOINT2), D (only in CHECKPOINT1) or M (other content, size or
kind), with the sizes. It reads only the manifests, no file bytes. Artifacts
are not compared.

Example:
  cairn diff cp-a cp-b
  cairn diff -o json cp-a cp-b`,
	setup: func(s *cli.Set) func(context.Context, *call) error {
		output := outputFlag(s)
		return func(ctx context.Context, c *call) error {
			if err := c.open(ctx); err != nil {
				return err
			}
			a, err := getCheckpoint(ctx, c.store, c.args[0])
			if err != nil {
				return err
			}
			b, err := getCheckpoint(ctx, c.store, c.args[1])
			if err != nil {
				return err
			}
			changes := snapshot.Diff(*a, *b)
			if *output == "json" {
				type change struct {
					Path string       `json:"path"`
					Kind string       `json:"change"`
					Old  *cairn.Entry `json:"old,omitempty"`
					New  *cairn.Entry `json:"new,omitempty"`
				}
				out := make([]change, 0, len(changes))
				for _, ch := range changes {
					j := change{Path: ch.Path, Kind: string(ch.Kind)}
					if ch.Kind != snapshot.Added {
						j.Old = &ch.Old
					}
					if ch.Kind != snapshot.Removed {
						j.New = &ch.New
					}
					out = append(out, j)
				}
				return writeJSON(c.p.stdout, out)
			}
			tw := tabwriter.NewWriter(c.p.stdout, 0, 4, 2, ' ', 0)
			for _, ch := range changes {
				switch ch.Kind {
				case snapshot.Added:
					fmt.Fprintf(tw, "A\t%s\t%s\n", quotePath(ch.Path), describeEntry(ch.New))
				case snapshot.Removed:
					fmt.Fprintf(tw, "D\t%s\t%s\n", quotePath(ch.Path), describeEntry(ch.Old))
				default:
					fmt.Fprintf(tw, "M\t%s\t%s -> %s\n", quotePath(ch.Path), describeEntry(ch.Old), describeEntry(ch.New))
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(c.p.stderr, "%d paths differ\n", len(changes))
			return nil
		}
	},
}

// describeEntry says what an entry is in a few words.
func describeEntry(e cairn.Entry) string {
	if e.Kind == cairn.KindDir {
		return "dir"
	}
	return fmt.Sprintf("%d B", e.Size)
}
