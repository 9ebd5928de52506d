package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/fulltest"
	"github.com/cairnstore/cairn/internal/s3test"
)

// TestDoctor fills an etcd member with a small quota through a store, and
// checks that cairn doctor reports the alarm (exit 4) and what holds the
// space, that --recover refuses to disarm while the member is still full,
// and that after a prune with deletes only it brings the member back: the
// alarm is gone and the store takes appends again.
func TestDoctor(t *testing.T) {
	etcd, client := embedetcd.ForTestWith(t, embedetcd.Config{QuotaBackendBytes: 8 << 20})
	s3 := s3test.StartFake(t, s3test.FakeOptions{})
	env := []string{"CAIRN_ETCD_ENDPOINTS=" + strings.Join(etcd.Endpoints(), ","), "CAIRN_PREFIX=doc/",
		"CAIRN_S3_ENDPOINT=" + s3.Endpoint, "CAIRN_S3_REGION=" + s3.Region, "CAIRN_S3_BUCKET=" + s3.Bucket,
		"CAIRN_S3_PATH_STYLE=true", "CAIRN_S3_ACCESS_KEY_ID=" + s3.AccessKeyID, "CAIRN_S3_SECRET_ACCESS_KEY=" + s3.SecretAccessKey}
	if out := ok(t, env, "doctor"); !strings.Contains(out, "alarm: none") || !strings.Contains(out, "members by region:") {
		t.Fatalf("doctor on an empty member:\n%s", out)
	}
	// The one member leads, in the region --regions gives it.
	if out := ok(t, env, "doctor", "--regions", "default=eu-west"); !regexp.MustCompile(`(?m)^default\s+eu-west\s+leader\s`).MatchString(out) {
		t.Fatalf("doctor --regions:\n%s", out)
	}
	if r := runCairn(t, env, "doctor", "--regions", "default"); r.code != 2 || !strings.Contains(r.stderr, "name=region") {
		t.Fatalf("doctor with a malformed --regions: %s", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := etcdstore.New(client, "doc/", etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lease, err := store.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	conv := fulltest.Conversation(360_000)
	acked := fulltest.Fill(t, ctx, store, []cairn.Writer{lease.Writer}, func(n int, thread, parent string) cairn.Checkpoint {
		return fulltest.Checkpoint(fulltest.ID(thread, n), thread, parent, conv)
	})
	head := acked["t"][len(acked["t"])-1].ID

	r := runCairn(t, env, "doctor")
	if r.code != exitProblems || !strings.Contains(r.stdout, "alarm: NOSPACE raised") || !strings.Contains(r.stdout, "chunk") {
		t.Fatalf("doctor on a full member: %s", r)
	}
	// Nothing deleted yet: the member stays above the threshold.
	if r := runCairn(t, env, "doctor", "--recover"); r.code != exitProblems || !strings.Contains(r.stderr, "stays raised") {
		t.Fatalf("doctor --recover on a member still full: %s", r)
	}
	if _, err := cairn.KeepNewest(ctx, store, "t", 1); err != nil {
		t.Fatalf("KeepNewest under the alarm: %v", err)
	}
	if out := ok(t, env, "doctor", "--recover"); !strings.Contains(out, "alarm: none") || !strings.Contains(out, "disarmed true") {
		t.Fatalf("doctor --recover after the prune:\n%s", out)
	}
	if _, err := store.Append(ctx, cairn.AppendInput{Checkpoint: fulltest.Checkpoint("after", "t", head, conv), ExpectedHeadID: head, Writer: lease.Writer}); err != nil {
		t.Fatalf("append after the recovery: %v", err)
	}
	var rep doctorReport
	if err := json.Unmarshal([]byte(ok(t, env, "doctor", "-o", "json")), &rep); err != nil || len(rep.Status.Members) != 1 ||
		rep.Status.Members[0].Quota != 8<<20 || rep.Status.Alarmed() || rep.Topology == nil || len(rep.Topology.Members) != 1 || !rep.Topology.Members[0].Leader {
		t.Fatalf("doctor -o json: %+v, %v", rep, err)
	}
}
