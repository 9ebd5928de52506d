package snapshot_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/snapshot"
)

// Save a workspace into a checkpoint on etcd and a bucket, then restore it
// elsewhere. The etcd member runs in the process; in production the store
// talks to a cluster and the bucket is bucket.NewS3 on R2.
func ExampleSave() {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "snapshot-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	srv, err := embedetcd.Start(ctx, embedetcd.Config{Dir: filepath.Join(tmp, "etcd"), NoFsync: true})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	client, err := srv.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	blobs := bucket.NewMemory(nil)
	store, err := etcdstore.New(client, "example/", etcdstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// A workspace: two files and an empty directory.
	ws := filepath.Join(tmp, "ws")
	os.MkdirAll(filepath.Join(ws, "src"), 0o755)
	os.MkdirAll(filepath.Join(ws, "out"), 0o755)
	os.WriteFile(filepath.Join(ws, "README.md"), []byte("# demo\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "src", "main.go"), []byte("package main\n"), 0o644)

	saved, err := snapshot.Save(ctx, store, blobs, snapshot.SaveInput{ThreadID: "thread-1", Dir: ws, Label: "first"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("saved %d entries, uploaded %d blobs\n", len(saved.Checkpoint.Files), saved.Stats.Uploaded)

	cp, err := snapshot.Get(ctx, store, saved.Checkpoint.ID)
	if err != nil {
		log.Fatal(err)
	}
	restored := filepath.Join(tmp, "restored")
	st, err := snapshot.Restore(ctx, blobs, cp, restored, nil)
	if err != nil {
		log.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(restored, "src", "main.go"))
	fmt.Printf("restored %d files and %d directory: src/main.go says %q\n", st.Files, st.Dirs, data)
	// Output:
	// saved 3 entries, uploaded 2 blobs
	// restored 2 files and 1 directory: src/main.go says "package main\n"
}
