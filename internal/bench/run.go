package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
)

// Row is one line of the result table. Cairn and Baseline are the figures as
// printed; Ratio is the median over the rounds of cairn's figure divided by
// the baseline's (NaN when there is no baseline).
type Row struct {
	ID       string
	Workload string
	Cairn    string
	Baseline string
	Ratio    float64
	Target   string
	// Result is "met", "missed", "reported" or "failed".
	Result string
	// Notes explain the row below the table.
	Notes []string
}

// runner carries what every workload needs.
type runner struct {
	cfg Config
	log io.Writer
	tmp string
}

// Run runs the selected workloads, prints the table and the notes to out,
// and returns the rows. A workload that fails is reported as failed in the
// table, the others still run, and the joined errors are returned.
func Run(ctx context.Context, cfg Config, out io.Writer) ([]Row, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	tmp, err := os.MkdirTemp("", "cairn-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	r := &runner{cfg: cfg, log: log, tmp: tmp}
	began, loadBefore := time.Now(), loadAverage()
	var rows []Row
	var errs []error
	for _, w := range []struct {
		id  string
		run func(context.Context) ([]Row, error)
	}{
		{"B1", r.b1}, {"B2", r.b2}, {"B3", r.b3Rows}, {"BC", r.bc}, {"B4", r.b4}, {"B5", r.b5}, {"B6", r.b6}, {"B7", r.b7}, {"B8", r.b8}, {"B9", r.b9}, {"B10", r.b10}, {"B11", r.b11}, {"B16", r.b16}, {"B20", r.b20},
	} {
		if !cfg.selected(w.id) {
			continue
		}
		r.logf("%s: start", w.id)
		t := time.Now()
		got, err := w.run(ctx)
		r.logf("%s: done in %v", w.id, time.Since(t).Round(time.Millisecond))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", w.id, err))
			if len(got) == 0 {
				got = append(got, Row{ID: w.id, Workload: "(see error)", Ratio: math.NaN(), Result: "failed", Notes: []string{err.Error()}})
			}
		}
		rows = append(rows, got...)
		if ctx.Err() != nil {
			break
		}
	}
	printTable(out, cfg, rows, time.Since(began), loadBefore, loadAverage())
	return rows, errors.Join(errs...)
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// etcd starts a fresh member for one workload, in a directory of its own,
// and a metered client of it. stop closes both and removes the data.
func (r *runner) etcd(ctx context.Context, name string) (cli *clientv3.Client, stop func(), err error) {
	dir := filepath.Join(r.tmp, "etcd-"+name)
	m, err := startMember(ctx, dir)
	if err != nil {
		return nil, nil, err
	}
	cli, err = m.client()
	if err != nil {
		m.stop()
		return nil, nil, err
	}
	return cli, func() {
		cli.Close()
		m.stop()
		os.RemoveAll(dir)
	}, nil
}

// cairnSide runs fn, the cairn side of one round, under a CPU profile when
// the configuration asks for profiles.
func (r *runner) cairnSide(workload string, round int, fn func() error) error {
	return r.profiled(workload, "cairn", round, fn)
}

// profiled runs fn, one side of one round, under a CPU profile named for
// the workload, the side and the round when the configuration asks for
// profiles.
func (r *runner) profiled(workload, side string, round int, fn func() error) error {
	if r.cfg.ProfileDir == "" {
		return fn()
	}
	f, err := os.Create(filepath.Join(r.cfg.ProfileDir, fmt.Sprintf("%s-%s-round%02d.pprof", workload, side, round+1)))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	return fn()
}

// alternate runs the cairn side and the other sides (the baseline, and any
// further reference) of each round, rotating their order from one round to
// the next so that none always runs on a warmer or a fuller server. tidy,
// when not nil, runs after each round, untimed.
func (r *runner) alternate(workload string, rounds int, tidy func() error, cairnSide func(round int) error, others ...func(round int) error) error {
	for round := range rounds {
		sides := []func() error{func() error {
			return r.cairnSide(workload, round, func() error { return cairnSide(round) })
		}}
		for i, o := range others {
			side := "baseline"
			if i > 0 {
				side = fmt.Sprintf("reference%d", i)
			}
			sides = append(sides, func() error { return r.profiled(workload, side, round, func() error { return o(round) }) })
		}
		for i := range sides {
			if err := sides[(i+round)%len(sides)](); err != nil {
				return err
			}
		}
		if tidy != nil {
			if err := tidy(); err != nil {
				return fmt.Errorf("between rounds: %w", err)
			}
		}
		r.logf("%s: round %d of %d done", workload, round+1, rounds)
	}
	return nil
}

// tidy keeps the data of a write workload from piling up from one round to
// the next, so that every round runs on a server of about the same size and
// a long run stays far from etcd's 2 GiB quota: it prunes each chain to its
// head, deletes the keys under the baselines' prefixes, and compacts etcd to
// the current revision, which lets the backend reuse the freed pages.
func tidy(ctx context.Context, cli *clientv3.Client, chains []*chain, prefixes ...string) error {
	for _, ch := range chains {
		p, ok := ch.store.(cairn.Pruner)
		if !ok || ch.head == "" {
			continue
		}
		if _, err := p.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: ch.thread, Keep: 1, Writer: ch.writer}); err != nil {
			return fmt.Errorf("prune %q: %w", ch.thread, err)
		}
	}
	for _, p := range prefixes {
		if _, err := cli.Delete(ctx, p, clientv3.WithPrefix()); err != nil {
			return err
		}
	}
	resp, err := cli.Get(ctx, "compaction-revision")
	if err != nil {
		return err
	}
	_, err = cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical())
	return err
}

// verdict is "met" or "missed".
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// machine describes the machine the run is on.
func machine() string {
	cpu := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	mem := ""
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var kb int64
			if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); err == nil {
				mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
				break
			}
		}
		f.Close()
	}
	return fmt.Sprintf("%s, %d cores%s; %s %s/%s", cpu, runtime.NumCPU(), mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// loadAverage returns the one-minute load average of the machine, or "?":
// the benchmarks share the machine with whatever else runs on it, and the
// table says how busy it was.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func printTable(out io.Writer, cfg Config, rows []Row, took time.Duration, loadBefore, loadAfter string) {
	fmt.Fprintf(out, "cairn-bench, %s run: %d rounds per workload (B1, B2: %d; B5: %d), each round running the workload and its baseline one after the other, alternating which goes first; took %v.\n",
		cfg.Name, cfg.Rounds, cfg.AppendRounds, cfg.B5Rounds, took.Round(time.Second))
	if cfg.Name != Full().Name {
		f := Full()
		fmt.Fprintf(out, "Not the full run: sizes and rounds are reduced (B4 %s references instead of %s, B5 %s objects instead of %s, fewer operations per round, B1 and B2 excepted); its figures are indicative only.\n",
			fmtInt(int64(cfg.B4Checkpoints*cfg.B4Keys)), fmtInt(int64(f.B4Checkpoints*f.B4Keys)), fmtInt(int64(cfg.B5Objects)), fmtInt(int64(f.B5Objects)))
	}
	fmt.Fprintf(out, "Machine: %s; one-minute load average %s at the start, %s at the end. etcd v3.7.3 embedded in a process of its own, default limits, fsync on; versitygw v1.8.0 (posix backend).\n\n",
		machine(), loadBefore, loadAfter)
	fmt.Fprintln(out, "| # | workload | cairn | baseline | median ratio | target | result |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		b := r.Baseline
		if b == "" {
			b = "-"
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s |\n", r.ID, r.Workload, r.Cairn, b, fmtRatio(r.Ratio), r.Target, r.Result)
	}
	fmt.Fprintln(out)
	for _, r := range rows {
		for _, n := range r.Notes {
			fmt.Fprintf(out, "- %s: %s\n", r.ID, n)
		}
	}
}
