// Package demo is the quickstart behind make demo: it runs cairn's whole flow
// on real files, on an embedded etcd and a local S3 server, and prints what
// the storage held before and after the sweep.
//
// The flow: copy a workspace directory, capture it into content-addressed
// blobs and checkpoints on three threads over four turns each while the files
// change between turns, fork one thread from an earlier checkpoint (restoring
// its files from the bucket) and go on there, leave the blobs of a capture
// that crashed before it appended, then run the sweeper's own run (the code of
// cmd/sweeper, under its lock): keep the newest checkpoints of every thread
// and delete the blobs no checkpoint uses. Finally it restores the head of
// every thread from the bucket and compares it with the workspace, byte for
// byte.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/sidecar"
	"github.com/cairnstore/cairn/snapshot"
)

// Options configure Run. The zero value of each field selects its default.
type Options struct {
	// Workspace is the directory to capture; it is copied, never changed.
	// Default: testdata/demo-workspace at the module root.
	Workspace string
	// S3 selects the S3 server: S3Auto (default), S3VersityGW or S3GoFakeS3.
	S3 string
	// Keep is how many checkpoints each thread keeps. Default 2.
	Keep int
	// Log receives the sweeper's log records; nil discards them.
	Log *slog.Logger
}

// The threads the demo captures, in order, and the fork.
const (
	turns      = 4
	forkThread = "gamma-fork"
	forkSource = "gamma"
	forkAt     = 2
	// baseTime is the createdAt of the first checkpoint (milliseconds).
	baseTime = 1_767_225_600_000
)

var threads = []string{"alpha", "beta", "gamma"}

// Snapshot is what the storage holds at one moment.
type Snapshot struct {
	// Checkpoints per thread, in the order of Threads.
	Checkpoints map[string]int `json:"checkpoints"`
	// Total is the number of checkpoints over all threads.
	Total int `json:"total"`
	// Referenced is the number of distinct blob keys checkpoints reference,
	// and References the sum of their reference counts.
	Referenced int `json:"referenced"`
	References int `json:"references"`
	// Objects and Bytes are the blobs in the bucket (under sandbox-files/ and
	// sandbox-artifacts/).
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
}

// Result is what the demo did.
type Result struct {
	// Etcd and S3 say where the data lived.
	Etcd string `json:"etcd"`
	S3   string `json:"s3"`
	// Workspace is the captured directory.
	Workspace WorkspaceInfo `json:"workspace"`
	// Threads are the threads, fork included, in display order.
	Threads []string `json:"threads"`
	// Captures is the number of checkpoints appended (the fork root
	// included), Uploaded the blobs they uploaded and Reused the blobs they
	// found already in the bucket.
	Captures int `json:"captures"`
	Uploaded int `json:"uploaded"`
	Reused   int `json:"reused"`
	// Orphans are the blobs of the capture that crashed before it appended.
	Orphans []string `json:"orphans"`
	// Before and After bracket the sweeper's run.
	Before Snapshot `json:"before"`
	After  Snapshot `json:"after"`
	// Run is the sweeper's report.
	Run sidecar.RunReport `json:"run"`
	// DeletedOrphans and DeletedPruned split the deleted blobs: never
	// referenced, or used only by pruned checkpoints.
	DeletedOrphans int `json:"deletedOrphans"`
	DeletedPruned  int `json:"deletedPruned"`
	// Missing counts the blobs that remaining checkpoints reference but the
	// bucket lacks (always 0 when the sweep is right).
	Missing int `json:"missing"`
	// Restored counts the thread heads restored from the bucket that match
	// their workspace byte for byte, of RestoreTotal.
	Restored     int `json:"restored"`
	RestoreTotal int `json:"restoreTotal"`
	// Keep is the number of checkpoints each thread kept.
	Keep    int           `json:"keep"`
	Elapsed time.Duration `json:"elapsed"`
}

// demo holds the running demo's connections.
type demo struct {
	store *etcdstore.Store
	blobs bucket.Bucket
	seq   int
}

// Run runs the demo and returns what it did; Print shows it.
func Run(ctx context.Context, opts Options) (res Result, err error) {
	began := time.Now()
	if opts.Keep == 0 {
		opts.Keep = 2
	}
	if opts.Workspace == "" {
		opts.Workspace, err = defaultWorkspace()
		if err != nil {
			return res, err
		}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	res.Keep = opts.Keep
	tmp, err := os.MkdirTemp("", "cairn-demo-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)

	// The embedded default: etcd in this process, and a local S3 server.
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: filepath.Join(tmp, "etcd"), NoFsync: true})
	if err != nil {
		return res, err
	}
	defer etcd.Close()
	client, err := etcd.NewClient()
	if err != nil {
		return res, err
	}
	defer client.Close()
	res.Etcd = fmt.Sprintf("embedded etcd at %s (default server limits)", etcd.Endpoints()[0])
	srv, err := startS3(ctx, opts.S3, filepath.Join(tmp, "s3"))
	if err != nil {
		return res, err
	}
	defer srv.close()
	res.S3 = fmt.Sprintf("%s at %s, bucket %s", srv.Name, srv.Endpoint, bucketName)
	blobs, err := bucket.NewS3(ctx, bucket.Config{
		Endpoint: srv.Endpoint, Region: region, Bucket: bucketName, PathStyle: true,
		AccessKeyID: accessKeyID, SecretAccessKey: secretAccess,
	})
	if err != nil {
		return res, err
	}
	defer blobs.Close()
	store, err := etcdstore.New(client, "cairn-demo/", etcdstore.Options{Objects: blobs})
	if err != nil {
		return res, err
	}
	defer store.Close()
	d := &demo{store: store, blobs: blobs}

	res.Workspace, err = describe(opts.Workspace)
	if err != nil {
		return res, fmt.Errorf("workspace %s: %w", opts.Workspace, err)
	}
	heads, err := d.captureAll(ctx, opts.Workspace, filepath.Join(tmp, "ws"), &res)
	if err != nil {
		return res, err
	}
	res.Threads = append(slices.Clone(threads), forkThread)

	if res.Before, err = d.snapshot(ctx, res.Threads); err != nil {
		return res, err
	}
	// The sweeper's run, as cmd/sweeper --once --keep=N --older-than=0 does
	// it, with a clock a minute ahead so that even blobs uploaded a moment
	// ago count as old enough.
	sw := sidecar.NewSweeper(client, store, blobs, sidecar.RunOptions{
		Keep:      opts.Keep,
		OlderThan: 0,
		Verify:    true,
		Now:       func() time.Time { return time.Now().Add(time.Minute) },
	}, opts.Log, nil)
	defer sw.Close()
	res.Run, err = sw.Run(ctx, ctx, sidecar.LockMode{})
	if err != nil {
		return res, fmt.Errorf("sweep: %w", err)
	}
	if res.After, err = d.snapshot(ctx, res.Threads); err != nil {
		return res, err
	}
	for _, k := range res.Run.Sweep.Deleted {
		if slices.Contains(res.Orphans, k) {
			res.DeletedOrphans++
		} else {
			res.DeletedPruned++
		}
	}
	if err := d.checkAfter(ctx, client, heads, filepath.Join(tmp, "restore"), &res); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(began)
	return res, nil
}

// captureAll runs the turns of every thread, the fork and the crashed
// capture, and returns the directory each thread's head should restore to.
func (d *demo) captureAll(ctx context.Context, src, work string, res *Result) (map[string]string, error) {
	heads := map[string]string{}
	count := func(st snapshot.CaptureStats) {
		res.Captures++
		res.Uploaded += st.Uploaded
		res.Reused += st.Present + st.Inherited
	}
	var forkFrom *cairn.Checkpoint
	for _, thread := range threads {
		dir := filepath.Join(work, thread)
		if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
			return nil, err
		}
		for turn := 1; turn <= turns; turn++ {
			if turn > 1 {
				if err := edit(dir, thread, turn); err != nil {
					return nil, fmt.Errorf("%s, turn %d: %w", thread, turn, err)
				}
			}
			info, err := describe(dir)
			if err != nil {
				return nil, err
			}
			report := ""
			if turn > 1 {
				report = testReport(thread, turn, info.Files)
			}
			cp, up, err := d.capture(ctx, dir, thread, turn, report)
			if err != nil {
				return nil, err
			}
			count(up)
			if thread == forkSource && turn == forkAt {
				forkFrom = cp
			}
		}
		heads[thread] = dir
	}

	// Fork gamma at turn 2 into a new thread, restore the fork's files from
	// the bucket, and take two more turns there.
	d.seq++
	root, err := snapshot.Fork(ctx, d.store, snapshot.ForkInput{
		SourceThreadID: forkSource, SourceCheckpointID: forkFrom.ID,
		DestinationThreadID: forkThread, DestinationCheckpointID: forkThread + "-root",
		CreatedAt: baseTime + float64(d.seq)*1000,
	})
	if err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	res.Captures++
	dir := filepath.Join(work, forkThread)
	if err := d.restore(ctx, root, dir); err != nil {
		return nil, err
	}
	for turn := forkAt + 1; turn <= turns; turn++ {
		if err := edit(dir, forkThread, turn); err != nil {
			return nil, fmt.Errorf("%s, turn %d: %w", forkThread, turn, err)
		}
		info, err := describe(dir)
		if err != nil {
			return nil, err
		}
		_, up, err := d.capture(ctx, dir, forkThread, turn, testReport(forkThread, turn, info.Files))
		if err != nil {
			return nil, err
		}
		count(up)
	}
	heads[forkThread] = dir

	// A capture that uploaded its blobs and crashed before it appended.
	crashed := []bucket.Blob{
		bucket.FileBlob([]byte("# Draft\n\nA capture that never finished uploaded this file.\n")),
		bucket.ArtifactBlob([]byte("partial test output\n")),
	}
	lease, err := d.store.AcquireWriter(ctx, "crashed")
	if err != nil {
		return nil, err
	}
	up, err := bucket.UploadBlobs(ctx, d.store, lease.Writer, d.blobs, crashed)
	// The capture dies here: its lease ends, and its claims with it.
	lease.Release(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	res.Orphans = up.Uploaded
	return heads, nil
}

// snapshot counts what the store and the bucket hold.
func (d *demo) snapshot(ctx context.Context, threads []string) (Snapshot, error) {
	s := Snapshot{Checkpoints: map[string]int{}}
	for _, t := range threads {
		list, err := d.store.List(ctx, t)
		if err != nil {
			return s, err
		}
		s.Checkpoints[t] = len(list)
		s.Total += len(list)
	}
	refs, err := d.store.ListBlobReferences(ctx)
	if err != nil {
		return s, err
	}
	s.Referenced = len(refs)
	for _, r := range refs {
		s.References += r.References
	}
	for _, prefix := range []string{cairn.ArtifactBlobPrefix, cairn.FileBlobPrefix} {
		for o, err := range bucket.Objects(ctx, d.blobs, prefix, 0) {
			if err != nil {
				return s, err
			}
			s.Objects++
			s.Bytes += o.Size
		}
	}
	return s, nil
}

// checkAfter checks the result of the sweep: every referenced blob is in the
// bucket, and each thread's head restores to its workspace byte for byte.
func (d *demo) checkAfter(ctx context.Context, _ *clientv3.Client, heads map[string]string, dir string, res *Result) error {
	refs, err := d.store.ListBlobReferences(ctx)
	if err != nil {
		return err
	}
	for _, r := range refs {
		if _, err := d.blobs.Head(ctx, r.Key); errors.Is(err, bucket.ErrNotFound) {
			res.Missing++
		} else if err != nil {
			return err
		}
	}
	for _, t := range res.Threads {
		res.RestoreTotal++
		head, err := d.store.GetHead(ctx, t)
		if err != nil {
			return err
		}
		cp, err := d.store.Get(ctx, head)
		if err != nil {
			return err
		}
		if cp == nil {
			return fmt.Errorf("thread %s: head %q not found", t, head)
		}
		out := filepath.Join(dir, t)
		if err := d.restore(ctx, cp, out); err != nil {
			return err
		}
		same, diff, err := sameTree(heads[t], out)
		if err != nil {
			return err
		}
		if !same {
			return fmt.Errorf("thread %s: the restored head differs from the workspace: %s", t, diff)
		}
		res.Restored++
	}
	return nil
}

// defaultWorkspace finds testdata/demo-workspace at the module root above the
// working directory.
func defaultWorkspace() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			ws := filepath.Join(dir, "testdata", "demo-workspace")
			if _, err := os.Stat(ws); err != nil {
				return "", fmt.Errorf("the demo workspace: %w", err)
			}
			return ws, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: run the demo from the repository")
		}
		dir = parent
	}
}

// Print writes the result as a readable report.
func Print(w io.Writer, r Result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("cairn demo: checkpoints in etcd, file bytes in an S3 bucket, then keep-newest and sweep\n\n")
	p("  etcd       %s\n", r.Etcd)
	p("  bucket     %s\n", r.S3)
	p("  workspace  %s: %d files in %d directories, %s\n\n", relative(r.Workspace.Dir), r.Workspace.Files, r.Workspace.Dirs, size(r.Workspace.Bytes))
	p("Captured %d checkpoints on %d threads: %d turns each on %s, files changing between turns;\n",
		r.Captures, len(r.Threads), turns, list(threads))
	p("%s forked from %s at turn %d (files restored from the bucket) and took %d more turns.\n",
		forkThread, forkSource, forkAt, turns-forkAt)
	p("The captures uploaded %d blobs and found %d already there (unchanged files share one blob).\n", r.Uploaded, r.Reused)
	p("One more capture uploaded %d blobs and crashed before it appended its checkpoint.\n\n", len(r.Orphans))

	p("%-24s %12s %12s\n", "", "before", "after")
	p("checkpoints\n")
	for _, t := range r.Threads {
		p("  %-22s %12d %12d\n", t, r.Before.Checkpoints[t], r.After.Checkpoints[t])
	}
	p("  %-22s %12d %12d\n", "all threads", r.Before.Total, r.After.Total)
	p("%-24s %12d %12d\n", "referenced blobs", r.Before.Referenced, r.After.Referenced)
	p("%-24s %12d %12d\n", "references", r.Before.References, r.After.References)
	p("%-24s %12d %12d\n", "objects in the bucket", r.Before.Objects, r.After.Objects)
	p("%-24s %12s %12s\n\n", "bytes in the bucket", size(r.Before.Bytes), size(r.After.Bytes))

	sw := r.Run.Sweep
	p("The sweeper's run (keep %d, older than 0, its clock a minute ahead; under the sweeper lock, revision %d):\n", r.Keep, r.Run.LockRevision)
	p("  pruned   %d checkpoints from %d threads\n", r.Run.Prune.Removed, len(r.Run.Prune.Pruned))
	p("  deleted  %d blobs, %s: %d never referenced (the crashed capture), %d used only by pruned checkpoints\n",
		len(sw.Deleted), size(sw.BytesFreed), r.DeletedOrphans, r.DeletedPruned)
	p("  kept     %d blobs that checkpoints still reference\n", sw.Referenced)
	if v := r.Run.Verify; v != nil {
		state := "consistent"
		if !v.OK() {
			state = fmt.Sprintf("%d problems", len(v.Problems))
		}
		p("  verify   store %s: %d threads, %d checkpoints, %d blob keys, reference counts recomputed and equal\n",
			state, v.Threads, v.Checkpoints, v.BlobKeys)
	}
	p("  log      Deleted %d blobs\n\n", len(sw.Deleted))
	p("After the sweep: %d referenced blobs missing from the bucket; %d of %d thread heads restored from the bucket\n",
		r.Missing, r.Restored, r.RestoreTotal)
	p("match their workspaces byte for byte.\n")
	p("Done in %.1fs.\n", r.Elapsed.Seconds())
}

// relative shortens a path below the working directory.
func relative(p string) string {
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, p); err == nil && !filepath.IsAbs(rel) && len(rel) < len(p) {
			return rel
		}
	}
	return p
}

func list(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	}
	out := ""
	for i, x := range s {
		switch {
		case i == len(s)-1:
			out += " and " + x
		case i > 0:
			out += ", " + x
		default:
			out += x
		}
	}
	return out
}

// size formats a byte count.
func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
