// Command wordfreq prints the most frequent words of its input files.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"example.com/wordfreq/count"
)

func main() {
	top := flag.Int("top", 10, "how many words to print")
	min := flag.Int("min", 1, "ignore words shorter than this")
	flag.Parse()
	if *top < 1 {
		fmt.Fprintln(os.Stderr, "wordfreq: -top must be at least 1")
		os.Exit(2)
	}
	c := count.New(count.Options{MinLength: *min})
	if flag.NArg() == 0 {
		if err := c.Read(os.Stdin); err != nil {
			fail(err)
		}
	}
	for _, name := range flag.Args() {
		if err := readFile(c, name); err != nil {
			fail(err)
		}
	}
	for i, w := range c.Top(*top) {
		fmt.Printf("%3d  %-20s %d\n", i+1, w.Word, w.Count)
	}
}

func readFile(c *count.Counter, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return c.Read(io.Reader(f))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "wordfreq:", err)
	os.Exit(1)
}
