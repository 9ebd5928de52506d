package etcdspace_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/etcdspace"
	"github.com/cairnstore/cairn/keys"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestReadAndUsage: the status of a healthy member names its quota and no
// alarm; Usage counts the keys under one prefix, by kind, and nothing of
// another prefix.
func TestReadAndUsage(t *testing.T) {
	_, cli := embedetcd.ForTestWith(t, embedetcd.Config{QuotaBackendBytes: 64 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := etcdspace.Read(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Members) != 1 || st.Members[0].Err != "" || st.Members[0].Quota != 64<<20 || st.Members[0].DBSize <= 0 || st.Alarmed() {
		t.Fatalf("status %+v", st)
	}
	l, other := keys.NewLayout("p/"), keys.NewLayout("q/")
	for k, v := range map[string]string{string(l.Thread("t")): "{}", string(l.Index("c")): "xx", string(l.Checkpoint("t", 1, "c")): "12345", string(other.Thread("t")): "{}"} {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	u, err := etcdspace.Usage(ctx, cli, l)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, k := range u {
		got[k.Kind] = k.Keys
	}
	if len(u) != 3 || got["thread"] != 1 || got["index"] != 1 || got["checkpoint"] != 1 || u[0].Kind != "checkpoint" {
		t.Fatalf("usage %+v", u)
	}
}

func TestRecoverRefusesABadThreshold(t *testing.T) {
	for _, th := range []float64{-0.5, 1, 1.5} {
		if _, err := etcdspace.Recover(context.Background(), nil, etcdspace.RecoverOptions{Threshold: th}); err == nil {
			t.Errorf("threshold %v accepted", th)
		}
	}
}
