//go:build !linux

package etcdstore

// release drops the pages of the mirror's file from the process's resident
// memory by closing the file and opening it again (see the Linux form, which
// uses madvise instead). No transaction may be open. Errors: ErrMirror.
func (m *Mirror) release() error { return m.remap() }

// releaseInTx does nothing: the file cannot be closed inside a transaction.
func (m *Mirror) releaseInTx() error { return nil }
