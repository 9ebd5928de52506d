// Package count counts words and ranks them by frequency.
package count

import (
	"bufio"
	"io"
	"sort"
	"strings"
	"unicode"
)

// Options configure a Counter.
type Options struct {
	// MinLength drops words shorter than this many letters.
	MinLength int
}

// Counter accumulates word counts over any number of inputs.
type Counter struct {
	opts  Options
	words map[string]int
	total int
}

// Word is a word with the number of times it was seen.
type Word struct {
	Word  string
	Count int
}

// New returns an empty Counter.
func New(opts Options) *Counter {
	return &Counter{opts: opts, words: map[string]int{}}
}

// Read counts the words of r.
func (c *Counter) Read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Split(bufio.ScanWords)
	for sc.Scan() {
		for _, w := range split(sc.Text()) {
			if len([]rune(w)) < c.opts.MinLength {
				continue
			}
			c.words[w]++
			c.total++
		}
	}
	return sc.Err()
}

// Total returns the number of words counted.
func (c *Counter) Total() int { return c.total }

// Top returns the n most frequent words, most frequent first; ties are in
// alphabetical order.
func (c *Counter) Top(n int) []Word {
	out := make([]Word, 0, len(c.words))
	for w, k := range c.words {
		out = append(out, Word{w, k})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Word < out[j].Word
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// split lower-cases a token and cuts it at every rune that is not a letter,
// a digit or an apostrophe.
func split(token string) []string {
	return strings.FieldsFunc(strings.ToLower(token), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\''
	})
}
