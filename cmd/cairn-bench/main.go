// Command cairn-bench measures cairn side by side with the engines under it:
// each workload runs against the etcd store (or the sweep against an S3
// bucket) and, in the same process and the same run, alternately with a
// baseline that sends the same bytes straight to etcd or through the bare S3
// SDK. It starts its own etcd member (default limits, fsync on) and its own
// versitygw, and prints one table: workload, cairn's figure, the baseline's,
// the median ratio over the rounds, the target, and whether it was met.
//
// Usage:
//
//	cairn-bench [-quick] [-only B1,B3] [-rounds N] [-cpuprofile DIR] [-v]
//
// `make bench` runs the full configuration and `make bench QUICK=1` the
// quick one. The exit status is 0 when the run completed, whether or not
// every target was met, and 1 when a workload failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/cairnstore/cairn/internal/bench"
)

func main() {
	if bench.SweeperMain() {
		return
	}
	if bench.MemberMain() {
		return
	}
	quick := flag.Bool("quick", false, "run the quick configuration: fewer rounds and smaller sizes")
	only := flag.String("only", "", "comma-separated workloads to run (B1 to B11, B16, B20, BC); empty runs all")
	b10cmd := flag.String("b10-cmd", "", "command B10 also runs against its cairnd, space-separated (gets CAIRN_BENCH_URL, _TOKEN, _ENTRIES, _APPENDS; prints \"append_p50_ms <ms>\")")
	rounds := flag.Int("rounds", 0, "rounds per workload (0 keeps the configuration's)")
	profile := flag.String("cpuprofile", "", "directory for a CPU profile of each round of each side (cairn, baseline, reference1, ...)")
	versitygw := flag.String("versitygw", "", "versitygw binary (default: $CAIRN_VERSITYGW, ./bin/versitygw, $PATH)")
	verbose := flag.Bool("v", false, "print progress to standard error")
	b16kept := flag.String("b16-kept", "", "kept checkpoints of each run of B16-B18 (the incremental sweep's scale harness), comma-separated: the largest gives the rows, all of them the fit extrapolated to 10^6 (empty keeps the configuration's: 10000,30000,100000, quick 1000)")
	b16latency := flag.Duration("b16-latency", 0, "latency added to each request of B16-B18's in-process bucket, e.g. 10ms")
	flag.Parse()

	cfg := bench.Full()
	if *quick {
		cfg = bench.Quick()
	}
	if *only != "" {
		cfg.Only = strings.Split(strings.ToUpper(*only), ",")
	}
	if *rounds > 0 {
		cfg.Rounds, cfg.AppendRounds, cfg.B5Rounds = *rounds, *rounds, *rounds
	}
	if *b16kept != "" {
		var sizes []int
		for _, f := range strings.Split(*b16kept, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				fmt.Fprintf(os.Stderr, "cairn-bench: -b16-kept: %v\n", err)
				os.Exit(2)
			}
			sizes = append(sizes, n)
		}
		slices.Sort(sizes)
		cfg.B16Kept, cfg.B16Fit = sizes[len(sizes)-1], sizes[:len(sizes)-1]
	}
	cfg.B16Latency = *b16latency
	cfg.ProfileDir = *profile
	if *b10cmd != "" {
		cfg.B10Command = strings.Fields(*b10cmd)
	}
	cfg.VersityGW = *versitygw
	if *verbose {
		cfg.Log = os.Stderr
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if _, err := bench.Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cairn-bench:", err)
		os.Exit(1)
	}
}
