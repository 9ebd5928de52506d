package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// bar draws a one-line progress bar on a terminal, redrawn in place at most
// every tick. A nil *bar draws nothing, which is what a command uses when
// stderr is not a terminal.
type bar struct {
	w     io.Writer
	verb  string // "capturing", "restoring"
	tick  time.Duration
	mu    sync.Mutex
	last  time.Time
	drawn bool
}

// newBar returns a bar on w, or nil when w is not a terminal.
func newBar(w io.Writer, terminal bool, verb string) *bar {
	if !terminal {
		return nil
	}
	return &bar{w: w, verb: verb, tick: 100 * time.Millisecond}
}

// update draws the state unless the last draw was less than a tick ago and
// the work is not done.
func (b *bar) update(files, totalFiles, bytes, totalBytes int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	done := files == totalFiles && bytes == totalBytes
	if b.drawn && !done && now.Sub(b.last) < b.tick {
		return
	}
	b.last, b.drawn = now, true
	const width = 30
	filled := width
	if totalBytes > 0 {
		filled = int(float64(width) * float64(bytes) / float64(totalBytes))
	} else if totalFiles > 0 {
		filled = int(float64(width) * float64(files) / float64(totalFiles))
	}
	filled = min(max(filled, 0), width)
	fmt.Fprintf(b.w, "\r%s [%s%s] %d/%d files, %s/%s\x1b[K", b.verb,
		strings.Repeat("=", filled), strings.Repeat(" ", width-filled),
		files, totalFiles, formatBytes(bytes), formatBytes(totalBytes))
}

// finish ends the bar's line.
func (b *bar) finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}
