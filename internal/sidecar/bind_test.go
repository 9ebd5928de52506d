package sidecar

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/s3test"
)

// TestBindAndUnbind: a bucket written before bindings existed (objects, no
// binding, no registry) is refused (exit 5, unregistered) until --bind
// records the prefix and the registry; a binding of a prefix removed for good
// is refused until --unbind removes it. Each run that proceeds deletes
// exactly the unreferenced blob.
func TestBindAndUnbind(t *testing.T) {
	etcd, client := embedetcd.ForTest(t)
	s3 := s3test.StartFake(t, s3test.FakeOptions{})
	bkt, err := bucket.NewS3(t.Context(), bucket.Config{Endpoint: s3.Endpoint, Region: s3.Region, Bucket: s3.Bucket, PathStyle: true,
		AccessKeyID: s3.AccessKeyID, SecretAccessKey: s3.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bkt.Close() })
	// A writer of an older release: blobs put, no binding.
	store, err := etcdstore.New(client, "legacy/", etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	kept, orphan := bucket.FileBlob([]byte("kept")), bucket.FileBlob([]byte("orphan"))
	if _, err := bucket.PutBlobs(t.Context(), bkt, []bucket.Blob{kept, orphan}); err != nil {
		t.Fatal(err)
	}
	lease, err := store.AcquireWriter(t.Context(), "thread")
	if err != nil {
		t.Fatal(err)
	}
	cp := cairn.Checkpoint{ID: "c1", ThreadID: "thread", Reason: cairn.ReasonAutomatic, Conversation: json.RawMessage(`[]`),
		Files: []cairn.Entry{{Path: "f", Kind: cairn.KindFile, BlobKey: kept.Key, Size: 4}}}
	if _, err := store.Append(t.Context(), cairn.AppendInput{Checkpoint: cp, Writer: lease.Writer}); err != nil {
		t.Fatal(err)
	}
	lease.Release(t.Context())

	env := map[string]string{cli.EnvS3AccessKeyID: s3.AccessKeyID, cli.EnvS3SecretAccessKey: s3.SecretAccessKey}
	sweeper := func(args ...string) (int, string) {
		t.Helper()
		var log strings.Builder
		args = append([]string{"--etcd-endpoints=" + strings.Join(etcd.Endpoints(), ","), "--prefix=legacy/",
			"--s3-endpoint=" + s3.Endpoint, "--s3-region=" + s3.Region, "--s3-bucket=" + s3.Bucket, "--s3-path-style",
			"--probe-timeout=5s", "--log-format=json"}, args...)
		code := Main(Env{Args: args, Getenv: func(k string) string { return env[k] }, Stderr: &log})
		return code, log.String()
	}
	once := []string{"--once", "--older-than=0s"}
	has := func(key string) bool {
		t.Helper()
		_, err := bkt.Head(t.Context(), key)
		return err == nil
	}

	if code, log := sweeper(once...); code != ExitUncovered || !strings.Contains(log, `"unregistered":true`) {
		t.Fatalf("a sweep of a bucket without a registry exited %d; want %d, unregistered:\n%s", code, ExitUncovered, log)
	}
	if !has(orphan.Key) {
		t.Fatal("the refused sweep deleted the orphan")
	}
	if code, log := sweeper("--bind"); code != ExitOK {
		t.Fatalf("--bind exited %d:\n%s", code, log)
	}
	own, _, err := store.BucketBinding(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := bucket.Bindings(t.Context(), bkt); err != nil || !slices.Equal(got, []cairn.Binding{own}) {
		t.Fatalf("after --bind the bindings are %v, %v; want [%v]", got, err, own)
	}
	if code, log := sweeper(once...); code != ExitOK || has(orphan.Key) || !has(kept.Key) {
		t.Fatalf("after --bind the sweep exited %d, orphan left %v, kept left %v:\n%s", code, has(orphan.Key), has(kept.Key), log)
	}

	// A prefix removed for good still holds a binding.
	gone := cairn.Binding{Cluster: own.Cluster, Prefix: "gone/"}
	if err := bucket.Record(t.Context(), bkt, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := bkt.PutIfAbsent(t.Context(), orphan.Key, orphan.Data); err != nil {
		t.Fatal(err)
	}
	if code, log := sweeper(once...); code != ExitUncovered || !strings.Contains(log, `\"gone/\"`) {
		t.Fatalf("a sweep of a bucket bound to gone/ exited %d; want %d naming gone/:\n%s", code, ExitUncovered, log)
	}
	if code, log := sweeper("--unbind=gone/"); code != ExitOK {
		t.Fatalf("--unbind exited %d:\n%s", code, log)
	}
	if code, log := sweeper(once...); code != ExitOK || has(orphan.Key) || !has(kept.Key) {
		t.Fatalf("after --unbind the sweep exited %d, orphan left %v:\n%s", code, has(orphan.Key), log)
	}
}
