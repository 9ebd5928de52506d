package cairn

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemoryStore is the reference implementation of Store, Pruner, ThreadLister,
// BlobReferenceWalker and the online sweep protocol (BlobClaimer and
// BlobCollector), kept in memory. It is safe for concurrent use and
// returns deep copies. It has no fork capability; MemoryForkStore adds one.
type MemoryStore struct {
	s   *memState
	now func() float64 // this handle's clock
}

// MemoryForkStore is a MemoryStore that can also fork, with an in-memory
// transcript store in the same state.
type MemoryForkStore struct {
	MemoryStore
}

var (
	_ Store               = (*MemoryStore)(nil)
	_ Pruner              = (*MemoryStore)(nil)
	_ ThreadDeleter       = (*MemoryStore)(nil)
	_ ThreadLister        = (*MemoryStore)(nil)
	_ BlobReferenceWalker = (*MemoryStore)(nil)
	_ Forker              = (*MemoryForkStore)(nil)
)

type memState struct {
	opts Options

	mu          sync.Mutex
	checkpoints map[string]*Checkpoint         // by id, over all threads
	threads     map[string]map[string]struct{} // thread id -> checkpoint ids
	heads       map[string]string
	writers     map[string]*WriterRecord
	// ends holds, per writer record, when the store's own timer ends it if
	// nobody renews it: the memory store's counterpart of the etcd lease a
	// record is attached to. It runs on the monotonic clock of the process,
	// never on a handle's clock, as etcd's leader keeps its own timer.
	ends        map[string]time.Time
	recordTTL   time.Duration
	fences      map[string]int64 // the last fence issued per thread; never cleared
	refs        map[string]int
	transcripts map[string]json.RawMessage
	gc          memGC // claims and GC records of the online sweep
}

// NewMemoryStore returns an empty MemoryStore. It returns ErrLeaseDuration or
// ErrRenewAfter when opts are invalid.
func NewMemoryStore(opts Options) (*MemoryStore, error) {
	o, err := opts.Validate()
	if err != nil {
		return nil, err
	}
	return &MemoryStore{now: o.Now, s: &memState{
		opts:        o,
		checkpoints: map[string]*Checkpoint{},
		threads:     map[string]map[string]struct{}{},
		heads:       map[string]string{},
		writers:     map[string]*WriterRecord{},
		ends:        map[string]time.Time{},
		recordTTL:   RecordTTL(o.LeaseDuration),
		fences:      map[string]int64{},
		refs:        map[string]int{},
		transcripts: map[string]json.RawMessage{},
	}}, nil
}

// NewMemoryForkStore returns an empty MemoryForkStore. It returns
// ErrLeaseDuration or ErrRenewAfter when opts are invalid.
func NewMemoryForkStore(opts Options) (*MemoryForkStore, error) {
	m, err := NewMemoryStore(opts)
	if err != nil {
		return nil, err
	}
	return &MemoryForkStore{MemoryStore: *m}, nil
}

// RecordTTL is how long a writer record outlives its holder's last acquire
// or renew when nobody renews, releases or takes it over: the lease duration
// rounded up to whole seconds, and at least 2s, as etcd grants the lease a
// record is attached to with its default settings.
func RecordTTL(leaseDuration time.Duration) time.Duration {
	return max(2*time.Second, (leaseDuration + time.Second - 1).Truncate(time.Second))
}

// WithClock returns another handle on the same store whose clock is now, as
// a second process in another region, with a clock of its own, would open
// the same data. Every decision of the contract that reads a clock (lease
// expiry and takeover, the guard of a write) reads the clock of the handle
// the call goes through; no decision about what a sweep may delete reads
// any of them.
func (m *MemoryStore) WithClock(now func() float64) *MemoryStore {
	if now == nil {
		now = SystemClock
	}
	return &MemoryStore{s: m.s, now: now}
}

// WithClock is MemoryStore.WithClock for a fork store.
func (m *MemoryForkStore) WithClock(now func() float64) *MemoryForkStore {
	return &MemoryForkStore{MemoryStore: *m.MemoryStore.WithClock(now)}
}

// writer returns the writer record of thread, or nil. A record whose timer
// ran out (nobody renewed it for recordTTL) ends here, with its claims, as
// etcd ends a record and the keys attached to its lease. s.mu is held.
func (s *memState) writer(thread string) *WriterRecord {
	rec := s.writers[thread]
	if rec != nil && !time.Now().Before(s.ends[thread]) {
		delete(s.writers, thread)
		delete(s.ends, thread)
		s.gc.dropLease(Writer{ThreadID: thread, OwnerToken: rec.OwnerToken, Fence: rec.Fence})
		return nil
	}
	return rec
}

// Get implements Store.
func (m *MemoryStore) Get(ctx context.Context, id string) (*Checkpoint, error) {
	if err := ValidateID(id, "checkpoint id"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.checkpoints[id]
	if !ok {
		return nil, nil
	}
	out := c.Clone()
	return &out, nil
}

// List implements Store.
func (m *MemoryStore) List(ctx context.Context, threadID string) ([]Checkpoint, error) {
	if err := ValidateID(threadID, "thread id"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Checkpoint, 0, len(s.threads[threadID]))
	for id := range s.threads[threadID] {
		out = append(out, s.checkpoints[id].Clone())
	}
	SortCheckpoints(out)
	return out, nil
}

// SortCheckpoints sorts checkpoints in the order of List: by CreatedAt, then by
// the bytes of the id.
func SortCheckpoints(cs []Checkpoint) {
	slices.SortFunc(cs, func(a, b Checkpoint) int {
		switch {
		case a.CreatedAt < b.CreatedAt:
			return -1
		case a.CreatedAt > b.CreatedAt:
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// GetHead implements Store.
func (m *MemoryStore) GetHead(ctx context.Context, threadID string) (string, error) {
	if err := ValidateID(threadID, "thread id"); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heads[threadID], nil
}

// Append implements Store.
func (m *MemoryStore) Append(ctx context.Context, in AppendInput) (AppendResult, error) {
	in.Checkpoint = in.Checkpoint.Clone()
	if err := CheckAppendInput(&in); err != nil {
		return AppendResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return AppendResult{}, err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &in.Checkpoint
	_, taken := s.checkpoints[c.ID]
	view := AppendView{Writer: s.writer(c.ThreadID), IDTaken: taken, Head: s.heads[c.ThreadID]}
	if err := view.Check(&in, m.now()); err != nil {
		if errors.Is(err, ErrWriterLost) {
			s.endClaims(in.Writer)
		}
		return AppendResult{}, err
	}
	s.insert(c)
	s.gc.dropLease(in.Writer) // the claims became references, or were not used
	return AppendResult{HeadID: c.ID}, nil
}

// insert stores c as the head of its thread and counts its blob keys. The
// caller holds s.mu and has checked everything.
func (s *memState) insert(c *Checkpoint) {
	s.checkpoints[c.ID] = c
	if s.threads[c.ThreadID] == nil {
		s.threads[c.ThreadID] = map[string]struct{}{}
	}
	s.threads[c.ThreadID][c.ID] = struct{}{}
	s.heads[c.ThreadID] = c.ID
	for _, k := range c.BlobKeys() {
		s.refs[k]++
	}
}

// remove deletes c and uncounts its blob keys. The caller holds s.mu.
func (s *memState) remove(c *Checkpoint) {
	delete(s.checkpoints, c.ID)
	delete(s.threads[c.ThreadID], c.ID)
	if len(s.threads[c.ThreadID]) == 0 {
		delete(s.threads, c.ThreadID)
	}
	for _, k := range c.BlobKeys() {
		if s.refs[k] <= 1 {
			delete(s.refs, k)
		} else {
			s.refs[k]--
		}
	}
}

// DeleteHead implements Store.
func (m *MemoryStore) DeleteHead(ctx context.Context, in DeleteHeadInput) error {
	if err := CheckDeleteHeadInput(&in); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	head := s.heads[in.ThreadID]
	c, exists := s.checkpoints[head]
	view := DeleteHeadView{Writer: s.writer(in.ThreadID), Head: head, HeadExists: exists}
	if err := view.Check(&in, m.now()); err != nil {
		return err
	}
	s.remove(c)
	// The parent may have been pruned; then the thread is left without a head.
	if p, ok := s.checkpoints[c.ParentCheckpointID]; ok && p.ThreadID == in.ThreadID {
		s.heads[in.ThreadID] = c.ParentCheckpointID
	} else {
		delete(s.heads, in.ThreadID)
	}
	return nil
}

// AcquireWriter implements Store.
func (m *MemoryStore) AcquireWriter(ctx context.Context, threadID string) (*Lease, error) {
	if err := ValidateID(threadID, "thread id"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := m.now()
	if s.writer(threadID).Live(now) {
		return nil, NewError(CodeWriterConflict, "thread %q already has an active writer", threadID)
	}
	s.fences[threadID]++
	rec := &WriterRecord{OwnerToken: rand.Text(), Fence: s.fences[threadID], ExpiresAt: now + Millis(s.opts.LeaseDuration)}
	s.writers[threadID] = rec
	s.ends[threadID] = time.Now().Add(s.recordTTL)
	w := Writer{ThreadID: threadID, OwnerToken: rec.OwnerToken, Fence: rec.Fence}
	return NewLease(w, rec.ExpiresAt, s.opts.RenewAfter, &memLease{s: s, w: w, now: m.now}), nil
}

type memLease struct {
	s   *memState
	w   Writer
	now func() float64 // the clock of the handle that acquired it
}

func (l *memLease) Renew(ctx context.Context) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := l.now()
	rec := s.writer(l.w.ThreadID)
	if !rec.Current(l.w, now) {
		s.endClaims(l.w)
		return 0, writerLost(l.w.ThreadID)
	}
	rec.ExpiresAt = now + Millis(s.opts.LeaseDuration)
	s.ends[l.w.ThreadID] = time.Now().Add(s.recordTTL)
	return rec.ExpiresAt, nil
}

func (l *memLease) Release(context.Context) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endRecord(l.w)
}

// endRecord removes w's record if it still holds it, and ends w's claims.
// s.mu is held.
func (s *memState) endRecord(w Writer) {
	if s.writer(w.ThreadID).Holds(w) {
		delete(s.writers, w.ThreadID)
		delete(s.ends, w.ThreadID)
	}
	s.gc.dropLease(w)
}

// endClaims ends w's claims after a write of w found it lost, unless w still
// holds its record (expired by a clock, not replaced): a clock that reads
// earlier may let w write again, so its claims stay until the record ends.
// s.mu is held.
func (s *memState) endClaims(w Writer) {
	if !s.writer(w.ThreadID).Holds(w) {
		s.gc.dropLease(w)
	}
}

// ListBlobReferences implements Store.
func (m *MemoryStore) ListBlobReferences(ctx context.Context) ([]BlobReference, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return m.s.references(), nil
}

func (s *memState) references() []BlobReference {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]BlobReference, 0, len(s.refs))
	for _, k := range slices.Sorted(maps.Keys(s.refs)) {
		out = append(out, BlobReference{Key: k, References: s.refs[k]})
	}
	return out
}

// WalkBlobReferences implements BlobReferenceWalker over a snapshot taken when
// the walk starts.
func (m *MemoryStore) WalkBlobReferences(ctx context.Context, fn func(BlobReference) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, r := range m.s.references() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// DeleteCheckpoints implements Pruner.
func (m *MemoryStore) DeleteCheckpoints(ctx context.Context, in DeleteCheckpointsInput) ([]string, error) {
	if err := CheckDeleteCheckpointsInput(&in); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.writer(in.ThreadID).Current(in.Writer, m.now()) {
		return nil, writerLost(in.ThreadID)
	}
	var chain []*Checkpoint // head first
	for id := s.heads[in.ThreadID]; id != ""; {
		c, ok := s.checkpoints[id]
		if !ok {
			break
		}
		chain = append(chain, c)
		id = c.ParentCheckpointID
	}
	removed := []string{}
	for i := len(chain) - 1; i >= int(in.Keep); i-- {
		s.remove(chain[i])
		removed = append(removed, chain[i].ID)
	}
	return removed, nil
}

// DeleteThread implements ThreadDeleter.
func (m *MemoryStore) DeleteThread(ctx context.Context, in DeleteThreadInput) ([]string, error) {
	if err := CheckDeleteThreadInput(&in); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.writer(in.ThreadID).Current(in.Writer, m.now()) {
		return nil, writerLost(in.ThreadID)
	}
	list := make([]Checkpoint, 0, len(s.threads[in.ThreadID]))
	for id := range s.threads[in.ThreadID] {
		list = append(list, *s.checkpoints[id])
	}
	SortCheckpoints(list)
	removed := make([]string, 0, len(list))
	for i := range list {
		s.remove(s.checkpoints[list[i].ID])
		removed = append(removed, list[i].ID)
	}
	delete(s.heads, in.ThreadID)
	return removed, nil
}

// ListThreads implements ThreadLister.
func (m *MemoryStore) ListThreads(ctx context.Context, after string, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 1000
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, t := range slices.Sorted(maps.Keys(s.heads)) {
		if t > after && len(out) < limit {
			out = append(out, t)
		}
	}
	return out, nil
}

// ForkFromCheckpoint implements Forker.
func (m *MemoryForkStore) ForkFromCheckpoint(ctx context.Context, in ForkInput) (*Checkpoint, error) {
	if err := CheckForkInput(&in); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	src := s.checkpoints[in.SourceCheckpointID]
	view := ForkView{Writer: s.writer(in.DestinationThreadID), DestinationUsed: s.destinationUsed(&in)}
	if src != nil {
		view.SourceThread = src.ThreadID
	}
	if err := view.Check(&in, m.now()); err != nil {
		return nil, err
	}
	root := ForkRoot(src, &in)
	s.transcripts[in.DestinationThreadID] = cloneTranscript(root.Conversation)
	stored := root.Clone()
	s.insert(&stored)
	return &root, nil
}

// destinationUsed reports A12's "destination not empty". The caller holds s.mu.
func (s *memState) destinationUsed(in *ForkInput) bool {
	_, transcript := s.transcripts[in.DestinationThreadID]
	_, taken := s.checkpoints[in.DestinationCheckpointID]
	return transcript || taken || len(s.threads[in.DestinationThreadID]) > 0 || s.heads[in.DestinationThreadID] != ""
}

// cloneTranscript copies a conversation for use as a transcript; null becomes
// the empty array, since a transcript is always a list.
func cloneTranscript(conv json.RawMessage) json.RawMessage {
	if conv == nil {
		return json.RawMessage("[]")
	}
	return append(json.RawMessage(nil), conv...)
}

// Transcripts implements Forker.
func (m *MemoryForkStore) Transcripts() TranscriptStore { return memTranscripts{m.s} }

type memTranscripts struct{ s *memState }

func (t memTranscripts) LoadThread(ctx context.Context, threadID string) (json.RawMessage, error) {
	if err := ValidateID(threadID, "thread id"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if msgs, ok := t.s.transcripts[threadID]; ok {
		return append(json.RawMessage(nil), msgs...), nil
	}
	return json.RawMessage("[]"), nil
}

func (t memTranscripts) SaveThread(ctx context.Context, threadID string, messages json.RawMessage) error {
	if err := ValidateID(threadID, "thread id"); err != nil {
		return err
	}
	if !json.Valid(messages) {
		return NewError(CodeInvalidEntry, "transcript of thread %q must be valid JSON", threadID)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.s.transcripts[threadID] = append(json.RawMessage(nil), messages...)
	return nil
}

// BucketBinding implements Bound: the store's Options.Binding, when its
// Cluster is set.
func (m *MemoryStore) BucketBinding(ctx context.Context) (Binding, bool, error) {
	if err := ctx.Err(); err != nil {
		return Binding{}, false, err
	}
	b := m.s.opts.Binding
	return b, b.Cluster != "", nil
}
