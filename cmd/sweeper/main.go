// Command sweeper keeps a cairn checkpoint store's bucket small: it keeps the
// newest --keep checkpoints of every thread, then deletes the blobs that no
// checkpoint references, no capture has claimed, and that have been
// unreferenced for --older-than. It is safe to run while captures run (the
// online sweep protocol of package sweep). Only one sweeper acts at a time,
// under an etcd lock.
//
// Run it from cron with --once, whose exit code tells the outcome, or as a
// daemon with --interval; sweeper --version prints its build. See
// docs/sweeper.md or sweeper --help for the flags,
// for their environment variables, the exit codes and the metrics.
package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/cairnstore/cairn/internal/buildinfo"
	"github.com/cairnstore/cairn/internal/sidecar"
)

func main() {
	if buildinfo.IsVersionFlag(os.Args[1:]) {
		buildinfo.Print(os.Stdout, "sweeper")
		return
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	os.Exit(sidecar.Main(sidecar.Env{
		Args:    os.Args[1:],
		Getenv:  os.Getenv,
		Stderr:  os.Stderr,
		Signals: signals,
		Exit:    os.Exit,
	}))
}
