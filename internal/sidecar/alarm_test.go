package sidecar

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/etcdspace"
	"github.com/cairnstore/cairn/internal/fulltest"
	"github.com/cairnstore/cairn/internal/s3test"
	"github.com/cairnstore/cairn/sweep"
)

// TestOnceUnderAlarm fills etcd through a store until it refuses an append
// (NOSPACE), then runs sweeper --once --keep=1: the run cannot take its
// lock, prunes every thread to its head with deletes only, and exits 0;
// after etcdspace.Recover the store takes appends again.
func TestOnceUnderAlarm(t *testing.T) {
	etcd, client := embedetcd.ForTestWith(t, embedetcd.Config{QuotaBackendBytes: 8 << 20})
	s3 := s3test.StartFake(t, s3test.FakeOptions{})
	env := map[string]string{cli.EnvS3AccessKeyID: s3.AccessKeyID, cli.EnvS3SecretAccessKey: s3.SecretAccessKey}
	sweeper := func(args ...string) (int, string) {
		t.Helper()
		var log strings.Builder
		args = append([]string{"--etcd-endpoints=" + strings.Join(etcd.Endpoints(), ","), "--prefix=full/",
			"--s3-endpoint=" + s3.Endpoint, "--s3-region=" + s3.Region, "--s3-bucket=" + s3.Bucket, "--s3-path-style",
			"--probe-timeout=5s", "--log-format=json"}, args...)
		code := Main(Env{Args: args, Getenv: func(k string) string { return env[k] }, Stderr: &log})
		return code, log.String()
	}
	if code, log := sweeper("--bind"); code != ExitOK {
		t.Fatalf("--bind exited %d:\n%s", code, log)
	}
	store, err := etcdstore.New(client, "full/", etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	threads := []string{"a", "b"}
	heads := map[string]string{}
	leases := map[string]*cairn.Lease{}
	var writers []cairn.Writer
	for _, th := range threads {
		if leases[th], err = store.AcquireWriter(t.Context(), th); err != nil {
			t.Fatal(err)
		}
		writers = append(writers, leases[th].Writer)
	}
	conv := fulltest.Conversation(360_000)
	acked := fulltest.Fill(t, t.Context(), store, writers, func(n int, thread, parent string) cairn.Checkpoint {
		return fulltest.Checkpoint(fulltest.ID(thread, n), thread, parent, conv)
	})
	for th, a := range acked {
		heads[th] = a[len(a)-1].ID
	}

	m := NewMetrics(false)
	m.WatchEtcd(client, 10*time.Second)
	gauges := func() map[string]float64 {
		t.Helper()
		fams, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, f := range fams {
			if strings.Contains(f.GetName(), "etcd_") {
				out[strings.TrimPrefix(f.GetName(), MetricPrefix)] = f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return out
	}
	if g := gauges(); g["etcd_nospace_alarm"] != 1 || g["etcd_db_quota_bytes"] != 8<<20 || g["etcd_db_size_bytes"] < 0.8*(8<<20) ||
		g["etcd_db_size_in_use_bytes"] <= 0 || g["etcd_status_up"] != 1 {
		t.Fatalf("etcd gauges of a full member: %v", g)
	}

	code, log := sweeper("--once", "--keep=1", "--older-than=0s")
	if code != ExitOK || !strings.Contains(log, `"under_alarm":true`) {
		t.Fatalf("sweeper --once under the alarm exited %d; want %d and underAlarm:\n%s", code, ExitOK, log)
	}
	for _, th := range threads {
		list, err := store.List(t.Context(), th)
		if err != nil || len(list) != 1 || list[0].ID != heads[th] {
			t.Fatalf("thread %q after the run: %d checkpoints, %v; want only %q", th, len(list), err, heads[th])
		}
	}
	if _, err := etcdspace.Recover(t.Context(), client, etcdspace.RecoverOptions{}); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	for _, th := range threads {
		leases[th].Release(t.Context())
		l, err := store.AcquireWriter(t.Context(), th)
		if err != nil {
			t.Fatal(err)
		}
		c := fulltest.Checkpoint(th+"-after", th, heads[th], conv)
		if _, err := store.Append(t.Context(), cairn.AppendInput{Checkpoint: c, ExpectedHeadID: heads[th], Writer: l.Writer}); err != nil {
			t.Fatalf("append after the recovery: %v", err)
		}
		l.Release(t.Context())
	}
	if g := gauges(); g["etcd_nospace_alarm"] != 0 || g["etcd_db_size_bytes"] >= 0.8*(8<<20) {
		t.Fatalf("etcd gauges after the recovery: %v", g)
	}
	// The next run takes its lock and sweeps.
	if code, log := sweeper("--once", "--keep=1", "--older-than=0s"); code != ExitOK || strings.Contains(log, `"under_alarm":true`) {
		t.Fatalf("sweeper --once after the recovery exited %d:\n%s", code, log)
	}
}

// TestObserveUnderAlarm: a run that pruned under the alarm counts as
// under_alarm, not success, so the alert on the last successful run still
// fires, and its removals are counted.
func TestObserveUnderAlarm(t *testing.T) {
	m := NewMetrics(false)
	m.observe(RunReport{UnderAlarm: true, Pruned: true, Prune: sweep.PruneReport{Removed: 3}}, nil)
	if got := testutil.ToFloat64(m.runs.WithLabelValues("under_alarm")); got != 1 {
		t.Fatalf("runs_total{result=under_alarm} = %v", got)
	}
	if got := testutil.ToFloat64(m.runs.WithLabelValues("success")); got != 0 {
		t.Fatalf("runs_total{result=success} = %v", got)
	}
	if got := testutil.ToFloat64(m.lastSuccess); got != 0 {
		t.Fatalf("last_success_timestamp_seconds = %v after a run under the alarm", got)
	}
	if got := testutil.ToFloat64(m.pruned); got != 3 {
		t.Fatalf("pruned_checkpoints_total = %v, want 3", got)
	}
}
