// Package snapshot captures a workspace directory into content-addressed
// blobs and a checkpoint, and restores a checkpoint into a directory: the Go
// form of upstream's capture and restore (snapshots.ts) and of its save and
// fork operations (snapshot-operations.ts), on any cairn.Store and bucket.
//
// # Capture
//
// CaptureDir and CaptureFS walk a tree and return its manifest: one
// cairn.Entry per regular file (keyed sandbox-files/sha256/<hex> by the
// SHA-256 of its bytes) and per empty directory, sorted by the bytes of the
// path. They follow upstream's rules: symlinks, executable regular files and
// other special files are refused with an *Error matching
// ErrUnsupportedEntry that names the path; the segments .git, node_modules
// and .env* are excluded at any depth unless Options.NoDefaultExcludes is
// set; Options.Include selects files and Options.Exclude removes files and
// directories, and an exclusion always wins. Artifacts are a second input
// (ArtifactSource).
//
// A capture streams. It hashes each file while reading it (or takes the
// digest from the stat cache when the file's path, size, mtime, ctime and
// inode are those recorded), claims every key for the writer lease through
// cairn.BlobClaimer before it looks in the bucket (except the keys of
// Uploader.Parent, which the parent's reference protects and which cost no
// request), and then uploads each key
// the bucket lacks straight from the file, hashing the bytes again as they
// are sent: when they no longer hash to the key, the upload is aborted before
// its last byte, so the bucket never stores the wrong bytes under a key, and
// the capture fails with an *Error matching ErrFileChanged. A file whose size
// or mtime moves while it is hashed fails the same way. No file is held in
// memory, uploads run Options.Concurrency at a time, and a re-capture of an
// unchanged tree uploads nothing.
//
// # Restore
//
// Restore checks the whole manifest (every path as upstream's normalize()
// does, no duplicates, no file under a file), then downloads every blob into
// a staging directory beside the target, verifying that each one's bytes hash
// to its key and have the entry's size. Only when every blob is staged does
// it touch the target. The guarantee:
//
//   - A failure before that point (a missing or corrupt blob, a bad path, a
//     full disk, a cancelled context) leaves the target exactly as it was,
//     and removes the staging directory.
//   - When the target does not exist, or is an empty directory, the staged
//     tree becomes the target with one rename: the target is either absent
//     (or empty) or the complete checkpoint, never a mix.
//   - When the target holds files, Restore removes its stale entries and
//     renames the staged files into place one by one. A crash in this step
//     can leave a mix of old and new files; it is recognisable because the
//     staging directory, named .<target>.cairn-restore-<random> beside the
//     target, still exists. Restoring again completes the job, and removes
//     leftover staging directories of earlier runs.
//   - One restore into a target runs at a time: each holds an flock(2) on
//     .<target>.cairn-restore.lock beside the target from before it looks
//     for leftovers until it ends, and a second restore into the same
//     directory (by any path to it, from any process) is refused with
//     ErrWorkspaceBusy before it touches anything. The kernel drops the lock
//     of a restore that dies. On systems without flock(2) this is the
//     caller's to ensure.
//
// Paths that a capture excludes (.git, node_modules, .env* and
// Options.Exclude) are left alone in the target: they are not stale, they
// were never captured.
//
// # Save and Fork
//
// Save is upstream's snapshots.save: it takes the thread's writer lease
// (renewing it while it works), reads the head, captures on it and appends a
// checkpoint whose parent is that head, then releases the lease. A stale
// head is retried a bounded number of times: Save reads the head again,
// captures again on it when it changed (with the stat cache, only the new
// blobs cost anything), re-parents, and appends again. Fork is upstream's
// snapshots.fork: it takes the destination's lease, forks, and releases.
//
// Diff compares the manifests of two checkpoints.
package snapshot
