package etcdstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/keys"
)

// A Mirror is the sweeper's local copy of what a store's reference records
// keep alive (docs/design.md, "The incremental sweep"). It holds every
// reference record under the store's prefix as of one etcd revision, and a
// count for every bucket key they keep: a blob key of a version-1 record
// directly, and for the capacity layout a root (or transcript) node, whose
// objects and reference chunks it keeps, and a reference-chunk node, whose
// blob keys it keeps. A node's children are read from the bucket when its
// count goes from 0 to 1 and kept in the file; they are immutable (the object
// is named by its digest), so they are never read again while kept. Counts
// are exact, as the walk counts them: a child's count is the sum of its
// parents' counts, so that a dry run's released references cancel them as
// they cancel the walk's.
//
// Sync brings the mirror to the current revision by following the reference
// records with an etcd watch from the mirror's revision; a compacted revision
// costs one paginated range read at a fixed revision, diffed against the
// mirror; an empty mirror (a new or lost file) is built by that same read.
// Each Sync persists what changed and the revision in steps (persist, finish)
// that a crash leaves resumable, each step a bounded bbolt transaction.
//
// A Mirror is safe for use by one goroutine at a time.
type Mirror struct {
	s    *Store
	db   *bolt.DB
	opts *bolt.Options // the file's, to open it again (remap, compact)
	path string
	// lock is held on path+".lock" while the mirror is open, so that the
	// file can be closed and opened again (remap, compact) with no other
	// process taking it in between.
	lock *fileutil.LockedFile
	// temp: the file is a temporary one of the mirror's own (OpenMirror with
	// no path), removed by Close.
	temp bool

	rev     int64
	cluster uint64
	// The file holds the state: every reference record by etcd key (a lease
	// byte, 1 when the record was staged under a lease so that it references
	// nothing, and the value), the children of every live node (see nodeID),
	// and the count of every counted key and node, keys and children packed
	// (mirrorkey.go). The heap holds only what
	// the current sync changed (ov*), written back with the revision in one
	// transaction. nrecs, rsum, ncounts, csum and nkids summarise the file's
	// records, counts and children (the number of each and the XOR of a hash
	// of each entry), kept in the header so that a truncated or changed file
	// is found at open by one streamed pass.
	nrecs, rsum   uint64
	ncounts, csum uint64
	nkids         uint64
	ovRecs        map[string]ovRec
	ovCounts      map[string]int      // nodes' counts only; see pend
	ovKids        map[string][]string // the children of the nodes the sync made live
	// kidsHeld counts the children in ovKids, and aheadN the nodes the
	// sync wrote ahead of its change (writeAhead), which the change's
	// transaction adopts.
	kidsHeld, aheadN int
	// pend is the change of counts the current sync has summed and not yet
	// written: each node's, which its children that are bucket keys share
	// (a node's children that are nodes are in the overlay's nodes), and
	// the change of the bucket keys records name directly. It is written
	// with the records and the revision, then applied to the counts in
	// batches of bounded size (finish), so that neither the heap nor one
	// transaction holds a change that reaches every count page.
	pend map[string]int
	// pending: the file holds a change of counts not yet applied in full
	// (a write that failed in the middle, or a crash): until finish applies
	// it, Count reports every key as referenced and Live fails.
	pending bool
	// ahead: the file holds children written ahead of a change that was
	// not written (writeAhead); the next sync or open removes them.
	ahead   bool
	rtx     *bolt.Tx // a read transaction held during a sync
	looks   int      // lookups through rtx since it began (reread)
	readErr error    // a value in the file failed its checksum after open
	// parts are where the reference chunks of the roots read in this sync
	// are (see read).
	parts map[keys.Digest]objPart

	// zeroed are the bucket keys that may have become garbage and that no
	// sweep has settled yet (Settle): those whose count fell to zero, and
	// those whose claim key was deleted (a claim that ended, used or not),
	// each with the revision of the sync that saw it (an upper bound of the
	// revision at which it happened). They are persisted with the revision,
	// in the same transaction, so that a crash or a restart loses none.
	zeroed map[string]int64
	// gap is the revision of the last range read (a rebuild or a compacted
	// watch): the falls and ended claims before it were not seen one by one,
	// so zeroed is complete only for those after it.
	gap int64
	// listed is the revision the mirror had reached when a sweep that then
	// listed the bucket began, recorded once that sweep's marks were written
	// (SetListed); 0 when none since the last range read's gap.
	listed int64
	// ended are the keys whose claims ended during the current sync.
	ended     []string
	dirtyZero map[string]bool

	// flushed: the current sync wrote a batch before its end (a cold build
	// in batches), so its file is compacted once the sync ends.
	flushed bool

	// limit, when set, paces the objects read from the bucket (SetReadRate).
	limit *rate.Limiter

	stats  MirrorStats
	broken mirrorFault
}

// MirrorStats count what a Mirror did since it was opened.
type MirrorStats struct {
	// Rebuilds is the number of times the mirror was built from an empty
	// state: a missing, unreadable, foreign or corrupt file.
	Rebuilds int64
	// Relists is the number of paginated range reads of the reference
	// records (cold builds and compacted watches).
	Relists int64
	// WatchRestarts is the number of watches that ended compacted or failed.
	WatchRestarts int64
	// Events is the number of watch events applied.
	Events int64
	// ObjectReads is the number of objects read from the bucket for nodes.
	ObjectReads int64
	// ChildReads is the number of times a node's children were read back
	// from the file, because its count changed.
	ChildReads int64
	// CountsWritten is the number of counts the syncs changed in the file
	// (set, changed or removed): what one sync writes follows what it
	// changed, not what the mirror holds.
	CountsWritten int64
	// Discarded says why the file's state was discarded at open, or "".
	Discarded string
}

// mirrorFault is a deliberately broken mirror, for the tests that show the
// differential test catches each kind of fault.
type mirrorFault struct {
	dropEvent  int  // drop the n-th watch event (from 1); 0 drops none
	trustStale bool // on a compacted watch, resume from the current revision without the range read
	forkShort  bool // a root record naming an already-live root does not count it
	skipSync   bool // Mirrored.ReadBlobGC decides on the mirror as it stands
	// forgetZeroed does not write the zeroed keys to the file: a restart
	// loses them.
	forgetZeroed bool
	// dropCount does not write a count that a sync set: the file's counts
	// lose it while the header's summary keeps it.
	dropCount bool
	// trustCounts does not check the file's counts against the header's
	// summary at open.
	trustCounts bool
	// trustUnfinished loads a file an unfinished sync left (revision 0 with
	// content) as if it were finished.
	trustUnfinished bool
	// afterAhead, when set, is called after each transaction of
	// writeAhead, with its number from 1; its error fails the write there.
	afterAhead func(n int) error
	// afterFlush, when set, is called after each write of a cold build's
	// batch, with the file's path; its error fails the sync there.
	afterFlush func(path string) error
	// afterApply, when set, is called after each transaction that applies
	// a batch of a sync's change of counts, or removes a batch of it
	// (finish), but the last, with the transaction's number from 1; its
	// error fails the write there, as a crash would.
	afterApply func(n int, removing bool) error
	// reapply applies an unfinished change of counts from its start again,
	// ignoring how far the file says it was applied.
	reapply bool
}

// ErrMirror: the mirror cannot be used (its file cannot be opened or written).
var ErrMirror = errors.New("etcdstore: mirror")

// mirrorLockWait is how long OpenMirror waits for a file another process
// holds open.
const mirrorLockWait = 5 * time.Second

// mirrorFormat is the version of the mirror file's format; a file of another
// version is discarded and rebuilt. Format 6 writes a sync's change of
// counts after its records, in batches, from a change it writes first
// (finish); format 5 wrote it in one transaction, and a reader of format 5
// would take a file whose change is not applied in full for a finished one.
// Format 5 stored keys packed (mirrorkey.go); format 4 as bucket keys.
const mirrorFormat = 6

var (
	mirrorMeta   = []byte("meta")
	mirrorRecs   = []byte("recs")
	mirrorKids   = []byte("kids")
	mirrorZero   = []byte("zero")
	mirrorCounts = []byte("counts")
	mirrorPend   = []byte("pend")
	mirrorAhead  = []byte("ahead")
	// pendMark, in the meta bucket while the file holds a change of counts
	// not applied in full, is the last key applied (empty: none yet).
	pendMark   = []byte("pend")
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	ecma       = crc64.MakeTable(crc64.ECMA)
)

// OpenMirror opens the mirror file at path, creating it if needed, and
// returns a mirror of s's reference records. A file written for another
// prefix or cluster, by another format version, or that fails its checksums is
// discarded (MirrorStats.Discarded says why) and the next Sync rebuilds it;
// so is an empty path, which keeps the mirror in memory only. The store must
// have Options.Objects when its checkpoints use the capacity layout. Errors:
// the file cannot be opened or written (ErrMirror), or ctx's error.
func (s *Store) OpenMirror(ctx context.Context, path string) (*Mirror, error) {
	return s.openMirror(ctx, path, mirrorFault{})
}

// openMirror is OpenMirror with a deliberately broken mirror for the tests.
func (s *Store) openMirror(ctx context.Context, path string, broken mirrorFault) (*Mirror, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m := &Mirror{s: s, path: path, broken: broken}
	m.reset()
	if path == "" {
		// No file given: the state goes in a temporary file of the mirror's
		// own, so that the heap holds only what a sync changes, as with a
		// file; Close removes it.
		dir, err := os.MkdirTemp("", "cairn-mirror-")
		if err != nil {
			return nil, fmt.Errorf("%w: temporary file: %w", ErrMirror, err)
		}
		m.opts = &bolt.Options{NoSync: true}
		db, err := bolt.Open(filepath.Join(dir, "mirror.db"), 0o600, m.opts)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%w: temporary file: %w", ErrMirror, err)
		}
		m.db, m.temp, m.path = db, true, dir
		m.stats.Discarded = "no file"
		return m, nil
	}
	// A compacted copy a crash left before its rename is of no use.
	if err := os.Remove(path + compactSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: remove %s: %w", ErrMirror, path+compactSuffix, err)
	}
	lock, err := lockMirror(ctx, path+".lock")
	if err != nil {
		return nil, err
	}
	m.lock = lock
	defer func() {
		if m.db == nil {
			lock.Close()
		}
	}()
	m.opts = &bolt.Options{Timeout: mirrorLockWait}
	db, err := bolt.Open(path, 0o600, m.opts)
	if err != nil && !errors.Is(err, bolterrors.ErrTimeout) {
		// Not a bbolt file, or a damaged one: it can only be rebuilt.
		m.s.log.Warn("etcdstore: mirror file unreadable; removing it, the next sync rebuilds it", "path", path, "err", err)
		if rerr := os.Remove(path); rerr != nil {
			return nil, fmt.Errorf("%w: open %s: %w (and remove it: %w)", ErrMirror, path, err, rerr)
		}
		m.stats.Discarded = "unreadable file: " + err.Error()
		db, err = bolt.Open(path, 0o600, m.opts)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", ErrMirror, path, err)
	}
	m.db = db
	why := m.load(true)
	if why == "" && (m.ahead || m.pending) {
		// A sync's write that stopped (a crash): children written ahead
		// of a change not written are removed, and a change of counts
		// not applied in full is applied; then the file is checked.
		var err error
		if m.ahead {
			err = m.dropAhead()
		}
		if err == nil && m.pending {
			err = m.finish(true)
		}
		if err != nil {
			why = "an unfinished write: " + err.Error()
		} else {
			m.reset()
			why = m.load(true)
		}
	}
	if why != "" {
		m.stats.Discarded = why
		m.s.log.Warn("etcdstore: mirror file discarded; the next sync rebuilds it", "path", path, "reason", why)
		m.reset()
		if err := m.db.Update(func(tx *bolt.Tx) error {
			return clearBuckets(tx)
		}); err != nil {
			m.db.Close()
			m.db = nil
			return nil, fmt.Errorf("%w: clear %s: %w", ErrMirror, path, err)
		}
	}
	// The check read the whole file through the map.
	if err := m.release(); err != nil {
		m.db.Close()
		m.db = nil
		return nil, err
	}
	return m, nil
}

// lockMirror locks the file path (creating it), waiting up to
// mirrorLockWait for another process that holds it. Errors: ErrMirror, or
// ctx's error.
func lockMirror(ctx context.Context, path string) (*fileutil.LockedFile, error) {
	deadline := time.Now().Add(mirrorLockWait)
	for {
		l, err := fileutil.TryLockFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, fileutil.ErrLocked) {
			return nil, fmt.Errorf("%w: lock %s: %w", ErrMirror, path, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %s is held by another process", ErrMirror, path)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close closes the mirror's file (and removes it if it is the mirror's own
// temporary file).
func (m *Mirror) Close() error {
	err := m.db.Close()
	if m.lock != nil {
		if lerr := m.lock.Close(); err == nil {
			err = lerr
		}
	}
	if m.temp {
		if rerr := os.RemoveAll(m.path); err == nil {
			err = rerr
		}
	}
	return err
}

// clearBuckets deletes every bucket of the file.
func clearBuckets(tx *bolt.Tx) error {
	for _, b := range [][]byte{mirrorMeta, mirrorRecs, mirrorKids, mirrorCounts, mirrorZero, mirrorPend, mirrorAhead} {
		if tx.Bucket(b) != nil {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// Revision returns the etcd revision the mirror is at: 0 before the first
// Sync of an empty mirror.
func (m *Mirror) Revision() int64 { return m.rev }

// Stats returns what the mirror did since it was opened.
func (m *Mirror) Stats() MirrorStats { return m.stats }

// Records returns the number of reference records the mirror holds.
func (m *Mirror) Records() int { return int(m.nrecs) }

// Discard empties the mirror and its file: the next Sync rebuilds it.
// Errors: the file could not be written (ErrMirror).
func (m *Mirror) Discard() error {
	m.reset()
	return m.writeHeader(true)
}

// writeHeader writes the header in a transaction of its own, after emptying
// the file if clear is set. Errors: ErrMirror.
func (m *Mirror) writeHeader(clear bool) error {
	if err := m.db.Update(func(tx *bolt.Tx) error {
		if clear {
			if err := clearBuckets(tx); err != nil {
				return err
			}
		}
		b, err := tx.CreateBucketIfNotExists(mirrorMeta)
		if err != nil {
			return err
		}
		return b.Put([]byte("header"), m.header())
	}); err != nil {
		return fmt.Errorf("%w: write %s: %w", ErrMirror, m.path, err)
	}
	return nil
}

func (m *Mirror) reset() {
	m.rev, m.cluster, m.gap, m.listed = 0, 0, 0, 0
	m.flushed, m.pending, m.ahead = false, false, false
	m.aheadN = 0
	m.nrecs, m.rsum, m.ncounts, m.csum, m.nkids = 0, 0, 0, 0, 0
	m.clearOverlay()
	m.zeroed = map[string]int64{}
	m.dirtyZero = map[string]bool{}
	m.ended = nil
	m.readErr = nil
}

// clearOverlay forgets what the current sync changed.
func (m *Mirror) clearOverlay() {
	m.ovRecs = map[string]ovRec{}
	m.ovCounts = map[string]int{}
	m.ovKids = map[string][]string{}
	m.kidsHeld = 0
	m.pend = map[string]int{}
	m.parts = map[keys.Digest]objPart{}
}

// An ovRec is a record as the current sync left it (ok false: removed).
type ovRec struct {
	v  []byte
	ok bool
}

// look returns a copy of the body of key k in the file's bucket b, or false
// if it has none, reading in the sync's read transaction if there is one. A
// value that fails its checksum is reported as absent and recorded in
// readErr (the sync then fails and the file is rebuilt).
func (m *Mirror) look(b []byte, k string) ([]byte, bool) {
	var out []byte
	var ok bool
	get := func(tx *bolt.Tx) error {
		bk := tx.Bucket(b)
		if bk == nil {
			return nil
		}
		v := bk.Get([]byte(k))
		if v == nil {
			return nil
		}
		body, good := unseal(v)
		if !good {
			m.readErr = fmt.Errorf("%w: %s: a %s entry fails its checksum", ErrMirror, m.path, b)
			return nil
		}
		out, ok = bytes.Clone(body), true
		return nil
	}
	m.looks++
	if m.rtx != nil {
		_ = get(m.rtx)
		return out, ok
	}
	if err := m.db.View(get); err != nil {
		m.readErr = fmt.Errorf("%w: read %s: %w", ErrMirror, m.path, err)
	}
	// Outside a sync (Count, Zeroed), the pages these lookups map are
	// released as a sync's are (reread).
	if m.looks >= lookRemap {
		m.looks = 0
		if err := m.release(); err != nil {
			m.s.log.Warn("etcdstore: mirror file's pages not released", "path", m.path, "err", err)
		}
	}
	return out, ok
}

// rec returns the record key (nil: none).
func (m *Mirror) rec(key string) []byte {
	if o, ok := m.ovRecs[key]; ok {
		return o.v
	}
	v, _ := m.look(mirrorRecs, key)
	return v
}

// kidsOf returns the children of the live node k, or false if it is not live.
func (m *Mirror) kidsOf(k string) ([]string, bool) {
	if ks, ok := m.ovKids[k]; ok {
		return ks, true
	}
	v, ok := m.look(mirrorKids, k)
	if !ok {
		return nil, false
	}
	ks, ok := decodeKidsBody(v)
	if !ok {
		m.readErr = fmt.Errorf("%w: %s: a node's children do not decode", ErrMirror, m.path)
	}
	return ks, ok
}

// Live calls fn for every bucket key the mirror counts as referenced, in key
// order, with its count, which is the walk's. It stops at fn's error. It
// reads the counts from the file in pages, holding no transaction while fn
// runs: every count is in the file between syncs, since a sync writes its
// overlay back (or drops it) before it returns. Errors: fn's, or the file
// could not be read, or holds a change not applied in full (ErrMirror).
func (m *Mirror) Live(fn func(cairn.BlobReference) error) error {
	if m.pending {
		return fmt.Errorf("%w: %s: a change of counts is not applied in full; the next sync applies it", ErrMirror, m.path)
	}
	from := []byte{1} // node ids start with 0; bucket keys after them
	for pages := 1; ; pages++ {
		if pages%liveRemap == 0 {
			if err := m.release(); err != nil {
				return err
			}
		}
		var page []cairn.BlobReference
		var next []byte
		err := m.db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket(mirrorCounts)
			if b == nil {
				return nil
			}
			c := b.Cursor()
			for k, v := c.Seek(from); k != nil; k, v = c.Next() {
				if len(page) == livePage {
					next = bytes.Clone(k)
					return nil
				}
				n, ok := decodeCount(v)
				if !ok {
					return fmt.Errorf("%w: %s: a count fails its checksum", ErrMirror, m.path)
				}
				key, ok := unpackKey(string(k))
				if !ok {
					return fmt.Errorf("%w: %s: a counted key %x is not a bucket key", ErrMirror, m.path, k)
				}
				page = append(page, cairn.BlobReference{Key: key, References: n})
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, r := range page {
			if err := fn(r); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		from = next
	}
}

// livePage is how many counts Live reads in one transaction; it releases
// the file's pages (release) every liveRemap pages.
const (
	livePage  = 4096
	liveRemap = 16
)

// Referenced reports whether the mirror counts key as referenced.
func (m *Mirror) Referenced(key string) bool { return m.Count(key) > 0 }

// Zeroed returns, sorted, the bucket keys whose count fell to zero, or whose
// claim ended, that no Settle has settled since, and that are unreferenced
// now: the incremental sweep's candidates. They survive a restart with the
// file intact: they are written with the revision that saw them, in one
// transaction. They are every such key since the revision WatchedSince
// returns; earlier ones only a listing of the bucket finds.
func (m *Mirror) Zeroed() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m.zeroed)) { // the file's lookups in order
		if m.Count(k) == 0 {
			out = append(out, k)
		}
	}
	return out
}

// WatchedSince returns the revision of the mirror's last range read (its
// build, or a watch that found its revision compacted): every reference
// count that fell to zero and every claim that ended after it is in Zeroed
// until settled; before it, they were not seen one by one.
func (m *Mirror) WatchedSince() int64 { return m.gap }

// Complete reports whether Zeroed, with the GC records, names every key
// that can have become garbage: a sweep that listed the bucket began after
// the mirror's last range read (WatchedSince) and wrote its marks, so that
// what became garbage before that read was listed and has a GC record, and
// what became garbage after it is in Zeroed until settled.
func (m *Mirror) Complete() bool {
	return m.rev != 0 && m.listed != 0 && m.listed >= m.gap
}

// SetListed records that a sweep which listed the bucket, beginning after
// the mirror reached revision rev, has written its marks; Complete reports
// true from then on, until the next range read. A rev older than the last
// range read records nothing. It persists the change. Errors: the file could
// not be written (ErrMirror).
func (m *Mirror) SetListed(rev int64) error {
	if rev < m.gap || rev <= m.listed || rev > m.rev {
		return nil
	}
	m.listed = rev
	return m.writeHeader(false)
}

// SetReadRate limits the objects the mirror reads from the bucket to perSecond
// (in bursts of at most that many, and at least one): a cold build after a
// lost file then costs the bucket a steady load, not a burst of every root at
// once. The sync that rebuilds takes longer, and the sweep that waits for it
// deletes nothing until it is done. Zero or less removes the limit.
func (m *Mirror) SetReadRate(perSecond float64) {
	if perSecond <= 0 {
		m.limit = nil
		return
	}
	m.limit = rate.NewLimiter(rate.Limit(perSecond), max(1, int(perSecond)))
}

// pace waits until n more objects may be read (SetReadRate).
func (m *Mirror) pace(ctx context.Context, n int) error {
	if m.limit == nil {
		return nil
	}
	for n > 0 {
		k := min(n, m.limit.Burst())
		if err := m.limit.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// Count returns the number of references the mirror counts for key. A count
// that fails its checksum in the file is reported as 1 (referenced: it can
// only keep garbage) and fails the next Sync, which then rebuilds; so is
// every count while the file holds a change of counts not applied in full
// (a sync that failed in its write), until the next Sync applies it.
func (m *Mirror) Count(key string) int {
	p, ok := packKey(key)
	if !ok {
		return 0 // not a key the mirror counts
	}
	if m.pending {
		return 1
	}
	return m.count(p)
}

// count is Count of a packed key or a node id.
func (m *Mirror) count(key string) int {
	if n, ok := m.ovCounts[key]; ok {
		return n
	}
	v, ok := m.look(mirrorCounts, key)
	if !ok {
		if m.readErr != nil {
			return 1
		}
		return 0
	}
	n, ok := decodeCountBody(v)
	if !ok {
		m.readErr = fmt.Errorf("%w: %s: a count does not decode", ErrMirror, m.path)
		return 1
	}
	return n
}

// Settle forgets the zeroed keys among keys that a sweep has decided on with
// a read at revision rev (each was found referenced, claimed, with a GC
// record, or absent from the bucket): those whose count fell to zero at a
// sync that reached rev at the latest. A key seen falling to zero by a later
// sync is kept, since the sweep's read may predate that fall. It also forgets
// every zeroed key recorded at rev at the latest that the mirror counts as
// referenced again (Zeroed does not return those): a later fall is a new
// entry. It persists the change. Errors: the file could not be written
// (ErrMirror).
func (m *Mirror) Settle(keys []string, rev int64) error {
	forget := func(k string) {
		if at, ok := m.zeroed[k]; ok && at <= rev {
			delete(m.zeroed, k)
			m.dirtyZero[k] = true
		}
	}
	for _, k := range keys {
		forget(k)
	}
	for k := range m.zeroed {
		if m.Count(k) > 0 {
			forget(k)
		}
	}
	if len(m.dirtyZero) == 0 {
		return nil
	}
	return m.persistSettled()
}

// Node ids: a byte 0, the role, the digest. Bucket keys never start with 0.
const (
	nodeRoot       = 'R' // a checkpoint's root: the root, its objects, its reference chunks
	nodeTranscript = 'T' // a transcript's root: the root and its conversation parts
	nodeChunk      = 'C' // a reference chunk: its blob keys
)

func nodeID(role byte, d keys.Digest) string {
	return string(append([]byte{0, role}, d[:]...))
}

func isNode(k string) bool { return len(k) > 0 && k[0] == 0 }

// edges returns what the reference record key with value v (lease: staged)
// keeps, as the walk reads it (walkRefs): nothing while staged; the blob keys
// of a version-1 record; the node of a root or transcript record.
func (m *Mirror) edges(key string, v []byte) ([]string, error) {
	if len(v) == 0 || v[0] != 0 {
		return nil, nil // staged by a write not yet published
	}
	val := v[1:]
	refs := m.s.layout.Refs()
	if len(key) <= len(refs) || key[:len(refs)] != string(refs) {
		return nil, corrupt("reference record key", []byte(key), errors.New("outside the reference records"))
	}
	shard := key[len(refs)]
	switch {
	case shard < keys.NumShards:
		if len(val)%keys.DigestLen != 0 {
			return nil, corrupt("reference record", []byte(key), fmt.Errorf("length %d", len(val)))
		}
		out := make([]string, 0, len(val)/keys.DigestLen)
		for i := 0; i < len(val); i += keys.DigestLen {
			out = append(out, packBlob(shard, keys.Digest(val[i:i+keys.DigestLen])))
		}
		return out, nil
	case shard == keys.RootShard || shard == keys.TranscriptShard:
		if len(val) != keys.DigestLen {
			return nil, corrupt("root reference record", []byte(key), fmt.Errorf("length %d", len(val)))
		}
		role := byte(nodeRoot)
		if shard == keys.TranscriptShard {
			role = nodeTranscript
		}
		return []string{nodeID(role, keys.Digest(val))}, nil
	}
	return nil, nil // a shard the walk does not read
}

// read reads from the bucket what the nodes ids keep, through the functions
// the walk uses (objRoot.namedObjects, objRoot.convObjects, fetchParts,
// countListings): a record form they learn flows into the mirror. It calls
// fn with each node's index in ids and its children, in the caller's
// goroutine, and stops at fn's error. Roots are read objectParallel at a
// time; reference chunks in batches of whole groups of chunks that share
// packs (chunkBatches), each batch in one fetchParts, as the walk reads
// them, so that the members of one pack cost one request and the heap holds
// one batch's bodies, not a sync's. What it reads does not go to the store's object
// cache (withoutCaching). A root's reference chunks are remembered with where
// they are (a packed root's are members of packs) until their own nodes are
// read, in the same sync.
func (m *Mirror) read(ctx context.Context, ids []string, fn func(i int, kids []string) error) error {
	ctx = withoutCaching(ctx) // each object is read once: kept in the file, not the cache
	var roots, chunks []int
	for i, id := range ids {
		if id[1] == nodeChunk {
			chunks = append(chunks, i)
		} else {
			roots = append(roots, i)
		}
	}
	out := make([][]string, len(roots))
	var mu sync.Mutex
	err := forEach(ctx, len(roots), objectParallel, func(ctx context.Context, j int) error {
		i := roots[j]
		d := keys.Digest([]byte(ids[i][2:]))
		if err := m.pace(ctx, 1); err != nil {
			return err
		}
		r, err := m.s.root(ctx, d)
		if err != nil {
			return err
		}
		var kids []string
		if ids[i][1] == nodeTranscript {
			for _, o := range r.convObjects(d) {
				kids = append(kids, packDigest(packObject, o))
			}
		} else {
			for _, o := range r.namedObjects(d) {
				kids = append(kids, packDigest(packObject, o))
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if ids[i][1] == nodeRoot {
			for _, c := range r.refs {
				m.parts[c.digest] = c
				kids = append(kids, nodeID(nodeChunk, c.digest))
			}
		}
		out[j] = kids
		m.stats.ObjectReads++
		return nil
	})
	if err != nil {
		return err
	}
	for j, i := range roots {
		if err := fn(i, out[j]); err != nil {
			return err
		}
	}
	parts := make([]objPart, len(chunks))
	for j, i := range chunks {
		d := keys.Digest([]byte(ids[i][2:]))
		p, ok := m.parts[d]
		if !ok {
			p = objPart{digest: d} // an object of its own
		}
		parts[j] = p
	}
	for _, idx := range chunkBatches(parts) {
		n := len(idx)
		batch := make([]objPart, n)
		for k, j := range idx {
			batch[k] = parts[j]
		}
		if err := m.pace(ctx, n); err != nil {
			return err
		}
		got, err := m.s.fetchParts(ctx, batch)
		if err != nil {
			return err
		}
		m.stats.ObjectReads += int64(n)
		for k, j := range idx {
			i := chunks[j]
			refs, err := countListings([]refListing{{chunks: []keys.Digest{batch[k].digest}}}, func(key string) ([]byte, error) {
				if b, ok := got[key]; ok {
					return b, nil
				}
				return nil, bucket.ErrNotFound
			})
			if err != nil {
				return err
			}
			kids := make([]string, len(refs))
			for x, r := range refs {
				p, ok := packKey(r.Key)
				if !ok {
					return corrupt("reference chunk", []byte(ids[i][2:]), fmt.Errorf("names %q, not a blob key", r.Key))
				}
				kids[x] = p
			}
			if err := fn(i, kids); err != nil {
				return err
			}
		}
	}
	return nil
}

// chunkBatch is how many reference chunks read fetches at once (a variable
// for the tests); a batch is extended, up to four times that, to the end of
// its last group (chunkBatches).
var chunkBatch = 1024

// chunkBatches cuts parts (reference chunks) into the batches read reads,
// as indexes into parts: chunkBatch of them, extended to the end of the last
// group, up to 4·chunkBatch. A group is the chunks whose reads share packs,
// directly or through other chunks of the group (readPlace: the pack of the
// leaf patched, and the chunk's own; one thread's turns, mostly). A pack
// that two batches need is read twice, so a batch of whole groups reads
// each of its packs once, as one call for all the chunks would.
func chunkBatches(parts []objPart) [][]int {
	places := make([][2]keys.Digest, len(parts))
	order := make([]int, len(parts))
	byPack := map[keys.Digest][]int{}
	for j, p := range parts {
		places[j], order[j] = readPlace(p), j
		byPack[places[j][0]] = append(byPack[places[j][0]], j)
		if places[j][1] != places[j][0] {
			byPack[places[j][1]] = append(byPack[places[j][1]], j)
		}
	}
	// Packs ranked breadth first from each group's first, so that a group's
	// packs that share chunks are near in rank; a chunk goes with the later
	// of its two packs, so that a pack's chunks are next to one another and
	// a group cut by the batch bound is cut between packs. Each search
	// reaches exactly one group, which takes the rank it starts from as its
	// name.
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(bytes.Compare(places[a][0][:], places[b][0][:]), bytes.Compare(places[a][1][:], places[b][1][:]))
	})
	type ranked struct{ rank, group int }
	rank := make(map[keys.Digest]ranked, len(byPack))
	for _, j := range order {
		if _, ok := rank[places[j][0]]; ok {
			continue
		}
		g := len(rank)
		queue := []keys.Digest{places[j][0]}
		rank[places[j][0]] = ranked{g, g}
		for len(queue) > 0 {
			d := queue[0]
			queue = queue[1:]
			for _, c := range byPack[d] {
				for _, q := range places[c] {
					if _, ok := rank[q]; !ok {
						rank[q] = ranked{len(rank), g}
						queue = append(queue, q)
					}
				}
			}
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ra0, ra1, rb0, rb1 := rank[places[a][0]].rank, rank[places[a][1]].rank, rank[places[b][0]].rank, rank[places[b][1]].rank
		return cmp.Or(cmp.Compare(max(ra0, ra1), max(rb0, rb1)), cmp.Compare(min(ra0, ra1), min(rb0, rb1)))
	})
	// group names a chunk's group; objects of their own share no pack and
	// are in none.
	group := func(j int) int {
		if places[j][0] == (keys.Digest{}) {
			return -1
		}
		return rank[places[j][0]].group
	}
	var out [][]int
	for len(order) > 0 {
		n := min(len(order), chunkBatch)
		for n < len(order) && n < 4*chunkBatch && group(order[n]) >= 0 && group(order[n]) == group(order[n-1]) {
			n++
		}
		out = append(out, order[:n:n])
		order = order[n:]
	}
	return out
}

// readPlace returns the packs a reference chunk's read begins with and
// reads it from: for a chunk made from a leaf, the leaf's; for a leaf
// stored as a patch, the pack of the leaf it patches, then its own; zero
// for an object of its own. Chunks of one thread's turns share the first.
func readPlace(p objPart) [2]keys.Digest {
	if p.at.base != nil {
		p = *p.at.base
	}
	if p.at.delta != nil {
		return [2]keys.Digest{p.at.delta.pack, p.at.pack}
	}
	return [2]keys.Digest{p.at.pack, p.at.pack}
}

// change is the records a sync changed: each key's value before the sync
// (nil: none).
type change map[string][]byte

// setRecord sets (v non-nil) or removes the record key, remembering its
// value before the sync in ch.
func (m *Mirror) setRecord(ch change, key string, v []byte) {
	if _, seen := ch[key]; !seen {
		ch[key] = m.rec(key)
	}
	m.ovRecs[key] = ovRec{v: v, ok: v != nil}
}

func recHash(key string, v []byte) uint64 {
	h := crc64.New(ecma)
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write(v)
	return h.Sum64()
}

// apply counts what the changed records keep now instead of what they kept
// before. It sums each key's change first and passes the sum down, level by
// level (records, then roots and transcripts, then reference chunks), so that
// a key is looked up, and a node's children read, once a sync however many of
// the changed records reach it, and a node whose count does not change passes
// nothing to its children: a turn appended and a turn pruned on the same
// thread cancel on the nodes they share. Counts stay exact, as the walk
// counts them: a child's count changes by the sum of its parents' changes.
// Within a sync a record moved from one key to another never takes a count
// through zero, since only the sums are applied.
//
// A cold build (building: the sync began with an empty mirror) applies its
// records applyBatch at a time, each batch's counts and children written to
// the file before the next (flush), so that the heap holds one batch's
// change, not the whole store's; a build that fails discards what it wrote,
// which loses nothing. Any other sync applies its change at once and writes
// its records in one transaction (persist), so that a sync that fails
// before it keeps the last state, and one that fails after it is finished
// from the file.
func (m *Mirror) apply(ctx context.Context, ch change, building bool) error {
	for _, k := range m.ended {
		m.zeroed[k] = m.rev
		m.dirtyZero[k] = true
	}
	m.ended = nil
	recs := slices.Sorted(maps.Keys(ch))
	for len(recs) > 0 {
		n := len(recs)
		if building {
			n = min(n, applyBatch)
		}
		if err := m.applyRecords(ctx, ch, recs[:n]); err != nil {
			return err
		}
		recs = recs[n:]
		if len(recs) > 0 {
			if err := m.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyBatch is how many records a cold build applies between two writes of
// its overlay to the file (a variable for the tests).
var applyBatch = 1024

// flush writes the overlay to the file in the middle of a sync, under a
// header that says the file is unfinished (revision 0, with content): a file
// left so by a crash is discarded at open, and a sync that fails after it
// discards it too (abandon). The sync's read transaction is begun again.
func (m *Mirror) flush() error {
	if m.readErr != nil {
		return m.readErr
	}
	m.endRead()
	if err := m.persist(false); err != nil {
		return err
	}
	m.flushed = true
	if m.broken.afterFlush != nil {
		if err := m.broken.afterFlush(m.path); err != nil {
			return err
		}
	}
	return m.beginRead()
}

// applyRecords applies the change of the records recs (keys of ch).
func (m *Mirror) applyRecords(ctx context.Context, ch change, recs []string) error {
	delta := map[string]int{}
	for _, key := range recs {
		old := ch[key]
		now := m.rec(key)
		if bytes.Equal(old, now) {
			continue
		}
		a, err := m.edges(key, now)
		if err != nil {
			return err
		}
		d, err := m.edges(key, old)
		if err != nil {
			return err
		}
		if m.broken.forkShort {
			a = slices.DeleteFunc(a, func(e string) bool { return isNode(e) && e[1] == nodeRoot && m.count(e) > 0 })
		}
		for _, e := range a {
			delta[e]++
		}
		for _, e := range d {
			delta[e]--
		}
	}
	defer func() { m.parts = map[keys.Digest]objPart{} }()
	for len(delta) > 0 {
		next := map[string]int{}
		var fresh []string
		var freshBy []int
		// In key order: the file's lookups then walk its pages in order.
		for _, k := range slices.Sorted(maps.Keys(delta)) {
			if err := m.reread(); err != nil {
				return err
			}
			d := delta[k]
			if d == 0 {
				continue
			}
			if !isNode(k) {
				// A bucket key's count changes when the change is
				// applied to the file (finish).
				m.pend[k] += d
				continue
			}
			n := m.count(k)
			if n+d < 0 {
				d = -n // not counted as often: cannot happen while the counts are exact
			}
			if d == 0 {
				continue
			}
			m.ovCounts[k] = n + d
			// The node's change passes to its children that are bucket
			// keys when the change is applied (finish), which reads the
			// node's children from the file once; a node that is no
			// longer live keeps its children there until then.
			m.pend[k] += d
			if n == 0 {
				// Live now: its children come from the bucket, below.
				fresh, freshBy = append(fresh, k), append(freshBy, d)
				continue
			}
			if k[1] != nodeRoot {
				continue // a chunk's and a transcript's children are bucket keys
			}
			// Children are read from the file only here: a change of a
			// node's count, whatever its size, passes to its children,
			// so that a child's count stays the sum of its parents'.
			ks, _ := m.kidsOf(k)
			m.stats.ChildReads++
			for _, c := range ks {
				if isNode(c) {
					next[c] += d
				}
			}
		}
		err := m.read(ctx, fresh, func(i int, kids []string) error {
			m.ovKids[fresh[i]] = kids
			m.kidsHeld += len(kids)
			for _, c := range kids {
				if isNode(c) {
					next[c] += freshBy[i]
				}
			}
			return m.spillKids()
		})
		if err != nil {
			return fmt.Errorf("etcdstore: mirror: read the objects of new roots: %w", err)
		}
		delta = next
	}
	return nil
}

// Sync brings the mirror to the store's current revision (at least), persists
// it, and returns that revision. Every reference record the mirror holds is as
// at the returned revision: a sweep that read GC records and claims at
// revision R and then calls Sync decides on references at a revision no older
// than R. An empty mirror is built by one paginated range read; a watch that
// finds its revision compacted costs one such read, diffed against the
// mirror. Errors: etcd or the bucket failed (the mirror keeps its last
// persisted state; a later Sync goes on from it), a record does not decode
// , the file could not be written (ErrMirror), or ctx's error.
func (m *Mirror) Sync(ctx context.Context) (int64, error) {
	target, cluster, err := m.current(ctx)
	if err != nil {
		return m.rev, err
	}
	if m.rev != 0 && m.cluster != cluster {
		m.s.log.Warn("etcdstore: mirror of another cluster; rebuilding", "file_cluster", m.cluster, "cluster", cluster)
		if err := m.Discard(); err != nil {
			return m.rev, err
		}
	}
	m.cluster = cluster
	if m.ahead {
		// The last sync's write stopped before its change.
		if err := m.dropAhead(); err != nil {
			return m.abandon(err)
		}
	}
	if m.pending {
		// The last sync's change of counts is not applied in full.
		if err := m.finish(true); err != nil {
			return m.abandon(err)
		}
	}
	if err := m.beginRead(); err != nil {
		return m.rev, err
	}
	defer m.endRead()
	ch := change{}
	building := m.rev == 0
	if building {
		m.stats.Rebuilds++
		if err := m.relist(ctx, ch, target); err != nil {
			return m.abandon(err)
		}
	} else if m.rev < target {
		if err := m.follow(ctx, ch, target); err != nil {
			return m.abandon(err)
		}
	}
	if err := m.apply(ctx, ch, building); err != nil {
		return m.abandon(err)
	}
	if m.readErr != nil {
		return m.abandon(m.readErr)
	}
	m.endRead() // a write transaction may grow the file's map
	if err := m.persist(true); err != nil {
		return m.abandon(err)
	}
	if err := m.release(); err != nil {
		return m.rev, err
	}
	if m.flushed {
		m.flushed = false
		if err := m.compact(); errors.Is(err, ErrMirror) {
			return m.rev, err
		} else if err != nil {
			// The file is as the build left it, complete; only larger.
			m.s.log.Warn("etcdstore: mirror file not compacted after its build", "path", m.path, "err", err)
		}
	}
	return m.rev, nil
}

// compactSuffix names the compacted copy of a mirror file before it
// replaces the file.
const compactSuffix = ".compact"

// compact replaces the file with a copy whose pages are full, after a cold
// build that wrote its batches into one another's pages (each batch's keys
// fall between the earlier batches', so the pages they reach split half
// full). The copy is written beside the file, synced, and renamed over it:
// a crash leaves either file whole. Errors: the copy could not be made (the
// file is then left as it was), or the file could not be opened again
// (ErrMirror).
func (m *Mirror) compact() error {
	path := m.db.Path()
	tmp := path + compactSuffix
	// The copy's free list is written, so that opening it does not scan
	// every page for free ones (remap opens the file often).
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		return err
	}
	err = bolt.Compact(dst, m.db, 16<<20)
	if err == nil && !m.temp {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := m.db.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	rerr := os.Rename(tmp, path)
	if rerr == nil && !m.temp {
		rerr = syncDir(filepath.Dir(path))
	}
	if rerr != nil {
		os.Remove(tmp)
	}
	db, err := bolt.Open(path, 0o600, m.opts)
	if err != nil {
		return fmt.Errorf("%w: open %s after compacting it: %w", ErrMirror, path, err)
	}
	m.db = db
	return rerr
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// abandon drops what a failed sync changed in memory by reloading the
// persisted state (or, without a file, starting empty).
func (m *Mirror) abandon(err error) (int64, error) {
	m.endRead()
	bad := m.readErr != nil
	m.reset()
	if why := m.load(false); why != "" || bad {
		// A file that fails its checks is emptied: the next sync rebuilds.
		m.reset()
		if derr := m.Discard(); derr != nil {
			m.s.log.Warn("etcdstore: mirror file could not be emptied", "path", m.path, "err", derr)
		}
	}
	return m.rev, err
}

// reread releases the file's pages (releaseInTx) once the sync has looked up
// lookRemap keys through its read transaction: the pages those lookups
// reached stop counting in the sweeper's resident memory. Errors: ErrMirror.
func (m *Mirror) reread() error {
	if m.rtx == nil || m.looks < lookRemap {
		return nil
	}
	m.looks = 0
	return m.releaseInTx()
}

// lookRemap is how many lookups at random places a sync makes through one
// read transaction (reread), or Count makes outside a sync, between two
// releases of the file's pages, and how many nodes one transaction of the
// change's removal looks up (a variable for the tests): with fault-around
// (see pageBytes), about 16 MiB of the file mapped.
var lookRemap = 256

// beginRead begins the sync's read transaction. Errors: ErrMirror.
func (m *Mirror) beginRead() error {
	rtx, err := m.db.Begin(false)
	if err != nil {
		return fmt.Errorf("%w: read %s: %w", ErrMirror, m.path, err)
	}
	m.rtx = rtx
	return nil
}

// endRead ends the sync's read transaction, if any.
func (m *Mirror) endRead() {
	if m.rtx != nil {
		_ = m.rtx.Rollback()
		m.rtx = nil
	}
	m.looks = 0
}

// current returns the store's current revision and cluster id, from a read of
// one key.
func (m *Mirror) current(ctx context.Context) (int64, uint64, error) {
	resp, err := m.s.client.Get(ctx, string(m.s.layout.Refs()), clientv3.WithKeysOnly())
	if err != nil {
		return 0, 0, fmt.Errorf("etcdstore: mirror: read the current revision: %w", err)
	}
	return resp.Header.Revision, resp.Header.ClusterId, nil
}

// relist reads every reference record at revision rev, page by page, and
// sets the mirror to them.
func (m *Mirror) relist(ctx context.Context, ch change, rev int64) error {
	m.stats.Relists++
	seen := map[string]bool{}
	err := m.s.scanAt(ctx, &rev, m.s.layout.Refs(), func(kv *mvccpb.KeyValue) error {
		k := string(kv.Key)
		seen[k] = true
		v := recValue(kv)
		if old := m.rec(k); old == nil || !bytes.Equal(old, v) {
			m.setRecord(ch, k, v)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("etcdstore: mirror: read the reference records at revision %d: %w", rev, err)
	}
	var gone []string
	if b := m.rtx.Bucket(mirrorRecs); b != nil {
		if err := b.ForEach(func(k, _ []byte) error {
			if !seen[string(k)] {
				gone = append(gone, string(k))
			}
			return nil
		}); err != nil {
			return fmt.Errorf("%w: read %s: %w", ErrMirror, m.path, err)
		}
	}
	for k, o := range m.ovRecs {
		if o.ok && !seen[k] {
			gone = append(gone, k)
		}
	}
	for _, k := range gone {
		m.setRecord(ch, k, nil)
	}
	m.rev, m.gap = rev, rev
	return nil
}

func recValue(kv *mvccpb.KeyValue) []byte {
	v := make([]byte, 1, 1+len(kv.Value))
	if kv.Lease != 0 {
		v[0] = 1
	}
	return append(v, kv.Value...)
}

// follow watches the reference records from the mirror's revision until the
// watch has delivered every event up to target, asking for progress
// notifications (WithProgressNotify, and RequestProgress while it waits) so
// that a quiet prefix still reaches it.
func (m *Mirror) follow(ctx context.Context, ch change, target int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// The claims (P q) and the reference records (P r) are adjacent: one
	// watch of [P q, P s) follows both at one revision.
	claims, refs := m.s.layout.Claims(), m.s.layout.Refs()
	end := append(bytes.Clone(refs[:len(refs)-1]), refs[len(refs)-1]+1)
	wch := m.s.client.Watch(wctx, string(claims), clientv3.WithRange(string(end)),
		clientv3.WithRev(m.rev+1), clientv3.WithProgressNotify())
	// etcd answers a progress request only once the watcher has caught up
	// (and drops it before), so the request is repeated until the watch
	// reaches the target; the wait only paces the requests.
	wait := time.Millisecond
	tick := time.NewTimer(0)
	defer tick.Stop()
	for m.rev < target {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-wch:
		case <-tick.C:
			if err := m.s.client.RequestProgress(wctx); err != nil {
				return fmt.Errorf("etcdstore: mirror: request watch progress: %w", err)
			}
			tick.Reset(wait)
			wait = min(2*wait, time.Second)
			continue
		case <-ctx.Done():
			return ctx.Err()
		}
		if !ok {
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("etcdstore: mirror: the watch closed at revision %d", m.rev)
		}
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			m.stats.WatchRestarts++
			m.s.log.Info("etcdstore: mirror's revision compacted; reading the reference records again", "revision", m.rev, "compacted", resp.CompactRevision)
			if m.broken.trustStale {
				m.rev = target
				return nil
			}
			return m.relist(ctx, ch, target)
		}
		if err := resp.Err(); err != nil {
			m.stats.WatchRestarts++
			return fmt.Errorf("etcdstore: mirror: watch: %w", err)
		}
		for _, ev := range resp.Events {
			m.stats.Events++
			if m.broken.dropEvent != 0 && m.stats.Events == int64(m.broken.dropEvent) {
				m.rev = ev.Kv.ModRevision
				continue
			}
			k := string(ev.Kv.Key)
			if bytes.HasPrefix(ev.Kv.Key, claims) {
				// A claim that ended (an append, a release, the end of its
				// etcd lease, a reap): its key may now be garbage.
				if ev.Type == clientv3.EventTypeDelete {
					ck, err := m.s.layout.DecodeClaim(ev.Kv.Key)
					if err != nil {
						return corrupt("claim key", ev.Kv.Key, err)
					}
					m.ended = append(m.ended, ck.Blob.Key())
				}
				m.rev = ev.Kv.ModRevision
				continue
			}
			if ev.Type == clientv3.EventTypeDelete {
				if m.rec(k) != nil {
					m.setRecord(ch, k, nil)
				}
			} else {
				m.setRecord(ch, k, recValue(ev.Kv))
			}
			m.rev = ev.Kv.ModRevision
		}
		if resp.IsProgressNotify() && resp.Header.Revision > m.rev {
			m.rev = resp.Header.Revision
		}
		if len(resp.Events) > 0 {
			// Events came: the watch may have caught up, and etcd sends the
			// history in one response once it has read it; ask again at once
			// rather than after the pacing's doubled wait.
			wait = time.Millisecond
			tick.Reset(0)
		}
	}
	return nil
}

// The file: bucket meta holds the header (format, prefix, cluster, revision,
// record count and hash, and a checksum of them); recs the records, kids the
// children of live nodes, each value followed by its CRC-32C.

func sealed(v []byte) []byte {
	return binary.BigEndian.AppendUint32(slices.Clip(v), crc32.Checksum(v, castagnoli))
}

func unseal(v []byte) ([]byte, bool) {
	if len(v) < 4 {
		return nil, false
	}
	body := v[:len(v)-4]
	return body, crc32.Checksum(body, castagnoli) == binary.BigEndian.Uint32(v[len(v)-4:])
}

// unfinishedHeader is the header of a file written in the middle of a sync:
// revision 0 (and no range read or listing), with the content's summary, so
// that the file passes its own checks but load refuses it as unfinished.
func (m *Mirror) unfinishedHeader() []byte { return m.headerAt(0, 0, 0) }

func (m *Mirror) header() []byte { return m.headerAt(m.rev, m.gap, m.listed) }

// headerAt is the header with revision rev, range read gap and listing
// listed.
func (m *Mirror) headerAt(rev, gap, listed int64) []byte {
	b := binary.BigEndian.AppendUint32(nil, mirrorFormat)
	b = binary.AppendUvarint(b, uint64(len(m.s.prefix)))
	b = append(b, m.s.prefix...)
	b = binary.BigEndian.AppendUint64(b, m.cluster)
	b = binary.BigEndian.AppendUint64(b, uint64(rev))
	b = binary.BigEndian.AppendUint64(b, m.nrecs)
	b = binary.BigEndian.AppendUint64(b, m.rsum)
	b = binary.BigEndian.AppendUint64(b, uint64(gap))
	b = binary.BigEndian.AppendUint64(b, uint64(listed))
	b = binary.BigEndian.AppendUint64(b, m.ncounts)
	b = binary.BigEndian.AppendUint64(b, m.csum)
	b = binary.BigEndian.AppendUint64(b, m.nkids)
	return sealed(b)
}

// headerLen is the length of a header after its prefix.
const headerLen = 72

func encodeCount(n int) []byte { return sealed(binary.AppendUvarint(nil, uint64(n))) }

// decodeCount decodes a sealed count.
func decodeCount(v []byte) (int, bool) {
	b, ok := unseal(v)
	if !ok {
		return 0, false
	}
	return decodeCountBody(b)
}

func decodeCountBody(b []byte) (int, bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || w != len(b) || n == 0 || n > 1<<40 {
		return 0, false
	}
	return int(n), true
}

// countHash is the hash of a count entry, as recHash of a record's.
func countHash(key string, n int) uint64 {
	return recHash(key, binary.AppendUvarint(nil, uint64(n)))
}

// encodeKids encodes a node's children, packed keys and node ids, one
// after the other: each one's first byte gives its length (packedSize).
func encodeKids(ks []string) []byte {
	n := 0
	for _, k := range ks {
		n += len(k)
	}
	b := make([]byte, 0, n+4)
	for _, k := range ks {
		b = append(b, k...)
	}
	return sealed(b)
}

func decodeKids(v []byte) ([]string, bool) {
	b, ok := unseal(v)
	if !ok {
		return nil, false
	}
	return decodeKidsBody(b)
}

// kidsValid reports whether v is a node's sealed children, as decodeKids
// would, without making them.
func kidsValid(v []byte) bool {
	b, ok := unseal(v)
	for ok && len(b) > 0 {
		n := packedSize(b)
		ok, b = n > 0, b[n:]
	}
	return ok
}

func decodeKidsBody(b []byte) ([]string, bool) {
	out := make([]string, 0, len(b)/packedLen)
	for len(b) > 0 {
		n := packedSize(b)
		if n == 0 {
			return nil, false
		}
		out = append(out, string(b[:n]))
		b = b[n:]
	}
	return out, true
}

// persist writes what the sync changed: first, in one transaction, the
// records, the new nodes' children, the zeroed keys, the summed change of
// counts (pend) and the revision; then finish applies that change to the
// counts in batches. The overlay is dropped once written. The header's
// summary of the records, counts and children is kept in step with what
// each transaction writes. With final false the headers written say that
// the file is unfinished (a cold build's batch).
func (m *Mirror) persist(final bool) error {
	if err := m.writeAhead(); err != nil {
		return err
	}
	ahead := m.aheadN
	nrecs, rsum, nkids := m.nrecs, m.rsum, m.nkids
	pend := false
	err := m.db.Update(func(tx *bolt.Tx) error {
		bs, err := mirrorBuckets(tx, mirrorMeta, mirrorRecs, mirrorKids, mirrorZero, mirrorPend)
		if err != nil {
			return err
		}
		// The children written ahead are the new nodes': counted from now.
		if tx.Bucket(mirrorAhead) != nil {
			if err := tx.DeleteBucket(mirrorAhead); err != nil {
				return err
			}
		}
		m.nkids += uint64(ahead)
		err = writeBack(bs[1], m.ovRecs, func(k string, old []byte) {
			if body, ok := unseal(old); ok {
				m.rsum ^= recHash(k, body)
			}
			m.nrecs--
		}, func(k string, o ovRec) ([]byte, bool) {
			if !o.ok {
				return nil, false
			}
			m.rsum ^= recHash(k, o.v)
			m.nrecs++
			return sealed(o.v), true
		})
		if err != nil {
			return err
		}
		if err := m.writeZeroed(bs[3]); err != nil {
			return err
		}
		for _, k := range slices.Sorted(maps.Keys(m.pend)) {
			if d := m.pend[k]; d != 0 {
				if err := bs[4].Put([]byte(k), encodeDelta(d)); err != nil {
					return err
				}
				pend = true
			}
		}
		if pend {
			if err := bs[0].Put(pendMark, sealed(nil)); err != nil {
				return err
			}
		}
		return bs[0].Put([]byte("header"), m.headerFor(final))
	})
	m.dirtyZero = map[string]bool{}
	if err != nil {
		m.nrecs, m.rsum, m.nkids = nrecs, rsum, nkids
		return fmt.Errorf("%w: write %s: %w", ErrMirror, m.path, err)
	}
	m.ahead, m.aheadN = false, 0
	m.clearOverlay()
	if !pend {
		return nil
	}
	m.pending = true
	return m.finish(final)
}

// writeAhead writes the children of the nodes the sync made live (ovKids)
// to the file ahead of the sync's change, kidsBatch nodes a transaction,
// listing each node in the bucket ahead, and empties ovKids; aheadN counts
// the nodes written ahead over the sync. The change's transaction adopts
// them (counts them in the header and removes the list); a write that stops
// before it leaves them listed, and the next sync or open removes them
// (dropAhead). When a sync makes many nodes live their children are many
// pages' worth, spread over the bucket: in the change's one transaction,
// bbolt would hold all those pages at once. Errors: ErrMirror.
func (m *Mirror) writeAhead() error {
	ks := slices.Sorted(maps.Keys(m.ovKids))
	for len(ks) > 0 {
		b := min(len(ks), kidsBatch)
		m.ahead = true
		err := m.db.Update(func(tx *bolt.Tx) error {
			bs, err := mirrorBuckets(tx, mirrorKids, mirrorAhead)
			if err != nil {
				return err
			}
			for _, k := range ks[:b] {
				if err := bs[0].Put([]byte(k), encodeKids(m.ovKids[k])); err != nil {
					return err
				}
				if err := bs[1].Put([]byte(k), sealed(nil)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%w: write %s: %w", ErrMirror, m.path, err)
		}
		for _, k := range ks[:b] {
			m.kidsHeld -= len(m.ovKids[k])
			delete(m.ovKids, k)
		}
		if err := m.release(); err != nil {
			return err
		}
		m.aheadN += b
		ks = ks[b:]
		if m.broken.afterAhead != nil {
			if err := m.broken.afterAhead(m.aheadN / kidsBatch); err != nil {
				return err
			}
		}
	}
	return nil
}

// spillKids writes the children the sync holds for the nodes it made live
// ahead of its change (writeAhead) once they number kidsSpill, in the middle
// of the sync's apply, so that the heap holds at most about kidsSpill
// children however many nodes a sync makes live; lookups then find them in
// the file. The sync's read transaction is begun again after the write.
// Errors: a value in the file failed its checksum (readErr), or ErrMirror.
func (m *Mirror) spillKids() error {
	if m.kidsHeld < kidsSpill {
		return nil
	}
	if m.readErr != nil {
		return m.readErr
	}
	m.endRead() // a write transaction may grow the file's map
	if err := m.writeAhead(); err != nil {
		return err
	}
	return m.beginRead()
}

// kidsSpill is how many children of new nodes a sync holds in the heap
// before it writes them ahead (spillKids; a variable for the tests): about
// 64 bytes each, 8 MiB.
var kidsSpill = 1 << 17

// kidsBatch is how many nodes' children one transaction of writeAhead or
// dropAhead writes or removes (a variable for the tests).
var kidsBatch = 256

// dropAhead removes the children written ahead of a change that was not
// written (writeAhead), kidsBatch nodes a transaction. Errors: ErrMirror.
func (m *Mirror) dropAhead() error {
	for {
		done := false
		nkids := m.nkids
		err := m.db.Update(func(tx *bolt.Tx) error {
			ahead := tx.Bucket(mirrorAhead)
			if ahead == nil {
				done = true
				return nil
			}
			kids, counts := tx.Bucket(mirrorKids), tx.Bucket(mirrorCounts)
			var ks [][]byte
			c := ahead.Cursor()
			for k, _ := c.First(); k != nil && len(ks) < kidsBatch; k, _ = c.Next() {
				ks = append(ks, bytes.Clone(k))
			}
			for _, k := range ks {
				// A node written ahead is not counted; one that is keeps
				// its children.
				if kids != nil && (counts == nil || counts.Get(k) == nil) {
					if err := kids.Delete(k); err != nil {
						return err
					}
				}
				if err := ahead.Delete(k); err != nil {
					return err
				}
			}
			if len(ks) < kidsBatch {
				done = true
				return tx.DeleteBucket(mirrorAhead)
			}
			return nil
		})
		if err != nil {
			m.nkids = nkids
			return fmt.Errorf("%w: write %s: %w", ErrMirror, m.path, err)
		}
		if err := m.release(); err != nil {
			return err
		}
		if done {
			m.ahead = false
			return nil
		}
	}
}

// mirrorBuckets returns the buckets names of tx, created if need be, each
// written with full pages: keys are written in order, and a count or a record
// is mostly rewritten at the same size, so a page that is full need not split,
// and a sync that changes keys spread over a bucket rewrites half as many
// pages as at bbolt's default of half full.
func mirrorBuckets(tx *bolt.Tx, names ...[]byte) ([]*bolt.Bucket, error) {
	bs := make([]*bolt.Bucket, len(names))
	for i, name := range names {
		b, err := tx.CreateBucketIfNotExists(name)
		if err != nil {
			return nil, err
		}
		b.FillPercent = 1
		bs[i] = b
	}
	return bs, nil
}

// headerFor is the header to write: the mirror's, or with final false an
// unfinished one.
func (m *Mirror) headerFor(final bool) []byte {
	if final {
		return m.header()
	}
	return m.unfinishedHeader()
}

// A pendEntry is one key's change of count in finish: the key (a node id,
// or a packed bucket key in its first packedLen bytes) and the change.
type pendEntry struct {
	k [nodeLen]byte
	n uint8
	d int32
}

func (e *pendEntry) key() []byte { return e.k[:e.n] }

// finish applies the change of counts the file holds (the pend bucket, which
// the sync's first transaction wrote) to the counts: each node's own count,
// and the counts of its children that are bucket keys, read from the file
// once. The changes are summed per key and applied in key order, at most
// pendBatch keys and pendNodes pages a transaction, each transaction
// recording the last key it applied (pendMark) with the counts it wrote,
// so that a write that stops in
// the middle (an error, a crash) is taken up where it stopped: Sync and the
// open apply the rest before anything reads the counts. The last
// transaction also removes the children of the nodes no longer live and the
// change itself. Every transaction writes the header with the summary of
// what the file then holds, so the open's check holds after each. Errors: the
// file could not be written (ErrMirror), or the change, a node's children or
// a count fails its checksum (ErrMirror; the file is then rebuilt).
func (m *Mirror) finish(final bool) (err error) {
	es, _, err := m.pendingChange()
	if err != nil {
		if !errors.Is(err, errSpill) {
			m.readErr = err
		}
		return err
	}
	defer func() {
		if cerr := es.close(); cerr != nil && err == nil {
			err = fmt.Errorf("%w: %w: %w", ErrMirror, errSpill, cerr)
		}
	}()
	if err := m.release(); err != nil {
		return err
	}
	it := &pendIter{s: es}
	batch := 0
	for {
		batch++
		done, err := m.applyPending(it, final)
		if err != nil {
			return err
		}
		if err := m.release(); err != nil {
			return err
		}
		if m.broken.afterApply != nil {
			if err := m.broken.afterApply(batch, false); err != nil {
				return err
			}
		}
		if done {
			break
		}
	}
	return m.removePending(final, batch)
}

// errSpill marks an error of finish's spill file (mirrorsort.go): the
// file is not at fault, and is not rebuilt for it.
var errSpill = errors.New("the expanded change's spill file")

// pendApplied is the mark of a change whose counts are all applied: it
// sorts after every packed key and node id.
var pendApplied = []byte{0xff}

// removePending removes the change of counts once every count is applied,
// pendBatch nodes a transaction, of which at most lookRemap no longer
// live: the children of each node it took to zero
// (kept until then, since the expansion reads them), then the node's entry.
// The last transaction removes the change's bucket, with the bucket keys'
// entries, and its mark. A removal that
// stops in the middle is taken up where it stopped, like the counts.
// Errors: ErrMirror.
func (m *Mirror) removePending(final bool, batch int) error {
	for {
		batch++
		done := false
		nkids := m.nkids
		err := m.db.Update(func(tx *bolt.Tx) error {
			bs, err := mirrorBuckets(tx, mirrorMeta, mirrorCounts, mirrorKids, mirrorPend)
			if err != nil {
				return err
			}
			counts, kids, pend := bs[1], bs[2], bs[3]
			// The nodes' entries come first (node ids sort first), up to
			// pendBatch of them a transaction, looked up in key order;
			// the bucket keys' entries go with the bucket.
			// A transaction deletes the children of at most lookRemap
			// nodes: each rewrites a page of children, which bbolt's
			// commit reads again through the map. The pages the lookups
			// map are released every lookRemap lookups.
			type entry struct {
				k    []byte
				dead bool
			}
			var es []entry
			dead := 0
			c := pend.Cursor()
			k, _ := c.First()
			for ; k != nil && isNode(string(k)) && len(es) < pendBatch && dead < lookRemap; k, _ = c.Next() {
				if len(es)%lookRemap == lookRemap-1 {
					if err := m.releaseInTx(); err != nil {
						return err
					}
				}
				e := entry{k: bytes.Clone(k)}
				e.dead = counts.Get(e.k) == nil && kids.Get(e.k) != nil
				if e.dead {
					dead++
				}
				es = append(es, e)
			}
			more := k != nil && isNode(string(k))
			for i, e := range es {
				if i%lookRemap == lookRemap-1 {
					if err := m.releaseInTx(); err != nil {
						return err
					}
				}
				if e.dead {
					m.nkids--
					if err := kids.Delete(e.k); err != nil {
						return err
					}
				}
				if err := pend.Delete(e.k); err != nil {
					return err
				}
			}
			if !more {
				done = true
				if err := tx.DeleteBucket(mirrorPend); err != nil {
					return err
				}
				if err := bs[0].Delete(pendMark); err != nil {
					return err
				}
			}
			return bs[0].Put([]byte("header"), m.headerFor(final))
		})
		if err != nil {
			m.nkids = nkids
			return fmt.Errorf("%w: write %s: %w", ErrMirror, m.path, err)
		}
		if err := m.release(); err != nil {
			return err
		}
		if done {
			m.pending = false
			return nil
		}
		if m.broken.afterApply != nil {
			if err := m.broken.afterApply(batch, true); err != nil {
				return err
			}
		}
	}
}

// pendBatch is how many keys' counts one transaction of finish writes at
// most, and pendNodes how many of the file's pages it may open for writing
// (variables for the tests). bbolt holds each such page decoded, and a
// buffer for it at the commit, until the transaction ends, and the pages
// stay mapped until the release that follows: a budget of keys alone
// bounds neither once a change's keys are sparse enough that each falls on
// a page of its own (at 10^4 kept a 16,384-key transaction held ~60 MiB of
// heap; at 10^5 each key is about a page).
var (
	pendBatch = 16384
	pendNodes = 1024
)

// pendingChange reads the change of counts the file holds, summed per key
// and sorted, with the last key already applied (empty: none).
func (m *Mirror) pendingChange() (*pendSorter, []byte, error) {
	var from []byte
	bad := func(what string) error { return fmt.Errorf("%w: %s: %s", ErrMirror, m.path, what) }
	err := m.db.View(func(tx *bolt.Tx) error {
		mark, ok := []byte(nil), false
		if meta := tx.Bucket(mirrorMeta); meta != nil {
			mark, ok = unseal(meta.Get(pendMark))
		}
		if !ok || tx.Bucket(mirrorPend) == nil {
			return bad("an unapplied change's mark fails its checksum")
		}
		from = bytes.Clone(mark)
		return nil
	})
	es := newPendSorter(m.db.Path())
	if err == nil && bytes.Equal(from, pendApplied) {
		return es, from, nil // every count applied: only the removal is left
	}
	skip := len(from) > 0 && !m.broken.reapply
	var spillErr error
	add := func(k []byte, d int) error {
		if skip && bytes.Compare(k, from) <= 0 {
			return nil // applied before the write stopped
		}
		if err := es.add(k, d); err != nil {
			spillErr = fmt.Errorf("%w: %w: %w", ErrMirror, errSpill, err)
			return spillErr
		}
		return nil
	}
	if err == nil {
		err = m.scan(mirrorPend, func(tx *bolt.Tx, k, v []byte) (int, error) {
			d, ok := decodeDelta(v)
			if !ok || packedSize(k) != len(k) {
				return 0, bad("an unapplied change fails its checksum")
			}
			if err := add(k, d); err != nil {
				return 0, err
			}
			if !isNode(string(k)) {
				return 0, nil
			}
			var body []byte
			if kids := tx.Bucket(mirrorKids); kids != nil {
				body, ok = unseal(kids.Get(k))
			}
			if !ok {
				return 0, bad("a changed node's children are missing or fail their checksum")
			}
			read := max(len(body), pageBytes)
			for len(body) > 0 {
				n := packedSize(body)
				switch {
				case n == 0 || (n == nodeLen && k[1] != nodeRoot):
					return 0, bad("a node's children do not decode")
				case n == packedLen:
					if err := add(body[:n], d); err != nil {
						return 0, err
					}
				}
				body = body[n:]
			}
			return read, nil
		})
	}
	if spillErr != nil {
		err = spillErr
	}
	if err != nil {
		es.close()
		if !errors.Is(err, ErrMirror) {
			err = fmt.Errorf("%w: read %s: %w", ErrMirror, m.path, err)
		}
		return nil, nil, err
	}
	return es, from, nil
}

// applyPending writes, in one transaction, the counts of the next keys of
// the change it hands out, until the transaction has written pendBatch
// keys or opened pendNodes pages, with the mark of the last key it wrote,
// or, when no key is left (done), the mark that every count is applied
// (pendApplied). It writes at least one key unless none was left.
func (m *Mirror) applyPending(it *pendIter, final bool) (done bool, err error) {
	ncounts, csum, nkids := m.ncounts, m.csum, m.nkids
	written := m.stats.CountsWritten
	zeroed := map[string]bool{}
	applied := 0
	err = m.db.Update(func(tx *bolt.Tx) error {
		bs, err := mirrorBuckets(tx, mirrorMeta, mirrorCounts, mirrorZero, mirrorKids)
		if err != nil {
			return err
		}
		counts := bs[1]
		var last pendEntry
		for applied < pendBatch {
			e, err := it.peek()
			if err != nil {
				return fmt.Errorf("%w: %w: %w", ErrMirror, errSpill, err)
			}
			if e == nil {
				break
			}
			if st := tx.Stats(); applied > 0 && st.GetNodeCount() >= int64(pendNodes) {
				break
			}
			last = *e
			it.pop()
			applied++
			k := last.key()
			n := 0
			if v := counts.Get(k); v != nil {
				var ok bool
				if n, ok = decodeCount(v); !ok {
					m.readErr = fmt.Errorf("%w: %s: a count fails its checksum", ErrMirror, m.path)
					return m.readErr
				}
			}
			now := max(n+int(last.d), 0) // below 0 cannot happen while the counts are exact
			if now == n {
				continue
			}
			m.stats.CountsWritten++
			if n != 0 {
				m.csum ^= countHash(string(k), n)
				m.ncounts--
			}
			if now != 0 {
				m.csum ^= countHash(string(k), now)
				m.ncounts++
				if !m.broken.dropCount {
					err = counts.Put(k, encodeCount(now))
				}
			} else {
				err = counts.Delete(k)
			}
			if err != nil {
				return err
			}
			if now == 0 && !isNode(string(k)) {
				key, ok := unpackKey(string(k))
				if !ok {
					m.readErr = fmt.Errorf("%w: %s: a counted key %x is neither a node nor a bucket key", ErrMirror, m.path, k)
					return m.readErr
				}
				zeroed[key] = true
			}
		}
		for k := range zeroed {
			m.zeroed[k] = m.rev
			m.dirtyZero[k] = true
		}
		if err := m.writeZeroed(bs[2]); err != nil {
			return err
		}
		e, err := it.peek()
		if err != nil {
			return fmt.Errorf("%w: %w: %w", ErrMirror, errSpill, err)
		}
		done = e == nil
		mark := pendApplied
		if !done {
			mark = bytes.Clone(last.key())
		}
		if err := bs[0].Put(pendMark, sealed(mark)); err != nil {
			return err
		}
		return bs[0].Put([]byte("header"), m.headerFor(final))
	})
	m.dirtyZero = map[string]bool{}
	if err != nil {
		m.ncounts, m.csum, m.nkids = ncounts, csum, nkids
		m.stats.CountsWritten = written
		if errors.Is(err, ErrMirror) {
			return false, err
		}
		return false, fmt.Errorf("%w: write %s: %w", ErrMirror, m.path, err)
	}
	return done, nil
}

// encodeDelta and decodeDelta encode a key's change of count in the pend
// bucket (never 0).
func encodeDelta(d int) []byte { return sealed(binary.AppendVarint(nil, int64(d))) }

func decodeDelta(v []byte) (int, bool) {
	b, ok := unseal(v)
	if !ok {
		return 0, false
	}
	d, w := binary.Varint(b)
	if w <= 0 || w != len(b) || d == 0 || d > 1<<40 || d < -(1<<40) {
		return 0, false
	}
	return int(d), true
}

// writeBack writes the overlay ov into b in key order (bbolt keeps a
// transaction's inserts in one node until commit, so keys in map order cost
// a copy of that node each: a cold build was quadratic): for each key, gone
// is told the value it replaces, if any, and value gives the new one, or
// false to delete the key.
func writeBack[V any](b *bolt.Bucket, ov map[string]V, gone func(k string, old []byte), value func(k string, v V) ([]byte, bool)) error {
	for _, k := range slices.Sorted(maps.Keys(ov)) {
		if old := b.Get([]byte(k)); old != nil {
			gone(k, old)
		}
		var err error
		if v, ok := value(k, ov[k]); ok {
			err = b.Put([]byte(k), v)
		} else {
			err = b.Delete([]byte(k))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// writeZeroed writes the changed zeroed keys into b.
func (m *Mirror) writeZeroed(b *bolt.Bucket) error {
	if m.broken.forgetZeroed {
		return nil
	}
	return writeBack(b, m.dirtyZero, func(string, []byte) {}, func(k string, _ bool) ([]byte, bool) {
		at, ok := m.zeroed[k]
		return sealed(binary.BigEndian.AppendUint64(nil, uint64(at))), ok
	})
}

// persistSettled writes the zeroed keys that Settle removed.
func (m *Mirror) persistSettled() error {
	defer func() { m.dirtyZero = map[string]bool{} }()
	err := m.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(mirrorZero)
		if err != nil {
			return err
		}
		return m.writeZeroed(b)
	})
	if err != nil {
		return fmt.Errorf("%w: write %s: %w", ErrMirror, m.path, err)
	}
	return nil
}

// load reads the file's header and zeroed keys into the mirror and checks
// the rest in one streamed pass, with no etcd or bucket read and nothing of
// it kept in the heap: every record, count and node's children passes its
// checksum, the records decode, the number and XOR of hashes of the records
// and of the counts are the header's, every counted node has its children
// and every node with children is counted. It returns why the file cannot be
// used, or "" (an empty file is used: the next Sync builds it). Without
// verify it reads the header and zeroed keys only: a sync that failed
// before its write left the file as the last open (or sync) checked it.
func (m *Mirror) load(verify bool) string {
	why := ""
	err := m.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(mirrorMeta)
		if meta == nil {
			if tx.Bucket(mirrorRecs) != nil || tx.Bucket(mirrorKids) != nil || tx.Bucket(mirrorCounts) != nil {
				why = "no header"
			}
			return nil
		}
		h, ok := unseal(meta.Get([]byte("header")))
		if !ok || len(h) < 4 {
			why = "header checksum"
			return nil
		}
		if v := binary.BigEndian.Uint32(h); v != mirrorFormat {
			why = fmt.Sprintf("format version %d, not %d", v, mirrorFormat)
			return nil
		}
		h = h[4:]
		n, w := binary.Uvarint(h)
		if w <= 0 || uint64(len(h)-w) < n || len(h)-w-int(n) != headerLen {
			why = "header length"
			return nil
		}
		if p := string(h[w : w+int(n)]); p != m.s.prefix {
			why = fmt.Sprintf("written for prefix %q", p)
			return nil
		}
		h = h[w+int(n):]
		m.cluster = binary.BigEndian.Uint64(h)
		m.rev = int64(binary.BigEndian.Uint64(h[8:]))
		m.nrecs = binary.BigEndian.Uint64(h[16:])
		m.rsum = binary.BigEndian.Uint64(h[24:])
		m.gap = int64(binary.BigEndian.Uint64(h[32:]))
		m.listed = int64(binary.BigEndian.Uint64(h[40:]))
		m.ncounts = binary.BigEndian.Uint64(h[48:])
		m.csum = binary.BigEndian.Uint64(h[56:])
		m.nkids = binary.BigEndian.Uint64(h[64:])
		if m.rev == 0 && (m.nrecs != 0 || m.ncounts != 0 || m.nkids != 0) && !m.broken.trustUnfinished {
			// Written in the middle of a sync (flush) that did not finish:
			// its counts may lack records the file already holds.
			why = "an unfinished sync"
			return nil
		}
		// A change of counts not applied in full: the open applies it
		// (finish) and checks the file after.
		m.pending = meta.Get(pendMark) != nil
		m.ahead = tx.Bucket(mirrorAhead) != nil
		if zero := tx.Bucket(mirrorZero); zero != nil {
			if err := zero.ForEach(func(k, v []byte) error {
				b, ok := unseal(v)
				if !ok || len(b) != 8 {
					return errors.New("zeroed key checksum")
				}
				m.zeroed[string(k)] = int64(binary.BigEndian.Uint64(b))
				return nil
			}); err != nil {
				why = err.Error()
			}
		}
		return nil
	})
	if err != nil {
		return err.Error()
	}
	if why == "" && verify && !m.pending && !m.ahead {
		why = m.check()
	}
	return why
}

// scan calls fn for every entry of the file's bucket name, in key order, in
// read transactions of about scanBytes each (the entries' keys and values,
// and what fn says it read besides), opening the file again (remap) between
// them: a pass over the whole file keeps no more of it mapped than that.
// Nothing may write the file meanwhile. Errors: fn's, or ErrMirror.
func (m *Mirror) scan(name []byte, fn func(tx *bolt.Tx, k, v []byte) (int, error)) error {
	var from []byte
	for {
		var next []byte
		err := m.db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket(name)
			if b == nil {
				return nil
			}
			c := b.Cursor()
			k, v := c.First()
			if from != nil {
				k, v = c.Seek(from)
			}
			for n := 0; k != nil; k, v = c.Next() {
				if n >= scanBytes {
					next = bytes.Clone(k)
					return nil
				}
				more, err := fn(tx, k, v)
				if err != nil {
					return err
				}
				n += len(k) + len(v) + more
			}
			return nil
		})
		if err != nil || next == nil {
			return err
		}
		if err := m.release(); err != nil {
			return err
		}
		from = next
	}
}

// scanBytes is about how much of the file scan reads in one transaction (a
// variable for the tests); pageBytes is what a lookup elsewhere in the file
// is taken to map: on a fault in a file's map, Linux also maps the
// neighbouring pages that are in its page cache ("fault-around", 64 KiB by
// default), so a lookup at a random place can add 16 pages to the resident
// memory, not one.
var scanBytes = 16 << 20

const pageBytes = 64 << 10

// check streams the records, counts and children of the file against the
// header (see load).
func (m *Mirror) check() string {
	var nrecs, rsum, ncounts, csum, nkids, nodes uint64
	if err := m.scan(mirrorRecs, func(_ *bolt.Tx, k, v []byte) (int, error) {
		body, ok := unseal(v)
		if !ok {
			return 0, errors.New("record checksum")
		}
		if _, err := m.edges(string(k), body); err != nil {
			return 0, err
		}
		nrecs++
		rsum ^= recHash(string(k), body)
		return 0, nil
	}); err != nil {
		return err.Error()
	}
	if nrecs != m.nrecs || rsum != m.rsum {
		return fmt.Sprintf("records truncated or changed (%d of %d)", nrecs, m.nrecs)
	}
	if err := m.scan(mirrorCounts, func(tx *bolt.Tx, k, v []byte) (int, error) {
		n, ok := decodeCount(v)
		if !ok && !m.broken.trustCounts {
			return 0, errors.New("count checksum")
		}
		ncounts++
		csum ^= countHash(string(k), n)
		if packedSize(k) != len(k) {
			return 0, errors.New("a count of neither a node nor a bucket key")
		}
		if !isNode(string(k)) {
			return 0, nil
		}
		nodes++
		if kids := tx.Bucket(mirrorKids); kids == nil || kids.Get(k) == nil {
			return 0, errors.New("a live node's objects are missing")
		}
		return pageBytes, nil
	}); err != nil {
		return err.Error()
	}
	if (ncounts != m.ncounts || csum != m.csum) && !m.broken.trustCounts {
		return fmt.Sprintf("counts truncated or changed (%d of %d)", ncounts, m.ncounts)
	}
	if err := m.scan(mirrorKids, func(_ *bolt.Tx, k, v []byte) (int, error) {
		if !kidsValid(v) || !isNode(string(k)) || len(k) != 2+keys.DigestLen {
			return 0, errors.New("node checksum")
		}
		nkids++
		return 0, nil
	}); err != nil {
		return err.Error()
	}
	if nkids != m.nkids || nkids != nodes {
		return fmt.Sprintf("a node without a count (%d nodes with children, %d counted, %d written)", nkids, nodes, m.nkids)
	}
	return ""
}
