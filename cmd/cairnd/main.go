// Command cairnd serves the sandbox checkpoint store contract over Connect
// (gRPC, gRPC-Web and HTTP/1.1 + JSON), from etcd and an S3-compatible
// bucket, one store per tenant. Run cairnd --help for the flags; cairnd
// --dev runs it on an embedded etcd and a local S3 server; cairnd --version
// prints its build.
package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/cairnstore/cairn/internal/buildinfo"
	"github.com/cairnstore/cairn/internal/cairnd"
)

func main() {
	if buildinfo.IsVersionFlag(os.Args[1:]) {
		buildinfo.Print(os.Stdout, "cairnd")
		return
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(cairnd.Main(cairnd.Env{
		Args: os.Args[1:], Getenv: os.Getenv, Stderr: os.Stderr, Stdout: os.Stdout, Signals: sigs,
	}))
}
