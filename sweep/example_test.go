package sweep_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/sweep"
)

// ExampleSweep sweeps an in-memory bucket beside a memory store, which runs
// the online sweep protocol: the first run marks the old unreferenced blob,
// and a run OlderThan later deletes it. The referenced blob, the young one and
// the key outside the blob prefixes stay.
func ExampleSweep() {
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	uploadedAt := now.Add(-48 * time.Hour)
	blobs := bucket.NewMemory(func() time.Time { return uploadedAt })
	store, _ := cairn.NewMemoryStore(cairn.Options{})

	for _, data := range []string{"unused", "used"} {
		_, _ = blobs.PutIfAbsent(ctx, bucket.FileKey([]byte(data)), []byte(data))
	}
	_, _ = blobs.PutIfAbsent(ctx, "backups/old", []byte("not a blob"))

	lease, _ := store.AcquireWriter(ctx, "thread")
	_, _ = store.Append(ctx, cairn.AppendInput{Writer: lease.Writer, Checkpoint: cairn.Checkpoint{
		ID: "c1", ThreadID: "thread", Reason: cairn.ReasonNamed, Conversation: []byte(`[]`),
		Files: []cairn.Entry{{Path: "a.txt", Kind: cairn.KindFile, BlobKey: bucket.FileKey([]byte("used")), Size: 4}},
	}})
	lease.Release(ctx)

	opts := sweep.Options{OlderThan: 24 * time.Hour, Now: func() time.Time { return now }}
	rep, err := sweep.Sweep(ctx, store, blobs, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("run 1: marked", rep.Marked, "deleted", len(rep.Deleted))

	// A day later, with a blob uploaded a minute before the second run.
	now = now.Add(24 * time.Hour)
	uploadedAt = now.Add(-time.Minute)
	_, _ = blobs.PutIfAbsent(ctx, bucket.FileKey([]byte("young")), []byte("young"))
	rep, err = sweep.Sweep(ctx, store, blobs, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("run 2: deleted", len(rep.Deleted), rep.Deleted[0] == bucket.FileKey([]byte("unused")), "left", blobs.Len())
	// Output:
	// run 1: marked 1 deleted 0
	// run 2: deleted 1 true left 3
}

// Example_sidecar shows how a sweeper process wires the pieces: flags into a
// bucket.Config, a probe at start-up, and a run whose every delete batch is
// first checked against the process's lock.
func Example_sidecar() {
	ctx := context.Background()
	cfg := bucket.Config{
		Endpoint:        bucket.R2Endpoint(os.Getenv("R2_ACCOUNT_ID"), ""),
		Region:          "auto",
		Bucket:          "checkpoints",
		AccessKeyID:     os.Getenv("R2_ACCESS_KEY_ID"),
		SecretAccessKey: os.Getenv("R2_SECRET_ACCESS_KEY"),
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	log.Info("starting", "s3", cfg) // the credentials are redacted

	blobs, err := bucket.NewS3(ctx, cfg)
	if err != nil {
		log.Error("bad bucket config", "error", err)
		return
	}
	defer blobs.Close()
	if err := blobs.Probe(ctx); err != nil {
		log.Error("bucket probe failed", "error", err) // says: missing bucket, bad credentials or unreachable
		return
	}

	var store cairn.Store // the etcd store
	stillLeader := func(ctx context.Context) error { return nil }
	recordProgress := func(ctx context.Context, batch []string) error { return nil }

	rep, err := sweep.Run(ctx, store, blobs, sweep.RunOptions{
		Keep: 20,
		Sweep: sweep.Options{
			OlderThan:  24 * time.Hour,
			MaxDeletes: 100_000,
			Logger:     log,
			BeforeDelete: func(ctx context.Context, batch []string) error {
				if err := stillLeader(ctx); err != nil {
					return err // stops the sweep before this batch
				}
				return recordProgress(ctx, batch) // e.g. an etcd txn fenced by the lock's revision
			},
		},
	})
	switch {
	case errors.Is(err, sweep.ErrIncomplete):
		log.Warn("some blobs were not deleted; the next run retries them", "report", rep.Sweep)
	case err != nil:
		log.Error("sweep failed", "error", err)
	default:
		log.Info("sweep done", "prune", rep.Prune, "sweep", rep.Sweep)
	}
}
