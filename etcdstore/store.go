package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/fence"
	"github.com/cairnstore/cairn/keys"
)

// Limits that keep every request within etcd's default server limits
// (--max-txn-ops=128, --max-request-bytes=1.5 MiB).
const (
	// MaxTxnOps is the most operations (or comparisons) any transaction of
	// the store carries. It equals etcd's default and is never exceeded.
	MaxTxnOps = 128
	// ChunkSize is the size of one staged chunk of a large checkpoint or
	// transcript; each chunk is one request well under 1.5 MiB.
	ChunkSize = 1 << 20
	// MaxCheckpointBytes is the largest encoded checkpoint the store accepts.
	// A larger one is rejected with cairn.ErrInvalidEntry before anything is
	// written.
	MaxCheckpointBytes = 48 << 20
	// inlineBudget is the largest publish transaction the store sends in one
	// request; a checkpoint whose publish would be larger is staged.
	inlineBudget = 900 << 10
	// bodyInline is the largest body kept in the checkpoint record itself;
	// a larger one is kept in chunks of its own.
	bodyInline = 64 << 10
	// refPartBytes bounds one reference record: a shard's digests are split
	// into parts of at most this size.
	refPartBytes = 256 << 10
	// MaxPrefixBytes bounds the prefix of a store (New): every key starts
	// with it, and the bounds of package cairn (cairn.MaxIDBytes and its
	// siblings) keep every request within etcd's limits for prefixes up to
	// this long (docs/limits.md).
	MaxPrefixBytes = 256
	// defaultStagingTTL is the default of Options.StagingTTL.
	defaultStagingTTL = time.Minute
)

// Options configure a Store.
type Options struct {
	cairn.Options
	// Logger receives the store's debug and warning messages; nil discards
	// them.
	Logger *slog.Logger
	// StagingTTL is the TTL of the etcd lease that a large write's staged
	// chunks are attached to until it publishes them; a writer that dies
	// mid-write leaves them for at most this long (plus etcd's lease
	// granularity). Zero selects one minute.
	StagingTTL time.Duration
	// Objects, when set, enables the capacity layout (version 2 of the
	// checkpoint record): a checkpoint whose body is larger than InlineLimit
	// keeps its files, conversation and artifacts as content-addressed
	// objects under sandbox-meta/sha256/ in this bucket, shared between
	// checkpoints, threads and forks, and etcd keeps only its small records.
	// The online sweep (package sweep) keeps the objects of live checkpoints
	// and deletes the others. When nil, the store writes version 1 only; a
	// store that meets version-2 records without Objects cannot read them and
	// says so.
	Objects ObjectStore
	// InlineLimit is the largest encoded body, in bytes, that stays inline in
	// version 1 when Objects is set. Zero selects 64 KiB.
	InlineLimit int
	// LocalReads serves Get from the member the client is connected to,
	// without a round trip to the leader, when that member's state shows the
	// checkpoint and its thread's read permit; otherwise Get reads
	// linearizably as before. Give the client only the endpoints of the
	// region's own members. Threads this store writes get read permits, and
	// from then on every deletion of their checkpoints (DeleteHead,
	// DeleteCheckpoints, DeleteThread, by any store) waits until every
	// member has applied the permit's withdrawal, so a deletion stalls while
	// a member is unreachable (docs/design.md, "Local reads of what never
	// changes"). Heads, lists and writes are unchanged.
	LocalReads bool
	// Unpacked makes appends write the capacity layout as stores before
	// packs did (root version 2: every leaf, conversation chunk and reference
	// chunk an object of its own) instead of the packed form (root version
	// 3: one pack and a root a checkpoint). Readers of every version read
	// both; set it while stores that cannot read version 3 still read the
	// bucket (a rolling upgrade), or to compare the two.
	Unpacked bool
}

// Store is a cairn.Store on etcd. It is safe for concurrent use. Create it
// with New and Close it to end the writer leases it holds.
type Store struct {
	client *clientv3.Client
	// raw sends the publish transactions, built as etcd's requests.
	raw    *rawKV
	layout keys.Layout
	// prefix is New's prefix; binding is the store's cairn.Binding, once
	// etcd has named its cluster.
	prefix  string
	binding *bindingOnce
	opts    cairn.Options
	log     *slog.Logger
	fences  *fence.Manager
	// stagingTTL is the TTL, in seconds, of staging leases.
	stagingTTL int64
	// guards are comparisons every write also requires (see Guarded).
	guards []clientv3.Cmp

	cache *threadCache
	// claims are the blob claims this store put, by writer lease.
	claims *claimSet

	// objects is Options.Objects; inlineLimit is Options.InlineLimit.
	objects     ObjectStore
	inlineLimit int
	// packs is !Options.Unpacked.
	packs    bool
	objCache *objCache
	heads    *headObjects

	// localReads is Options.LocalReads; reads counts how Gets were served.
	localReads bool
	reads      *readCounts
}

// threadCache holds the last known thread records, by thread, so that the
// common append needs no read before its transaction.
type threadCache struct {
	mu      sync.Mutex
	threads map[string]threadState
}

var (
	_ cairn.Store               = (*Store)(nil)
	_ cairn.Pruner              = (*Store)(nil)
	_ cairn.Forker              = (*Store)(nil)
	_ cairn.ThreadLister        = (*Store)(nil)
	_ cairn.BlobReferenceWalker = (*Store)(nil)
)

// New returns a store that keeps its keys under prefix on client. The caller
// keeps owning client and closes it after the store. New does no I/O. It
// returns cairn.ErrLeaseDuration or cairn.ErrRenewAfter for invalid lease
// options, and an error when client is nil or prefix is longer than
// MaxPrefixBytes.
//
// Two stores with different prefixes never see each other's data, whatever the
// prefixes; the literal prefix starts every key, so an etcd role limited to
// the prefix is enough for the store.
func New(client *clientv3.Client, prefix string, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("etcdstore.New: client is required")
	}
	if len(prefix) > MaxPrefixBytes {
		return nil, fmt.Errorf("etcdstore.New: the prefix is %d bytes long, more than MaxPrefixBytes (%d)", len(prefix), MaxPrefixBytes)
	}
	o, err := opts.Options.Validate()
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	inline := opts.InlineLimit
	if inline <= 0 {
		inline = defaultInlineLimit
	}
	ttl := opts.StagingTTL
	if ttl <= 0 {
		ttl = defaultStagingTTL
	}
	return &Store{
		client:      client,
		raw:         newRawKV(client),
		stagingTTL:  int64(max(1, (ttl+time.Second-1)/time.Second)),
		layout:      keys.NewLayout(prefix),
		prefix:      prefix,
		binding:     &bindingOnce{},
		opts:        o,
		log:         log,
		fences:      fence.NewManager(client, fence.Options{TTL: o.LeaseDuration, Logger: log}),
		cache:       &threadCache{threads: map[string]threadState{}},
		claims:      newClaimSet(),
		objects:     opts.Objects,
		inlineLimit: inline,
		packs:       !opts.Unpacked,
		objCache:    newObjCache(objectCacheBytes),
		heads:       &headObjects{m: map[string]headSet{}},
		localReads:  opts.LocalReads,
		reads:       &readCounts{},
	}, nil
}

// Close revokes the etcd leases of the writer records that the store's
// AcquireWriter created and that are still held, which ends those writer
// leases and their claims: their holders get cairn.ErrWriterLost. It does
// not close the client.
func (s *Store) Close() error { return s.fences.Close() }

// Layout returns the key layout of the store.
func (s *Store) Layout() keys.Layout { return s.layout }

func (s *Store) now() float64 { return s.opts.Now() }

// threadRec is the value of a thread record. The stored checkpoints of a
// thread are always the chain from the head down to the oldest checkpoint not
// pruned; Floor hides pruned checkpoints whose records are not yet deleted.
type threadRec struct {
	Head          string  `json:"head,omitempty"`
	HeadSeq       uint64  `json:"headSeq,omitempty"`
	HeadCreatedAt float64 `json:"headCreatedAt,omitempty"`
	// LastSeq is the sequence number of the newest checkpoint the thread ever
	// had; the next append takes LastSeq+1. It never decreases.
	LastSeq uint64 `json:"lastSeq"`
	// Floor: checkpoints with a lower sequence number were pruned.
	Floor uint64 `json:"floor,omitempty"`
	// Op is the nonce of the write that produced this record, so that a
	// retry after an unknown outcome can tell whether that write landed.
	Op string `json:"op,omitempty"`
	// LocalReads is set by the first write of a store with
	// Options.LocalReads and never cleared: from then on the thread has a
	// read permit (keys.Layout.ReadPermit) whenever no deletion is under
	// way, and every deletion of its checkpoints, by any store, withdraws
	// the permit and waits for every member before it commits (see
	// withdrawPermit).
	LocalReads bool `json:"localReads,omitempty"`
}

// threadState is a thread record with its mod revision; Rev 0 means the
// record does not exist.
type threadState struct {
	rec threadRec
	rev int64
}

func (s *Store) cached(thread string) (threadState, bool) {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.threads[thread]
	return st, ok
}

// maxCachedThreads bounds the thread cache; it is cleared when full.
const maxCachedThreads = 1 << 14

func (s *Store) remember(thread string, st threadState) {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.threads) >= maxCachedThreads {
		clear(c.threads)
	}
	c.threads[thread] = st
}

func (s *Store) forget(thread string) {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.threads, thread)
}

// ErrGuardFailed is returned by a write of a Guarded store when its guard does
// not hold. The write changed nothing.
var ErrGuardFailed = errors.New("etcdstore: the write's guard does not hold")

// Guarded returns a view of the store whose every write (Append, DeleteHead,
// DeleteCheckpoints, ForkFromCheckpoint, ClaimBlobs and the writes of the
// cairn.BlobCollector methods) also requires guard, in the same
// transaction: for example (*concurrency.Mutex).IsOwner(), so that a process
// that has lost its lock cannot write. When the guard does not hold, the write
// changes nothing and returns an error matching ErrGuardFailed (checked before
// the contract's errors of the write's live state). Reads, AcquireWriter,
// the leases' Renew and Release, and the deletes of a lease's own claims that
// follow its append or release, are not guarded. The view shares the store's
// leases, claims and cache; Close the original store, not the view.
func (s *Store) Guarded(guard clientv3.Cmp) *Store {
	g := *s
	g.guards = append(slices.Clone(s.guards), guard)
	return &g
}

// withGuards appends the store's guards to a write's comparisons.
func (s *Store) withGuards(cmps []clientv3.Cmp) []clientv3.Cmp {
	return append(cmps, s.guards...)
}

// guardErr returns ErrGuardFailed when the store's guards do not hold now,
// after one of its writes failed its comparisons.
func (s *Store) guardErr(ctx context.Context) error {
	if len(s.guards) == 0 {
		return nil
	}
	resp, err := s.client.Txn(ctx).If(s.guards...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return ErrGuardFailed
	}
	return nil
}

// ckptMeta is the value of a checkpoint record: a uvarint length, that many
// bytes of JSON, then, for a checkpoint whose body is inline, the body.
type ckptMeta struct {
	Seq             uint64  `json:"seq"`
	ParentID        string  `json:"parent,omitempty"`
	ParentSeq       uint64  `json:"parentSeq,omitempty"`
	ParentCreatedAt float64 `json:"parentCreatedAt,omitempty"`
	Nonce           string  `json:"nonce"`
	// Shards is the set of reference shards the checkpoint has records in.
	Shards uint32 `json:"shards,omitempty"`
	// Chunks is the number of chunks holding the body; 0 means the body is
	// inline, in Body.
	Chunks int `json:"chunks,omitempty"`
	Size   int `json:"size"`
	// Layout is 2 for the capacity layout, whose Body holds only the
	// checkpoint's header fields and whose files, conversation and artifacts
	// are the objects of Root (hex SHA-256); absent for version 1.
	Layout int    `json:"layout,omitempty"`
	Root   string `json:"root,omitempty"`
	// Packs, for a packed root, are the hex digests of the packs the root
	// names, concatenated: a cold read fetches them whole in parallel with
	// the root. A hint only: every member is verified against the root.
	Packs string `json:"packs,omitempty"`

	Body []byte `json:"-"`
}

// decodeMeta decodes a checkpoint record's value. Body aliases v.
func decodeMeta(v []byte) (ckptMeta, error) {
	var m ckptMeta
	n, k := binary.Uvarint(v)
	if k <= 0 || n > uint64(len(v)-k) {
		return m, errCodec
	}
	if err := json.Unmarshal(v[k:k+int(n)], &m); err != nil {
		return m, err
	}
	if rest := v[k+int(n):]; len(rest) > 0 {
		m.Body = rest
	}
	return m, nil
}

// idxRec is the value of an id index record: where a checkpoint id lives.
type idxRec struct {
	Thread    string  `json:"thread"`
	CreatedAt float64 `json:"createdAt"`
	Seq       uint64  `json:"seq"`
	Nonce     string  `json:"nonce"`
}

func newNonce() keys.Nonce {
	var n keys.Nonce
	_, _ = rand.Read(n[:])
	return n
}

func parseNonce(s string) (keys.Nonce, error) {
	var n keys.Nonce
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != keys.NonceLen {
		return n, fmt.Errorf("etcdstore: bad nonce %q", s)
	}
	copy(n[:], b)
	return n, nil
}

// corrupt reports stored data the store cannot decode.
func corrupt(what string, key []byte, err error) error {
	return fmt.Errorf("etcdstore: corrupt %s at key %q: %w", what, key, err)
}

// writerKeys returns the fence keys of a thread's writer record.
func (s *Store) writerKeys(thread string) fence.Keys {
	return fence.Keys{Owner: string(s.layout.WriterOwner(thread)), Expiry: string(s.layout.WriterExpiry(thread))}
}

// ambiguous reports whether err leaves the outcome of a write unknown: etcd
// may have applied it. Errors that etcd returns before applying anything are
// not ambiguous.
func ambiguous(err error) bool {
	if err == nil {
		return false
	}
	for _, definite := range []error{
		rpctypes.ErrTooManyOps, rpctypes.ErrDuplicateKey, rpctypes.ErrRequestTooLarge,
		rpctypes.ErrKeyNotFound, rpctypes.ErrLeaseNotFound, rpctypes.ErrCompacted, rpctypes.ErrFutureRev,
		rpctypes.ErrPermissionDenied, rpctypes.ErrAuthFailed, rpctypes.ErrInvalidAuthToken,
		rpctypes.ErrUserEmpty, rpctypes.ErrNoLeader, rpctypes.ErrNotCapable, rpctypes.ErrAuthOldRevision,
		rpctypes.ErrNoSpace, // see noSpace: the writes that can tell settle it by a read
	} {
		if errors.Is(err, definite) {
			return false
		}
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.ResourceExhausted,
			codes.FailedPrecondition, codes.OutOfRange, codes.NotFound, codes.AlreadyExists, codes.Unimplemented:
			return false
		}
	}
	return true
}

// noSpace reports whether err is etcd's refusal for lack of space: its
// NOSPACE alarm is raised (every request that puts a key is refused before it
// is applied), or the request would cross the space quota.
//
// The second case is not always a refusal: etcd applies a transaction whose
// put crosses the quota and answers NOSPACE all the same (it then raises the
// alarm). So a write that can tell whether it landed (the thread writes, by
// the nonce of the thread record; AcquireWriter, by the owner token) reads
// once after such an answer (reads are served under the alarm) and reports
// success when it finds its own write, ErrStoreFull otherwise; nothing else
// can apply the write later, since etcd answered after applying or refusing
// it. The other writes (staged chunks and claims under an etcd lease, the
// sweeper's records) leave nothing visible when they land this way: what
// they put is ended with its lease, or settled by the next sweep, as after
// a crash.
func noSpace(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace) {
		return true
	}
	if st, ok := status.FromError(err); ok {
		return st.Code() == codes.ResourceExhausted && st.Message() == rpctypes.ErrNoSpace.Error()
	}
	return false
}

// storeFull returns the coded refusal of op for etcd's NOSPACE answer err.
func storeFull(op string, err error) error {
	return &cairn.Error{Code: cairn.CodeStoreFull, Err: err, Message: op +
		" refused: etcd is out of space (NOSPACE alarm); nothing was written. Free space: docs/operations.md"}
}

// definite turns a NOSPACE answer that reached the end of a write into
// ErrStoreFull. Coded errors (the contract's, ErrStoreFull) and unknown
// outcomes (an earlier attempt's answer was lost) are left as they are.
// Every write method defers it on its named error.
func definite(op string, err *error) {
	if *err == nil || cairn.CodeOf(*err) != "" || !noSpace(*err) {
		return
	}
	var uo *UnknownOutcomeError
	if errors.As(*err, &uo) {
		return
	}
	*err = storeFull(op, *err)
}

// withTimeout bounds best-effort cleanup that must not depend on the caller's
// context having time left.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}
