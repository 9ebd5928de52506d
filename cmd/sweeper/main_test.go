package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/internal/sidecar"
)

// TestSweeperBinary runs the sweeper binary as a process against an embedded
// etcd and a versitygw process.
func TestSweeperBinary(t *testing.T) {
	w := newWorld(t)

	t.Run("OnceWithFlags", func(t *testing.T) {
		tn := w.newTenant(t)
		s := tn.seed(t)
		before := tn.keys(t)
		p := w.run(t, tn.args("--once", "--keep=1", "--older-than=0s", "--verify"), tn.creds())
		if p.code != sidecar.ExitOK {
			t.Fatalf("exit code %d; want 0; output:\n%s", p.code, p.output())
		}
		rec, ok := p.record("Deleted 6 blobs")
		if !ok {
			t.Fatalf("no \"Deleted 6 blobs\" line; output:\n%s", p.output())
		}
		equal(t, "pruned_checkpoints", rec["pruned_checkpoints"], any(float64(2)))
		equal(t, "result", rec["result"], any("success"))
		if got, want := tn.keys(t), without(before, s.orphans, s.prunedOnly); !slices.Equal(got, want) {
			t.Errorf("bucket after the run:\n%v\nwant\n%v", got, want)
		}
		equal(t, "checkpoints of alpha", tn.checkpoints(t, "alpha"), 1)
		equal(t, "checkpoints of beta", tn.checkpoints(t, "beta"), 1)
		if _, ok := p.record("store verified"); !ok {
			t.Errorf("--verify logged no result; output:\n%s", p.output())
		}
		// The settings line shows where each value came from.
		settings, ok := p.record("sweeper starting")
		if !ok {
			t.Fatalf("no settings line; output:\n%s", p.output())
		}
		keep := settings["settings"].(map[string]any)["keep"].(map[string]any)
		equal(t, "settings.keep", keep["from"], any("flag"))
	})

	t.Run("VerifyChecksObjects", func(t *testing.T) { verifyObjects(t, w) })

	t.Run("EnvironmentAndFlagPrecedence", func(t *testing.T) {
		tn := w.newTenant(t)
		s := tn.seed(t)
		before := tn.keys(t)
		// Everything from the environment, the etcd endpoints from etcdctl's
		// variable; a flag overrides the environment's wrong bucket, and the
		// credentials come from the SDK's default chain.
		env := []string{
			"ETCDCTL_ENDPOINTS=" + strings.Join(w.etcd.Endpoints(), ","),
			"CAIRN_PREFIX=" + tn.prefix,
			"CAIRN_S3_ENDPOINT=" + w.s3.Endpoint,
			"CAIRN_S3_REGION=" + w.s3.Region,
			"CAIRN_S3_BUCKET=no-such-bucket",
			"CAIRN_S3_PATH_STYLE=true",
			"CAIRN_ONCE=true",
			"CAIRN_OLDER_THAN=0s",
			"CAIRN_LOG_FORMAT=json",
			"AWS_ACCESS_KEY_ID=" + w.s3.AccessKeyID,
			"AWS_SECRET_ACCESS_KEY=" + w.s3.SecretAccessKey,
		}
		p := w.run(t, []string{"--s3-bucket=" + tn.bucket}, env)
		if p.code != sidecar.ExitOK {
			t.Fatalf("exit code %d; want 0; output:\n%s", p.code, p.output())
		}
		if _, ok := p.record("Deleted 3 blobs"); !ok {
			t.Fatalf("no \"Deleted 3 blobs\" line (no --keep: only the orphans go); output:\n%s", p.output())
		}
		if got, want := tn.keys(t), without(before, s.orphans); !slices.Equal(got, want) {
			t.Errorf("bucket after the run:\n%v\nwant\n%v", got, want)
		}
		settings := p.waitFor("sweeper starting")["settings"].(map[string]any)
		for name, want := range map[string]string{
			"etcd_endpoints": "env ETCDCTL_ENDPOINTS",
			"s3_bucket":      "flag",
			"prefix":         "env CAIRN_PREFIX",
		} {
			got, _ := settings[name].(map[string]any)
			equal(t, "settings."+name+".from", got["from"], any(want))
		}
		if strings.Contains(p.output(), w.s3.SecretAccessKey) {
			t.Errorf("the secret access key appears in the output")
		}
	})

	t.Run("PolicyFilePlanThenApply", func(t *testing.T) {
		a, b := w.newTenant(t), w.newTenant(t)
		sa := a.seed(t)
		b.seed(t)
		beforeA := a.keys(t)
		dir := t.TempDir()
		policies := filepath.Join(dir, "policies.yaml")
		body := fmt.Sprintf("prefixes:\n  - prefix: %s\n    s3-bucket: %s\n    keep: 1\n  - prefix: %s\n    name: b\n    s3-bucket: %s\n    keep: 2\n",
			a.prefix, a.bucket, b.prefix, b.bucket)
		if err := os.WriteFile(policies, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		args := func(extra ...string) []string {
			return append(dropFlag(dropFlag(a.args(extra...), "--prefix"), "--s3-bucket"), "--policy-file="+policies)
		}
		plan := filepath.Join(dir, "plan.json")
		p := w.run(t, args("--once", "--older-than=0s", "--plan="+plan, "--log-format=json"), a.creds())
		if p.code != sidecar.ExitOK {
			t.Fatalf("--plan: exit code %d; output:\n%s", p.code, p.output())
		}
		var pf sidecar.PlanFile
		data, err := os.ReadFile(plan)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &pf); err != nil {
			t.Fatal(err)
		}
		if len(pf.Targets) != 2 {
			t.Fatalf("plan has %d targets, want 2:\n%s", len(pf.Targets), data)
		}
		equal(t, "planned checkpoints of a", pf.Targets[0].Checkpoints, 2)
		equal(t, "planned blobs of a", pf.Targets[0].BlobsDeleted, 6)
		equal(t, "planned checkpoints of b", pf.Targets[1].Checkpoints, 1)
		if got := a.keys(t); !slices.Equal(got, beforeA) {
			t.Errorf("--plan changed the bucket")
		}
		p = w.run(t, args("--once", "--older-than=0s", "--apply="+plan, "--log-format=json"), a.creds())
		if p.code != sidecar.ExitOK {
			t.Fatalf("--apply: exit code %d; output:\n%s", p.code, p.output())
		}
		if got, want := a.keys(t), without(beforeA, sa.orphans, sa.prunedOnly); !slices.Equal(got, want) {
			t.Errorf("bucket a after the apply:\n%v\nwant\n%v", got, want)
		}
		equal(t, "checkpoints of a's alpha", a.checkpoints(t, "alpha"), 1)
		equal(t, "checkpoints of b's alpha", b.checkpoints(t, "alpha"), 2)
		// The plan is spent: applying it again finds the heads it planned
		// against but not the checkpoints, and refuses.
		p = w.run(t, args("--once", "--older-than=0s", "--apply="+plan, "--log-format=json"), a.creds())
		if p.code != sidecar.ExitFailure || !strings.Contains(p.output(), "the store changed since the plan was made") {
			t.Errorf("a second --apply: exit code %d, want %d and a stale-plan error; output:\n%s", p.code, sidecar.ExitFailure, p.output())
		}
	})

	t.Run("DryRunDeletesNothing", func(t *testing.T) {
		tn := w.newTenant(t)
		tn.seed(t)
		before := tn.keys(t)
		p := w.run(t, tn.args("--once", "--keep=1", "--older-than=0s", "--dry-run", "--log-format=json"), tn.creds())
		if p.code != sidecar.ExitOK {
			t.Fatalf("exit code %d; want 0; output:\n%s", p.code, p.output())
		}
		// The dry run removes no checkpoint, but counts the blobs only the
		// checkpoints its prune would remove use: the real run's 6, not
		// only the 3 orphans.
		if _, ok := p.record("Dry run: would delete 6 blobs"); !ok {
			t.Fatalf("no dry-run summary; output:\n%s", p.output())
		}
		if got := tn.keys(t); !slices.Equal(got, before) {
			t.Errorf("a dry run changed the bucket:\n%v\nwas\n%v", got, before)
		}
		equal(t, "checkpoints of alpha", tn.checkpoints(t, "alpha"), 3)
	})

	t.Run("IntervalServesMetricsAndStopsOnSIGTERM", func(t *testing.T) {
		tn := w.newTenant(t)
		tn.seed(t)
		p := w.start(t, tn.args("--interval=1h", "--keep=1", "--older-than=0s", "--listen=127.0.0.1:0"), tn.creds())
		addr := p.waitFor("serving /metrics")["address"].(string)
		p.waitFor("Deleted 6 blobs")
		status, body := httpGet(t, "http://"+addr+"/metrics")
		equal(t, "GET /metrics status", status, 200)
		for series, want := range map[string]string{
			`cairn_sweeper_runs_total{result="success"}`: "1",
			`cairn_sweeper_runs_total{result="failure"}`: "0",
			"cairn_sweeper_deleted_blobs_total":          "6",
			"cairn_sweeper_pruned_checkpoints_total":     "2",
			"cairn_sweeper_dry_run":                      "0",
			"cairn_sweeper_lock_held":                    "0",
			"cairn_sweeper_bucket_blobs":                 "10",
			"cairn_sweeper_run_duration_seconds_count":   "1",
		} {
			equal(t, series, metric(t, body, series), want)
		}
		if v := metric(t, body, "cairn_sweeper_last_success_timestamp_seconds"); v == "0" {
			t.Errorf("last_success_timestamp_seconds is 0 after a successful run")
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			status, body := httpGet(t, "http://"+addr+path)
			equal(t, "GET "+path, status, 200)
			equal(t, "GET "+path+" body", strings.TrimSpace(body), "ok")
		}
		p.signal(syscall.SIGTERM)
		if code := p.wait(); code != sidecar.ExitOK {
			t.Fatalf("exit code after SIGTERM in interval mode %d; want 0; output:\n%s", code, p.output())
		}
		p.waitFor("sweeper stopped")
	})

	t.Run("SecondSweeperWaitsInIntervalMode", func(t *testing.T) {
		tn := w.newTenant(t)
		s := tn.seed(t)
		before := tn.keys(t)
		release := tn.holdLock(t)
		p := w.start(t, tn.args("--interval=1h", "--older-than=0s", "--listen=127.0.0.1:0"), tn.creds())
		addr := p.waitFor("serving /metrics")["address"].(string)
		p.waitFor("another sweeper holds the lock; waiting")
		if status, _ := httpGet(t, "http://"+addr+"/readyz"); status != 200 {
			t.Errorf("/readyz answered %d while waiting for the lock; want 200", status)
		}
		if got := tn.keys(t); !slices.Equal(got, before) {
			t.Fatalf("the sweeper deleted without the lock:\n%v\nwas\n%v", got, before)
		}
		release()
		p.waitFor("Deleted 3 blobs")
		if got, want := tn.keys(t), without(before, s.orphans); !slices.Equal(got, want) {
			t.Errorf("bucket after the run:\n%v\nwant\n%v", got, want)
		}
		p.signal(syscall.SIGINT)
		if code := p.wait(); code != sidecar.ExitOK {
			t.Fatalf("exit code %d; want 0; output:\n%s", code, p.output())
		}
	})

	t.Run("SecondSweeperExitsOnce", func(t *testing.T) {
		tn := w.newTenant(t)
		tn.seed(t)
		before := tn.keys(t)
		tn.holdLock(t)
		for _, tc := range []struct {
			name string
			args []string
			min  time.Duration
		}{
			{"AtOnce", nil, 0},
			{"AfterLockTimeout", []string{"--lock-timeout=1s"}, time.Second},
		} {
			t.Run(tc.name, func(t *testing.T) {
				began := time.Now()
				p := w.run(t, tn.args(append([]string{"--once", "--older-than=0s"}, tc.args...)...), tn.creds())
				if p.code != sidecar.ExitLockHeld {
					t.Fatalf("exit code %d; want %d; output:\n%s", p.code, sidecar.ExitLockHeld, p.output())
				}
				if took := time.Since(began); took < tc.min {
					t.Errorf("gave up after %v; want at least %v", took, tc.min)
				}
				if !strings.Contains(p.output(), "another sweeper holds the lock") {
					t.Errorf("the output does not say the lock is held:\n%s", p.output())
				}
				if got := tn.keys(t); !slices.Equal(got, before) {
					t.Errorf("the sweeper deleted without the lock:\n%v\nwas\n%v", got, before)
				}
			})
		}
	})

	t.Run("SIGTERMFinishesTheBatchInFlight", func(t *testing.T) {
		tn := w.newTenant(t)
		s := tn.seed(t)
		before := tn.keys(t)
		g := newGate(t, w.s3.Endpoint)
		args := tn.args("--once", "--older-than=0s", "--batch-size=2", "--s3-endpoint="+g.srv.URL)
		p := w.start(t, args, tn.creds())
		select {
		case <-g.inFlight:
		case <-time.After(60 * time.Second):
			t.Fatalf("no delete request arrived; output:\n%s", p.output())
		}
		// While the first sweeper is in its first batch, a second one
		// exits without deleting.
		second := w.run(t, tn.args("--once", "--older-than=0s"), tn.creds())
		if second.code != sidecar.ExitLockHeld {
			t.Fatalf("second sweeper: exit code %d; want %d; output:\n%s", second.code, sidecar.ExitLockHeld, second.output())
		}
		p.signal(syscall.SIGTERM)
		p.waitFor("signal received")
		g.open()
		if code := p.wait(); code != sidecar.ExitInterrupted {
			t.Fatalf("exit code %d; want %d; output:\n%s", code, sidecar.ExitInterrupted, p.output())
		}
		equal(t, "delete requests", g.deletes.Load(), int64(1))
		// The first batch (the first two orphans in key order) went; the
		// third orphan stays for the next run.
		orphans := sorted(s.orphans)
		if got, want := tn.keys(t), without(before, orphans[:2]); !slices.Equal(got, want) {
			t.Errorf("bucket after the interrupted run:\n%v\nwant\n%v", got, want)
		}
		rec := p.waitFor("Deleted 2 blobs")
		equal(t, "result", rec["result"], any("interrupted"))
	})

	t.Run("SecondSignalExitsAtOnce", func(t *testing.T) {
		tn := w.newTenant(t)
		tn.seed(t)
		before := tn.keys(t)
		g := newGate(t, w.s3.Endpoint)
		p := w.start(t, tn.args("--once", "--older-than=0s", "--s3-endpoint="+g.srv.URL), tn.creds())
		select {
		case <-g.inFlight:
		case <-time.After(60 * time.Second):
			t.Fatalf("no delete request arrived; output:\n%s", p.output())
		}
		p.signal(syscall.SIGTERM)
		p.waitFor("signal received")
		p.signal(syscall.SIGTERM)
		if code := p.wait(); code != sidecar.ExitInterrupted {
			t.Fatalf("exit code %d; want %d; output:\n%s", code, sidecar.ExitInterrupted, p.output())
		}
		// It exited with the request still held at the proxy: nothing was
		// deleted.
		if got := tn.keys(t); !slices.Equal(got, before) {
			t.Errorf("bucket changed:\n%v\nwas\n%v", got, before)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		tn := w.newTenant(t)
		tn.seed(t)
		before := tn.keys(t)
		for _, tc := range []struct {
			name string
			args []string
			env  []string
			code int
			want string
		}{
			{"NegativeOlderThan", tn.args("--once", "--older-than=-1h"), tn.creds(), sidecar.ExitUsage, "--older-than must not be negative"},
			{"UnparsableOlderThan", tn.args("--once", "--older-than=yesterday"), tn.creds(), sidecar.ExitUsage, `"yesterday" is not a duration`},
			{"NeitherOnceNorInterval", tn.args(), tn.creds(), sidecar.ExitUsage, "give --once"},
			{"NoPrefix", dropFlag(tn.args("--once"), "--prefix"), tn.creds(), sidecar.ExitUsage, "--prefix (or CAIRN_PREFIX) is required"},
			{"MissingBucket", tn.args("--once", "--older-than=0s", "--s3-bucket=no-such-bucket"), tn.creds(), sidecar.ExitFailure, `no-such-bucket\" does not exist`},
			{"WrongSecret", tn.args("--once", "--older-than=0s"), []string{
				cli.EnvS3AccessKeyID + "=" + w.s3.AccessKeyID, cli.EnvS3SecretAccessKey + "=wrong-secret",
			}, sidecar.ExitFailure, "credentials for bucket"},
			{"UnknownAccessKey", tn.args("--once", "--older-than=0s"), []string{
				cli.EnvS3AccessKeyID + "=nobody", cli.EnvS3SecretAccessKey + "=wrong-secret",
			}, sidecar.ExitFailure, "credentials for bucket"},
			{"UnreachableEtcd", tn.args("--once", "--older-than=0s", "--etcd-endpoints=127.0.0.1:1", "--probe-timeout=1s"), tn.creds(), sidecar.ExitFailure, "cannot reach etcd at 127.0.0.1:1"},
			// The bucket is bound to the tenant's prefix, which a sweeper of
			// another prefix does not cover: it refuses before it could find
			// its store empty.
			{"WrongPrefixRefused", tn.args("--once", "--older-than=0s", "--prefix=other-tenant/"), tn.creds(), sidecar.ExitUncovered, "which this sweep does not cover"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := w.run(t, tc.args, tc.env)
				if p.code != tc.code {
					t.Fatalf("exit code %d; want %d; output:\n%s", p.code, tc.code, p.output())
				}
				if !strings.Contains(p.output(), tc.want) {
					t.Errorf("the output does not say %q:\n%s", tc.want, p.output())
				}
				if got := tn.keys(t); !slices.Equal(got, before) {
					t.Errorf("bucket changed:\n%v\nwas\n%v", got, before)
				}
			})
		}
	})
}
