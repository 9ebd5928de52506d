// Package etcdstore is a cairn.Store on etcd: checkpoints, heads, writer
// leases, blob references, transcripts and instance records of many services
// live under one key prefix of a shared etcd cluster.
//
// It implements cairn.Store and every optional capability (cairn.Pruner,
// cairn.Forker with a transcript store in the same keyspace, cairn.ThreadLister,
// cairn.BlobReferenceWalker, and the two sides of the online sweep protocol,
// cairn.BlobClaimer and cairn.BlobCollector) and, through Instances,
// cairn.InstanceStore.
//
// Everything works within etcd's DEFAULT server limits, 128 operations per
// transaction and 1.5 MiB per request, which is what a shared cluster gives:
//
//   - The common append is one transaction. Its comparisons encode the
//     contract's live checks: the writer lease is current, the id is unused in
//     every thread, and the thread is at the expected head.
//   - A checkpoint too large for one request (up to MaxCheckpointBytes encoded)
//     is staged first, in chunks attached to a short etcd lease, and published
//     by one small transaction that detaches them. A writer that dies while
//     staging leaves nothing visible, and etcd deletes what it staged when the
//     staging lease expires.
//   - Blob references are not counters. Each checkpoint writes, per shard of
//     the blob key space, one record listing its distinct blob digests; the
//     count of a key is the number of records that contain it. Writers on
//     different threads never write the same key, so they never contend.
//   - deleteHead, deleteCheckpoints and fork are each one transaction; a prune
//     of any number of checkpoints removes their chunks and references with
//     range deletes and hides their records behind the thread's prune floor in
//     that same transaction.
//   - The online sweep keeps a GC record per blob key the sweeper is
//     collecting and a claim per (blob key, writer lease), attached to the
//     etcd lease of that writer's record; a claim is live while the record
//     is its lease's, whatever any clock says. Every move of a record is a
//     compare-and-swap on its version, and "no claim" is one range comparison
//     over the key's claims, so a writer's claim and the sweeper's delete
//     cannot both win.
//     A turn's claims end in its append's own transaction.
//
// The key layout, every transaction's comparisons and operations, and what
// each costs are described in docs/design.md; those of the online sweep on
// the methods of BlobClaimer and BlobCollector.
//
// # Writes whose outcome is unknown
//
// When etcd may or may not have applied a write (for example a deadline ran
// out during the commit), the store retries it, with the same identity, while
// the call's context allows; a retry either finds that the first attempt
// landed or applies the write once. When the context ends first, the write
// returns an *UnknownOutcomeError; its Retry method does the same resolution
// later.
//
// # Contention
//
// Append, DeleteHead, DeleteCheckpoints and ForkFromCheckpoint never fail
// because the thread changed under them: a write whose transaction loses its
// comparison to a change after which the contract's checks still pass reads
// the new state, runs the checks again in their order, and commits again,
// with a jittered backoff from the third attempt, for as long as its context
// allows. If the change makes a check fail, the write returns that check's
// contract error. When the context ends first, the write returns the
// context's error (wrapped in an *UnknownOutcomeError when an earlier attempt
// may still land). Commits that end without an answer are bounded: after six
// the write returns an *UnknownOutcomeError.
package etcdstore
