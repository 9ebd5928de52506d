// Command testsum reads the events of `go test -json` and keeps a tally of
// them, so that `make test` can end with one line: N passed, N failed,
// N skipped.
//
// As a filter (the default) it reads events from standard input and writes
// what a person needs to see: each package's result line, build errors, and
// the whole output of every test that failed; the output of tests that passed
// is dropped. With -log it also appends the events to a file. With -summary it
// reads the event files named as arguments and prints only the tally.
//
// It exits 1 when anything failed, 2 on a usage or I/O error.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	log := flag.String("log", "", "append the events read to this file")
	summary := flag.Bool("summary", false, "print the tally of the event files named as arguments")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go test -json ... | testsum [-log file]\n       testsum -summary file...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	t, err := run(*summary, *log, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	if t.Failed > 0 {
		os.Exit(1)
	}
}

func run(summary bool, log string, files []string) (Tally, error) {
	if summary {
		var t Tally
		for _, name := range files {
			f, err := os.Open(name)
			if err != nil {
				if os.IsNotExist(err) {
					continue // that step did not run
				}
				return t, err
			}
			err = t.Read(f, io.Discard, nil)
			f.Close()
			if err != nil {
				return t, fmt.Errorf("%s: %w", name, err)
			}
		}
		fmt.Println(t)
		return t, nil
	}
	if len(files) > 0 {
		return Tally{}, fmt.Errorf("arguments need -summary")
	}
	var raw io.Writer
	if log != "" {
		f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return Tally{}, err
		}
		defer f.Close()
		raw = f
	}
	var t Tally
	err := t.Read(os.Stdin, os.Stdout, raw)
	return t, err
}
