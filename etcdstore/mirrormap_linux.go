package etcdstore

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// release drops the pages of the mirror's file from the process's resident
// memory: madvise(MADV_DONTNEED) over bbolt's map of the file, so that a
// sweeper's resident memory follows what one step of a sync reads, not the
// file. The map is shared and read-only: the pages stay in the kernel's page
// cache, and a later read maps them again with the same bytes. The map's
// start is DB.Info's and its length the kernel's (/proc/self/maps), so that
// nothing but the map is advised: bbolt may have grown the file past its
// map. No transaction may be open. Errors: ErrMirror.
func (m *Mirror) release() error { return m.releaseInTx() }

// releaseInTx is release inside a transaction of the mirror's own goroutine:
// a read through the transaction maps the page again with the same bytes
// (the file changes only at a commit), and bbolt maps the file again only
// inside the mirror's own calls, so DB.Info gives the current map. Where
// release must close the file (not Linux), it does nothing.
func (m *Mirror) releaseInTx() error {
	start := m.db.Info().Data
	n, err := mapLength(start)
	if err != nil {
		return fmt.Errorf("%w: %s: find its map: %w", ErrMirror, m.db.Path(), err)
	}
	if n == 0 {
		return nil
	}
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, start, n, unix.MADV_DONTNEED); e != 0 {
		return fmt.Errorf("%w: %s: release its pages: %w", ErrMirror, m.db.Path(), e)
	}
	return nil
}

// mapLength returns the length of the process's map that begins at start,
// from /proc/self/maps, or 0 if none does.
func mapLength(start uintptr) (uintptr, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	want := strconv.FormatUint(uint64(start), 16)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		from, rest, ok := bytes.Cut(line, []byte{'-'})
		if !ok || !bytes.Equal(bytes.TrimLeft(from, "0"), []byte(want)) {
			continue
		}
		to, _, _ := bytes.Cut(rest, []byte{' '})
		end, err := strconv.ParseUint(string(to), 16, 64)
		if err != nil || uintptr(end) <= start {
			return 0, fmt.Errorf("a map line %q", line)
		}
		return uintptr(end) - start, nil
	}
	return 0, sc.Err()
}
