package snapshot

import "sync"

// progressChunk is how many bytes pass between two events inside one file.
const progressChunk = 4 << 20

// meter counts one phase and reports it through fn, one call at a time.
type meter struct {
	fn func(Progress)
	mu sync.Mutex
	p  Progress
	// since counts the bytes added since the last event.
	since int64
}

func newMeter(fn func(Progress), phase Phase, files int, bytes int64) *meter {
	m := &meter{fn: fn, p: Progress{Phase: phase, FilesTotal: files, BytesTotal: bytes}}
	m.emit()
	return m
}

func (m *meter) emit() {
	if m.fn != nil {
		m.fn(m.p)
	}
}

// bytes records n more bytes done, and reports every progressChunk bytes.
func (m *meter) bytes(n int64) {
	if m == nil || m.fn == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.p.BytesDone += n
	m.since += n
	if m.since >= progressChunk {
		m.since = 0
		m.emit()
	}
}

// file records one more file done, with rest bytes of it not yet counted.
func (m *meter) file(rest int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.p.FilesDone++
	m.p.BytesDone += rest
	m.since = 0
	m.emit()
}

// finish reports the phase complete.
func (m *meter) finish() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p.FilesDone != m.p.FilesTotal || m.p.BytesDone != m.p.BytesTotal {
		m.p.FilesDone, m.p.BytesDone = m.p.FilesTotal, m.p.BytesTotal
		m.emit()
	}
}
