package cairn

import (
	"encoding/json"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/cairnstore/cairn/internal/hexdigest"
)

// ValidateID returns ErrInvalidID unless s is a valid identifier: non-empty,
// at most MaxIDBytes long and valid UTF-8. NUL, '/' and spaces are allowed;
// there is no normalisation. The length bound is this module's, not
// upstream's (see MaxIDBytes). what names the identifier in the message.
func ValidateID(s, what string) error {
	if s == "" {
		return NewError(CodeInvalidID, "%s must be a non-empty string", what)
	}
	if len(s) > MaxIDBytes {
		return tooLong(CodeInvalidID, what, len(s), MaxIDBytes)
	}
	if !utf8.ValidString(s) {
		return NewError(CodeInvalidID, "%s must be well-formed Unicode", what)
	}
	return nil
}

// ValidatePath reports whether p is a normalized workspace-relative path, as
// the store requires of entry paths: non-empty; no NUL and no backslash; no
// leading '/'; no drive prefix followed by a separator or the end ("C:" and
// "C:/x" are rejected, "C:foo" is accepted); and no empty, "." or ".."
// segment. Paths are not checked for valid UTF-8. ValidatePath does not
// check the length; ValidateEntries also refuses a path longer than
// MaxPathBytes.
func ValidatePath(p string) bool {
	if p == "" || p[0] == '/' {
		return false
	}
	if len(p) >= 2 && isASCIILetter(p[0]) && p[1] == ':' && (len(p) == 2 || p[2] == '/') {
		return false // a drive; "C:\x" is refused below for its backslash
	}
	// One pass: no NUL or backslash anywhere, and no segment that is empty,
	// "." or "..".
	start := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			if p[i] == 0 || p[i] == '\\' {
				return false
			}
			continue
		}
		switch i - start {
		case 0:
			return false
		case 1:
			if p[start] == '.' {
				return false
			}
		case 2:
			if p[start] == '.' && p[start+1] == '.' {
				return false
			}
		}
		start = i + 1
	}
	return true
}

func isASCIILetter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }

// Blob key prefixes of the two namespaces.
const (
	FileBlobPrefix     = "sandbox-files/sha256/"
	ArtifactBlobPrefix = "sandbox-artifacts/sha256/"
)

// ObjectPrefix is the bucket prefix of a store's own body objects (the
// capacity layout of the etcd store): content-addressed like blobs, never
// named by a checkpoint, kept alive by the store's records and swept under
// the same online protocol.
const ObjectPrefix = "sandbox-meta/sha256/"

// IsObjectKey reports whether k has the form sandbox-meta/sha256/<64
// lower-case hex digits>.
func IsObjectKey(k string) bool { return hasHexDigest(k, ObjectPrefix) }

// IsFileBlobKey reports whether k has the form sandbox-files/sha256/<64
// lower-case hex digits>.
func IsFileBlobKey(k string) bool { return hasHexDigest(k, FileBlobPrefix) }

// IsArtifactBlobKey reports whether k has the form
// sandbox-artifacts/sha256/<64 lower-case hex digits>.
func IsArtifactBlobKey(k string) bool { return hasHexDigest(k, ArtifactBlobPrefix) }

func hasHexDigest(k, prefix string) bool {
	return strings.HasPrefix(k, prefix) && hexdigest.Valid(k[len(prefix):])
}

// decodeHexDigest is hasHexDigest that also decodes the digest into *d
// (unspecified when it reports false).
func decodeHexDigest(k, prefix string, d *[32]byte) bool {
	return strings.HasPrefix(k, prefix) && hexdigest.Decode(k[len(prefix):], d)
}

func isSafeSize(n int64) bool { return n >= 0 && n <= MaxSafeInteger }

func isFinite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// ValidateCreatedAt returns ErrInvalidEntry unless f is finite. Negative,
// zero and fractional values are valid.
func ValidateCreatedAt(f float64, what string) error {
	if !isFinite(f) {
		return NewError(CodeInvalidEntry, "%s must be a finite number", what)
	}
	return nil
}

// ValidateEntries checks a checkpoint's files in order and returns
// ErrInvalidEntry for the first invalid entry: a path longer than
// MaxPathBytes or not normalized (ValidatePath), a duplicate path, an entry beneath a file, a file that is an
// ancestor of an earlier entry, a file without a valid blob key or size, a
// directory with file fields, or an unknown kind. Together the two ancestor
// rules mean that no entry may have a file as a proper ancestor, whatever the
// order of the entries.
func ValidateEntries(files []Entry) error { return validateEntries(files, nil) }

// validateEntries is ValidateEntries that, with ds non-nil (as long as
// files), also decodes each file's blob key into ds[i] (see BlobDigests).
func validateEntries(files []Entry, ds [][32]byte) error {
	from, err := validateSortedEntries(files, ds)
	if err != nil || from == len(files) {
		return err
	}
	if err := validateEntriesFrom(files, from); err != nil || ds == nil {
		return err
	}
	for i := from; i < len(files); i++ {
		if files[i].Kind == KindFile {
			decodeHexDigest(files[i].BlobKey, FileBlobPrefix, &ds[i]) // valid: it was just checked
		}
	}
	return nil
}

// maxFileChain bounds the files validateSortedEntries keeps open at once.
const maxFileChain = 32

// validateSortedEntries checks files while their paths are in strictly
// increasing byte order, as a capture lists them, without the map that
// validateEntriesFrom keeps. It returns the first invalid entry's error, or
// how many entries it checked: all of them, or fewer when an entry is out of
// order (or the files it keeps open are too many), where the map takes over.
//
// In that order no path repeats, and every proper ancestor of an entry comes
// before it, so no file can be an ancestor of an earlier entry; what is left
// to check is that no entry is beneath an earlier file. open holds the
// earlier files that a later entry can still be beneath: f can be the parent
// directory of a path p > f only while p < f+"0" ('0' follows '/'), that is
// while p begins with f and the byte after it is at most '/'. So each open
// file begins the next, and an entry is beneath one of them exactly when the
// byte after that file's path in the entry's is '/'.
//
// With ds non-nil, each file's blob key is decoded into ds[i] as it is
// checked, in the same pass over its digits.
func validateSortedEntries(files []Entry, ds [][32]byte) (int, error) {
	var chain [maxFileChain]string
	open := chain[:0]
	for i := range files {
		e := &files[i]
		if e.decodeProblem != "" || len(e.Path) > MaxPathBytes || !ValidatePath(e.Path) || i > 0 && e.Path <= files[i-1].Path {
			return i, nil // the map reports the problem, or takes over
		}
		for len(open) > 0 && !openTo(open[len(open)-1], e.Path) {
			open = open[:len(open)-1]
		}
		for _, f := range open {
			if e.Path[len(f)] == '/' {
				return i, NewError(CodeInvalidEntry, "entry %q is beneath file %q", e.Path, f)
			}
		}
		switch e.Kind {
		case KindFile:
			var ok bool
			if ds != nil {
				ok = decodeHexDigest(e.BlobKey, FileBlobPrefix, &ds[i])
			} else {
				ok = IsFileBlobKey(e.BlobKey)
			}
			if !ok {
				return i, NewError(CodeInvalidEntry, "file %q needs a blobKey of the form %s<64 hex digits>", e.Path, FileBlobPrefix)
			}
			if !isSafeSize(e.Size) {
				return i, NewError(CodeInvalidEntry, "file %q size must be a non-negative safe integer", e.Path)
			}
			if len(open) == maxFileChain {
				return i + 1, nil
			}
			open = append(open, e.Path)
		case KindDir:
			if e.fileFields || e.BlobKey != "" || e.Size != 0 {
				return i, NewError(CodeInvalidEntry, "directory %q cannot have file fields", e.Path)
			}
		default:
			return i, NewError(CodeInvalidEntry, "entry %q kind must be file or dir", e.Path)
		}
	}
	return len(files), nil
}

// openTo reports whether an entry p > f can be beneath f or precede one
// that is: p begins with f and the byte after it is at most '/'.
func openTo(f, p string) bool {
	return len(p) > len(f) && p[len(f)] <= '/' && p[:len(f)] == f
}

// validateEntriesFrom checks files[from:], files[:from] being valid.
func validateEntriesFrom(files []Entry, from int) error {
	// paths maps every path seen so far, and every proper ancestor of one, to
	// what it is: an entry of a kind, an ancestor, or both.
	paths := make(map[string]pathRole, len(files))
	for i := range files[:from] {
		e := &files[i]
		if e.Kind == KindFile {
			paths[e.Path] |= roleFile
		} else {
			paths[e.Path] |= roleDir
		}
		for j := strings.IndexByte(e.Path, '/'); j >= 0; j = nextSlash(e.Path, j) {
			paths[e.Path[:j]] |= roleAncestor
		}
	}
	prevDir := ""
	if from > 0 {
		prevDir = dirOf(files[from-1].Path)
	}
	for i := from; i < len(files); i++ {
		e := &files[i]
		if e.decodeProblem != "" {
			return NewError(CodeInvalidEntry, "%s", e.decodeProblem)
		}
		if len(e.Path) > MaxPathBytes {
			return tooLong(CodeInvalidEntry, "entry path", len(e.Path), MaxPathBytes)
		}
		if !ValidatePath(e.Path) {
			return NewError(CodeInvalidEntry, "entry path %q must be a normalized workspace-relative path", e.Path)
		}
		role := paths[e.Path]
		if role&(roleFile|roleDir) != 0 {
			return NewError(CodeInvalidEntry, "duplicate entry path %q", e.Path)
		}
		// Entries of one directory usually come together. When this entry's
		// directory is the previous entry's, its ancestors were checked and
		// recorded with that entry, and the previous entry, a sibling, is
		// not one of them: skip the walk.
		dir := dirOf(e.Path)
		sameDir := i > 0 && dir != "" && dir == prevDir
		for j := strings.IndexByte(e.Path, '/'); j >= 0 && !sameDir; j = nextSlash(e.Path, j) {
			if paths[e.Path[:j]]&roleFile != 0 {
				return NewError(CodeInvalidEntry, "entry %q is beneath file %q", e.Path, e.Path[:j])
			}
		}
		var kind pathRole
		switch e.Kind {
		case KindFile:
			if role&roleAncestor != 0 {
				return NewError(CodeInvalidEntry, "file %q is an ancestor of another entry", e.Path)
			}
			if !IsFileBlobKey(e.BlobKey) {
				return NewError(CodeInvalidEntry, "file %q needs a blobKey of the form %s<64 hex digits>", e.Path, FileBlobPrefix)
			}
			if !isSafeSize(e.Size) {
				return NewError(CodeInvalidEntry, "file %q size must be a non-negative safe integer", e.Path)
			}
			kind = roleFile
		case KindDir:
			if e.fileFields || e.BlobKey != "" || e.Size != 0 {
				return NewError(CodeInvalidEntry, "directory %q cannot have file fields", e.Path)
			}
			kind = roleDir
		default:
			return NewError(CodeInvalidEntry, "entry %q kind must be file or dir", e.Path)
		}
		paths[e.Path] = role | kind
		for j := strings.IndexByte(e.Path, '/'); j >= 0 && !sameDir; j = nextSlash(e.Path, j) {
			paths[e.Path[:j]] |= roleAncestor
		}
		prevDir = dir
	}
	return nil
}

// dirOf returns the directory part of a path: "" for a top-level one.
func dirOf(p string) string {
	if j := strings.LastIndexByte(p, '/'); j >= 0 {
		return p[:j]
	}
	return ""
}

// pathRole says what a path is among the entries validated so far.
type pathRole uint8

const (
	roleFile     pathRole = 1 << iota // a file entry
	roleDir                           // a directory entry
	roleAncestor                      // a proper ancestor of an entry
)

func nextSlash(s string, after int) int {
	k := strings.IndexByte(s[after+1:], '/')
	if k < 0 {
		return -1
	}
	return after + 1 + k
}

// ValidateArtifacts returns ErrInvalidEntry for the first artifact with an
// invalid field: an artifactId, name or mimeType longer than MaxNameBytes, an
// artifactId that is empty or not valid UTF-8, an empty name or mimeType, a blob key not of the form sandbox-artifacts/sha256/<64 hex
// digits>, a size that is not a non-negative safe integer, or a createdAt that
// is not finite. Duplicate artifact ids and keys are allowed.
func ValidateArtifacts(artifacts []Artifact) error {
	for i := range artifacts {
		a := &artifacts[i]
		if a.decodeProblem != "" {
			return NewError(CodeInvalidEntry, "%s", a.decodeProblem)
		}
		for _, f := range []struct{ v, what string }{
			{a.ArtifactID, "artifact artifactId"}, {a.Name, "artifact name"}, {a.MimeType, "artifact mimeType"},
		} {
			if err := validateName(f.v, f.what); err != nil {
				return err
			}
		}
		if a.ArtifactID == "" || !utf8.ValidString(a.ArtifactID) || a.Name == "" || a.MimeType == "" ||
			!IsArtifactBlobKey(a.BlobKey) || !isSafeSize(a.Size) || !isFinite(a.CreatedAt) {
			return NewError(CodeInvalidEntry, "artifact %q has invalid fields", a.ArtifactID)
		}
	}
	return nil
}

// ValidateConversation returns ErrInvalidEntry when conv is non-nil and not
// valid JSON. The conversation is otherwise opaque.
func ValidateConversation(conv json.RawMessage) error {
	if conv != nil && !json.Valid(conv) {
		return NewError(CodeInvalidEntry, "checkpoint conversation must be valid JSON")
	}
	return nil
}

// ValidateCheckpointNames returns ErrInvalidEntry when c's reason, label or
// sourceRunId, in that order, is longer than MaxNameBytes. Upstream never
// validates them; the bound is this module's.
func ValidateCheckpointNames(c *Checkpoint) error {
	for _, f := range []struct{ v, what string }{
		{c.Reason, "checkpoint reason"}, {c.Label, "checkpoint label"}, {c.SourceRunID, "checkpoint sourceRunId"},
	} {
		if err := validateName(f.v, f.what); err != nil {
			return err
		}
	}
	return nil
}

// CheckAppendInput runs, in the contract's order, every check of Append that
// needs no store state: the identifiers of the checkpoint, the writer, the
// expected head and the parent (ErrInvalidID); the writer's thread
// (ErrWriterLost); then createdAt, reason, label and sourceRunId, files,
// artifacts and conversation (ErrInvalidEntry). A store calls it first, then checks the live state with
// AppendView.Check atomically with its write.
func CheckAppendInput(in *AppendInput) error { return checkAppendInput(in, nil) }

// checkAppendInput is CheckAppendInput, decoding the blob keys into d when
// it is not nil (see CheckAppendInputDigests).
func checkAppendInput(in *AppendInput, d *BlobDigests) error {
	c := &in.Checkpoint
	if err := ValidateID(c.ThreadID, "checkpoint thread id"); err != nil {
		return err
	}
	if err := ValidateID(in.Writer.ThreadID, "writer thread id"); err != nil {
		return err
	}
	if err := ValidateID(c.ID, "checkpoint id"); err != nil {
		return err
	}
	if in.ExpectedHeadID != "" {
		if err := ValidateID(in.ExpectedHeadID, "expected head id"); err != nil {
			return err
		}
	}
	if c.ParentCheckpointID != "" {
		if err := ValidateID(c.ParentCheckpointID, "parent checkpoint id"); err != nil {
			return err
		}
	}
	if in.Writer.ThreadID != c.ThreadID {
		return NewError(CodeWriterLost, "writer thread %q does not match checkpoint thread %q", in.Writer.ThreadID, c.ThreadID)
	}
	return checkContent(c, d)
}

// BlobDigests are the SHA-256 digests of a checkpoint's blob keys, as
// CheckAppendInputDigests decodes them while it checks the keys: Files[i] is
// the digest of Checkpoint.Files[i]'s key (unspecified for a directory),
// Artifacts[i] that of Checkpoint.Artifacts[i]'s.
type BlobDigests struct {
	Files, Artifacts [][32]byte
}

// CheckAppendInputDigests is CheckAppendInput that also decodes, into d, the
// digest of each blob key it checks, in the same pass over the key: a store
// that keeps digests (reference records, say) need not parse the keys again.
// It reuses the arrays of d. d's contents are unspecified when it returns an
// error.
func CheckAppendInputDigests(in *AppendInput, d *BlobDigests) error {
	c := &in.Checkpoint
	d.Files = resize(d.Files, len(c.Files))
	d.Artifacts = resize(d.Artifacts, len(c.Artifacts))
	return checkAppendInput(in, d)
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// CheckCheckpointContent checks createdAt, the lengths of reason, label and
// sourceRunId (at most MaxNameBytes each), files, artifacts and
// conversation, in that order, and returns ErrInvalidEntry for the first
// that is invalid.
func CheckCheckpointContent(c *Checkpoint) error { return checkContent(c, nil) }

func checkContent(c *Checkpoint, d *BlobDigests) error {
	if err := ValidateCreatedAt(c.CreatedAt, "checkpoint createdAt"); err != nil {
		return err
	}
	if err := ValidateCheckpointNames(c); err != nil {
		return err
	}
	var files [][32]byte
	if d != nil {
		files = d.Files
	}
	if err := validateEntries(c.Files, files); err != nil {
		return err
	}
	if err := ValidateArtifacts(c.Artifacts); err != nil {
		return err
	}
	if d != nil {
		for i := range c.Artifacts {
			decodeHexDigest(c.Artifacts[i].BlobKey, ArtifactBlobPrefix, &d.Artifacts[i]) // valid: it was just checked
		}
	}
	return ValidateConversation(c.Conversation)
}

// WriterRecord is a thread's current writer lease as a store keeps it.
type WriterRecord struct {
	OwnerToken string
	Fence      int64
	ExpiresAt  float64
}

// Current reports whether rec is the lease w names and is unexpired at now. A
// lease is expired when ExpiresAt <= now. A nil rec is no lease.
func (rec *WriterRecord) Current(w Writer, now float64) bool {
	return rec != nil && rec.OwnerToken == w.OwnerToken && rec.Fence == w.Fence && rec.ExpiresAt > now
}

// Holds reports whether rec is still the record of the lease w names: not
// released, not taken over, not ended by the store. It reads no clock. A
// lease's claims protect their keys exactly while Holds is true, because
// every fenced write of w compares the same record: once Holds is false, w
// can never write again, whatever any clock says.
func (rec *WriterRecord) Holds(w Writer) bool {
	return rec != nil && rec.OwnerToken == w.OwnerToken && rec.Fence == w.Fence
}

// Live reports whether rec is an unexpired lease at now, whoever holds it.
func (rec *WriterRecord) Live(now float64) bool {
	return rec != nil && rec.ExpiresAt > now
}

func writerLost(threadID string) error {
	return NewError(CodeWriterLost, "writer lease for thread %q is no longer current", threadID)
}

// AppendView is the live state an Append depends on, observed atomically.
type AppendView struct {
	Writer  *WriterRecord // the thread's writer lease; nil when there is none
	IDTaken bool          // the checkpoint id exists, in any thread
	Head    string        // the thread's head; "" when the thread is empty
}

// Check runs the live checks of Append in the contract's order: the writer
// lease (ErrWriterLost), the id (ErrDuplicateID), the head (ErrStaleHead) and
// the parent (ErrParentMismatch). in must have passed CheckAppendInput.
func (v AppendView) Check(in *AppendInput, now float64) error {
	c := &in.Checkpoint
	if !v.Writer.Current(in.Writer, now) {
		return writerLost(c.ThreadID)
	}
	if v.IDTaken {
		return NewError(CodeDuplicateID, "checkpoint %q already exists", c.ID)
	}
	if v.Head != in.ExpectedHeadID {
		return NewError(CodeStaleHead, "expected head %q, but thread %q is at %q", in.ExpectedHeadID, c.ThreadID, v.Head)
	}
	if c.ParentCheckpointID != in.ExpectedHeadID {
		return NewError(CodeParentMismatch, "checkpoint %q parent %q does not match expected head %q", c.ID, c.ParentCheckpointID, in.ExpectedHeadID)
	}
	return nil
}

// CheckDeleteHeadInput runs the checks of DeleteHead that need no store state,
// in order: the thread id, the checkpoint id and the writer's thread id
// (ErrInvalidID), then the writer's thread (ErrWriterLost).
func CheckDeleteHeadInput(in *DeleteHeadInput) error {
	if err := ValidateID(in.ThreadID, "thread id"); err != nil {
		return err
	}
	if err := ValidateID(in.CheckpointID, "checkpoint id"); err != nil {
		return err
	}
	if err := ValidateID(in.Writer.ThreadID, "writer thread id"); err != nil {
		return err
	}
	if in.Writer.ThreadID != in.ThreadID {
		return NewError(CodeWriterLost, "writer thread %q does not match thread %q", in.Writer.ThreadID, in.ThreadID)
	}
	return nil
}

// DeleteHeadView is the live state a DeleteHead depends on.
type DeleteHeadView struct {
	Writer     *WriterRecord
	Head       string // the thread's head; "" when the thread is empty
	HeadExists bool   // the head's checkpoint record exists
}

// Check runs the live checks of DeleteHead in order: the writer lease
// (ErrWriterLost), then that the checkpoint is the head and exists
// (ErrNotHead).
func (v DeleteHeadView) Check(in *DeleteHeadInput, now float64) error {
	if !v.Writer.Current(in.Writer, now) {
		return writerLost(in.ThreadID)
	}
	if v.Head != in.CheckpointID {
		return NewError(CodeNotHead, "checkpoint %q is not the head of thread %q", in.CheckpointID, in.ThreadID)
	}
	if !v.HeadExists {
		return NewError(CodeNotHead, "checkpoint %q does not exist", in.CheckpointID)
	}
	return nil
}

// CheckDeleteThreadInput runs the checks of DeleteThread that need no store
// state, in order: the thread id and the writer's thread id (ErrInvalidID),
// then the writer's thread (ErrWriterLost).
func CheckDeleteThreadInput(in *DeleteThreadInput) error {
	if err := ValidateID(in.ThreadID, "thread id"); err != nil {
		return err
	}
	if err := ValidateID(in.Writer.ThreadID, "writer thread id"); err != nil {
		return err
	}
	if in.Writer.ThreadID != in.ThreadID {
		return NewError(CodeWriterLost, "writer thread %q does not match thread %q", in.Writer.ThreadID, in.ThreadID)
	}
	return nil
}

// CheckDeleteCheckpointsInput runs the checks of DeleteCheckpoints that need no
// store state, in order: the thread id and the writer's thread id
// (ErrInvalidID), the writer's thread (ErrWriterLost), then keep, which must
// be a safe integer of 1 or more (ErrInvalidEntry).
func CheckDeleteCheckpointsInput(in *DeleteCheckpointsInput) error {
	if err := CheckDeleteThreadInput(&DeleteThreadInput{ThreadID: in.ThreadID, Writer: in.Writer}); err != nil {
		return err
	}
	k := in.Keep
	if !isFinite(k) || k != math.Trunc(k) || k < 1 || k > MaxSafeInteger {
		return NewError(CodeInvalidEntry, "keep must be a safe integer of 1 or more, not %v", k)
	}
	return nil
}

// CheckForkInput runs the checks of ForkFromCheckpoint that need no store
// state, in order: the four identifiers and the writer's thread id
// (ErrInvalidID), createdAt (ErrInvalidEntry), then equal source and
// destination threads (ErrForkSourceThreadMismatch).
func CheckForkInput(in *ForkInput) error {
	for _, f := range []struct{ v, what string }{
		{in.SourceThreadID, "source thread id"},
		{in.SourceCheckpointID, "source checkpoint id"},
		{in.DestinationThreadID, "destination thread id"},
		{in.DestinationCheckpointID, "destination checkpoint id"},
		{in.Writer.ThreadID, "writer thread id"},
	} {
		if err := ValidateID(f.v, f.what); err != nil {
			return err
		}
	}
	if err := ValidateCreatedAt(in.CreatedAt, "fork checkpoint createdAt"); err != nil {
		return err
	}
	if in.SourceThreadID == in.DestinationThreadID {
		return NewError(CodeForkSourceThreadMismatch, "cannot fork thread %q into itself", in.SourceThreadID)
	}
	return nil
}

// ForkView is the live state a fork depends on.
type ForkView struct {
	// SourceThread is the thread of the source checkpoint; "" when the source
	// checkpoint does not exist.
	SourceThread string
	// Writer is the destination thread's writer lease; nil when there is none.
	Writer *WriterRecord
	// DestinationUsed reports persisted state of the destination: a transcript
	// (even an empty one), a checkpoint or a head, or a checkpoint anywhere with
	// the destination checkpoint id.
	DestinationUsed bool
}

// Check runs the live checks of a fork in order: the source exists
// (ErrForkSourceNotFound) and belongs to the source thread
// (ErrForkSourceThreadMismatch), the writer names the destination thread and is
// current (ErrWriterLost), and the destination is empty
// (ErrForkDestinationNotEmpty).
func (v ForkView) Check(in *ForkInput, now float64) error {
	if v.SourceThread == "" {
		return NewError(CodeForkSourceNotFound, "source checkpoint %q does not exist", in.SourceCheckpointID)
	}
	if v.SourceThread != in.SourceThreadID {
		return NewError(CodeForkSourceThreadMismatch, "source checkpoint %q belongs to thread %q, not %q", in.SourceCheckpointID, v.SourceThread, in.SourceThreadID)
	}
	if in.Writer.ThreadID != in.DestinationThreadID {
		return NewError(CodeWriterLost, "writer thread %q does not match destination thread %q", in.Writer.ThreadID, in.DestinationThreadID)
	}
	if !v.Writer.Current(in.Writer, now) {
		return writerLost(in.DestinationThreadID)
	}
	if v.DestinationUsed {
		return NewError(CodeForkDestinationNotEmpty, "destination thread %q or checkpoint id %q is already in use", in.DestinationThreadID, in.DestinationCheckpointID)
	}
	return nil
}

// ForkRoot returns the checkpoint a fork of source creates: a root on the
// destination thread with reason "fork-root", the input's id and createdAt,
// deep copies of the source's files, conversation and artifacts, and no label
// or sourceRunId.
func ForkRoot(source *Checkpoint, in *ForkInput) Checkpoint {
	c := source.Clone()
	return Checkpoint{
		ID:           in.DestinationCheckpointID,
		ThreadID:     in.DestinationThreadID,
		CreatedAt:    in.CreatedAt,
		Reason:       ReasonForkRoot,
		Files:        c.Files,
		Conversation: c.Conversation,
		Artifacts:    c.Artifacts,
	}
}
