// Package sweep deletes the blobs that no checkpoint uses, and prunes old
// checkpoints first so that their blobs go too.
//
// Sweep is the Go form of upstream's sweepSandboxBlobs. It lists the keys
// under sandbox-files/ and sandbox-artifacts/ with their upload times and
// deletes each key that no checkpoint references and whose age, now minus its
// upload time, is strictly greater than Options.OlderThan. Keys elsewhere in
// the bucket are never listed or touched. Prune applies a retention Policy
// to every thread (keep the newest N, drop checkpoints older than a maximum
// age, remove idle threads, never remove protected checkpoints), and Run does
// both in the order the upstream page gives: prune, then sweep.
//
// # An exact preview
//
// A dry run of Run makes the decisions of the real run on the same reads:
// Policy.Plan decides each thread in both, and the dry run's sweep counts
// the references its prune would have released as gone
// (PruneReport.Released, Options.Released), so its report (checkpoints and
// threads removed, blobs marked and deleted, bytes) is the real run's on the
// same state. Its plans (PruneReport.Plans) can be carried out later with
// PruneOptions.Apply, which refuses with ErrPlanStale when a planned thread
// changed.
//
// # Safety
//
// With a store that implements cairn.BlobCollector (the memory stores and
// etcdstore do), Sweep runs the online protocol and is safe while captures
// run, provided the captures claim what they reuse (bucket.UploadBlobs does):
//
//   - A key is deleted only if, at a read of the store taken after the
//     listing and after the key's GC record was created, no checkpoint
//     references it and no writer has a live claim on it; the record moves
//     from candidate to deleting by a compare-and-swap on its version, and a
//     claim made since the read removes the record, so that key's delete is
//     called off (Report.Aborted).
//   - The grace, OlderThan, runs from the first sweep that found the key
//     unreferenced and unclaimed (GCRecord.Since), so a blob is deleted no
//     sooner than OlderThan after its last reference or claim ended, and no
//     sooner than OlderThan after its upload. With OlderThan = 0 a key is
//     marked, read again and deleted in one run; otherwise it is marked in
//     one run and deleted by a later one.
//   - A delete whose outcome is unknown leaves the key in the deleting
//     state: writers treat its bytes as gone and wait; the next run deletes
//     it again and settles it.
//
// With a store without the protocol, Sweep follows upstream's rule: it
// deletes each unreferenced key whose age, now minus its upload time, is
// strictly greater than OlderThan, and a capture that reuses an old
// unreferenced blob during the sweep can lose it.
//
// Both take now before they list the bucket and read the store after the
// listing. They fail closed: an error while listing or reading the store
// aborts the sweep before the first delete. They delete in batches of at most
// 1000 keys (one S3 DeleteObjects request each, never an empty one), and
// Options.BeforeDelete can veto each batch, for example when the caller has
// lost the lock that makes it the only sweeper. Options.MaxDeletes caps the
// deletes of one run, and Options.DryRun runs every step but the writes.
//
// # A shared bucket
//
// Stores that write to a bucket record their binding there first
// (bucket.Bind). After its listing a sweep lists the bindings and refuses,
// deleting and writing nothing, with an error matching ErrUncovered, when the
// bucket is bound to a store it does not cover, or holds objects without the
// binding registry's marker. Options.Others adds stores to cover: a key is
// kept while any of them references or claims it, and the online protocol's
// records are moved in each of them. docs/design.md ("A bucket shared by
// several stores") gives the argument.
//
// # Without a listing
//
// Options.Incremental names a source (etcdstore.Mirrored, whose mirror
// follows the store with an etcd watch) that knows the keys whose last
// reference or claim ended since the last sweep. Once one run has listed the
// bucket after the source began following the store, a run takes its
// candidates from the source and the GC records alone and lists nothing; each
// still goes through the online protocol, so a wrong candidate list can only
// leave garbage. It sends one HEAD request for each key it is about to move
// to deleting (existence, size, upload time), and no request at all when
// nothing changed. Options.List, a source that lost track (a rebuilt mirror,
// a compacted watch) and Options.Others make a run list. docs/design.md
// ("Candidates without a listing") gives the argument.
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
