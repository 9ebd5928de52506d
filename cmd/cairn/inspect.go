package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/cli"
)

var logCmd = &command{
	name: "log", args: "[flags] THREAD", nargs: 1, store: true,
	ids:     []string{"THREAD"},
	summary: "list a thread's checkpoints, the head first, along the parent chain",
	help: `Lists the checkpoints of THREAD from its head back along the parent chain,
newest first, as git log does: id, creation time, reason, label, and how many
files and bytes each holds. Checkpoints of the thread that are not on the
head's chain (left behind by a deleted head) are not listed.

Example:
  cairn log t1
  cairn log -n 5 -o json t1`,
	setup: func(s *cli.Set) func(context.Context, *call) error {
		limit := new(int)
		s.Var(count{limit}, "n", "list at most this many checkpoints (0: all)")
		output := outputFlag(s)
		return func(ctx context.Context, c *call) error {
			if err := c.open(ctx); err != nil {
				return err
			}
			thread := c.args[0]
			chain, err := headChain(ctx, c.store, thread)
			if err != nil {
				return err
			}
			if *limit > 0 && len(chain) > *limit {
				chain = chain[:*limit]
			}
			if *output == "json" {
				return writeJSON(c.p.stdout, chain)
			}
			tw := tabwriter.NewWriter(c.p.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCREATED\tREASON\tLABEL\tFILES\tBYTES")
			for _, cp := range chain {
				files, size := totals(&cp)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", cp.ID, formatTime(cp.CreatedAt), cp.Reason, cp.Label, files, formatBytes(size))
			}
			return tw.Flush()
		}
	},
}

// headChain returns the checkpoints of the thread from its head along the
// parent chain. It returns an errNotFound error for a thread without a head.
func headChain(ctx context.Context, store *etcdstore.Store, thread string) ([]cairn.Checkpoint, error) {
	head, err := store.GetHead(ctx, thread)
	if err != nil {
		return nil, fmt.Errorf("thread %q: %w", thread, err)
	}
	if head == "" {
		return nil, notFoundf("thread %q has no checkpoint under this --prefix ('cairn threads' lists the threads)", thread)
	}
	all, err := store.List(ctx, thread)
	if err != nil {
		return nil, fmt.Errorf("thread %q: %w", thread, err)
	}
	byID := make(map[string]cairn.Checkpoint, len(all))
	for _, cp := range all {
		byID[cp.ID] = cp
	}
	var chain []cairn.Checkpoint
	for id := head; id != ""; {
		cp, ok := byID[id]
		if !ok {
			break // pruned: the chain ends here
		}
		chain = append(chain, cp)
		id = cp.ParentCheckpointID
		if len(chain) > len(all) {
			return nil, fmt.Errorf("thread %q: the parent chain from %s has a cycle; run 'cairn verify'", thread, head)
		}
	}
	return chain, nil
}

var threadsCmd = &command{
	name: "threads", args: "[flags]", nargs: 0, store: true,
	summary: "list the threads that have checkpoints, with their heads",
	help: `Lists every thread under --prefix that has at least one checkpoint, sorted
by id, with its head checkpoint.

Example:
  cairn threads
  cairn threads -o json`,
	setup: func(s *cli.Set) func(context.Context, *call) error {
		output := outputFlag(s)
		return func(ctx context.Context, c *call) error {
			if err := c.open(ctx); err != nil {
				return err
			}
			type thread struct {
				ID   string `json:"threadId"`
				Head string `json:"headId"`
			}
			var threads []thread
			for after := ""; ; {
				page, err := c.store.ListThreads(ctx, after, 0)
				if err != nil {
					return err
				}
				if len(page) == 0 {
					break
				}
				for _, id := range page {
					head, err := c.store.GetHead(ctx, id)
					if err != nil {
						return fmt.Errorf("thread %q: %w", id, err)
					}
					threads = append(threads, thread{ID: id, Head: head})
				}
				after = page[len(page)-1]
			}
			if *output == "json" {
				if threads == nil {
					threads = []thread{}
				}
				return writeJSON(c.p.stdout, threads)
			}
			tw := tabwriter.NewWriter(c.p.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "THREAD\tHEAD")
			for _, t := range threads {
				fmt.Fprintf(tw, "%s\t%s\n", t.ID, t.Head)
			}
			return tw.Flush()
		}
	},
}

var showCmd = &command{
	name: "show", args: "[flags] CHECKPOINT", nargs: 1, store: true,
	ids:     []string{"CHECKPOINT"},
	summary: "print a checkpoint's manifest",
	help: `Prints the checkpoint's fields and its manifest: every file with its size and
blob key, every empty directory, every artifact. With -o json it prints the
checkpoint in the upstream wire shape (the JSON a TanStack AI
SandboxCheckpointStore returns).

Example:
  cairn show cp-0123
  cairn show -o json cp-0123 | jq '.files[].path'`,
	setup: func(s *cli.Set) func(context.Context, *call) error {
		output := outputFlag(s)
		return func(ctx context.Context, c *call) error {
			if err := c.open(ctx); err != nil {
				return err
			}
			cp, err := getCheckpoint(ctx, c.store, c.args[0])
			if err != nil {
				return err
			}
			if *output == "json" {
				return writeJSON(c.p.stdout, cp)
			}
			w := c.p.stdout
			files, size := totals(cp)
			fmt.Fprintf(w, "checkpoint %s\nthread     %s\nparent     %s\ncreated    %s\nreason     %s\n",
				cp.ID, cp.ThreadID, orNone(cp.ParentCheckpointID), formatTime(cp.CreatedAt), cp.Reason)
			if cp.Label != "" {
				fmt.Fprintf(w, "label      %s\n", cp.Label)
			}
			if cp.SourceRunID != "" {
				fmt.Fprintf(w, "run        %s\n", cp.SourceRunID)
			}
			fmt.Fprintf(w, "files      %d, %s\n\n", files, formatBytes(size))
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KIND\tSIZE\tPATH\tBLOB")
			for _, e := range cp.Files {
				if e.Kind == cairn.KindDir {
					fmt.Fprintf(tw, "dir\t-\t%s/\t-\n", quotePath(e.Path))
					continue
				}
				fmt.Fprintf(tw, "file\t%d\t%s\t%s\n", e.Size, quotePath(e.Path), e.BlobKey)
			}
			for _, a := range cp.Artifacts {
				fmt.Fprintf(tw, "artifact\t%d\t%s\t%s\n", a.Size, quotePath(a.Name), a.BlobKey)
			}
			return tw.Flush()
		}
	},
}

var verifyCmd = &command{
	name: "verify", args: "[flags]", nargs: 0, store: true,
	summary: "check the store's invariants and reference counts",
	help: `Reads the whole store at one etcd revision and checks its invariants: every
head exists, every checkpoint's records are there, and every blob's reference
count matches the checkpoints that use it (the sweeper's --verify, without a
sweep and without the sweeper's lock). It changes nothing. With --objects it
also fetches every object of each checkpoint from the bucket. Exits 4 when it
finds a problem; leftover garbage is reported but is not a problem.

Example:
  cairn verify
  cairn verify --objects -o json`,
	setup: func(s *cli.Set) func(context.Context, *call) error {
		objects := s.Bool("objects", false, "also fetch and decode every checkpoint object from the bucket")
		output := outputFlag(s)
		return func(ctx context.Context, c *call) error {
			if err := c.open(ctx); err != nil {
				return err
			}
			r, err := c.store.Verify(ctx, etcdstore.VerifyOptions{Objects: *objects})
			if err != nil {
				return fmt.Errorf("verify the store: %w", err)
			}
			if *output == "json" {
				if err := writeJSON(c.p.stdout, r); err != nil {
					return err
				}
			} else {
				w := c.p.stdout
				fmt.Fprintf(w, "revision %d: %d threads, %d checkpoints, %d blob keys, %d references, %d GC records, %d claims\n",
					r.Revision, r.Threads, r.Checkpoints, r.BlobKeys, r.References, r.GCRecords, r.Claims)
				for _, p := range r.Problems {
					fmt.Fprintf(w, "problem: %s\n", p)
				}
				for _, g := range r.Garbage {
					fmt.Fprintf(w, "garbage: %s\n", g)
				}
				if r.OK() {
					fmt.Fprintln(w, "ok")
				}
			}
			if !r.OK() {
				return fmt.Errorf("%w: verify found %d (the first: %s)", errProblems, len(r.Problems), r.Problems[0])
			}
			return nil
		}
	},
}

// getCheckpoint returns the checkpoint or an errNotFound error naming it.
func getCheckpoint(ctx context.Context, store cairn.Store, id string) (*cairn.Checkpoint, error) {
	cp, err := store.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %q: %w", id, err)
	}
	if cp == nil {
		return nil, notFoundf("no checkpoint %q under this --prefix ('cairn log THREAD' lists a thread's checkpoints)", id)
	}
	return cp, nil
}

// outputFlag registers -o.
func outputFlag(s *cli.Set) *string {
	o := new(string)
	s.Var(choice{v: o, allowed: []string{"text", "json"}, def: "text"}, "o", "output format: text or json")
	*o = "text"
	return o
}

// choice is a flag.Value that accepts one of a few words.
type choice struct {
	v       *string
	allowed []string
	def     string
}

func (c choice) String() string {
	if c.v == nil {
		return c.def
	}
	return *c.v
}

func (c choice) Set(s string) error {
	for _, a := range c.allowed {
		if s == a {
			*c.v = s
			return nil
		}
	}
	return fmt.Errorf("%q is not one of %v", s, c.allowed)
}

// count is a flag.Value for a number of 0 or more.
type count struct{ n *int }

func (c count) String() string {
	if c.n == nil {
		return "0"
	}
	return strconv.Itoa(*c.n)
}

func (c count) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a whole number of 0 or more", s)
	}
	*c.n = n
	return nil
}

// writeJSON writes v as one line of compact JSON, so that a checkpoint's
// conversation keeps its bytes; jq pretty-prints it.
func writeJSON(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// totals counts the files of a checkpoint and adds up their sizes.
func totals(cp *cairn.Checkpoint) (files int, size int64) {
	for _, e := range cp.Files {
		if e.Kind == cairn.KindFile {
			files++
			size += e.Size
		}
	}
	return files, size
}

// formatTime and formatBytes are the CLI's formats, shared with the web
// console.
var (
	formatTime  = cli.FormatTime
	formatBytes = cli.FormatBytes
)

// quotePath prints a path as it is when it is printable UTF-8 without tabs
// or newlines, and Go-quoted otherwise.
func quotePath(p string) string {
	q := strconv.Quote(p)
	if q[1:len(q)-1] == p {
		return p
	}
	return q
}

func orNone(s string) string {
	if s == "" {
		return "(none: a root)"
	}
	return s
}
