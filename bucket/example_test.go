package bucket_test

import (
	"context"
	"fmt"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

// ExampleUploadBlobs claims and stores the blobs of a capture under the
// writer's lease, so that a sweeper running at the same time cannot delete
// them before the append, and reads one back verified.
func ExampleUploadBlobs() {
	ctx := context.Background()
	store, _ := cairn.NewMemoryStore(cairn.Options{})
	b := bucket.NewMemory(nil)
	lease, err := store.AcquireWriter(ctx, "thread-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)

	hello := bucket.FileBlob([]byte("hello"))
	res, err := bucket.UploadBlobs(ctx, store, lease.Writer, b, []bucket.Blob{hello, hello, bucket.ArtifactBlob([]byte("hello"))})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(hello.Key)
	fmt.Println(len(res.Uploaded), "uploaded")

	res, _ = bucket.UploadBlobs(ctx, store, lease.Writer, b, []bucket.Blob{hello})
	fmt.Println(len(res.Present), "already present")

	data, err := bucket.ReadBlob(ctx, b, hello.Key)
	fmt.Println(string(data), err)
	// Output:
	// sandbox-files/sha256/2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824
	// 2 uploaded
	// 1 already present
	// hello <nil>
}
