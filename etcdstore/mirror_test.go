package etcdstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/keys"
	"github.com/cairnstore/cairn/sweep"
)

// mirrorBed is a store of both layouts on one prefix, some threads on it, and
// a mirror of it in a file.
type mirrorBed struct {
	e       *v2Env
	small   *Store // capacity layout for every checkpoint
	large   *Store // version-1 records (inline)
	path    string
	m       *Mirror
	fault   mirrorFault
	rnd     *rand.Rand
	threads map[string]*bedThread
	next    int
	// unused are the keys claimed by writers that then released their
	// leases without appending, in order.
	unused []string
}

type bedThread struct {
	w     cairn.Writer
	lease *cairn.Lease
	head  *cairn.Checkpoint
	n     int
}

func newMirrorBed(t *testing.T, seed uint64, fault mirrorFault) *mirrorBed {
	t.Helper()
	e := newV2Env(t)
	b := &mirrorBed{
		e: e, small: e.store(true, 1), large: e.store(true, 1<<20),
		path: filepath.Join(t.TempDir(), "mirror.db"), fault: fault,
		rnd: rand.New(rand.NewPCG(seed, seed^0x9e37)), threads: map[string]*bedThread{},
	}
	b.open()
	t.Cleanup(func() { b.m.Close() })
	return b
}

func (b *mirrorBed) open() {
	b.e.t.Helper()
	m, err := b.small.openMirror(b.e.ctx, b.path, b.fault)
	if err != nil {
		b.e.t.Fatal(err)
	}
	b.m = m
}

func (b *mirrorBed) restart() {
	b.e.t.Helper()
	if err := b.m.Close(); err != nil {
		b.e.t.Fatal(err)
	}
	b.open()
}

// store picks a layout for the next write.
func (b *mirrorBed) store() *Store {
	if b.rnd.IntN(3) == 0 {
		return b.large
	}
	return b.small
}

func (b *mirrorBed) thread(s *Store, name string) *bedThread {
	th := b.threads[name]
	if th == nil {
		l, err := s.AcquireWriter(b.e.ctx, name)
		if err != nil {
			b.e.t.Fatal(err)
		}
		th = &bedThread{w: l.Writer, lease: l}
		b.threads[name] = th
	}
	return th
}

func (b *mirrorBed) fresh(prefix string) string {
	b.next++
	return fmt.Sprintf("%s%d", prefix, b.next)
}

// checkpoint is the next checkpoint of th: its head's files with a few
// changed, new artifacts, and a longer conversation.
func (b *mirrorBed) checkpoint(name string, th *bedThread) cairn.Checkpoint {
	id := b.fresh("c")
	var files []cairn.Entry
	conv := []byte(`[]`)
	parent := ""
	if th.head != nil {
		files = slices.Clone(th.head.Files)
		conv = th.head.Conversation
		parent = th.head.ID
	} else {
		for i := range 40 {
			files = append(files, cairn.Entry{Path: fmt.Sprintf("src/f%03d.go", i), Kind: cairn.KindFile, BlobKey: objTestFileKey(id + fmt.Sprint(i)), Size: 1})
		}
	}
	for range 1 + b.rnd.IntN(3) {
		i := b.rnd.IntN(len(files))
		files[i].BlobKey = objTestFileKey(b.fresh("blob"))
	}
	conv = append(conv[:len(conv)-1:len(conv)-1], []byte(fmt.Sprintf(`%s{"turn":%q,"text":%q}]`, map[bool]string{true: "", false: ","}[len(conv) == 2], id, strings.Repeat("x", 300)))...)
	th.n++
	return cairn.Checkpoint{
		ID: id, ThreadID: name, ParentCheckpointID: parent, CreatedAt: float64(th.n), Reason: cairn.ReasonAutomatic,
		Files: files, Conversation: conv,
		Artifacts: []cairn.Artifact{{ArtifactID: "a" + id, Name: "r.txt", MimeType: "text/plain", Size: 1, BlobKey: objTestArtifactKey(id), CreatedAt: 1}},
	}
}

func (b *mirrorBed) names() []string {
	var out []string
	for n, th := range b.threads {
		if th.head != nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// step does one random operation and returns its name.
func (b *mirrorBed) step() string {
	t, ctx := b.e.t, b.e.ctx
	t.Helper()
	names := b.names()
	op := b.rnd.IntN(100)
	switch {
	case op < 40 || len(names) == 0:
		name := b.fresh("t")
		if len(names) > 0 && b.rnd.IntN(4) > 0 {
			name = names[b.rnd.IntN(len(names))]
		}
		s := b.store()
		th := b.thread(s, name)
		c := b.checkpoint(name, th)
		// The writer claims the keys its parent lacks, as bucket.UploadBlobs
		// does before it uploads them.
		var fresh []string
		for _, k := range c.BlobKeys() {
			if th.head == nil || !slices.Contains(th.head.BlobKeys(), k) {
				fresh = append(fresh, k)
			}
		}
		if _, err := s.ClaimBlobs(ctx, th.w, fresh); err != nil {
			t.Fatalf("claim for %s: %v", c.ID, err)
		}
		if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: c.ParentCheckpointID, Writer: th.w}); err != nil {
			t.Fatalf("append %s: %v", c.ID, err)
		}
		th.head = &c
		return "append"
	case op < 55:
		src := names[b.rnd.IntN(len(names))]
		dst := b.fresh("t")
		s := b.store()
		th := b.thread(s, dst)
		id := b.fresh("f")
		c, err := s.ForkFromCheckpoint(ctx, cairn.ForkInput{SourceThreadID: src, SourceCheckpointID: b.threads[src].head.ID,
			DestinationThreadID: dst, DestinationCheckpointID: id, CreatedAt: 1, Writer: th.w})
		if err != nil {
			t.Fatalf("fork %s: %v", src, err)
		}
		th.head, th.n = c, 1
		return "fork"
	case op < 70:
		name := names[b.rnd.IntN(len(names))]
		th := b.threads[name]
		if _, err := b.small.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: name, Keep: 1, Writer: th.w}); err != nil {
			t.Fatalf("prune %s: %v", name, err)
		}
		return "prune"
	case op < 78:
		name := names[b.rnd.IntN(len(names))]
		th := b.threads[name]
		if _, err := b.small.DeleteThread(ctx, cairn.DeleteThreadInput{ThreadID: name, Writer: th.w}); err != nil {
			t.Fatalf("delete thread %s: %v", name, err)
		}
		delete(b.threads, name)
		return "deleteThread"
	case op < 84:
		// A claim that ends without a reference: the writer claims a key,
		// and its lease ends.
		name := b.fresh("t")
		l, err := b.small.AcquireWriter(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		k := objTestFileKey(b.fresh("unused"))
		if _, err := b.small.ClaimBlobs(ctx, l.Writer, []string{k}); err != nil {
			t.Fatal(err)
		}
		b.unused = append(b.unused, k)
		l.Release(ctx)
		return "claimUnused"
	case op < 89:
		resp, err := b.e.cli.Get(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.e.cli.Compact(ctx, resp.Header.Revision); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatal(err)
		}
		return "compact"
	case op < 94:
		b.restart()
		return "restart"
	case op < 97:
		if err := b.m.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(b.path); err != nil {
			t.Fatal(err)
		}
		b.open()
		return "deleteFile"
	default:
		b.corrupt(b.rnd.IntN(4))
		return "corruptFile"
	}
}

// corrupt damages the closed mirror file in one of eight ways and reopens it
// (the differential test uses the first four).
func (b *mirrorBed) corrupt(how int) {
	t := b.e.t
	t.Helper()
	if err := b.m.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(b.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		pick := func(name []byte) (*bolt.Bucket, []byte) {
			bk := tx.Bucket(name)
			if bk == nil {
				return nil, nil
			}
			k, _ := bk.Cursor().First()
			return bk, k
		}
		switch how {
		case 0: // a flipped bit in a record
			if bk, k := pick(mirrorRecs); k != nil {
				v := slices.Clone(bk.Get(k))
				v[len(v)/2] ^= 1
				return bk.Put(k, v)
			}
		case 1: // a record lost (truncated)
			if bk, k := pick(mirrorRecs); k != nil {
				return bk.Delete(k)
			}
		case 2: // a live node's objects lost
			if bk, k := pick(mirrorKids); k != nil {
				return bk.Delete(k)
			}
		case 4: // a flipped bit in a count
			if bk, k := pick(mirrorCounts); k != nil {
				v := slices.Clone(bk.Get(k))
				v[0] ^= 1
				return bk.Put(k, v)
			}
		case 5: // a count lost (truncated)
			if bk, k := pick(mirrorCounts); k != nil {
				return bk.Delete(k)
			}
		case 6: // a blob key's count one too low, with a valid checksum
			if bk := tx.Bucket(mirrorCounts); bk != nil {
				k, _ := bk.Cursor().Seek([]byte{1})
				if k == nil {
					return nil
				}
				k = slices.Clone(k)
				n, _ := decodeCount(bk.Get(k))
				if n == 1 {
					return bk.Delete(k)
				}
				return bk.Put(k, encodeCount(n-1))
			}
		case 7: // written by format 3: its version, no counts
			if bk := tx.Bucket(mirrorMeta); bk != nil {
				h, ok := unseal(slices.Clone(bk.Get([]byte("header"))))
				if ok {
					binary.BigEndian.PutUint32(h, 3)
					if err := bk.Put([]byte("header"), sealed(h)); err != nil {
						return err
					}
				}
			}
			if tx.Bucket(mirrorCounts) != nil {
				return tx.DeleteBucket(mirrorCounts)
			}
		case 3: // written by an older format
			if bk := tx.Bucket(mirrorMeta); bk != nil {
				h, ok := unseal(slices.Clone(bk.Get([]byte("header"))))
				if ok {
					binary.BigEndian.PutUint32(h, mirrorFormat-1)
					return bk.Put([]byte("header"), sealed(h))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b.open()
}

// check syncs the mirror and compares its keys and counts with the full
// walk's at the same revision: the full run's comparison (Mirrored.Check).
func (b *mirrorBed) check() error {
	return b.small.WithMirror(b.m).Check(b.e.ctx)
}

// runDifferential does steps random operations, checking the mirror against
// the walk after most of them (the others leave it behind, so that
// compactions overtake it), and returns the first difference.
func runDifferential(t *testing.T, seed uint64, steps int, fault mirrorFault) error {
	t.Helper()
	b := newMirrorBed(t, seed, fault)
	var ops []string
	for i := range steps {
		rev := b.m.Revision()
		op := b.step()
		ops = append(ops, op)
		if op == "restart" && (b.m.Revision() != rev || b.m.Stats().Discarded != "") {
			return fmt.Errorf("step %d: an intact file was not resumed: revision %d, was %d; discarded %q", i, b.m.Revision(), rev, b.m.Stats().Discarded)
		}
		if b.rnd.IntN(3) == 0 && op != "restart" {
			continue // leave the mirror behind
		}
		if err := b.check(); err != nil {
			return fmt.Errorf("step %d (%s; ops so far %v): %w", i, op, ops[max(0, len(ops)-6):], err)
		}
	}
	return nil
}

func TestMirrorDifferential(t *testing.T) {
	steps := 400
	if testing.Short() {
		steps = 120
	}
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			if err := runDifferential(t, seed, steps, mirrorFault{}); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Builds (the first, and after each lost or damaged file) in batches
	// of two records.
	t.Run("batches", func(t *testing.T) {
		defer func(n int) { applyBatch = n }(applyBatch)
		applyBatch = 2
		if err := runDifferential(t, 3, steps, mirrorFault{}); err != nil {
			t.Fatal(err)
		}
	})
	// Counts applied a few keys a transaction, the file read a few entries
	// a transaction and opened again between, and lookups a few at a time;
	// then counts applied until a transaction has opened a few pages; then
	// the expanded change sorted through its spill file; then the new
	// nodes' children written ahead every few children, in the middle of
	// the sync, and their chunks read a few at a time.
	for _, c := range []struct {
		name         string
		batch, pags  int
		spill        int
		kids, chunks int
	}{
		{"small steps", 3, 1024, 1 << 18, 1 << 17, 512},
		{"few pages a transaction", 16384, 3, 1 << 18, 1 << 17, 512},
		{"change spilled", 16384, 1024, 5, 1 << 17, 512},
		{"children written ahead", 16384, 1024, 1 << 18, 3, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func(p, n, b, l, k, s, ks, cb int) {
				pendBatch, pendNodes, scanBytes, lookRemap, kidsBatch, pendSpill, kidsSpill, chunkBatch = p, n, b, l, k, s, ks, cb
			}(pendBatch, pendNodes, scanBytes, lookRemap, kidsBatch, pendSpill, kidsSpill, chunkBatch)
			pendBatch, pendNodes, scanBytes, lookRemap, kidsBatch, pendSpill = c.batch, c.pags, 200, 2, 2, c.spill
			kidsSpill, chunkBatch = c.kids, c.chunks
			if err := runDifferential(t, 4, steps, mirrorFault{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMirrorDifferentialCatchesBroken runs the differential test against
// deliberately broken mirrors: each must be caught.
func TestMirrorDifferentialCatchesBroken(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault mirrorFault
	}{
		{"drops a watch event", mirrorFault{dropEvent: 7}},
		{"trusts a stale file", mirrorFault{trustStale: true}},
		{"counts a fork's root once too few", mirrorFault{forkShort: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runDifferential(t, 1, 400, tc.fault)
			if err == nil {
				t.Fatal("the broken mirror was not caught")
			}
			t.Logf("caught: %v", err)
		})
	}
}

// TestMirrorRestartReadsNothing: a mirror reopened from an intact file
// follows the watch from its revision with no object read and no range read.
func TestMirrorRestartReadsNothing(t *testing.T) {
	b := newMirrorBed(t, 3, mirrorFault{})
	for range 30 {
		b.step()
	}
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
	rev := b.m.Revision()
	b.restart()
	if st := b.m.Stats(); st.Discarded != "" || b.m.Revision() != rev {
		t.Fatalf("reopened: discarded %q, revision %d, want %d", st.Discarded, b.m.Revision(), rev)
	}
	name := b.fresh("t")
	th := b.thread(b.small, name)
	c := b.checkpoint(name, th)
	if _, err := b.small.Append(b.e.ctx, cairn.AppendInput{Checkpoint: c, Writer: th.w}); err != nil {
		t.Fatal(err)
	}
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
	st := b.m.Stats()
	if st.Relists != 0 || st.Rebuilds != 0 {
		t.Fatalf("restart listed %d times, rebuilt %d times", st.Relists, st.Rebuilds)
	}
	// One new checkpoint of a new thread: its root, transcript and
	// reference chunks, nothing else.
	if st.ObjectReads == 0 || st.ObjectReads > 8 {
		t.Fatalf("restart then one append read %d objects", st.ObjectReads)
	}
}

// TestMirrorCompactedReadsOnce: a mirror whose revision was compacted reads
// the records once, at one revision.
func TestMirrorCompactedReadsOnce(t *testing.T) {
	b := newMirrorBed(t, 4, mirrorFault{})
	for range 10 {
		b.step()
	}
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
	before := b.m.Stats()
	for i := 0; i < 5; i++ {
		name := b.fresh("t")
		th := b.thread(b.small, name)
		c := b.checkpoint(name, th)
		if _, err := b.small.Append(b.e.ctx, cairn.AppendInput{Checkpoint: c, Writer: th.w}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := b.e.cli.Get(b.e.ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.e.cli.Compact(b.e.ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
	st := b.m.Stats()
	if got := st.Relists - before.Relists; got != 1 {
		t.Fatalf("compacted: %d range reads, want 1", got)
	}
	if st.WatchRestarts-before.WatchRestarts != 1 {
		t.Fatalf("compacted: %d watch restarts, want 1", st.WatchRestarts-before.WatchRestarts)
	}
}

// TestMirrorForeignFile: a file of another prefix is discarded and rebuilt.
func TestMirrorForeignFile(t *testing.T) {
	b := newMirrorBed(t, 5, mirrorFault{})
	for range 5 {
		b.step()
	}
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
	b.m.Close()
	other, err := New(b.e.cli, "other/", Options{Objects: b.e.mem})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	m, err := other.OpenMirror(b.e.ctx, b.path)
	if err != nil {
		t.Fatal(err)
	}
	why := m.Stats().Discarded
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(why, "prefix") {
		t.Fatalf("a file of another prefix: discarded %q", why)
	}
	b.open()
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
	if b.m.Stats().Rebuilds != 1 {
		t.Fatalf("back on its own prefix: %d rebuilds, want 1", b.m.Stats().Rebuilds)
	}
}

// TestMirroredSweep: the online sweep on a Mirrored store plans exactly what
// it plans on the store (dry runs), then deletes only garbage, and a sweep
// after nothing changed reads no object.
func TestMirroredSweep(t *testing.T) {
	b := newMirrorBed(t, 6, mirrorFault{})
	if err := bucket.BindStore(b.e.ctx, b.small, b.e.mem); err != nil {
		t.Fatal(err)
	}
	put := func() {
		// The bytes of every blob that any checkpoint so far named, and
		// of every claimed key.
		for _, th := range b.threads {
			if th.head == nil {
				continue
			}
			for _, k := range th.head.BlobKeys() {
				b.e.mem.Put(b.e.ctx, k, []byte("b"))
			}
		}
	}
	for range 60 {
		b.step()
		put()
	}
	time.Sleep(2 * time.Millisecond) // every upload strictly older than the sweep's now
	mirrored := b.small.WithMirror(b.m)
	plan := func(refs sweep.References) []string {
		t.Helper()
		rep, err := sweep.Sweep(b.e.ctx, refs, b.e.mem, sweep.Options{DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Deleted
	}
	want := plan(b.small)
	if got := plan(mirrored); !slices.Equal(got, want) {
		t.Fatalf("dry run on the mirror: %d keys, on the store: %d", len(got), len(want))
	}
	if len(want) == 0 {
		t.Fatal("the bed made no garbage")
	}
	var live []string
	if _, err := b.small.ReadBlobGC(b.e.ctx, func(r cairn.BlobReference) error {
		live = append(live, r.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := sweep.Sweep(b.e.ctx, mirrored, b.e.mem, sweep.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Deleted, want) {
		t.Fatalf("the sweep deleted %d keys, its dry run planned %d", len(rep.Deleted), len(want))
	}
	for _, k := range live {
		if slices.Contains(rep.Deleted, k) {
			t.Fatalf("live key %s deleted", k)
		}
	}
	vrep, err := b.small.Verify(b.e.ctx, VerifyOptions{Objects: true})
	if err != nil || !vrep.OK() {
		t.Fatalf("Verify after the sweep: %v %v", vrep.Problems, err)
	}
	reads := b.m.Stats().ObjectReads
	if _, err := sweep.Sweep(b.e.ctx, mirrored, b.e.mem, sweep.Options{}); err != nil {
		t.Fatal(err)
	}
	if got := b.m.Stats().ObjectReads - reads; got != 0 {
		t.Fatalf("a sweep with nothing changed read %d objects", got)
	}
}

// TestMirroredSweepSyncs: a key marked as garbage and then referenced again
// is kept, because the sweep's decision uses the mirror at a revision no
// older than the GC record. A broken Mirrored that decides on the mirror as it
// stands (not synced after the GC state was read) deletes the live key.
func TestMirroredSweepSyncs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		skipSync bool
	}{{"synced", false}, {"broken: not synced", true}} {
		t.Run(tc.name, func(t *testing.T) {
			b := newMirrorBed(t, 7, mirrorFault{skipSync: tc.skipSync})
			if err := bucket.BindStore(b.e.ctx, b.small, b.e.mem); err != nil {
				t.Fatal(err)
			}
			for range 5 {
				b.step()
			}
			k := objTestFileKey("garbage, then used again")
			b.e.mem.Put(b.e.ctx, k, []byte("b"))
			now := time.Now()
			opts := sweep.Options{OlderThan: time.Hour, Now: func() time.Time { return now }}
			mirrored := b.small.WithMirror(b.m)
			if _, err := b.m.Sync(b.e.ctx); err != nil {
				t.Fatal(err)
			}
			if rep, err := sweep.Sweep(b.e.ctx, mirrored, b.e.mem, opts); err != nil || rep.Marked == 0 {
				t.Fatalf("first sweep: marked %d, %v", rep.Marked, err)
			}
			// A new checkpoint names the key again.
			name := b.fresh("t")
			th := b.thread(b.small, name)
			c := b.checkpoint(name, th)
			c.Files[0].BlobKey = k
			if _, err := b.small.Append(b.e.ctx, cairn.AppendInput{Checkpoint: c, Writer: th.w}); err != nil {
				t.Fatal(err)
			}
			now = now.Add(3 * time.Hour)
			rep, err := sweep.Sweep(b.e.ctx, mirrored, b.e.mem, opts)
			if err != nil {
				t.Fatal(err)
			}
			deleted := slices.Contains(rep.Deleted, k)
			if deleted != tc.skipSync {
				t.Fatalf("the referenced key deleted: %v", deleted)
			}
			if deleted {
				t.Logf("the broken variant deleted the live key %s", k)
			}
		})
	}
}

// live returns the keys the mirror counts, after a sync.
func (b *mirrorBed) live() map[string]bool {
	b.e.t.Helper()
	if _, err := b.m.Sync(b.e.ctx); err != nil {
		b.e.t.Fatal(err)
	}
	out := map[string]bool{}
	_ = b.m.Live(func(r cairn.BlobReference) error {
		out[r.Key] = true
		return nil
	})
	return out
}

// zeroedAcrossRestart appends to a few threads, syncs, prunes and deletes a
// thread, syncs, restarts the mirror from its file, and returns the keys that
// lost their last reference and the zeroed keys after the restart.
func zeroedAcrossRestart(t *testing.T, fault mirrorFault) (lost, zeroed []string, b *mirrorBed) {
	t.Helper()
	b = newMirrorBed(t, 8, fault)
	ctx := b.e.ctx
	for i := range 12 {
		name := fmt.Sprintf("z%d", i%3)
		s := b.small
		if i%4 == 0 {
			s = b.large
		}
		th := b.thread(s, name)
		c := b.checkpoint(name, th)
		if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: c.ParentCheckpointID, Writer: th.w}); err != nil {
			t.Fatal(err)
		}
		th.head = &c
	}
	before := b.live()
	for _, name := range []string{"z0", "z1"} {
		if _, err := b.small.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: name, Keep: 1, Writer: b.threads[name].w}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.small.DeleteThread(ctx, cairn.DeleteThreadInput{ThreadID: "z2", Writer: b.threads["z2"].w}); err != nil {
		t.Fatal(err)
	}
	after := b.live()
	for k := range before {
		if !after[k] {
			lost = append(lost, k)
		}
	}
	slices.Sort(lost)
	b.restart()
	if st := b.m.Stats(); st.Discarded != "" {
		t.Fatalf("an intact file was discarded: %s", st.Discarded)
	}
	return lost, b.m.Zeroed(), b
}

// TestMirrorZeroedSurvivesRestart: the keys whose count fell to zero are
// kept in the file with the revision until a sweep settles them, so a
// restart loses none; Settle forgets only keys zeroed at or before the
// sweep's read. A mirror that does not persist them is caught.
func TestMirrorZeroedSurvivesRestart(t *testing.T) {
	lost, zeroed, b := zeroedAcrossRestart(t, mirrorFault{})
	if len(lost) == 0 {
		t.Fatal("the bed made no garbage")
	}
	if !slices.Equal(zeroed, lost) {
		t.Fatalf("after a restart the mirror has %d zeroed keys, %d keys lost their last reference", len(zeroed), len(lost))
	}
	rev := b.m.Revision()
	// A sweep whose read predates the fall settles nothing.
	if err := b.m.Settle(zeroed, rev-1); err != nil {
		t.Fatal(err)
	}
	if got := b.m.Zeroed(); !slices.Equal(got, lost) {
		t.Fatalf("a settle at an older revision forgot %d keys", len(lost)-len(got))
	}
	half := zeroed[:len(zeroed)/2]
	if err := b.m.Settle(half, rev); err != nil {
		t.Fatal(err)
	}
	b.restart()
	if got, want := b.m.Zeroed(), zeroed[len(zeroed)/2:]; !slices.Equal(got, want) {
		t.Fatalf("after settling half and a restart: %d zeroed keys, want %d", len(got), len(want))
	}
	if err := b.m.Discard(); err != nil {
		t.Fatal(err)
	}
	b.restart()
	if got := b.m.Zeroed(); len(got) != 0 {
		t.Fatalf("a discarded mirror kept %d zeroed keys", len(got))
	}

	t.Run("broken: zeroed keys not persisted", func(t *testing.T) {
		lost, zeroed, _ := zeroedAcrossRestart(t, mirrorFault{forgetZeroed: true})
		if slices.Equal(zeroed, lost) {
			t.Fatal("the broken mirror was not caught")
		}
		t.Logf("caught: %d of %d keys that lost their last reference were forgotten by a restart", len(lost)-len(zeroed), len(lost))
	})
}

// TestMirrorEndedClaims: the mirror follows the claims with the reference
// records, so a key claimed and then abandoned (its writer released without
// appending, so its claim ended with its lease) becomes a candidate, kept
// across a restart; a claimed key that the append then referenced does not.
// A compacted watch moves WatchedSince: the claims that ended in the gap were
// not seen one by one.
func TestMirrorEndedClaims(t *testing.T) {
	b := newMirrorBed(t, 9, mirrorFault{})
	ctx := b.e.ctx
	name := b.fresh("t")
	th := b.thread(b.small, name)
	c := b.checkpoint(name, th)
	if _, err := b.small.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: th.w}); err != nil {
		t.Fatal(err)
	}
	th.head = &c
	b.live()
	since := b.m.WatchedSince()
	if since == 0 {
		t.Fatal("a built mirror has no WatchedSince")
	}

	// Claimed, then referenced by the append that ends the claim.
	used := objTestFileKey(b.fresh("used"))
	if _, err := b.small.ClaimBlobs(ctx, th.w, []string{used}); err != nil {
		t.Fatal(err)
	}
	c2 := b.checkpoint(name, th)
	c2.ParentCheckpointID = c.ID
	c2.Files[0].BlobKey = used
	if _, err := b.small.Append(ctx, cairn.AppendInput{Checkpoint: c2, ExpectedHeadID: c.ID, Writer: th.w}); err != nil {
		t.Fatal(err)
	}
	// Claimed by a writer that then released its lease without appending.
	abandoned := objTestFileKey(b.fresh("abandoned"))
	l, err := b.small.AcquireWriter(ctx, b.fresh("t"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.small.ClaimBlobs(ctx, l.Writer, []string{abandoned}); err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)

	live := b.live()
	if !live[used] {
		t.Fatal("the used key is not referenced")
	}
	b.restart()
	got := b.m.Zeroed()
	if !slices.Contains(got, abandoned) {
		t.Fatalf("the abandoned claim's key is not a candidate after a restart: %v", got)
	}
	if slices.Contains(got, used) {
		t.Fatal("a key whose claim ended with the append that references it is a candidate")
	}
	if b.m.WatchedSince() != since {
		t.Fatalf("WatchedSince moved from %d to %d without a range read", since, b.m.WatchedSince())
	}

	for range 2 {
		if _, err := b.small.ClaimBlobs(ctx, th.w, []string{objTestFileKey(b.fresh("gap"))}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := b.e.cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.e.cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	b.live()
	if b.m.WatchedSince() <= since {
		t.Fatalf("after a compacted watch WatchedSince is %d, was %d", b.m.WatchedSince(), since)
	}
	if !slices.Contains(b.m.Zeroed(), abandoned) {
		t.Fatal("a range read forgot an unsettled candidate")
	}
}

// TestMirrorReadRate: a cold build under SetReadRate reads its objects no
// faster than the rate allows (after one burst), and builds the same mirror.
func TestMirrorReadRate(t *testing.T) {
	b := newMirrorBed(t, 14, mirrorFault{})
	for range 30 {
		b.step()
	}
	if err := b.m.Discard(); err != nil {
		t.Fatal(err)
	}
	const perSecond = 10
	b.m.SetReadRate(perSecond)
	start := time.Now()
	if _, err := b.m.Sync(b.e.ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	n := b.m.Stats().ObjectReads
	if n <= 2*perSecond {
		t.Fatalf("the bed has %d objects to read, too few to show a rate of %d a second", n, perSecond)
	}
	// A limiter lets one burst through at once, then perSecond a second.
	if least := time.Duration(float64(n-perSecond) / perSecond * float64(time.Second)); took < least {
		t.Fatalf("read %d objects in %v at %d a second; at least %v", n, took, perSecond, least)
	}
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d objects in %v at %d a second", n, took, perSecond)
}

// storedEntries returns the number of records, counts and nodes' children
// in m's file.
func (m *Mirror) storedEntries() int {
	n := 0
	_ = m.db.View(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{mirrorRecs, mirrorCounts, mirrorKids} {
			if bk := tx.Bucket(b); bk != nil {
				n += bk.Stats().KeyN
			}
		}
		return nil
	})
	return n
}

// corruptAndCheck builds a mirror, damages its file in the way how names
// (see corrupt), reopens it and syncs: it returns why the file was discarded
// and the full run's comparison of the synced mirror with the walk.
func corruptAndCheck(t *testing.T, how int, fault mirrorFault) (string, error) {
	t.Helper()
	b := newMirrorBed(t, 21, fault)
	for range 12 {
		b.step()
	}
	if err := b.check(); err != nil {
		t.Fatalf("before the damage: %v", err)
	}
	b.corrupt(how)
	return b.m.Stats().Discarded, b.check()
}

// A file with a damaged or lost count, or written by format 3, is found at
// open and rebuilt; a mirror that trusts its counts is caught by the full
// run's comparison.
func TestMirrorCorruptCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		how  int
	}{{"flipped bit", 4}, {"count lost", 5}, {"count one too low", 6}, {"format 3", 7}} {
		t.Run(tc.name, func(t *testing.T) {
			why, err := corruptAndCheck(t, tc.how, mirrorFault{})
			if why == "" {
				t.Fatal("the damaged file was used")
			}
			if err != nil {
				t.Fatalf("discarded (%s), but the rebuilt mirror differs from the walk: %v", why, err)
			}
		})
	}
	t.Run("broken: counts trusted", func(t *testing.T) {
		why, err := corruptAndCheck(t, 6, mirrorFault{trustCounts: true})
		if why == "" && err == nil {
			t.Fatal("the broken mirror was not caught")
		}
		t.Logf("caught: discarded %q, comparison %v", why, err)
	})
}

// TestMirrorReadsUncached checks that what a sync reads from the bucket
// stays out of its store's object cache: the mirror reads each object once,
// and in a sweeper process the cache would only hold memory.
func TestMirrorReadsUncached(t *testing.T) {
	b := newMirrorBed(t, 5, mirrorFault{})
	s := b.e.store(true, 1)
	m, err := s.OpenMirror(b.e.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	for range 30 {
		b.step()
	}
	if _, err := m.Sync(b.e.ctx); err != nil {
		t.Fatal(err)
	}
	if m.Stats().ObjectReads == 0 {
		t.Fatal("the sync read no object")
	}
	if n := s.objCache.size; n != 0 {
		t.Fatalf("the sync's %d object reads left %d bytes in the store's object cache", m.Stats().ObjectReads, n)
	}
}

// Each sync writes what it changed back to the file with the revision: the
// overlay is empty after it, the file passes its own check, and a reopened
// mirror resumes at the same revision with the same counts. A mirror that
// drops the counts it writes is caught at the reopen.
func TestMirrorOverlayWriteBack(t *testing.T) {
	run := func(t *testing.T, fault mirrorFault) error {
		t.Helper()
		b := newMirrorBed(t, 22, fault)
		for i := range 10 {
			b.step()
			rev, err := b.m.Sync(b.e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(b.m.ovRecs) + len(b.m.ovCounts) + len(b.m.ovKids); n != 0 {
				return fmt.Errorf("step %d: %d overlay entries after the sync", i, n)
			}
			var before []cairn.BlobReference
			if err := b.m.Live(func(r cairn.BlobReference) error { before = append(before, r); return nil }); err != nil {
				t.Fatal(err)
			}
			b.restart()
			if st := b.m.Stats(); st.Discarded != "" || b.m.Revision() != rev {
				return fmt.Errorf("step %d: reopened: discarded %q, revision %d, want %d", i, st.Discarded, b.m.Revision(), rev)
			}
			var after []cairn.BlobReference
			if err := b.m.Live(func(r cairn.BlobReference) error { after = append(after, r); return nil }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(before, after) {
				return fmt.Errorf("step %d: reopened with %d counted keys, had %d", i, len(after), len(before))
			}
			if err := b.check(); err != nil {
				return fmt.Errorf("step %d: %w", i, err)
			}
		}
		return nil
	}
	if err := run(t, mirrorFault{}); err != nil {
		t.Fatal(err)
	}
	t.Run("broken: counts not written", func(t *testing.T) {
		err := run(t, mirrorFault{dropCount: true})
		if err == nil {
			t.Fatal("the broken mirror was not caught")
		}
		t.Logf("caught: %v", err)
	})
}

// A sync applies each key's summed change once: a fork's thread deleted
// (and its transcript emptied) and a fork of the same checkpoint under the
// same id made in one sync leave every count as it was (the two forks'
// records name the same root), so the sync
// neither reads a node's children back from the file nor writes a count. A
// mirror that passes each record's change down on its own (+1 to every key
// under the root, then -1 to each) reads the children back; one that writes
// back every count it touched rewrites them unchanged.
func TestMirrorSummedChange(t *testing.T) {
	b := newMirrorBed(t, 5, mirrorFault{})
	ctx := b.e.ctx
	src := b.thread(b.small, "src")
	c := b.checkpoint("src", src)
	if _, err := b.small.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: src.w}); err != nil {
		t.Fatal(err)
	}
	fork := func(dst string) {
		t.Helper()
		th := b.thread(b.small, dst)
		if _, err := b.small.ForkFromCheckpoint(ctx, cairn.ForkInput{SourceThreadID: "src", SourceCheckpointID: c.ID,
			DestinationThreadID: dst, DestinationCheckpointID: "fork", CreatedAt: 1, Writer: th.w}); err != nil {
			t.Fatal(err)
		}
	}
	fork("one")
	if _, err := b.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	before := b.m.Stats()
	if before.CountsWritten == 0 || before.ChildReads != 0 {
		t.Fatalf("the first sync wrote %d counts and read children back %d times", before.CountsWritten, before.ChildReads)
	}
	// The first fork's thread and its transcript (which names the root
	// too) go; the second fork names the same root, with the same id.
	if _, err := b.small.DeleteThread(ctx, cairn.DeleteThreadInput{ThreadID: "one", Writer: b.threads["one"].w}); err != nil {
		t.Fatal(err)
	}
	if err := b.small.Transcripts().SaveThread(ctx, "one", json.RawMessage(`[]`)); err != nil {
		t.Fatal(err)
	}
	fork("two")
	if _, err := b.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
	after := b.m.Stats()
	if n := after.ChildReads - before.ChildReads; n != 0 {
		t.Errorf("the sync read children back %d times, want 0", n)
	}
	if n := after.CountsWritten - before.CountsWritten; n != 0 {
		t.Errorf("the sync wrote %d counts, want 0", n)
	}
}

// A cold build writes its change to the file a batch of records at a time,
// so that its heap holds one batch: the mirror it builds equals the walk. A
// file a crash left in the middle of a build is refused at open (its counts
// may lack records it already holds) and rebuilt; a mirror that trusts it
// is caught by the full run's comparison. A build that fails in the middle
// leaves an empty file, and the next sync builds it whole.
func TestMirrorBuildInBatches(t *testing.T) {
	defer func(n int) { applyBatch = n }(applyBatch)
	applyBatch = 3
	var flushes int
	var image string // the file as the first flush left it
	b := newMirrorBed(t, 9, mirrorFault{afterFlush: func(path string) error {
		flushes++
		if image == "" {
			image = filepath.Join(t.TempDir(), "crashed.db")
			if err := copyFile(path, image); err != nil {
				return err
			}
		}
		return nil
	}})
	ctx := b.e.ctx
	for i := range 14 {
		name := fmt.Sprintf("t%d", i%4)
		th := b.thread(b.small, name)
		c := b.checkpoint(name, th)
		if _, err := b.small.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: c.ParentCheckpointID, Writer: th.w}); err != nil {
			t.Fatal(err)
		}
		th.head = &c
	}
	if _, err := b.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if flushes < 2 {
		t.Fatalf("the build wrote %d batches before its last, want at least 2", flushes)
	}
	if err := b.check(); err != nil {
		t.Fatalf("the mirror built in batches: %v", err)
	}
	// The build ends with the file compacted in place; a copy a crash
	// left beside it is removed at the next open.
	if err := os.WriteFile(b.path+compactSuffix, []byte("half a copy"), 0o600); err != nil {
		t.Fatal(err)
	}
	rev := b.m.Revision()
	b.restart()
	if st := b.m.Stats(); st.Discarded != "" || b.m.Revision() != rev {
		t.Fatalf("reopened after the build: discarded %q, revision %d, want %d", st.Discarded, b.m.Revision(), rev)
	}
	if _, err := os.Stat(b.path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stray compacted copy is still there: %v", err)
	}
	if err := b.check(); err != nil {
		t.Fatalf("the compacted mirror, reopened: %v", err)
	}

	// The crash image: refused at open and rebuilt.
	open := func(fault mirrorFault) *Mirror { t.Helper(); return b.openImage(t, image, fault) }
	m := open(mirrorFault{})
	if got := m.Stats().Discarded; got != "an unfinished sync" {
		t.Errorf("the file a crash left in a build: discarded %q, want %q", got, "an unfinished sync")
	}
	if _, err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.small.WithMirror(m).Check(ctx); err != nil {
		t.Errorf("rebuilt from the crash image: %v", err)
	}
	t.Run("broken: trusts an unfinished file", func(t *testing.T) {
		m := open(mirrorFault{trustUnfinished: true})
		if _, err := m.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		err := b.small.WithMirror(m).Check(ctx)
		if err == nil {
			t.Fatal("the mirror that trusts an unfinished file was not caught")
		}
		t.Logf("caught: %v", err)
	})

	// A build that fails after a batch: the file is emptied, and the next
	// sync builds it whole.
	b.m.broken.afterFlush = func(string) error { return errors.New("the bucket went away") }
	if err := b.m.Discard(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.m.Sync(ctx); err == nil {
		t.Fatal("the failing build returned no error")
	}
	if b.m.Revision() != 0 || b.m.Records() != 0 {
		t.Errorf("after the failed build: revision %d, %d records, want an empty mirror", b.m.Revision(), b.m.Records())
	}
	b.m.broken.afterFlush = nil
	if _, err := b.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.check(); err != nil {
		t.Errorf("built again after the failure: %v", err)
	}
}

// openImage opens a mirror, with fault, on a copy of the file image (a
// crash image), closed at t's end.
func (b *mirrorBed) openImage(t *testing.T, image string, fault mirrorFault) *Mirror {
	t.Helper()
	path := filepath.Join(t.TempDir(), "copy.db")
	if err := copyFile(image, path); err != nil {
		t.Fatal(err)
	}
	m, err := b.small.openMirror(b.e.ctx, path, fault)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// copyFile copies the file from to the file to.
func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// A sync writes its change of counts after its records, in batches of
// pendBatch keys, each transaction marking how far it got, the change sorted
// through its spill file (pendSpill 16). A write that stops
// after any batch (an error, or a crash: the file as it was then) is taken up
// where it stopped, by the next sync of the same mirror or by the open of
// the file; until then the mirror reports every key as referenced and names
// no candidate. The counts then equal the walk's. A mirror that applies the
// change from its start again, ignoring the mark, is caught by the full
// run's comparison.
func TestMirrorApplyInBatches(t *testing.T) {
	defer func(n, k, p int) { pendBatch, kidsBatch, pendSpill = n, k, p }(pendBatch, kidsBatch, pendSpill)
	pendBatch, kidsBatch, pendSpill = 2, 1, 16
	b := newMirrorBed(t, 11, mirrorFault{})
	ctx := b.e.ctx
	for range 12 {
		b.step()
	}
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
	churn := func() {
		t.Helper()
		for i := range 6 {
			name := fmt.Sprintf("c%d", i%3)
			th := b.thread(b.small, name)
			c := b.checkpoint(name, th)
			if _, err := b.small.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: c.ParentCheckpointID, Writer: th.w}); err != nil {
				t.Fatal(err)
			}
			th.head = &c
		}
		b.step() // may restart the mirror: set its faults after
	}
	churn()
	batches := 0
	removals := 0
	b.m.broken.afterApply = func(n int, removing bool) error {
		if removing {
			removals++
		} else {
			batches = max(batches, n)
		}
		return nil
	}
	if _, err := b.m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
	if batches < 120 || removals < 3 {
		t.Fatalf("the sync applied its change in %d batches and removed it in %d more, want at least 120 and 3", batches, removals)
	}
	// The first batches hold nodes' counts (node ids sort first), the
	// later ones bucket keys'; -1 stops in the removal.
	for _, stop := range []int{1, 30, 60, -1} {
		name := fmt.Sprintf("stopped after batch %d", stop)
		if stop < 0 {
			name = "stopped in the removal"
		}
		t.Run(name, func(t *testing.T) {
			churn()
			image := filepath.Join(t.TempDir(), "crashed.db")
			b.m.broken.afterApply = func(n int, removing bool) error {
				if n < stop || (stop < 0 && !removing) {
					return nil
				}
				if err := copyFile(b.path, image); err != nil {
					return err
				}
				return errors.New("the disk went away")
			}
			_, err := b.m.Sync(ctx)
			b.m.broken.afterApply = nil
			if err == nil {
				t.Skip("the change was applied in fewer batches")
			}
			if !b.m.pending {
				t.Fatalf("the sync's write stopped (%v), and the mirror does not say so", err)
			}
			es, mark, err := b.m.pendingChange()
			if err != nil {
				t.Fatal(err)
			}
			if err := es.close(); err != nil {
				t.Fatal(err)
			}
			if got := b.m.Zeroed(); len(got) != 0 {
				t.Errorf("with a change not applied in full, Zeroed names %d keys, want none", len(got))
			}
			if err := b.m.Live(func(cairn.BlobReference) error { return nil }); !errors.Is(err, ErrMirror) {
				t.Errorf("with a change not applied in full, Live: %v, want ErrMirror", err)
			}
			open := func(fault mirrorFault) *Mirror { t.Helper(); return b.openImage(t, image, fault) }
			m := open(mirrorFault{})
			if st := m.Stats(); st.Discarded != "" || st.Rebuilds != 0 {
				t.Fatalf("the file a crash left in the write: discarded %q", st.Discarded)
			}
			if m.pending {
				t.Fatal("the open left the change unapplied")
			}
			if err := b.small.WithMirror(m).Check(ctx); err != nil {
				t.Errorf("the crash image, opened: %v", err)
			}
			if got := m.Stats().ObjectReads; got != 0 {
				t.Errorf("the crash image's open and sync read %d objects, want 0", got)
			}
			t.Run("broken: applies the change from its start again", func(t *testing.T) {
				if len(mark) == 0 || isNode(string(mark)) {
					// A node's count applied twice changes no bucket
					// key's count: the node only stays live longer.
					t.Skip("the write stopped among the nodes' counts")
				}
				if bytes.Equal(mark, pendApplied) {
					t.Skip("the write stopped after every count was applied")
				}
				m := open(mirrorFault{reapply: true})
				err := b.small.WithMirror(m).Check(ctx)
				if err == nil {
					t.Fatal("the mirror that applies a change twice was not caught")
				}
				t.Logf("caught: %v", err)
			})
			// The mirror whose write stopped takes it up at its next sync.
			if err := b.check(); err != nil {
				t.Errorf("the mirror whose write stopped, synced again: %v", err)
			}
		})
	}
	// A write that stops while it writes the new nodes' children, before
	// the change: the children are removed (at the next sync, or at the
	// open of the file as it was), and the counts are the walk's.
	t.Run("stopped ahead of the change", func(t *testing.T) {
		churn()
		image := filepath.Join(t.TempDir(), "crashed.db")
		b.m.broken.afterAhead = func(n int) error {
			if n < 2 {
				return nil
			}
			if err := copyFile(b.path, image); err != nil {
				return err
			}
			return errors.New("the disk went away")
		}
		_, err := b.m.Sync(ctx)
		b.m.broken.afterAhead = nil
		if err == nil {
			t.Fatal("the sync made fewer than 2 nodes live")
		}
		if !b.m.ahead {
			t.Fatalf("the sync's write stopped (%v), and the mirror does not say so", err)
		}
		m := b.openImage(t, image, mirrorFault{})
		if st := m.Stats(); st.Discarded != "" {
			t.Fatalf("the file a crash left ahead of the change: discarded %q", st.Discarded)
		}
		if m.ahead {
			t.Fatal("the open left the children written ahead")
		}
		if err := b.small.WithMirror(m).Check(ctx); err != nil {
			t.Errorf("the crash image, opened: %v", err)
		}
		if err := b.check(); err != nil {
			t.Errorf("the mirror whose write stopped, synced again: %v", err)
		}
		// The file as the sync left it passes the open's check.
		b.restart()
		if st := b.m.Stats(); st.Discarded != "" {
			t.Errorf("reopened: discarded %q", st.Discarded)
		}
	})
}

// The mirror's file is its process's while it is open, also across the
// closes and opens of a sync (remap): a second open waits, and fails when
// its context ends; once the first is closed, it opens.
func TestMirrorFileLocked(t *testing.T) {
	b := newMirrorBed(t, 13, mirrorFault{})
	for range 6 {
		b.step()
	}
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.e.ctx, 300*time.Millisecond)
	defer cancel()
	if m, err := b.small.OpenMirror(ctx, b.path); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			m.Close()
		}
		t.Fatalf("a second open of a mirror's file: %v, want the context's deadline", err)
	}
	if err := b.m.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := b.small.OpenMirror(b.e.ctx, b.path)
	if err != nil {
		t.Fatalf("the open after the first mirror closed: %v", err)
	}
	b.m = m
	if st := m.Stats(); st.Discarded != "" {
		t.Fatalf("reopened: discarded %q", st.Discarded)
	}
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
}

// TestChunkBatches checks that read's batches of reference chunks hold
// whole groups of chunks that share packs, so that no pack is read by two
// batches, and stay bounded.
func TestChunkBatches(t *testing.T) {
	defer func(n int) { chunkBatch = n }(chunkBatch)
	chunkBatch = 2
	pk := func(s string) keys.Digest { return keys.Digest(sha256.Sum256([]byte(s))) }
	n := 0
	whole := func(pack string) objPart {
		n++
		return objPart{digest: pk(fmt.Sprint("chunk", n)), at: partLoc{pack: pk(pack), size: 1}}
	}
	patched := func(pack, base string) objPart {
		p := whole(pack)
		p.at.delta = &partLoc{pack: pk(base), size: 1}
		return p
	}
	derived := func(leaf objPart) objPart {
		n++
		return objPart{digest: pk(fmt.Sprint("chunk", n)), at: partLoc{from: 1, base: &leaf}}
	}
	// Three threads, each a base pack and turn packs whose leaves patch the
	// base's, some stored whole in a turn's pack; a chunk of its own.
	var parts []objPart
	for _, th := range []string{"a", "b", "c"} {
		parts = append(parts,
			whole(th+"-base"), patched(th+"-1", th+"-base"), whole(th+"-2"),
			derived(patched(th+"-2", th+"-base")), whole(th+"-base"), patched(th+"-1", th+"-base"),
			derived(whole(th+"-1")))
	}
	parts = append(parts, objPart{digest: pk("alone")})
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })

	seen := map[int]bool{}
	readBy := map[keys.Digest]int{}
	for b, idx := range chunkBatches(parts) {
		if len(idx) == 0 || len(idx) > 4*chunkBatch {
			t.Fatalf("batch %d holds %d chunks", b, len(idx))
		}
		for _, j := range idx {
			if seen[j] {
				t.Fatalf("chunk %d in two batches", j)
			}
			seen[j] = true
			for _, d := range readPlace(parts[j]) {
				if d == (keys.Digest{}) {
					continue
				}
				if was, ok := readBy[d]; ok && was != b {
					t.Fatalf("pack %x read by batches %d and %d", d[:4], was, b)
				}
				readBy[d] = b
			}
		}
	}
	if len(seen) != len(parts) {
		t.Fatalf("the batches hold %d of %d chunks", len(seen), len(parts))
	}
}
