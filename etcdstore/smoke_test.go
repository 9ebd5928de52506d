package etcdstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

func fileKey(s string) string {
	return fmt.Sprintf("sandbox-files/sha256/%x", sha256.Sum256([]byte(s)))
}

func TestSmoke(t *testing.T) {
	_, cli := embedetcd.ForTest(t)
	ctx := context.Background()
	now := 1000.0
	s, err := etcdstore.New(cli, "smoke/", etcdstore.Options{Options: cairn.Options{Now: func() float64 { return now }}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.AcquireWriter(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	prev := ""
	for i := range 5 {
		id := fmt.Sprintf("c%d", i)
		c := cairn.Checkpoint{ID: id, ThreadID: "t1", ParentCheckpointID: prev, CreatedAt: float64(10 - i), Reason: "automatic",
			Files:        []cairn.Entry{{Path: "a.txt", Kind: cairn.KindFile, BlobKey: fileKey("a"), Size: 1}, {Path: id, Kind: cairn.KindFile, BlobKey: fileKey(id), Size: 2}},
			Conversation: json.RawMessage(`[{"role":"user","content":"hi"}]`)}
		if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: prev, Writer: l.Writer}); err != nil {
			t.Fatalf("append %s: %v", id, err)
		}
		prev = id
	}
	got, err := s.Get(ctx, "c3")
	if err != nil || got == nil || got.ParentCheckpointID != "c2" {
		t.Fatalf("get: %+v %v", got, err)
	}
	list, err := s.List(ctx, "t1")
	if err != nil || len(list) != 5 || list[0].ID != "c4" {
		t.Fatalf("list: %v %v", list, err)
	}
	refs, err := s.ListBlobReferences(ctx)
	t.Logf("refs %v %v", refs, err)
	_, err = s.Append(ctx, cairn.AppendInput{Checkpoint: cairn.Checkpoint{ID: "c4", ThreadID: "t1", ParentCheckpointID: "c4"}, ExpectedHeadID: "c4", Writer: l.Writer})
	t.Logf("dup: %v", err)
	_, err = s.Append(ctx, cairn.AppendInput{Checkpoint: cairn.Checkpoint{ID: "x", ThreadID: "t1"}, Writer: l.Writer})
	t.Logf("stale: %v", err)
	removed, err := s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "t1", Keep: 2, Writer: l.Writer})
	t.Logf("pruned %v %v", removed, err)
	list, _ = s.List(ctx, "t1")
	t.Logf("list after prune %d", len(list))
	if err := s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "t1", CheckpointID: "c4", Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	h, _ := s.GetHead(ctx, "t1")
	t.Logf("head %q", h)
	if err := s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "t1", CheckpointID: "c3", Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	h, _ = s.GetHead(ctx, "t1")
	t.Logf("head after A10 %q", h)
	refs, err = s.ListBlobReferences(ctx)
	t.Logf("refs %v %v", refs, err)
	// fork
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: cairn.Checkpoint{ID: "c0", ThreadID: "t1", Files: []cairn.Entry{{Path: "a", Kind: cairn.KindFile, BlobKey: fileKey("a"), Size: 1}}}, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	dl, err := s.AcquireWriter(ctx, "t2")
	if err != nil {
		t.Fatal(err)
	}
	root, err := s.ForkFromCheckpoint(ctx, cairn.ForkInput{SourceThreadID: "t1", SourceCheckpointID: "c0", DestinationThreadID: "t2", DestinationCheckpointID: "f0", CreatedAt: 5, Writer: dl.Writer})
	t.Logf("fork %v %v", root, err)
	tr, err := s.Transcripts().LoadThread(ctx, "t2")
	t.Logf("transcript %s %v", tr, err)
	refs, err = s.ListBlobReferences(ctx)
	t.Logf("refs %v %v", refs, err)
	threads, err := s.ListThreads(ctx, "", 0)
	t.Logf("threads %v %v", threads, err)
	now += 1e9
	_, err = s.Append(ctx, cairn.AppendInput{Checkpoint: cairn.Checkpoint{ID: "late", ThreadID: "t1", ParentCheckpointID: "c0"}, ExpectedHeadID: "c0", Writer: l.Writer})
	t.Logf("expired: %v", err)
	l2, err := s.AcquireWriter(ctx, "t1")
	t.Logf("takeover: %v %v (old fence %d)", l2, err, l.Fence)
}
