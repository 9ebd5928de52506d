// Package sweep deletes the blobs that no checkpoint uses, and prunes old
// checkpoints first so that their blobs go too.
//
// Sweep is the Go form of upstream's sweepSandboxBlobs. It lists the keys
// under sandbox-files/ and sandbox-artifacts/ with their upload times and
// deletes each key that no checkpoint references and whose age, now minus its
// upload time, is strictly greater than Options.OlderThan. Keys elsewhere in
// the bucket are never listed or touched. Prune keeps the newest checkpoints
// of every thread, and Run does both in the order the upstream page gives:
// prune, then sweep.
//
// # Safety
//
// A capture uploads its blobs before it appends the checkpoint that
// references them, so OlderThan must be longer than the longest capture. The
// sweep takes now before it lists the bucket and reads the references after
// the listing, so a blob uploaded during the listing is either too young or
// already referenced. It fails closed: an error while listing or reading
// references aborts it before the first delete. It deletes in batches of at
// most 1000 keys (one S3 DeleteObjects request each, never an empty one), and
// Options.BeforeDelete can veto each batch, for example when the caller has
// lost the lock that makes it the only sweeper. Options.MaxDeletes caps the
// deletes of one run, and Options.DryRun runs every step but the delete
// requests.
//
// A capture that finds an old, unreferenced blob already present reuses it
// without uploading; if the sweep deletes that blob before the capture
// appends, the new checkpoint references a missing blob. As upstream says,
// run the sweep when no capture runs, or make OlderThan long enough that no
// capture reuses a blob that old.
//
// # Memory
//
// The sweep holds the listed keys that are old enough to delete (key, size
// and a flag; about 150 bytes each for content keys) and one listing page at
// a time; keys too young to delete are counted and dropped. With a store that
// implements cairn.BlobReferenceWalker it streams the references and holds
// none of them; otherwise it also holds the list ListBlobReferences returns
// while it marks the referenced keys. The report lists the deleted, failed,
// skipped and pending keys.
package sweep
