//go:build !linux

package etcdstore

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// release drops the pages of the mirror's file from the process's resident
// memory by closing the file and opening it again (see the Linux form, which
// uses madvise instead). No transaction may be open. Errors: ErrMirror.
func (m *Mirror) release() error { return m.remap() }

// releaseInTx does nothing: the file cannot be closed inside a transaction.
func (m *Mirror) releaseInTx() error { return nil }

// remap closes the file and opens it again, so that the pages a step read
// or wrote through bbolt's map of the file stop counting in the process's
// resident memory (they stay in the kernel's page cache): a sweeper's
// resident memory then follows what one step reads (a batch of counts, a
// page of Live), not the file's size. The lock file keeps other processes
// out meanwhile. No transaction may be open. Errors: ErrMirror.
func (m *Mirror) remap() error {
	path := m.db.Path()
	if err := m.db.Close(); err != nil {
		return fmt.Errorf("%w: close %s: %w", ErrMirror, path, err)
	}
	db, err := bolt.Open(path, 0o600, m.opts)
	if err != nil {
		return fmt.Errorf("%w: open %s again: %w", ErrMirror, path, err)
	}
	m.db = db
	return nil
}
