package bench

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) {
	if SweeperMain() {
		return
	}
	if MemberMain() {
		return
	}
	os.Exit(m.Run())
}

// tiny is a configuration small enough for a test, with every workload.
func tiny() Config {
	return Config{
		Name: "smoke", Rounds: 2, AppendRounds: 2,
		B1Appends: 3, B1Entries: 20,
		B2Writers: 3, B2Appends: 2, B2Shared: 0.8,
		// Large enough to be staged: more than one request's worth.
		B3Entries: 10_000, B3Iterations: 1,
		B4Checkpoints: 20, B4Keys: 100,
		B5Objects: 300, B5Rounds: 1,
		B10Appends: 3,
		B11Threads: 1,
		B16Kept:    100,
		B7Files:    100, B7Bytes: 2 << 20,
	}
}

// TestRunPrintsTheTable runs every workload at a tiny size and checks the
// shape of the table. It asserts nothing about the figures: timings on a
// shared machine under the race detector mean nothing.
func TestRunPrintsTheTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var out, log bytes.Buffer
	cfg := tiny()
	cfg.Log = &log
	rows, err := Run(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s\noutput:\n%s", err, log.String(), out.String())
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
		if !slices.Contains([]string{"met", "missed", "reported"}, r.Result) {
			t.Errorf("%s: result %q", r.ID, r.Result)
		}
		if r.Cairn == "" || r.Target == "" {
			t.Errorf("%s: empty figure or target: %+v", r.ID, r)
		}
	}
	// Some workloads give a second row: B1 and B2 their client CPU, B3 the
	// capacity layout with 1% new (B3O), B5 the sweep under the online
	// protocol (B5P), B10 the get (B10G).
	want := slices.Clone(Workloads)
	for _, after := range [][2]string{{"B1", "B1-CPU"}, {"B2", "B2-CPU"}, {"B3", "B3O"}, {"B5", "B5P"}, {"B10", "B10G"}, {"B16", "B17"}, {"B17", "B18"}} {
		want = slices.Insert(want, slices.Index(want, after[0])+1, after[1])
	}
	if !slices.Equal(ids, want) {
		t.Errorf("rows %v, want %v", ids, want)
	}
	text := out.String()
	for _, want := range []string{"smoke run", "| # | workload | cairn | baseline | median ratio | target | result |", "| B1 |", "| B6 |", "| B7 |", "| B8 |", "| B9 |"} {
		if !strings.Contains(text, want) {
			t.Errorf("the output lacks %q:\n%s", want, text)
		}
	}
	t.Logf("\n%s", text)
}

// TestB16 runs the incremental sweep's rows alone: a restart with the file
// intact reads nothing, and one after a compaction reads the records once.
func TestB16(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cfg := tiny()
	cfg.Only = []string{"B16"}
	rows, err := Run(ctx, cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{"B16", "B17", "B18"}) || rows[1].Result != "met" {
		t.Fatalf("rows %v, B17 %q:\n%s", ids, rows[1].Result, out.String())
	}
	t.Logf("\n%s", out.String())
}

func TestOnlySelects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := tiny()
	cfg.Only = []string{"B6"}
	var out bytes.Buffer
	rows, err := Run(ctx, cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].ID != "B6" {
		t.Fatalf("rows %+v, want B6 alone", rows)
	}
	cfg.Only = []string{"B99"}
	if _, err := Run(ctx, cfg, &out); err == nil {
		t.Fatal("an unknown workload was accepted")
	}
}

func TestQuantileAndMedian(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	if got := quantile(ds, .5); got != 3 {
		t.Errorf("p50 %v", got)
	}
	if got := quantile(ds, .99); got != 5 {
		t.Errorf("p99 %v", got)
	}
	if got := quantile(ds, 0); got != 1 {
		t.Errorf("p0 %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median %v", got)
	}
	if got := fmtInt(1234567); got != "1,234,567" {
		t.Errorf("fmtInt %q", got)
	}
}

func TestMayWrite(t *testing.T) {
	// A read-only transaction is not a write; the bench counts retries by
	// write transactions, so this matters.
	ctx := context.Background()
	cli, stop, err := (&runner{tmp: t.TempDir(), log: &bytes.Buffer{}}).etcd(ctx, "maywrite")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tctx, tl := withTally(ctx, true)
	if _, err := cli.Put(tctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(tctx, "k"); err != nil {
		t.Fatal(err)
	}
	inner, il := withTally(tctx, false)
	if _, err := cli.Txn(inner).Then(clientv3.OpGet("k")).Commit(); err != nil {
		t.Fatal(err)
	}
	calls := tl.snapshot()
	if len(calls) != 3 || !calls[0].write || calls[1].write || calls[2].write {
		t.Fatalf("calls %+v", calls)
	}
	if calls[0].req == 0 || calls[1].resp == 0 {
		t.Fatalf("sizes not recorded: %+v", calls)
	}
	if il.count() != 1 || il.writes() != 0 {
		t.Fatalf("inner tally: %d calls, %d writes", il.count(), il.writes())
	}
}

// TestB10Rows runs B10 alone at a tiny size: it serves cairnd on loopback
// and gives the append and the get rows, and the row of an external client.
func TestB10Rows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := tiny()
	cfg.Only = []string{"B10"}
	// The external command gets the server's address and a token, and its
	// figure becomes a row.
	cfg.B10Command = []string{"sh", "-c", `case "$CAIRN_BENCH_URL" in http://127.0.0.1:*) ;; *) exit 1;; esac; test -n "$CAIRN_BENCH_TOKEN" && echo "append_p50_ms 1.5"`}
	var out bytes.Buffer
	rows, err := Run(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rows) != 3 || rows[0].ID != "B10" || rows[1].ID != "B10G" || rows[2].ID != "B10X" || rows[2].Cairn != "1.50 ms" {
		t.Fatalf("rows %+v, want B10, B10G and B10X of 1.50 ms", rows)
	}
}

// Every standard configuration validates, and each count that must be at
// least one is refused at zero.
func TestConfigValidate(t *testing.T) {
	for _, cfg := range []Config{Full(), Quick(), tiny()} {
		if err := cfg.validate(); err != nil {
			t.Errorf("%s: %v", cfg.Name, err)
		}
	}
	for name, zero := range map[string]func(*Config){
		"Rounds":       func(c *Config) { c.Rounds = 0 },
		"AppendRounds": func(c *Config) { c.AppendRounds = 0 },
		"B5Rounds":     func(c *Config) { c.B5Rounds = 0 },
		"B1Appends":    func(c *Config) { c.B1Appends = 0 },
		"B2Appends":    func(c *Config) { c.B2Appends = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := Quick()
			zero(&cfg)
			if err := cfg.validate(); err == nil {
				t.Errorf("%s = 0 accepted", name)
			}
		})
	}
	// The quick run keeps B1 and B2 as the full run has them.
	f, q := Full(), Quick()
	if q.AppendRounds != f.AppendRounds || q.B1Appends != f.B1Appends || q.B2Appends != f.B2Appends || q.B2Writers != f.B2Writers {
		t.Errorf("quick B1/B2 (%d rounds, %d, %d×%d) differ from full (%d rounds, %d, %d×%d)",
			q.AppendRounds, q.B1Appends, q.B2Writers, q.B2Appends, f.AppendRounds, f.B1Appends, f.B2Writers, f.B2Appends)
	}
}
