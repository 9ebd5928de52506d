// Package sharedtest writes the scenario of several stores on one bucket
// (docs/shared-buckets.md) for the tests of the packages that sweep such a
// bucket: each tenant writes one checkpoint through the writer protocol,
// with files whose bytes one of them shares with every other tenant, a
// conversation large enough for the capacity layout, and one blob it uploads
// and never references.
package sharedtest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

// Store is what a tenant writes through.
type Store interface {
	cairn.Store
	cairn.BlobClaimer
}

// Bucket is what the scenario needs of the shared bucket.
type Bucket interface {
	bucket.Reader
	bucket.Putter
	bucket.Lister
}

// SharedBytes are the bytes of the file every tenant has.
var SharedBytes = []byte("the same bytes in every tenant")

// Tenant is one tenant of the scenario and what it wrote.
type Tenant struct {
	Name  string
	Store Store
	// Checkpoint is its checkpoint's id, on thread "thread".
	Checkpoint string
	// Keys are the blob keys its checkpoint references, sorted.
	Keys []string
	// Garbage are the blobs it uploaded and does not reference.
	Garbage []string
}

// Write writes tenant name's checkpoint of files files (the first with
// SharedBytes) and a 200 KiB conversation through st, uploading every blob
// with bucket.UploadBlobs (which binds the store to blobs when it records
// bindings), plus one artifact blob it never references.
func Write(t testing.TB, st Store, name string, blobs Bucket, files int) *Tenant {
	t.Helper()
	ctx := context.Background()
	tn := &Tenant{Name: name, Store: st, Checkpoint: strings.Trim(name, "/") + "-1"}
	var up []bucket.Blob
	cp := cairn.Checkpoint{ID: tn.Checkpoint, ThreadID: "thread", CreatedAt: 1, Reason: cairn.ReasonAutomatic}
	for i := range files {
		data := fmt.Appendf(nil, "%s file %d", name, i)
		if i == 0 {
			data = SharedBytes
		}
		b := bucket.FileBlob(data)
		up = append(up, b)
		tn.Keys = append(tn.Keys, b.Key)
		cp.Files = append(cp.Files, cairn.Entry{Path: fmt.Sprintf("dir/f%04d", i), Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(data))})
	}
	g := bucket.ArtifactBlob([]byte(name + " uploaded and never referenced"))
	up = append(up, g)
	tn.Garbage = []string{g.Key}
	conv, _ := json.Marshal([]string{strings.Repeat(name+" says something. ", 200<<10/(len(name)+16))})
	cp.Conversation = conv
	lease, err := st.AcquireWriter(ctx, "thread")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	if _, err := bucket.UploadBlobs(ctx, st, lease.Writer, blobs, up); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, cairn.AppendInput{Checkpoint: cp, Writer: lease.Writer}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(tn.Keys)
	return tn
}

// Readable returns the first reason the tenant's checkpoint cannot be read
// and restored: the store cannot read it, or a blob it references is gone or
// not its bytes.
func (tn *Tenant) Readable(ctx context.Context, blobs bucket.Reader) error {
	cp, err := tn.Store.Get(ctx, tn.Checkpoint)
	if err != nil {
		return fmt.Errorf("%s: %w", tn.Name, err)
	}
	if got := cp.BlobKeys(); !slices.Equal(got, tn.Keys) {
		return fmt.Errorf("%s: the checkpoint references %d keys; %d were written", tn.Name, len(got), len(tn.Keys))
	}
	for _, k := range tn.Keys {
		if _, err := bucket.ReadBlob(ctx, blobs, k); err != nil {
			return fmt.Errorf("%s: %w", tn.Name, err)
		}
	}
	return nil
}

// AllReadable is Readable for each tenant, the first failure first.
func AllReadable(ctx context.Context, blobs bucket.Reader, tenants []*Tenant) error {
	for _, tn := range tenants {
		if err := tn.Readable(ctx, blobs); err != nil {
			return err
		}
	}
	return nil
}

// Garbage returns every tenant's garbage, sorted.
func Garbage(tenants []*Tenant) []string {
	var out []string
	for _, tn := range tenants {
		out = append(out, tn.Garbage...)
	}
	slices.Sort(out)
	return out
}

// ContentKeys returns the keys under the prefixes a sweep lists, sorted.
func ContentKeys(t testing.TB, blobs bucket.Lister) []string {
	t.Helper()
	var out []string
	for _, prefix := range []string{"sandbox-artifacts/", "sandbox-files/", "sandbox-meta/"} {
		for o, err := range bucket.Objects(context.Background(), blobs, prefix, 0) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, o.Key)
		}
	}
	return out
}

// Prefixes returns the prefixes of bindings.
func Prefixes(bs []cairn.Binding) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Prefix)
	}
	return out
}
