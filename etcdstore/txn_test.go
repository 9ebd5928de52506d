package etcdstore_test

import (
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// TestPublishThroughWrappedKV appends and forks on a client whose KV is a
// namespace: the publish transactions, which the store builds as etcd's own
// requests on a plain client, must then go through that KV, so every key the
// store writes lands under the namespace.
func TestPublishThroughWrappedKV(t *testing.T) {
	srv, plain := embedetcd.ForTest(t)
	ctx := testContext(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: plain.GetLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	cli.KV = namespace.NewKV(cli.KV, "ns/")
	s := newStore(t, cli, "wrapped/", etcdstore.Options{})
	lease, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	c := smallCheckpoint("c1", "t", "", "k1")
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: lease.Writer}); err != nil {
		t.Fatal(err)
	}
	dest, err := s.AcquireWriter(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForkFromCheckpoint(ctx, cairn.ForkInput{SourceThreadID: "t", SourceCheckpointID: "c1", CreatedAt: 2, DestinationThreadID: "u", DestinationCheckpointID: "f1", Writer: dest.Writer}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "f1"} {
		got, err := s.Get(ctx, id)
		if err != nil || got == nil {
			t.Fatalf("Get(%s): %v, %v", id, got, err)
		}
	}
	resp, err := plain.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		if strings.HasPrefix(string(kv.Key), "wrapped/") {
			t.Errorf("key %q is outside the namespace", kv.Key)
		}
		if strings.HasPrefix(string(kv.Key), "ns/wrapped/") {
			n++
		}
	}
	if n == 0 {
		t.Fatal("no key under the namespace")
	}
}
