package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/sidecar"
)

// verifyObjects: --verify checks the checkpoints of the capacity layout too.
// A store whose one checkpoint keeps its body in objects verifies clean, with
// the checkpoint's blob keys counted; once a leaf of that body is gone from
// the bucket (which the sweep itself does not read: it counts the reference
// chunks), --verify reports the missing object and exits 4.
func verifyObjects(t *testing.T, w *world) {
	t.Run("Unpacked", func(t *testing.T) { verifyObjectsOf(t, w, true) })
	t.Run("Packed", func(t *testing.T) { verifyObjectsOf(t, w, false) })
}

// verifyObjectsOf appends a checkpoint of the capacity layout, unpacked
// (root version 2) or packed, runs the sweeper with --verify, then deletes
// an object the checkpoint needs and runs it again: with a leaf gone, Verify
// reports it; with the pack gone (which holds the reference chunks too),
// the sweep fails closed before it deletes anything, naming the pack.
func verifyObjectsOf(t *testing.T, w *world, unpacked bool) {
	tn := w.newTenant(t)
	ctx := t.Context()
	store, err := etcdstore.New(w.client, tn.prefix, etcdstore.Options{Objects: tn.blobs, Unpacked: unpacked})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// 1,000 files: a body over the 64 KiB inline limit, so objects.
	var blobs []bucket.Blob
	cp := cairn.Checkpoint{ID: "big-1", ThreadID: "big", Reason: cairn.ReasonAutomatic, Conversation: json.RawMessage(`[]`),
		CreatedAt: float64(time.Now().UnixMilli())}
	for i := range 1000 {
		b := bucket.FileBlob(fmt.Appendf(nil, "file %d", i))
		blobs = append(blobs, b)
		cp.Files = append(cp.Files, cairn.Entry{Path: fmt.Sprintf("src/f%04d.go", i), Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(b.Data))})
	}
	lease, err := store.AcquireWriter(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bucket.UploadBlobs(ctx, store, lease.Writer, tn.blobs, blobs); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, cairn.AppendInput{Checkpoint: cp, Writer: lease.Writer}); err != nil {
		t.Fatal(err)
	}
	lease.Release(context.WithoutCancel(ctx))
	var leaf string
	for _, k := range tn.keys(t) {
		if !strings.HasPrefix(k, cairn.ObjectPrefix) {
			continue
		}
		data, err := tn.blobs.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 0 && (data[0] == 'L' || data[0] == 'P') { // a leaf, or the pack that holds the leaves
			leaf = k
			break
		}
	}
	if leaf == "" {
		t.Fatalf("the checkpoint wrote no leaf or pack object; bucket: %v", tn.keys(t))
	}

	p := w.run(t, tn.args("--once", "--older-than=0s", "--verify", "--log-format=json"), tn.creds())
	if p.code != sidecar.ExitOK {
		t.Fatalf("exit code %d; want 0; output:\n%s", p.code, p.output())
	}
	rec, ok := p.record("store verified")
	if !ok {
		t.Fatalf("--verify logged no result; output:\n%s", p.output())
	}
	// The checkpoint's blob keys are counted, which Verify does only when it
	// reads the objects (it counts none of a capacity-layout checkpoint
	// from etcd alone).
	equal(t, "references", rec["references"], any(float64(1000)))
	equal(t, "problems", rec["problems"], any(float64(0)))

	if res, err := tn.blobs.Delete(ctx, []string{leaf}); err != nil || len(res.Deleted) != 1 {
		t.Fatalf("delete %s: %+v, %v", leaf, res, err)
	}
	before := len(tn.keys(t))
	p = w.run(t, tn.args("--once", "--older-than=0s", "--verify", "--log-format=json"), tn.creds())
	if !unpacked {
		if p.code != sidecar.ExitFailure || !strings.Contains(p.output(), "nothing deleted") || !strings.Contains(p.output(), leaf) {
			t.Fatalf("exit code %d; want %d, failing closed and naming the missing pack %s; output:\n%s", p.code, sidecar.ExitFailure, leaf, p.output())
		}
		if n := len(tn.keys(t)); n != before {
			t.Fatalf("the bucket holds %d keys after the failed run, %d before it", n, before)
		}
		return
	}
	if p.code != sidecar.ExitVerify {
		t.Fatalf("exit code %d; want %d (verify problems); output:\n%s", p.code, sidecar.ExitVerify, p.output())
	}
	prob, ok := p.record("store problem")
	if !ok {
		t.Fatalf("no store problem logged; output:\n%s", p.output())
	}
	equal(t, "kind", prob["kind"], any("missing-object"))
	if !strings.Contains(fmt.Sprint(prob["detail"]), leaf) {
		t.Errorf("the problem does not name the missing object %s: %v", leaf, prob)
	}
}
