package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/server"
	"github.com/cairnstore/cairn/remote"
)

const (
	b10Prefix       = "/cairn-bench/b10/"
	b10RemotePrefix = "/cairn-bench/b10-remote/"
	b10ExtPrefix    = "/cairn-bench/b10-ext/"
	b10Token        = "cairn-bench-b10"
	b10ExtToken     = "cairn-bench-b10-ext"
	b10Warmup       = 20
)

// b10Server serves the store of B10's remote side: cairnd's server on
// loopback over the same etcd member, with a tenant for the Go client and
// one for an external client (Config.B10Command).
func b10Server(r *runner, cli *clientv3.Client) (url string, stop func(), err error) {
	srv, err := server.New(server.Config{Client: cli, Tenants: []server.Tenant{
		server.NewTenant("bench", b10RemotePrefix, b10Token),
		server.NewTenant("bench-ext", b10ExtPrefix, b10ExtToken),
	}, Store: etcdstore.Options{Options: storeOptions}})
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = srv.Close(context.Background())
		return "", nil, err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	url = "http://" + l.Addr().String()
	r.logf("B10: cairnd serves %s (tenant token %q under %q for the Go client, %q under %q for B10's external command)",
		url, b10Token, b10RemotePrefix, b10ExtToken, b10ExtPrefix)
	return url, func() {
		_ = hs.Close()
		_ = srv.Close(context.Background())
	}, nil
}

// b10 measures an append of a B1Entries-entry checkpoint, and a get of it,
// through cairnd from the Go client (package remote) against the same
// store in process, on one etcd member.
func (r *runner) b10(ctx context.Context) ([]Row, error) {
	cfg := r.cfg
	cli, stop, err := r.etcd(ctx, "b10")
	if err != nil {
		return nil, err
	}
	defer stop()
	local, err := newEtcdStore(cli, b10Prefix)
	if err != nil {
		return nil, err
	}
	defer local.Close()
	url, stopServer, err := b10Server(r, cli)
	if err != nil {
		return nil, err
	}
	defer stopServer()
	hc := &http.Client{Transport: remote.NewTransport()}
	defer hc.CloseIdleConnections()
	rem := remote.New(url, remote.Options{Token: b10Token, HTTPClient: hc})

	sides := make([]*b10Side, 2)
	for i, s := range []cairn.Store{local, rem} {
		ch, err := newChain(ctx, s, "b10-thread")
		if err != nil {
			return nil, err
		}
		sides[i] = &b10Side{ch: ch, build: r.b1Builder(ch), want: cfg.B1Entries}
		for range b10Warmup {
			if _, _, err := sides[i].pair(ctx); err != nil {
				return nil, err
			}
		}
	}
	err = r.alternate("B10", cfg.Rounds, func() error {
		return tidy(ctx, cli, []*chain{sides[0].ch, sides[1].ch})
	}, func(round int) error {
		return sides[1].round(ctx, round, cfg.Rounds, cfg.B10Appends)
	}, func(round int) error {
		return sides[0].round(ctx, round, cfg.Rounds, cfg.B10Appends)
	})
	if err != nil {
		return nil, err
	}
	inProc, wire := sides[0], sides[1]
	appendRatio := wire.ratio(inProc, func(s sample10) time.Duration { return s.append })
	getRatio := wire.ratio(inProc, func(s sample10) time.Duration { return s.get })
	note := fmt.Sprintf("%d appends and gets per side and round, %d rounds, one writer; the Go client speaks the Connect protocol with binary protobuf over HTTP/1.1 on loopback to cairnd's server in this process, which runs the same etcdstore on the same etcd member; figures are p50s, the ratio the median over the rounds of the two sides' p50s.",
		cfg.B10Appends, cfg.Rounds)
	rows := []Row{{
		ID: "B10", Workload: fmt.Sprintf("append of a %d-entry checkpoint through cairnd (Go client) vs in process", cfg.B1Entries),
		Cairn: fmtDur(wire.p50(func(s sample10) time.Duration { return s.append })), Baseline: fmtDur(inProc.p50(func(s sample10) time.Duration { return s.append })),
		Ratio: appendRatio, Target: "ratio ≤ 1.5", Result: verdict(appendRatio <= 1.5), Notes: []string{note},
	}, {
		ID: "B10G", Workload: "get of that checkpoint through cairnd (Go client) vs in process",
		Cairn: fmtDur(wire.p50(func(s sample10) time.Duration { return s.get })), Baseline: fmtDur(inProc.p50(func(s sample10) time.Duration { return s.get })),
		Ratio: getRatio, Target: "ratio ≤ 1.5", Result: verdict(getRatio <= 1.5),
	}}
	if len(cfg.B10Command) > 0 {
		row, err := r.b10External(ctx, url, inProc.p50(func(s sample10) time.Duration { return s.append }))
		if err != nil {
			return rows, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// sample10 is one append and get of B10.
type sample10 struct{ append, get time.Duration }

// b10Side is one side of B10: a chain and its samples, by round.
type b10Side struct {
	ch      *chain
	build   func() cairn.AppendInput
	want    int
	samples [][]sample10
}

func (s *b10Side) pair(ctx context.Context) (time.Duration, time.Duration, error) {
	in := s.build()
	start := time.Now()
	if err := s.ch.append(ctx, in); err != nil {
		return 0, 0, err
	}
	a := time.Since(start)
	start = time.Now()
	got, err := s.ch.store.Get(ctx, in.Checkpoint.ID)
	g := time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	if got == nil || len(got.Files) != s.want {
		return 0, 0, fmt.Errorf("get %q did not return the checkpoint just appended", in.Checkpoint.ID)
	}
	return a, g, nil
}

func (s *b10Side) round(ctx context.Context, round, rounds, n int) error {
	if s.samples == nil {
		s.samples = make([][]sample10, rounds)
	}
	for range n {
		a, g, err := s.pair(ctx)
		if err != nil {
			return err
		}
		s.samples[round] = append(s.samples[round], sample10{a, g})
	}
	return nil
}

func (s *b10Side) durations(round int, f func(sample10) time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(s.samples[round]))
	for _, x := range s.samples[round] {
		out = append(out, f(x))
	}
	return out
}

func (s *b10Side) p50(f func(sample10) time.Duration) time.Duration {
	var all []time.Duration
	for round := range s.samples {
		all = append(all, s.durations(round, f)...)
	}
	return medianDuration(all)
}

// ratio is the median over the rounds of s's p50 over base's.
func (s *b10Side) ratio(base *b10Side, f func(sample10) time.Duration) float64 {
	var rs []float64
	for round := range s.samples {
		rs = append(rs, float64(medianDuration(s.durations(round, f)))/float64(medianDuration(base.durations(round, f))))
	}
	return median(rs)
}

// b10External runs Config.B10Command against the running cairnd, with the
// address, token and sizes in CAIRN_BENCH_URL, CAIRN_BENCH_TOKEN,
// CAIRN_BENCH_ENTRIES and CAIRN_BENCH_APPENDS, and reads the line
// "append_p50_ms <milliseconds>" it prints: the TypeScript client's figure
// beside the Go client's.
func (r *runner) b10External(ctx context.Context, url string, inProcess time.Duration) (Row, error) {
	cfg := r.cfg
	cmd := exec.CommandContext(ctx, cfg.B10Command[0], cfg.B10Command[1:]...)
	cmd.Env = append(os.Environ(),
		"CAIRN_BENCH_URL="+url, "CAIRN_BENCH_TOKEN="+b10ExtToken,
		"CAIRN_BENCH_ENTRIES="+strconv.Itoa(cfg.B1Entries), "CAIRN_BENCH_APPENDS="+strconv.Itoa(cfg.B10Appends*cfg.Rounds))
	cmd.Stderr = r.log
	out, err := cmd.Output()
	if err != nil {
		return Row{}, fmt.Errorf("B10 command %q: %w", strings.Join(cfg.B10Command, " "), err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "append_p50_ms" {
			ms, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				break
			}
			d := time.Duration(ms * float64(time.Millisecond))
			ratio := float64(d) / float64(inProcess)
			return Row{
				ID: "B10X", Workload: fmt.Sprintf("append of a %d-entry checkpoint through cairnd from %s", cfg.B1Entries, cfg.B10Command[0]),
				Cairn: fmtDur(d), Baseline: fmtDur(inProcess), Ratio: ratio, Target: "reported", Result: "reported",
			}, nil
		}
	}
	return Row{}, errors.New(`B10 command printed no line "append_p50_ms <milliseconds>"`)
}
