package sweep

import (
	"context"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

// Hooks are the online sweep's hooks, for the package's external tests. Each
// is called, when set, on the sweep's goroutine between two of its steps:
//
//   - AfterRead after the read of references, claims and records that
//     follows the listing, with what it read;
//   - AfterMark after the stale records were dropped and the new candidates
//     marked, with the records it created (not in a dry run);
//   - AfterBegin after a batch's candidates moved to GCDeleting, with the
//     moved records, before the batch's delete request;
//   - AfterDelete after a batch's delete request returned, before its records
//     are settled.
type Hooks struct {
	AfterRead   func(ctx context.Context, view cairn.BlobGCView)
	AfterMark   func(ctx context.Context, marked []cairn.GCRecord)
	AfterBegin  func(ctx context.Context, moved []cairn.GCRecord)
	AfterDelete func(ctx context.Context, res bucket.DeleteResult, err error)
}

// WithHooks returns o with the hooks h.
func WithHooks(o Options, h Hooks) Options {
	o.hooks = &hooks{afterRead: h.AfterRead, afterMark: h.AfterMark, afterBegin: h.AfterBegin, afterDelete: h.AfterDelete}
	return o
}

// IgnoringBindings returns o for a deliberately broken sweep that neither
// writes its marker nor refuses in a bucket bound to stores it does not
// cover: the tests run it to show that their scenarios catch that mistake.
func IgnoringBindings(o Options) Options {
	o.ignoreBindings = true
	return o
}

// TrustingCandidates returns o for a deliberately broken incremental sweep
// that deletes the candidates its source names and counts as unreferenced,
// without the protocol (no claims read, no mark, no move to deleting): the
// tests run it to show that their scenarios catch that mistake.
func TrustingCandidates(o Options) Options {
	o.trustCandidates = true
	return o
}
