// Command cairn-demo is the quickstart that make demo runs: on an embedded
// etcd and a local S3 server (versitygw when make tools has built it, else an
// in-process gofakes3), it captures a workspace of real files into checkpoints
// on several threads while the files change, forks a thread, keeps the newest
// checkpoints of each, sweeps the blobs no checkpoint uses, and prints what the
// storage held before and after. Nothing outside this machine is contacted.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/cairnstore/cairn/internal/buildinfo"
	"github.com/cairnstore/cairn/internal/demo"
)

func main() {
	if buildinfo.IsVersionFlag(os.Args[1:]) {
		buildinfo.Print(os.Stdout, "cairn-demo")
		return
	}
	var opts demo.Options
	verbose := flag.Bool("v", false, "log the sweeper's run to stderr")
	flag.StringVar(&opts.Workspace, "workspace", "", "directory to capture (default testdata/demo-workspace)")
	flag.StringVar(&opts.S3, "s3", demo.S3Auto, "S3 server: auto, versitygw or gofakes3")
	flag.IntVar(&opts.Keep, "keep", 2, "checkpoints each thread keeps")
	// Named, not os.Args[0]: under go run that is a path in the build cache.
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: cairn-demo [flags]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if opts.Keep < 1 {
		fmt.Fprintln(os.Stderr, "cairn-demo: -keep must be at least 1")
		os.Exit(2)
	}
	if *verbose {
		opts.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := demo.Run(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cairn-demo:", err)
		os.Exit(1)
	}
	demo.Print(os.Stdout, res)
}
