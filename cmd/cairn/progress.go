package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/cairnstore/cairn/snapshot"
)

// bar draws a progress bar on a terminal: one line per phase, redrawn in
// place at most every tick. A nil *bar draws nothing, which is what a command
// uses when stderr is not a terminal.
type bar struct {
	w     io.Writer
	tick  time.Duration
	mu    sync.Mutex
	phase snapshot.Phase
	last  time.Time
}

// newBar returns a bar on w, or nil when w is not a terminal.
func newBar(w io.Writer, terminal bool) *bar {
	if !terminal {
		return nil
	}
	return &bar{w: w, tick: 100 * time.Millisecond}
}

// verbs name the phases on the bar.
var verbs = map[snapshot.Phase]string{
	snapshot.PhaseHash:     "hashing    ",
	snapshot.PhaseUpload:   "uploading  ",
	snapshot.PhaseDownload: "downloading",
	snapshot.PhaseWrite:    "writing    ",
}

// event draws p, unless the last draw of its phase was less than a tick ago
// and the phase is not done. A new phase starts a new line.
func (b *bar) event(p snapshot.Progress) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	done := p.FilesDone == p.FilesTotal && p.BytesDone == p.BytesTotal
	if p.Phase == b.phase && !done && now.Sub(b.last) < b.tick {
		return
	}
	if b.phase != "" && p.Phase != b.phase {
		fmt.Fprintln(b.w)
	}
	b.phase, b.last = p.Phase, now
	const width = 30
	filled := width
	if p.BytesTotal > 0 {
		filled = int(float64(width) * float64(p.BytesDone) / float64(p.BytesTotal))
	} else if p.FilesTotal > 0 {
		filled = int(float64(width) * float64(p.FilesDone) / float64(p.FilesTotal))
	}
	filled = min(max(filled, 0), width)
	verb := verbs[p.Phase]
	if verb == "" {
		verb = string(p.Phase)
	}
	fmt.Fprintf(b.w, "\r%s [%s%s] %d/%d files, %s/%s\x1b[K", verb,
		strings.Repeat("=", filled), strings.Repeat(" ", width-filled),
		p.FilesDone, p.FilesTotal, formatBytes(p.BytesDone), formatBytes(p.BytesTotal))
}

// finish ends the bar's line.
func (b *bar) finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.phase != "" {
		fmt.Fprintln(b.w)
		b.phase = ""
	}
}
