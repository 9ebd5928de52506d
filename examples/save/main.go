// Command save is the README's Go example as a program that runs: it saves a
// directory as a checkpoint of a thread with snapshot.Save, reads the thread's
// head back, and restores it into a second directory, on the etcd and the
// bucket that the CAIRN_ environment variables name. `cairn dev` runs both on
// this machine and prints those variables:
//
//	cairn dev &                  # or: go run ./cmd/cairn dev
//	eval "$(cairn dev --print-env)"
//	go run ./examples/save ./some/dir /tmp/restored
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/snapshot"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Getenv, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "save:", err)
		os.Exit(1)
	}
}

// run saves args[0] on thread "readme-example" and restores the new head into
// args[1].
func run(ctx context.Context, getenv func(string) string, args []string, out io.Writer) error {
	if len(args) != 2 {
		return errors.New("usage: save DIR RESTORE-DIR")
	}
	endpoints := getenv("CAIRN_ETCD_ENDPOINTS")
	if endpoints == "" {
		return errors.New("CAIRN_ETCD_ENDPOINTS is not set: start `cairn dev` and export the lines it prints")
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints: strings.Split(endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		return err
	}
	defer client.Close()
	blobs, err := bucket.NewS3(ctx, bucket.Config{
		Endpoint:        getenv("CAIRN_S3_ENDPOINT"),
		Region:          getenv("CAIRN_S3_REGION"),
		Bucket:          getenv("CAIRN_S3_BUCKET"),
		PathStyle:       getenv("CAIRN_S3_PATH_STYLE") == "true",
		AccessKeyID:     getenv("CAIRN_S3_ACCESS_KEY_ID"),
		SecretAccessKey: getenv("CAIRN_S3_SECRET_ACCESS_KEY"),
	})
	if err != nil {
		return err
	}
	defer blobs.Close()
	store, err := etcdstore.New(client, getenv("CAIRN_PREFIX"), etcdstore.Options{Objects: blobs})
	if err != nil {
		return err
	}
	defer store.Close()

	// Capture the directory and append it at the thread's head, under the
	// thread's writer lease (taken, renewed and released by Save).
	saved, err := snapshot.Save(ctx, store, blobs, snapshot.SaveInput{
		ThreadID: "readme-example",
		Dir:      args[0],
		Label:    "saved by examples/save",
	})
	if err != nil {
		return err // e.g. snapshot.ErrUnsupportedEntry naming a symlink
	}
	fmt.Fprintf(out, "saved %s: %d files, %d blobs uploaded\n", saved.Checkpoint.ID, saved.Stats.Files, saved.Stats.Uploaded)

	// Read the head back and restore it: every blob is downloaded and
	// checked against its key before the target changes.
	head, err := store.GetHead(ctx, "readme-example")
	if err != nil {
		return err
	}
	cp, err := snapshot.Get(ctx, store, head)
	if err != nil {
		return err
	}
	if _, err := snapshot.Restore(ctx, blobs, cp, args[1], nil); err != nil {
		return err
	}
	fmt.Fprintf(out, "restored %s into %s\n", cp.ID, args[1])
	return nil
}
