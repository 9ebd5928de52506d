package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/keys"
)

// envValue returns the value of name in NAME=value lines.
func envValue(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// seed appends the given checkpoints, in order, each at the head before it,
// through the store that the dev stack's variables describe, uploading each
// file's bytes first.
func seed(t *testing.T, env []string, files map[string]string, cps ...cairn.Checkpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{envValue(env, "CAIRN_ETCD_ENDPOINTS")}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	blobs, err := bucket.NewS3(ctx, bucket.Config{
		Endpoint: envValue(env, "CAIRN_S3_ENDPOINT"), Region: envValue(env, "CAIRN_S3_REGION"), Bucket: envValue(env, "CAIRN_S3_BUCKET"),
		PathStyle: true, AccessKeyID: envValue(env, "CAIRN_S3_ACCESS_KEY_ID"), SecretAccessKey: envValue(env, "CAIRN_S3_SECRET_ACCESS_KEY"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	store, err := etcdstore.New(client, envValue(env, "CAIRN_PREFIX"), etcdstore.Options{Objects: blobs})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, cp := range cps {
		lease, err := store.AcquireWriter(ctx, cp.ThreadID)
		if err != nil {
			t.Fatal(err)
		}
		var up []bucket.Blob
		for i, e := range cp.Files {
			if e.Kind == cairn.KindFile {
				b := bucket.FileBlob([]byte(files[e.Path]))
				cp.Files[i].BlobKey, cp.Files[i].Size = b.Key, int64(len(b.Data))
				up = append(up, b)
			}
		}
		if _, err := bucket.UploadBlobs(ctx, store, lease.Writer, blobs, up); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(ctx, cairn.AppendInput{Checkpoint: cp, ExpectedHeadID: cp.ParentCheckpointID, Writer: lease.Writer}); err != nil {
			t.Fatal(err)
		}
		lease.Release(ctx)
	}
}

func TestInspect(t *testing.T) {
	d := startDev(t, t.TempDir())
	files := map[string]string{"main.go": "package main\n", "docs/read me.md": strings.Repeat("x", 2048)}
	seed(t, d.env, files,
		cairn.Checkpoint{ID: "cp-1", ThreadID: "t1", CreatedAt: 1767323045123, Reason: cairn.ReasonAutomatic, Conversation: json.RawMessage(`[]`),
			Files: []cairn.Entry{{Path: "main.go", Kind: cairn.KindFile}}},
		cairn.Checkpoint{ID: "cp-2", ThreadID: "t1", ParentCheckpointID: "cp-1", CreatedAt: 1767323046000, Reason: cairn.ReasonNamed, Label: "green",
			Conversation: json.RawMessage(`[{"role":"user"}]`),
			Files:        []cairn.Entry{{Path: "docs", Kind: cairn.KindDir}, {Path: "docs/read me.md", Kind: cairn.KindFile}, {Path: "main.go", Kind: cairn.KindFile}}},
		cairn.Checkpoint{ID: "cp-9", ThreadID: "t2", CreatedAt: 1767323047000, Reason: cairn.ReasonAutomatic, Conversation: json.RawMessage(`[]`)},
	)

	t.Run("log", func(t *testing.T) {
		out := ok(t, d.env, "log", "t1")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		want := [][]string{
			{"ID", "CREATED", "REASON", "LABEL", "FILES", "BYTES"},
			{"cp-2", "2026-01-02T03:04:06.000Z", "named", "green", "2", "2.0", "KiB"},
			{"cp-1", "2026-01-02T03:04:05.123Z", "automatic", "1", "13", "B"},
		}
		if len(lines) != len(want) {
			t.Fatalf("cairn log t1 printed %d lines, want %d:\n%s", len(lines), len(want), out)
		}
		for i, w := range want {
			if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
				t.Errorf("line %d = %q, want fields %q", i, lines[i], w)
			}
		}
		if out := ok(t, d.env, "log", "-n", "1", "t1"); strings.Contains(out, "cp-1") || !strings.Contains(out, "cp-2") {
			t.Errorf("cairn log -n 1 t1:\n%s", out)
		}
		var chain []cairn.Checkpoint
		if err := json.Unmarshal([]byte(ok(t, d.env, "log", "t1", "-o", "json")), &chain); err != nil {
			t.Fatal(err)
		}
		if len(chain) != 2 || chain[0].ID != "cp-2" || chain[1].ID != "cp-1" {
			t.Errorf("cairn log -o json: %+v", chain)
		}
	})
	t.Run("show", func(t *testing.T) {
		out := ok(t, d.env, "show", "cp-2")
		for _, want := range []string{"checkpoint cp-2\n", "parent     cp-1\n", "label      green\n", "files      2, 2.0 KiB\n", "docs/", "docs/read me.md", "sandbox-files/sha256/"} {
			if !strings.Contains(out, want) {
				t.Errorf("cairn show cp-2 does not say %q:\n%s", want, out)
			}
		}
		js := ok(t, d.env, "show", "-o", "json", "cp-2")
		var wire map[string]json.RawMessage
		if err := json.Unmarshal([]byte(js), &wire); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"id", "threadId", "parentCheckpointId", "createdAt", "reason", "label", "files", "conversation", "artifacts"} {
			if _, found := wire[key]; !found {
				t.Errorf("cairn show -o json has no %q:\n%s", key, js)
			}
		}
		if string(wire["conversation"]) != `[{"role":"user"}]` {
			t.Errorf("conversation = %s", wire["conversation"])
		}
		root := ok(t, d.env, "show", "-o", "json", "cp-1")
		if !strings.Contains(root, `"parentCheckpointId":null`) || strings.Contains(root, `"label"`) {
			t.Errorf("a root's wire shape has a null parent and no label:\n%s", root)
		}
	})
	t.Run("threads", func(t *testing.T) {
		out := ok(t, d.env, "threads")
		if got := strings.Join(strings.Fields(out), " "); got != "THREAD HEAD t1 cp-2 t2 cp-9" {
			t.Errorf("cairn threads = %q", out)
		}
	})
	t.Run("verify", func(t *testing.T) {
		out := ok(t, d.env, "verify", "--objects")
		if !strings.Contains(out, "2 threads, 3 checkpoints, 2 blob keys") || !strings.HasSuffix(out, "ok\n") {
			t.Errorf("cairn verify:\n%s", out)
		}
	})
	t.Run("not-found", func(t *testing.T) {
		for _, args := range [][]string{{"show", "cp-404"}, {"log", "t404"}} {
			r := runCairn(t, d.env, args...)
			if r.code != exitNotFound || !strings.Contains(r.stderr, "404") {
				t.Errorf("cairn %v: %v, want exit %d naming it", args, r, exitNotFound)
			}
		}
	})
	t.Run("verify-problem", func(t *testing.T) {
		// Without its index record, cp-9 is a checkpoint Get cannot find:
		// a broken invariant that verify reports with exit 4.
		client, err := clientv3.New(clientv3.Config{Endpoints: []string{envValue(d.env, "CAIRN_ETCD_ENDPOINTS")}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		key := keys.NewLayout(envValue(d.env, "CAIRN_PREFIX")).Index("cp-9")
		if resp, err := client.Delete(ctx, string(key)); err != nil || resp.Deleted != 1 {
			t.Fatalf("delete the index record of cp-9: %v, %v", resp, err)
		}
		r := runCairn(t, d.env, "verify")
		if r.code != exitProblems || !strings.Contains(r.stdout, "problem: ") || !strings.Contains(r.stderr, "verify found 1") {
			t.Errorf("cairn verify of a broken store: %v, want exit %d and the problem", r, exitProblems)
		}
	})
}
