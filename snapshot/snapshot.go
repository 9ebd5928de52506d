package snapshot

import (
	"bytes"
	"context"
	"io"
	"os"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

// DefaultConcurrency is how many files a capture uploads, and a restore
// downloads, at a time when Options.Concurrency is 0. R2 serves many
// concurrent requests per bucket; 16 keeps a link busy without queueing
// requests for long on a small machine.
const DefaultConcurrency = 16

// DefaultPutFirstMax is the largest file a capture puts without looking for
// its key first, when Options.PutFirstMax is 0: sending a mebibyte that
// the bucket turns out to hold costs about what a round trip does.
const DefaultPutFirstMax = 1 << 20

// DefaultExcludes are the path segments a capture leaves out at any depth,
// as upstream's default policy does: a segment equal to .git or node_modules,
// or starting with .env.
var DefaultExcludes = []string{".git", "node_modules", ".env*"}

// Blobs is the bucket a capture writes to and a restore reads from. When it
// also implements bucket.StreamPutter and bucket.StreamReader (bucket.S3 and
// bucket.Memory do), no file is held in memory; otherwise each file is read
// whole, one per worker, before it is sent or after it is received. A
// capture whose claimer records bindings (cairn.Bound) binds it to the bucket
// before its first claim (bucket.BindStore), which needs a bucket.Lister too;
// without one the capture fails with bucket.ErrCannotBind.
type Blobs interface {
	bucket.Reader
	bucket.Putter
}

// Options tune a capture or a restore. The zero value selects the defaults.
type Options struct {
	// Include, when not empty, keeps only the files whose slash-separated
	// path relative to the root matches one of its patterns; directories are
	// still walked. Exclude leaves out every file and directory (with all it
	// holds) whose path matches one of its patterns; exclusion wins over
	// inclusion. A pattern is path.Match syntax; a pattern without a slash
	// is matched against each segment of the path (so "*.log" excludes
	// a/b/c.log), one with a slash against the whole path. A restore uses
	// Exclude (with the defaults) to know which paths of the target to leave
	// alone. A malformed pattern fails with path.ErrBadPattern.
	Include []string
	Exclude []string
	// NoDefaultExcludes turns DefaultExcludes off.
	NoDefaultExcludes bool
	// Concurrency bounds the files hashed, uploaded or downloaded at once;
	// 0 selects DefaultConcurrency.
	Concurrency int
	// PutFirstMax bounds the files a capture may put without looking for
	// their key first. A key the parent does not reference costs either a
	// HeadObject and, when the bucket lacks it, a PutObject; or one
	// conditional PutObject, which sends the bytes even when the bucket holds
	// them. A capture heads first while most of its recent lookups found
	// their key present (a re-capture, content another thread stored), and
	// puts first, files of at most PutFirstMax bytes on a bucket whose put
	// finds an existing key itself (bucket.PutsFindExisting), while most
	// found it absent (new content). 0 selects DefaultPutFirstMax; a
	// negative value makes every lookup a head.
	PutFirstMax int64
	// StatCache, when not "", is the path of a local file that remembers the
	// digest of each captured file by its path, size, mtime, ctime and inode,
	// like git's index: a later capture of the same directory hashes only the
	// files whose stat changed. A missing, unreadable or corrupt cache is
	// ignored and rewritten, never trusted; a file modified in the same
	// second the cache was written is hashed again (a write in that second
	// may not have moved its mtime). CaptureDir only (an fs.FS has no
	// inodes). A restore records the files it wrote, so that a capture of
	// the restored tree reads only what changed since, except the files
	// written in the second the restore ended.
	StatCache string
	// Progress, when not nil, receives progress events. Calls are
	// serialised and must return quickly.
	Progress func(Progress)
}

// Phase names the step a Progress event counts.
type Phase string

// The phases, in the order they run. A capture hashes, then uploads; a
// restore downloads (and verifies), then writes the target.
const (
	PhaseHash     Phase = "hash"
	PhaseUpload   Phase = "upload"
	PhaseDownload Phase = "download"
	PhaseWrite    Phase = "write"
)

// Progress is one progress event: how many files and bytes of the phase are
// done, of how many. The totals of a phase are fixed when it starts; every
// phase ends with an event where done equals total.
type Progress struct {
	Phase      Phase
	FilesDone  int
	FilesTotal int
	BytesDone  int64
	BytesTotal int64
}

// Uploader is where a capture puts its blobs, and the writer lease it claims
// them for: every key is claimed for Writer through Claimer before the
// capture looks in Bucket, so that a running sweeper cannot delete bytes the
// capture relies on (docs/design.md, "Online sweep and capacity").
//
// Parent, when not nil, is the checkpoint the capture will be appended on
// (the thread's head, read under the same lease). The keys it references
// are protected by that reference while the writer holds the lease, and
// their bytes were verified when the parent was captured, so the capture
// neither claims them nor asks the bucket for them: an unchanged re-capture
// then costs no request per file. A caller that appends on another parent
// must capture again.
type Uploader struct {
	Bucket  Blobs
	Claimer cairn.BlobClaimer
	Writer  cairn.Writer
	Parent  *cairn.Checkpoint
}

// ArtifactSource is an artifact to capture. Open is called twice (once to
// hash, once to upload when the bucket lacks the bytes) and must return the
// same bytes each time; the capture closes what it returns.
type ArtifactSource struct {
	ArtifactID string
	Name       string
	MimeType   string
	CreatedAt  float64
	Open       func() (io.ReadSeekCloser, error)
}

// ArtifactBytes returns an ArtifactSource for bytes in memory.
func ArtifactBytes(id, name, mimeType string, createdAt float64, data []byte) ArtifactSource {
	return ArtifactSource{ArtifactID: id, Name: name, MimeType: mimeType, CreatedAt: createdAt,
		Open: func() (io.ReadSeekCloser, error) { return nopCloser{bytes.NewReader(data)}, nil }}
}

// ArtifactFile returns an ArtifactSource for the file at path.
func ArtifactFile(id, name, mimeType string, createdAt float64, path string) ArtifactSource {
	return ArtifactSource{ArtifactID: id, Name: name, MimeType: mimeType, CreatedAt: createdAt,
		Open: func() (io.ReadSeekCloser, error) { return os.Open(path) }}
}

type nopCloser struct{ io.ReadSeeker }

func (nopCloser) Close() error { return nil }

// Manifest is what a capture produced: the checkpoint's files and artifacts,
// ready for cairn.Checkpoint, and what it cost.
type Manifest struct {
	// Files are the entries sorted by the bytes of their path.
	Files []cairn.Entry
	// Artifacts are sorted by CreatedAt, then by the bytes of ArtifactID.
	Artifacts []cairn.Artifact
	Stats     CaptureStats
}

// CaptureStats counts what a capture did.
type CaptureStats struct {
	Files int   // file entries
	Dirs  int   // empty-directory entries
	Bytes int64 // the sum of the file sizes
	// Hashed and HashedBytes count the files read to hash them; the others
	// had their digest from the stat cache.
	Hashed      int
	HashedBytes int64
	// Uploaded and UploadedBytes count the distinct blobs the bucket lacked
	// and the capture stored; Present counts those it already held, found
	// by a HeadObject or refused by a conditional put (Options.PutFirstMax),
	// and Inherited those the parent references, which cost no request.
	Uploaded      int
	UploadedBytes int64
	Present       int
	Inherited     int
}

// RestoreStats counts what a restore did.
type RestoreStats struct {
	Files   int   // files written
	Dirs    int   // empty-directory entries made
	Bytes   int64 // bytes downloaded and written
	Removed int   // stale entries of the target removed
}

// Get returns the checkpoint id of st, or an *Error matching
// ErrMissingCheckpoint when there is none. Errors of the store (such as
// cairn.ErrInvalidID) are returned as they are.
func Get(ctx context.Context, st cairn.Store, id string) (*cairn.Checkpoint, error) {
	cp, err := st.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if cp == nil {
		return nil, &Error{Code: CodeMissingCheckpoint, Message: "no checkpoint " + quote(id)}
	}
	return cp, nil
}
