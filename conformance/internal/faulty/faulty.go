// Package faulty is an in-memory checkpoint store with switchable faults. The
// tests of package conformance run it once with no fault, where it must pass
// every suite, and once per fault, where some case must fail: that is how
// they show that the suites catch each kind of mistake.
//
// With no fault the store behaves as cairn.MemoryForkStore. It is written
// from the contract independently of that store, with one switch per fault,
// and uses only the exported helpers of package cairn.
package faulty

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/cairnstore/cairn"
)

// Faults selects the mistakes the store makes. The zero value makes none.
type Faults struct {
	// Append.
	SkipDuplicateCheck        bool // an existing id is overwritten
	HeadBeforeWriter          bool // the head is compared before the lease
	ParentBeforeDuplicate     bool // the parent is compared before the id
	ContentBeforeWriterThread bool // invalid content wins over a writer of another thread
	LeaseBeforeContent        bool // a stale lease wins over invalid content
	AppendCheckThenAct        bool // the checks and the write are two critical sections

	// Validation.
	RejectDriveRelative bool // "C:foo" is rejected like "C:/foo"
	FileAncestorOneWay  bool // [a/b, a(file)] is accepted
	AcceptUpperHex      bool // blob digests may use A-F
	AcceptUnsafeSize    bool // sizes up to MaxInt64 pass
	SkipConversation    bool // conversations are not checked for valid JSON

	// Bounds (cairn.MaxIDBytes and its siblings).
	AcceptLongIDs            bool // Append accepts identifiers past cairn.MaxIDBytes
	IDBoundAfterWriterThread bool // Append checks the identifiers' bound after the writer's thread
	AcceptLongNames          bool // names and paths past their bounds are accepted

	// Copies.
	ShareFiles            bool // Get and List return the stored Files slice
	KeepInputConversation bool // Append keeps the caller's conversation bytes
	CompactConversation   bool // the conversation is stored compacted

	// Reads.
	ListUTF16Order bool // List breaks createdAt ties by UTF-16 code units

	// Reference counts.
	CountEveryOccurrence bool // a key used twice in one checkpoint counts twice
	DeleteHeadKeepsRefs  bool // DeleteHead does not decrement
	KeepZeroRefs         bool // keys at zero stay listed

	// Leases.
	LiveAtExpiry        bool // a lease is live while expiresAt >= now
	FenceResetOnRelease bool // Release forgets the thread's last fence
	StaleReleaseDeletes bool // Release deletes whatever lease the thread has
	RenewRevivesExpired bool // Renew of an expired, untaken lease succeeds
	ConflictBumpsFence  bool // a refused AcquireWriter bumps the holder's fence
	AcquireWaits        bool // AcquireWriter waits for the holder instead of failing
	AcquireHangs        bool // AcquireWriter blocks for good on a held thread, whatever its context
	RenewByThread       bool // Renew extends the thread's lease, whoever holds it

	// DeleteHead and pruning.
	DanglingHeadAfterPrune bool // DeleteHead moves the head to a pruned parent
	PruneByCreatedAt       bool // Keep keeps the newest by createdAt
	PruneNewestFirst       bool // removed ids are returned newest first
	PruneAcceptsZero       bool // Keep 0 removes everything
	PruneWithoutLease      bool // DeleteCheckpoints ignores lease currency
	// DeleteThread.
	DeleteThreadKeepsRefs    bool // DeleteThread leaves the reference counts
	DeleteThreadWithoutLease bool // DeleteThread ignores lease currency
	DeleteThreadKeepsHead    bool // DeleteThread leaves the head pointing at a removed checkpoint
	DeleteThreadNewestFirst  bool // DeleteThread returns the removed ids newest first

	// Fork.
	ForkCopiesLabel            bool // the fork root keeps label and sourceRunId
	ForkDuplicateIDCode        bool // a taken destination id gives DUPLICATE_ID
	ForkIgnoresEmptyTranscript bool // a saved [] transcript does not count
	ForkSourceBeforeSameThread bool // source existence is checked before equal threads
	ForkReturnsStored          bool // the returned fork root is the stored value
	ForkCheckThenAct           bool // the checks and the write are two critical sections

	// Optional capabilities.
	ListThreadsWithLeases bool // threads with only a lease are listed
	WalkSkipsLast         bool // the walk misses the last key

	// Online sweep (BlobClaimer and BlobCollector).
	ClaimIgnoredByDelete    bool // BeginBlobDeletes ignores live claims, and a claim leaves a candidate's record
	ClaimWithoutLease       bool // ClaimBlobs accepts a lease that is not current
	ClaimsOutliveLease      bool // claims stay live after Release, expiry and takeover, until the lease's next Append
	ClaimsJudgedByClock     bool // a claim counts as dead once its lease's stored expiry passed by the caller's clock
	ClaimDeleting           bool // ClaimBlobs claims a key in GCDeleting instead of reporting it busy
	ClaimLeaseBeforeKeys    bool // ClaimBlobs checks the lease before the keys
	ClaimBeforeKeyCheck     bool // ClaimBlobs claims the keys before an invalid one
	AppendKeepsClaims       bool // a successful Append leaves the lease's claims
	ReleaseEndsThreadClaims bool // Release ends the claims of every lease of the thread
	MarkClaimed             bool // MarkBlobs marks keys with a live claim
	MarkReplaces            bool // MarkBlobs replaces existing records
	BeginIgnoresVersion     bool // BeginBlobDeletes moves a candidate whatever its version
	EndLosesSince           bool // EndBlobDeletes(deleted=false) restarts Since at the store's now
	DropDeleting            bool // DropBlobRecords removes records in GCDeleting too
	VersionReused           bool // a key's versions restart when its record goes, so a new record repeats an old one's
	WaitReturnsAtOnce       bool // WaitBlobs does not wait
	ReadGCAfterWalk         bool // ReadBlobGC reads claims and records after it walked the references
}

// Store is the faulty store. It implements cairn.Store, cairn.Pruner,
// cairn.ThreadDeleter,
// cairn.Forker, cairn.ThreadLister, cairn.BlobReferenceWalker,
// cairn.BlobClaimer and cairn.BlobCollector.
type Store struct {
	*state
	clock func() float64 // this handle's clock
}

// state is what every handle on one store shares.
type state struct {
	f    Faults
	opts cairn.Options

	mu          sync.Mutex
	checkpoints map[string]*cairn.Checkpoint
	heads       map[string]string
	writers     map[string]*cairn.WriterRecord
	fences      map[string]int64
	refs        map[string]int
	transcripts map[string]json.RawMessage
	leased      map[string]bool // threads that ever had a lease
	gc          gcState         // claims and GC records of the online sweep
}

// New returns an empty store with the given faults.
func New(opts cairn.Options, f Faults) (*Store, error) {
	o, err := opts.Validate()
	if err != nil {
		return nil, err
	}
	return &Store{clock: o.Now, state: &state{
		f: f, opts: o,
		checkpoints: map[string]*cairn.Checkpoint{},
		heads:       map[string]string{},
		writers:     map[string]*cairn.WriterRecord{},
		fences:      map[string]int64{},
		refs:        map[string]int{},
		transcripts: map[string]json.RawMessage{},
		leased:      map[string]bool{},
		gc:          newGCState(),
	}}, nil
}

// WithClock returns another handle on the same store whose clock is now, as
// cairn.MemoryStore.WithClock does.
func (s *Store) WithClock(now func() float64) *Store { return &Store{state: s.state, clock: now} }

func (s *Store) now() float64 { return s.clock() }

func (s *Store) live(rec *cairn.WriterRecord, now float64) bool {
	if rec == nil {
		return false
	}
	if s.f.LiveAtExpiry {
		return rec.ExpiresAt >= now
	}
	return rec.ExpiresAt > now
}

func (s *Store) current(rec *cairn.WriterRecord, w cairn.Writer, now float64) bool {
	return rec != nil && rec.OwnerToken == w.OwnerToken && rec.Fence == w.Fence && s.live(rec, now)
}

func lost(thread string) error {
	return cairn.NewError(cairn.CodeWriterLost, "writer lease for thread %q is not current", thread)
}

// read returns a copy of c for a reader.
func (s *Store) read(c *cairn.Checkpoint) cairn.Checkpoint {
	out := c.Clone()
	if s.f.ShareFiles {
		out.Files = c.Files
	}
	return out
}

// Get implements cairn.Store.
func (s *Store) Get(ctx context.Context, id string) (*cairn.Checkpoint, error) {
	if err := cairn.ValidateID(id, "checkpoint id"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.checkpoints[id]
	if !ok {
		return nil, nil
	}
	out := s.read(c)
	return &out, nil
}

// List implements cairn.Store.
func (s *Store) List(ctx context.Context, thread string) ([]cairn.Checkpoint, error) {
	if err := cairn.ValidateID(thread, "thread id"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []cairn.Checkpoint{}
	for _, c := range s.checkpoints {
		if c.ThreadID == thread {
			out = append(out, s.read(c))
		}
	}
	slices.SortFunc(out, func(a, b cairn.Checkpoint) int {
		if a.CreatedAt != b.CreatedAt {
			if a.CreatedAt < b.CreatedAt {
				return -1
			}
			return 1
		}
		if s.f.ListUTF16Order {
			return slices.Compare(utf16.Encode([]rune(a.ID)), utf16.Encode([]rune(b.ID)))
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// GetHead implements cairn.Store.
func (s *Store) GetHead(ctx context.Context, thread string) (string, error) {
	if err := cairn.ValidateID(thread, "thread id"); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heads[thread], nil
}

// appendIDs returns the identifiers of an append that are checked, in the
// contract's order: "" stands for an absent expected head or parent.
func appendIDs(in *cairn.AppendInput) []string {
	c := &in.Checkpoint
	return []string{c.ThreadID, in.Writer.ThreadID, c.ID, in.ExpectedHeadID, c.ParentCheckpointID}
}

func (s *Store) checkIDs(in *cairn.AppendInput) error {
	for i, id := range appendIDs(in) {
		if id == "" && i >= 3 {
			continue // null
		}
		if s.f.AcceptLongIDs || s.f.IDBoundAfterWriterThread {
			if id == "" || !utf8.ValidString(id) {
				return cairn.NewError(cairn.CodeInvalidID, "identifier %q", id)
			}
			continue
		}
		if err := cairn.ValidateID(id, "identifier"); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) checkWriterThread(in *cairn.AppendInput) error {
	if in.Writer.ThreadID != in.Checkpoint.ThreadID {
		return cairn.NewError(cairn.CodeWriterLost, "writer thread %q is not %q", in.Writer.ThreadID, in.Checkpoint.ThreadID)
	}
	if s.f.IDBoundAfterWriterThread {
		for _, id := range appendIDs(in) {
			if len(id) > cairn.MaxIDBytes {
				return cairn.NewError(cairn.CodeInvalidID, "identifier of %d bytes", len(id))
			}
		}
	}
	return nil
}

// longName reports whether a name of n bytes is past its bound max, unless
// the store accepts long names.
func (s *Store) longName(n, max int) bool { return !s.f.AcceptLongNames && n > max }

func (s *Store) checkContent(c *cairn.Checkpoint) error {
	if err := cairn.ValidateCreatedAt(c.CreatedAt, "createdAt"); err != nil {
		return err
	}
	for _, n := range []string{c.Reason, c.Label, c.SourceRunID} {
		if s.longName(len(n), cairn.MaxNameBytes) {
			return invalidEntry("a name of %d bytes", len(n))
		}
	}
	if err := s.validateEntries(c.Files); err != nil {
		return err
	}
	if err := s.validateArtifacts(c.Artifacts); err != nil {
		return err
	}
	if !s.f.SkipConversation {
		return cairn.ValidateConversation(c.Conversation)
	}
	return nil
}

func invalidEntry(format string, args ...any) error {
	return cairn.NewError(cairn.CodeInvalidEntry, format, args...)
}

func (s *Store) validPath(p string) bool {
	if s.f.RejectDriveRelative && len(p) >= 2 && p[1] == ':' && (p[0]|0x20 >= 'a' && p[0]|0x20 <= 'z') {
		return false
	}
	return cairn.ValidatePath(p)
}

func (s *Store) blobKey(k, prefix string) bool {
	if s.f.AcceptUpperHex {
		k = strings.ToLower(k)
		prefix = strings.ToLower(prefix)
	}
	if prefix == cairn.FileBlobPrefix {
		return cairn.IsFileBlobKey(k)
	}
	return cairn.IsArtifactBlobKey(k)
}

func (s *Store) size(n int64) bool {
	return n >= 0 && (s.f.AcceptUnsafeSize || n <= cairn.MaxSafeInteger)
}

func (s *Store) validateEntries(files []cairn.Entry) error {
	kinds := map[string]cairn.EntryKind{}
	for _, e := range files {
		if !s.validPath(e.Path) || s.longName(len(e.Path), cairn.MaxPathBytes) {
			return invalidEntry("path %q", e.Path)
		}
		if _, dup := kinds[e.Path]; dup {
			return invalidEntry("duplicate path %q", e.Path)
		}
		segs := strings.Split(e.Path, "/")
		for i := 1; i < len(segs); i++ {
			if kinds[strings.Join(segs[:i], "/")] == cairn.KindFile {
				return invalidEntry("%q is beneath a file", e.Path)
			}
		}
		if e.Kind == cairn.KindFile && !s.f.FileAncestorOneWay {
			for p := range kinds {
				if strings.HasPrefix(p, e.Path+"/") {
					return invalidEntry("file %q is above %q", e.Path, p)
				}
			}
		}
		switch e.Kind {
		case cairn.KindFile:
			if !s.blobKey(e.BlobKey, cairn.FileBlobPrefix) || !s.size(e.Size) {
				return invalidEntry("file %q", e.Path)
			}
		case cairn.KindDir:
			if e.BlobKey != "" || e.Size != 0 {
				return invalidEntry("dir %q has file fields", e.Path)
			}
		default:
			return invalidEntry("kind %q", e.Kind)
		}
		kinds[e.Path] = e.Kind
	}
	return nil
}

func (s *Store) validateArtifacts(arts []cairn.Artifact) error {
	for _, a := range arts {
		long := s.longName(len(a.ArtifactID), cairn.MaxNameBytes) || s.longName(len(a.Name), cairn.MaxNameBytes) ||
			s.longName(len(a.MimeType), cairn.MaxNameBytes)
		if long || a.ArtifactID == "" || !utf8.ValidString(a.ArtifactID) || a.Name == "" || a.MimeType == "" ||
			!s.blobKey(a.BlobKey, cairn.ArtifactBlobPrefix) || !s.size(a.Size) ||
			math.IsNaN(a.CreatedAt) || math.IsInf(a.CreatedAt, 0) {
			return invalidEntry("artifact %q", a.ArtifactID)
		}
	}
	return nil
}

// liveChecks runs the checks of Append that read the store. s.mu is held.
func (s *Store) liveChecks(in *cairn.AppendInput, now float64) error {
	c := &in.Checkpoint
	lease := func() error {
		if !s.current(s.writers[c.ThreadID], in.Writer, now) {
			return lost(c.ThreadID)
		}
		return nil
	}
	dup := func() error {
		if _, taken := s.checkpoints[c.ID]; taken && !s.f.SkipDuplicateCheck {
			return cairn.NewError(cairn.CodeDuplicateID, "checkpoint %q exists", c.ID)
		}
		return nil
	}
	head := func() error {
		if s.heads[c.ThreadID] != in.ExpectedHeadID {
			return cairn.NewError(cairn.CodeStaleHead, "head is %q", s.heads[c.ThreadID])
		}
		return nil
	}
	parent := func() error {
		if c.ParentCheckpointID != in.ExpectedHeadID {
			return cairn.NewError(cairn.CodeParentMismatch, "parent %q", c.ParentCheckpointID)
		}
		return nil
	}
	order := []func() error{lease, dup, head, parent}
	switch {
	case s.f.HeadBeforeWriter:
		order = []func() error{head, lease, dup, parent}
	case s.f.ParentBeforeDuplicate:
		order = []func() error{lease, parent, dup, head}
	case s.f.LeaseBeforeContent:
		order = []func() error{dup, head, parent} // the lease was checked earlier
	}
	for _, check := range order {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// Append implements cairn.Store.
func (s *Store) Append(ctx context.Context, in cairn.AppendInput) (cairn.AppendResult, error) {
	conv := in.Checkpoint.Conversation
	in.Checkpoint = in.Checkpoint.Clone()
	if s.f.KeepInputConversation {
		in.Checkpoint.Conversation = conv
	}
	c := &in.Checkpoint
	if err := s.checkIDs(&in); err != nil {
		return cairn.AppendResult{}, err
	}
	switch {
	case s.f.ContentBeforeWriterThread:
		if err := s.checkContent(c); err != nil {
			return cairn.AppendResult{}, err
		}
		if err := s.checkWriterThread(&in); err != nil {
			return cairn.AppendResult{}, err
		}
	case s.f.LeaseBeforeContent:
		if err := s.checkWriterThread(&in); err != nil {
			return cairn.AppendResult{}, err
		}
		s.mu.Lock()
		ok := s.current(s.writers[c.ThreadID], in.Writer, s.now())
		s.mu.Unlock()
		if !ok {
			return cairn.AppendResult{}, lost(c.ThreadID)
		}
		if err := s.checkContent(c); err != nil {
			return cairn.AppendResult{}, err
		}
	default:
		if err := s.checkWriterThread(&in); err != nil {
			return cairn.AppendResult{}, err
		}
		if err := s.checkContent(c); err != nil {
			return cairn.AppendResult{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return cairn.AppendResult{}, err
	}
	if s.f.CompactConversation && c.Conversation != nil {
		var b bytes.Buffer
		_ = json.Compact(&b, c.Conversation)
		c.Conversation = b.Bytes()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.liveChecks(&in, s.now()); err != nil {
		return cairn.AppendResult{}, err
	}
	if s.f.AppendCheckThenAct {
		s.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		s.mu.Lock()
	}
	if old, taken := s.checkpoints[c.ID]; taken {
		s.uncount(old)
	}
	s.insert(c)
	if !s.f.AppendKeepsClaims {
		s.endClaims(in.Writer)
	}
	return cairn.AppendResult{HeadID: c.ID}, nil
}

func (s *Store) keys(c *cairn.Checkpoint) []string {
	if !s.f.CountEveryOccurrence {
		return c.BlobKeys()
	}
	var ks []string
	for _, e := range c.Files {
		if e.Kind == cairn.KindFile {
			ks = append(ks, e.BlobKey)
		}
	}
	for _, a := range c.Artifacts {
		ks = append(ks, a.BlobKey)
	}
	return ks
}

// insert stores c as its thread's head. s.mu is held.
func (s *Store) insert(c *cairn.Checkpoint) {
	s.checkpoints[c.ID] = c
	s.heads[c.ThreadID] = c.ID
	for _, k := range s.keys(c) {
		s.refs[k]++
	}
}

func (s *Store) uncount(c *cairn.Checkpoint) {
	for _, k := range s.keys(c) {
		s.refs[k]--
		if s.refs[k] <= 0 && !s.f.KeepZeroRefs {
			delete(s.refs, k)
		}
	}
}

// remove deletes c. s.mu is held.
func (s *Store) remove(c *cairn.Checkpoint) {
	delete(s.checkpoints, c.ID)
	if !s.f.DeleteHeadKeepsRefs {
		s.uncount(c)
	}
}

// DeleteHead implements cairn.Store.
func (s *Store) DeleteHead(ctx context.Context, in cairn.DeleteHeadInput) error {
	if err := cairn.CheckDeleteHeadInput(&in); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.current(s.writers[in.ThreadID], in.Writer, s.now()) {
		return lost(in.ThreadID)
	}
	head := s.heads[in.ThreadID]
	c, ok := s.checkpoints[head]
	if head != in.CheckpointID || !ok {
		return cairn.NewError(cairn.CodeNotHead, "%q is not the head", in.CheckpointID)
	}
	s.remove(c)
	if _, ok := s.checkpoints[c.ParentCheckpointID]; ok || (s.f.DanglingHeadAfterPrune && c.ParentCheckpointID != "") {
		s.heads[in.ThreadID] = c.ParentCheckpointID
	} else {
		delete(s.heads, in.ThreadID)
	}
	return nil
}

// AcquireWriter implements cairn.Store.
func (s *Store) AcquireWriter(ctx context.Context, thread string) (*cairn.Lease, error) {
	if err := cairn.ValidateID(thread, "thread id"); err != nil {
		return nil, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s.mu.Lock()
		now := s.now()
		rec := s.writers[thread]
		if s.live(rec, now) {
			if s.f.ConflictBumpsFence {
				s.fences[thread]++
				rec.Fence = s.fences[thread]
			}
			s.mu.Unlock()
			if s.f.AcquireHangs {
				select {}
			}
			if s.f.AcquireWaits {
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Millisecond):
				}
				continue
			}
			return nil, cairn.NewError(cairn.CodeWriterConflict, "thread %q has a writer", thread)
		}
		s.fences[thread]++
		rec = &cairn.WriterRecord{OwnerToken: rand.Text(), Fence: s.fences[thread], ExpiresAt: now + cairn.Millis(s.opts.LeaseDuration)}
		s.writers[thread] = rec
		s.leased[thread] = true
		w := cairn.Writer{ThreadID: thread, OwnerToken: rec.OwnerToken, Fence: rec.Fence}
		s.mu.Unlock()
		return cairn.NewLease(w, rec.ExpiresAt, s.opts.RenewAfter, &lease{s: s, w: w}), nil
	}
}

type lease struct {
	s *Store
	w cairn.Writer
}

func (l *lease) Renew(ctx context.Context) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	rec := s.writers[l.w.ThreadID]
	ok := s.current(rec, l.w, now)
	if s.f.RenewRevivesExpired && rec != nil && rec.OwnerToken == l.w.OwnerToken && rec.Fence == l.w.Fence {
		ok = true
	}
	if s.f.RenewByThread && rec != nil {
		ok = true
	}
	if !ok {
		return 0, lost(l.w.ThreadID)
	}
	rec.ExpiresAt = now + cairn.Millis(s.opts.LeaseDuration)
	return rec.ExpiresAt, nil
}

func (l *lease) Release(context.Context) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.writers[l.w.ThreadID]
	if rec != nil && (s.f.StaleReleaseDeletes || rec.OwnerToken == l.w.OwnerToken && rec.Fence == l.w.Fence) {
		delete(s.writers, l.w.ThreadID)
		if s.f.FenceResetOnRelease {
			delete(s.fences, l.w.ThreadID)
		}
	}
	s.releaseClaims(l.w)
}

// ListBlobReferences implements cairn.Store.
func (s *Store) ListBlobReferences(ctx context.Context) ([]cairn.BlobReference, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.references(), nil
}

// references lists the reference counts. s.mu is held.
func (s *Store) references() []cairn.BlobReference {
	out := []cairn.BlobReference{}
	for _, k := range slices.Sorted(maps.Keys(s.refs)) {
		out = append(out, cairn.BlobReference{Key: k, References: s.refs[k]})
	}
	return out
}

// WalkBlobReferences implements cairn.BlobReferenceWalker.
func (s *Store) WalkBlobReferences(ctx context.Context, fn func(cairn.BlobReference) error) error {
	refs, err := s.ListBlobReferences(ctx)
	if err != nil {
		return err
	}
	if s.f.WalkSkipsLast && len(refs) > 0 {
		refs = refs[:len(refs)-1]
	}
	for _, r := range refs {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// ListThreads implements cairn.ThreadLister.
func (s *Store) ListThreads(ctx context.Context, after string, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 2
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	set := map[string]bool{}
	for _, c := range s.checkpoints {
		set[c.ThreadID] = true
	}
	if s.f.ListThreadsWithLeases {
		maps.Copy(set, s.leased)
	}
	var out []string
	for _, t := range slices.Sorted(maps.Keys(set)) {
		if t > after && len(out) < limit {
			out = append(out, t)
		}
	}
	return out, nil
}

// DeleteThread implements cairn.ThreadDeleter.
func (s *Store) DeleteThread(ctx context.Context, in cairn.DeleteThreadInput) ([]string, error) {
	if err := cairn.CheckDeleteThreadInput(&in); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.f.DeleteThreadWithoutLease && !s.current(s.writers[in.ThreadID], in.Writer, s.now()) {
		return nil, lost(in.ThreadID)
	}
	var list []*cairn.Checkpoint
	for _, c := range s.checkpoints {
		if c.ThreadID == in.ThreadID {
			list = append(list, c)
		}
	}
	slices.SortFunc(list, func(a, b *cairn.Checkpoint) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	removed := []string{}
	for _, c := range list {
		delete(s.checkpoints, c.ID)
		if !s.f.DeleteThreadKeepsRefs {
			s.uncount(c)
		}
		removed = append(removed, c.ID)
	}
	if s.f.DeleteThreadNewestFirst {
		slices.Reverse(removed)
	}
	if !s.f.DeleteThreadKeepsHead {
		delete(s.heads, in.ThreadID)
	}
	return removed, nil
}

// DeleteCheckpoints implements cairn.Pruner.
func (s *Store) DeleteCheckpoints(ctx context.Context, in cairn.DeleteCheckpointsInput) ([]string, error) {
	check := in
	if s.f.PruneAcceptsZero && check.Keep == 0 {
		check.Keep = 1
	}
	if err := cairn.CheckDeleteCheckpointsInput(&check); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.f.PruneWithoutLease && !s.current(s.writers[in.ThreadID], in.Writer, s.now()) {
		return nil, lost(in.ThreadID)
	}
	var chain []*cairn.Checkpoint // head first
	for id := s.heads[in.ThreadID]; id != ""; {
		c, ok := s.checkpoints[id]
		if !ok {
			break
		}
		chain = append(chain, c)
		id = c.ParentCheckpointID
	}
	if s.f.PruneByCreatedAt {
		slices.SortStableFunc(chain, func(a, b *cairn.Checkpoint) int {
			switch {
			case a.CreatedAt > b.CreatedAt:
				return -1
			case a.CreatedAt < b.CreatedAt:
				return 1
			}
			return 0
		})
	}
	removed := []string{}
	for i := len(chain) - 1; i >= int(in.Keep); i-- {
		s.remove(chain[i])
		removed = append(removed, chain[i].ID)
	}
	if s.f.PruneNewestFirst {
		slices.Reverse(removed)
	}
	if _, ok := s.checkpoints[s.heads[in.ThreadID]]; !ok {
		delete(s.heads, in.ThreadID)
	}
	return removed, nil
}

// ForkFromCheckpoint implements cairn.Forker.
func (s *Store) ForkFromCheckpoint(ctx context.Context, in cairn.ForkInput) (*cairn.Checkpoint, error) {
	if err := cairn.CheckForkInput(&in); err != nil {
		// With ForkSourceBeforeSameThread, equal threads are left to
		// forkChecks, after the source lookup.
		if !s.f.ForkSourceBeforeSameThread || !errors.Is(err, cairn.ErrForkSourceThreadMismatch) {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	src, err := s.forkChecks(&in)
	if err != nil {
		return nil, err
	}
	if s.f.ForkCheckThenAct {
		s.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		s.mu.Lock()
	}
	root := cairn.ForkRoot(src, &in)
	if s.f.ForkCopiesLabel {
		root.Label, root.SourceRunID = src.Label, src.SourceRunID
	}
	stored := root.Clone()
	if s.f.ForkReturnsStored {
		stored = root
	}
	if root.Conversation == nil {
		s.transcripts[in.DestinationThreadID] = json.RawMessage("[]")
	} else {
		s.transcripts[in.DestinationThreadID] = bytes.Clone(root.Conversation)
	}
	if s.f.ForkReturnsStored {
		s.insert(&root)
		return &root, nil
	}
	s.insert(&stored)
	return &root, nil
}

// forkChecks runs the live checks of a fork. s.mu is held.
func (s *Store) forkChecks(in *cairn.ForkInput) (*cairn.Checkpoint, error) {
	src := s.checkpoints[in.SourceCheckpointID]
	if src == nil {
		return nil, cairn.NewError(cairn.CodeForkSourceNotFound, "no source %q", in.SourceCheckpointID)
	}
	if src.ThreadID != in.SourceThreadID || in.SourceThreadID == in.DestinationThreadID {
		return nil, cairn.NewError(cairn.CodeForkSourceThreadMismatch, "source thread mismatch")
	}
	if in.Writer.ThreadID != in.DestinationThreadID || !s.current(s.writers[in.DestinationThreadID], in.Writer, s.now()) {
		return nil, lost(in.DestinationThreadID)
	}
	if _, taken := s.checkpoints[in.DestinationCheckpointID]; taken {
		if s.f.ForkDuplicateIDCode {
			return nil, cairn.NewError(cairn.CodeDuplicateID, "checkpoint %q exists", in.DestinationCheckpointID)
		}
		return nil, cairn.NewError(cairn.CodeForkDestinationNotEmpty, "checkpoint %q exists", in.DestinationCheckpointID)
	}
	tr, hasTranscript := s.transcripts[in.DestinationThreadID]
	if s.f.ForkIgnoresEmptyTranscript && hasTranscript && string(tr) == "[]" {
		hasTranscript = false
	}
	used := hasTranscript || s.heads[in.DestinationThreadID] != ""
	for _, c := range s.checkpoints {
		used = used || c.ThreadID == in.DestinationThreadID
	}
	if used {
		return nil, cairn.NewError(cairn.CodeForkDestinationNotEmpty, "destination %q is in use", in.DestinationThreadID)
	}
	return src, nil
}

// Transcripts implements cairn.Forker.
func (s *Store) Transcripts() cairn.TranscriptStore { return transcripts{s} }

type transcripts struct{ s *Store }

func (t transcripts) LoadThread(ctx context.Context, thread string) (json.RawMessage, error) {
	if err := cairn.ValidateID(thread, "thread id"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if m, ok := t.s.transcripts[thread]; ok {
		return bytes.Clone(m), nil
	}
	return json.RawMessage("[]"), nil
}

func (t transcripts) SaveThread(ctx context.Context, thread string, msgs json.RawMessage) error {
	if err := cairn.ValidateID(thread, "thread id"); err != nil {
		return err
	}
	if !json.Valid(msgs) {
		return cairn.NewError(cairn.CodeInvalidEntry, "transcript is not JSON")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.s.transcripts[thread] = bytes.Clone(msgs)
	return nil
}
