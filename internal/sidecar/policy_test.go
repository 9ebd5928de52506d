package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/sweep"
)

// seedNamed adds thread gamma to the fixture: an old named checkpoint and an
// old automatic one on top of it.
func (f *fixture) seedNamed(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	lease, err := f.store.AcquireWriter(ctx, "gamma")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	parent := ""
	for i, reason := range []string{cairn.ReasonNamed, cairn.ReasonAutomatic} {
		b := bucket.FileBlob(fmt.Appendf(nil, "gamma %d", i))
		if _, err := bucket.PutBlobs(ctx, f.mem, []bucket.Blob{b}); err != nil {
			t.Fatal(err)
		}
		c := cairn.Checkpoint{ID: fmt.Sprintf("g-%d", i), ThreadID: "gamma", ParentCheckpointID: parent, CreatedAt: float64(10 + i),
			Reason: reason, Conversation: json.RawMessage(`[]`),
			Files: []cairn.Entry{{Path: "g", Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(b.Data))}}}
		if _, err := f.store.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: parent, Writer: lease.Writer}); err != nil {
			t.Fatal(err)
		}
		parent = c.ID
	}
}

// TestPolicyDryRunEqualsRealRun runs each policy on etcd as a dry run and
// then for real on the same seeded state: the counts must agree, and the
// per-policy metrics must say the same.
func TestPolicyDryRunEqualsRealRun(t *testing.T) {
	_, client := embedetcd.ForTest(t)
	policies := []struct {
		name   string
		policy sweep.Policy
		// wantRemoved and wantThreads are what the real run removes.
		wantRemoved, wantThreads, wantProtected int
	}{
		{"Keep1", sweep.Policy{Keep: 1}, 3, 0, 0},
		{"MaxAge", sweep.Policy{MaxAge: time.Hour}, 3, 0, 0},
		{"MaxAgeProtectNamed", sweep.Policy{MaxAge: time.Hour, Protect: []string{cairn.ReasonNamed}}, 2, 0, 1},
		{"DeleteIdle", sweep.Policy{DeleteIdle: time.Hour}, 6, 3, 0},
		{"DeleteIdleProtectNamed", sweep.Policy{DeleteIdle: time.Hour, Protect: []string{cairn.ReasonNamed}}, 4, 2, 1},
	}
	for _, p := range policies {
		t.Run(p.name, func(t *testing.T) {
			f := newFixture(t, client, true)
			f.seedNamed(t)
			run := func(dry bool) (RunReport, *Metrics) {
				t.Helper()
				m := NewMetrics(dry)
				// Deleting every idle thread empties the store, which the
				// sweep refuses without AllowEmptyStore (see EmptiedStore).
				rep, err := f.sweeper(t, RunOptions{Policy: p.policy, PolicyName: p.name, OlderThan: 0, DryRun: dry, AllowEmptyStore: true}, m).Run(t.Context(), t.Context(), LockMode{})
				if err != nil {
					t.Fatalf("Run(dry run %t): %v\n%s", dry, err, f.log.String())
				}
				return rep, m
			}
			dry, dm := run(true)
			wet, wm := run(false)
			equal(t, "removed", wet.Prune.Removed, p.wantRemoved)
			equal(t, "threads deleted", wet.Prune.ThreadsDeleted, p.wantThreads)
			equal(t, "protected", wet.Prune.Protected, p.wantProtected)
			for _, c := range []struct {
				name     string
				dry, wet any
			}{
				{"Prune.Pruned", dry.Prune.Pruned, wet.Prune.Pruned},
				{"Prune.Protected", dry.Prune.Protected, wet.Prune.Protected},
				{"Sweep.Deleted", dry.Sweep.Deleted, wet.Sweep.Deleted},
				{"Sweep.BytesFreed", dry.Sweep.BytesFreed, wet.Sweep.BytesFreed},
				{"Sweep.Marked", dry.Sweep.Marked, wet.Sweep.Marked},
			} {
				if fmt.Sprint(c.dry) != fmt.Sprint(c.wet) {
					t.Errorf("%s: dry run %v, real run %v", c.name, c.dry, c.wet)
				}
			}
			for _, name := range []string{"policy_checkpoints_removed_total", "policy_threads_removed_total", "policy_blobs_freed_total",
				"policy_bytes_freed_total", "policy_protected_skipped_total", "policy_busy_threads_skipped_total"} {
				series := fmt.Sprintf(`%s{policy=%q}`, name, p.name)
				equal(t, "dry "+series, gauge(t, dm, series), gauge(t, wm, series))
			}
			equal(t, "metric of removed checkpoints", gauge(t, wm, fmt.Sprintf(`policy_checkpoints_removed_total{policy=%q}`, p.name)), float64(p.wantRemoved))
		})
	}
}

// TestPolicyDryRunRefusesAnEmptiedStore: a policy that removes every thread
// leaves the store empty, which the real run's sweep refuses (a wrong
// --prefix looks the same); the dry run must say so too.
func TestPolicyDryRunRefusesAnEmptiedStore(t *testing.T) {
	_, client := embedetcd.ForTest(t)
	f := newFixture(t, client, true)
	for _, dry := range []bool{true, false} {
		_, err := f.sweeper(t, RunOptions{Policy: sweep.Policy{DeleteIdle: time.Hour}, OlderThan: 0, DryRun: dry}, nil).Run(t.Context(), t.Context(), LockMode{})
		if !errors.Is(err, ErrEmptyStore) {
			t.Errorf("dry run %t: %v, want ErrEmptyStore", dry, err)
		}
	}
}

// duplicateKey returns the first key that a JSON object of line repeats at
// the same level, or "".
func duplicateKey(line string) string {
	dec := json.NewDecoder(strings.NewReader(line))
	var walk func() string
	walk = func() string {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, _ := dec.Token()
				key, _ := k.(string)
				if seen[key] {
					return key
				}
				seen[key] = true
				if d := walk(); d != "" {
					return d
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if d := walk(); d != "" {
					return d
				}
			}
			_, _ = dec.Token()
		}
		return ""
	}
	return walk()
}

// TestLogLines checks the JSON log of a dry run and of a real run: no record
// repeats a key, every duration is text, and one blob reads "1 blob".
func TestLogLines(t *testing.T) {
	_, client := embedetcd.ForTest(t)
	for _, dry := range []bool{true, false} {
		t.Run(fmt.Sprintf("DryRun=%t", dry), func(t *testing.T) {
			f := newFixture(t, client, true)
			if _, err := f.sweeper(t, RunOptions{Keep: 1, OlderThan: 0, DryRun: dry}, nil).Run(t.Context(), t.Context(), LockMode{}); err != nil {
				t.Fatal(err)
			}
			msgs := map[string]bool{}
			for _, line := range strings.Split(strings.TrimSpace(f.log.String()), "\n") {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("not JSON: %q", line)
				}
				msgs[fmt.Sprint(rec["msg"])] = true
				if k := duplicateKey(line); k != "" {
					t.Errorf("record %q repeats the key %q: %s", rec["msg"], k, line)
				}
				var check func(prefix string, v any)
				check = func(prefix string, v any) {
					switch v := v.(type) {
					case map[string]any:
						for k, x := range v {
							check(prefix+"."+k, x)
						}
					case float64:
						if strings.HasSuffix(prefix, "duration") || strings.HasSuffix(prefix, "older_than") {
							t.Errorf("record %q has %s as a number (%v), not as text", rec["msg"], prefix, v)
						}
					}
				}
				check("", rec)
			}
			for _, want := range []string{"sweep started", "thread pruned", "prune finished", "sweep finished"} {
				if !msgs[want] {
					t.Errorf("no %q record in the log", want)
				}
			}
		})
	}
	t.Run("OneBlob", func(t *testing.T) {
		for n, want := range map[int]string{0: "0 blobs", 1: "1 blob", 2: "2 blobs"} {
			if got := count(n, "blob"); got != want {
				t.Errorf("count(%d) = %q, want %q", n, got, want)
			}
		}
	})
}

// TestPlanAndApply writes the plan of a dry run, reads it back as --apply
// does, carries it out, and refuses a plan made before the store changed.
func TestPlanAndApply(t *testing.T) {
	_, client := embedetcd.ForTest(t)
	policy := sweep.Policy{Keep: 1, DeleteIdle: 0}
	plan := func(t *testing.T, f *fixture) (string, Target) {
		t.Helper()
		target := Target{Name: "default", Prefix: f.prefix, Bucket: "blobs", Policy: policy}
		rep, err := f.sweeper(t, RunOptions{Policy: policy, OlderThan: 0, DryRun: true}, nil).Run(t.Context(), t.Context(), LockMode{})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "plan.json")
		if err := writePlan(path, PlanFile{Version: planVersion, CreatedAt: now, Targets: []TargetPlan{planOf(target, rep)}}); err != nil {
			t.Fatal(err)
		}
		return path, target
	}
	t.Run("Applies", func(t *testing.T) {
		f := newFixture(t, client, true)
		path, target := plan(t, f)
		data, _ := os.ReadFile(path)
		var pf PlanFile
		if err := json.Unmarshal(data, &pf); err != nil {
			t.Fatal(err)
		}
		tp := pf.Targets[0]
		equal(t, "planned checkpoints", tp.Checkpoints, 2)
		equal(t, "planned blobs", tp.BlobsDeleted, 7)
		plans, err := readPlan(path, []Target{target})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := f.sweeper(t, RunOptions{Apply: plans[f.prefix], OlderThan: 0}, nil).Run(t.Context(), t.Context(), LockMode{})
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "applied checkpoints", rep.Prune.Removed, tp.Checkpoints)
		equal(t, "deleted blobs", len(rep.Sweep.Deleted), tp.BlobsDeleted)
		equal(t, "checkpoints of alpha", f.checkpoints(t, "alpha"), 1)
	})
	t.Run("RefusedWhenStale", func(t *testing.T) {
		f := newFixture(t, client, true)
		path, target := plan(t, f)
		// A new checkpoint on alpha since the plan.
		lease, err := f.store.AcquireWriter(t.Context(), "alpha")
		if err != nil {
			t.Fatal(err)
		}
		head, _ := f.store.GetHead(t.Context(), "alpha")
		c := cairn.Checkpoint{ID: "late", ThreadID: "alpha", ParentCheckpointID: head, CreatedAt: 100, Reason: cairn.ReasonAutomatic, Conversation: json.RawMessage(`[]`)}
		if _, err := f.store.Append(t.Context(), cairn.AppendInput{Checkpoint: c, ExpectedHeadID: head, Writer: lease.Writer}); err != nil {
			t.Fatal(err)
		}
		lease.Release(t.Context())
		plans, err := readPlan(path, []Target{target})
		if err != nil {
			t.Fatal(err)
		}
		before := f.keys(t)
		_, err = f.sweeper(t, RunOptions{Apply: plans[f.prefix], OlderThan: 0}, nil).Run(t.Context(), t.Context(), LockMode{})
		if !errors.Is(err, sweep.ErrPlanStale) || ExitCode(err) != ExitFailure {
			t.Fatalf("apply of a stale plan: %v (exit %d), want ErrPlanStale and exit %d", err, ExitCode(err), ExitFailure)
		}
		equal(t, "checkpoints of alpha", f.checkpoints(t, "alpha"), 4)
		equal(t, "bucket keys", len(f.keys(t)), len(before))
	})
	t.Run("ReadErrors", func(t *testing.T) {
		dir := t.TempDir()
		write := func(name, body string) string {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
		targets := []Target{{Prefix: "a/"}}
		for _, tc := range []struct {
			name, body, want string
		}{
			{"NotJSON", "nope", "not a plan file"},
			{"OtherVersion", `{"version": 7, "targets": []}`, "plan version 7"},
			{"MissingPrefix", `{"version": 1, "targets": [{"prefix": "b/"}]}`, `nothing for prefix "a/"`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := readPlan(write(tc.name, tc.body), targets)
				if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("readPlan = %v, want a usage error containing %q", err, tc.want)
				}
			})
		}
	})
}

func TestReadPolicyFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		body string
		want []Target
		err  string
	}{
		{"TwoPrefixes", `
prefixes:
  - prefix: tenant-a/
    s3-bucket: blobs-a
    keep: 5
    max-age: 30d
    protect: [named]
  - prefix: tenant-b/
    name: b
    delete-idle-threads: 90d
    protect-label-prefix: "pin:"
`, []Target{
			{Name: "tenant-a/", Prefix: "tenant-a/", Bucket: "blobs-a", Policy: sweep.Policy{Keep: 5, MaxAge: 30 * 24 * time.Hour, Protect: []string{"named"}}},
			{Name: "b", Prefix: "tenant-b/", Bucket: "default-bucket", Policy: sweep.Policy{DeleteIdle: 90 * 24 * time.Hour, ProtectLabelPrefix: "pin:"}},
		}, ""},
		{"UnknownKey", "prefixes:\n  - prefix: a/\n    kep: 1\n", nil, `unknown field "kep"`},
		{"BadDuration", "prefixes:\n  - prefix: a/\n    max-age: soon\n", nil, `entry 1: max-age: "soon" is not a duration`},
		{"NoRule", "prefixes:\n  - prefix: a/\n", nil, "entry 1: no rule"},
		{"NoPrefix", "prefixes:\n  - keep: 1\n", nil, "entry 1: prefix is required"},
		{"SharedBucket", "prefixes:\n  - prefix: b/\n    keep: 1\n  - prefix: a/\n    keep: 2\n", []Target{
			{Name: "b/", Prefix: "b/", Bucket: "default-bucket", Policy: sweep.Policy{Keep: 1}},
			{Name: "a/", Prefix: "a/", Bucket: "default-bucket", Policy: sweep.Policy{Keep: 2}},
		}, ""},
		{"TwicePrefix", "prefixes:\n  - prefix: a/\n    keep: 1\n    s3-bucket: x\n  - prefix: a/\n    keep: 1\n", nil, `entry 2: prefix "a/" appears twice`},
		{"Empty", "prefixes: []\n", nil, "no entry"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".yaml")
			if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readPolicyFile(path, "default-bucket")
			if tc.err != "" {
				if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("readPolicyFile = %v, want a usage error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("targets\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// TestOperatorMessages feeds the sweeper each input an operator got wrong
// and checks what it says: the setting as the user gave it, the value and
// what was expected, in two lines.
func TestOperatorMessages(t *testing.T) {
	base := []string{"--prefix=p", "--s3-bucket=b", "--once"}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"KeepVariable", base, map[string]string{"CAIRN_KEEP": "x"}, []string{`invalid value "x" for CAIRN_KEEP (the variable of --keep): expected a whole number`}},
		{"KeepFlag", append([]string{"--keep=abc"}, base...), nil, []string{`invalid value "abc" for flag --keep: expected a whole number`}},
		{"DryRunVariable", base, map[string]string{"CAIRN_DRY_RUN": "maybe"}, []string{`invalid value "maybe" for CAIRN_DRY_RUN (the variable of --dry-run): expected true or false`}},
		{"OlderThanVariable", base, map[string]string{"CAIRN_OLDER_THAN": "-1h"}, []string{"CAIRN_OLDER_THAN must not be negative"}},
		{"OlderThanFlag", append([]string{"--older-than=-1h"}, base...), nil, []string{"--older-than must not be negative"}},
		{"MaxAgeVariable", base, map[string]string{"CAIRN_MAX_AGE": "-1h"}, []string{"CAIRN_MAX_AGE must not be negative"}},
		{"EndpointWithoutHost", append([]string{"--etcd-endpoints=http://"}, base...), nil, []string{`--etcd-endpoints: "http://" has no host`}},
		{"ProtectWithoutRule", append([]string{"--protect=named"}, base...), nil, []string{"--protect protects checkpoints, but no rule removes any"}},
		{"PlanAndApply", append([]string{"--plan=a", "--apply=b"}, base...), nil, []string{"not both"}},
		{"PolicyFileAndKeep", []string{"--policy-file=x", "--keep=1", "--s3-bucket=b", "--once"}, nil, []string{"--keep and --policy-file do not go together"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			start := time.Now()
			code := Main(Env{Args: tc.args, Getenv: envOf(tc.env), Stderr: &out})
			if code != ExitUsage {
				t.Errorf("exit code %d, want %d; output:\n%s", code, ExitUsage, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output does not say %q:\n%s", w, out.String())
				}
			}
			if lines := strings.Count(strings.TrimSpace(out.String()), "\n") + 1; lines != 2 {
				t.Errorf("output has %d lines, want the error and the pointer to --help:\n%s", lines, out.String())
			}
			if strings.Contains(out.String(), "parse error") || strings.Contains(out.String(), "Exit codes:") {
				t.Errorf("output says only parse error or prints the whole help:\n%s", out.String())
			}
			_ = start
		})
	}
}

func TestGroupByBucket(t *testing.T) {
	tg := func(prefix, bkt string) Target { return Target{Name: prefix, Prefix: prefix, Bucket: bkt} }
	tests := []struct {
		name string
		in   []Target
		want [][]Target
	}{
		{"OneEach", []Target{tg("a/", "x"), tg("b/", "y")}, [][]Target{{tg("a/", "x")}, {tg("b/", "y")}}},
		{"Shared", []Target{tg("c/", "x"), tg("b/", "y"), tg("a/", "x")}, [][]Target{{tg("a/", "x"), tg("c/", "x")}, {tg("b/", "y")}}},
		{"AllOnOne", []Target{tg("t3/", "x"), tg("t1/", "x"), tg("t2/", "x")}, [][]Target{{tg("t1/", "x"), tg("t2/", "x"), tg("t3/", "x")}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := GroupByBucket(tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("GroupByBucket = %v; want %v", got, tc.want)
			}
		})
	}
}
