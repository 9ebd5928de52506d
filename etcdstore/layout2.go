package etcdstore

import (
	"container/list"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/keys"
)

// The capacity layout (version 2 of the checkpoint record; docs/design.md,
// "Capacity: what etcd keeps per checkpoint"). With Options.Objects set, a
// checkpoint whose version-1 body would be larger than Options.InlineLimit
// keeps its files, conversation and artifacts in body objects (objects.go)
// in that bucket. etcd keeps:
//
//	P t T c f64(createdAt) I   the checkpoint record: its JSON header says
//	                           layout 2 and names the root; the bytes after it
//	                           are the checkpoint's header fields (id, thread,
//	                           parent, createdAt, reason, label, run) in the
//	                           body codec, without files, conversation or
//	                           artifacts
//	P r 4 T seq n 0            the checkpoint's one reference record: the
//	                           32-byte root digest (keys.RootShard)
//	P r 5 T                    for a transcript that names a root's
//	                           conversation, the root digest
//	                           (keys.TranscriptShard)
//
// plus the usual thread and index records. Objects are claimed for the writer
// lease (namespace 2 of the claim keys) before they are put, so a sweep
// cannot delete an object between the put and the append that names it.

const (
	// layoutObjects is the checkpoint record layout of the capacity layout.
	layoutObjects = 2
	// defaultInlineLimit is the default of Options.InlineLimit.
	defaultInlineLimit = 64 << 10
	// objectParallel bounds the object puts and gets one call sends at once:
	// they are independent, and what limits them is the bucket's latency
	// (tens of milliseconds a request on R2), not bandwidth.
	objectParallel = 32
	// objectCacheBytes bounds the cache of decoded objects.
	objectCacheBytes = 32 << 20
)

// ObjectStore is the bucket that keeps a store's body objects: reads and
// conditional puts are all the store needs of it for the objects.
// *bucket.S3 and *bucket.Memory implement it. Before its first object the
// store binds itself to the bucket (bucket.BindStore), which also lists: an
// ObjectStore that is not a bucket.Lister fails that first write with
// bucket.ErrCannotBind.
type ObjectStore interface {
	bucket.Reader
	bucket.Putter
}

// writeRootVersion is the version of the roots appends write: objRootTree;
// tests set objVersion to write what stores wrote before it.
var writeRootVersion byte = objRootTree

// toObjects makes w the version-2 form of its checkpoint: its record keeps
// only the header fields, its one reference record names the root. The
// split starts from the memo of the thread's last split in memos, and
// leaves its own there. With packs, w also keeps the split for the packed
// form (w.split), which the append packs once it knows the parent's packs.
func (w *newCheckpoint) toObjects(memos *splitMemos, packs bool) error {
	var root object
	var objs []object
	var refs []refChunk
	var err error
	fileRefs := 0 // the reference chunks of the leaves, which come first
	var from []refFrom
	var prevLeaves map[keys.Digest]object
	if writeRootVersion == objRootTree {
		var memo *splitMemo
		cut := func(path string, _ int) bool { return objLeafCut(path) }
		if packs && writePacked {
			cut = objPackLeafCut
		}
		prev := memos.get(w.c.ThreadID)
		root, objs, refs, memo, err = splitTreeCut(w.c, prev, cut)
		if err == nil {
			memos.put(w.c.ThreadID, memo)
			fileRefs, from, prevLeaves = memo.leafRefs(), memo.refsFrom(), memo.prevLeaves(prev)
		}
	} else {
		root, objs, refs, err = splitCheckpointBodyAt(w.c, writeRootVersion)
	}
	if err != nil {
		return err
	}
	w.objects = append(objs, root)
	for _, r := range refs {
		w.objects = append(w.objects, r.object)
	}
	w.setRoot(root.digest)
	if packs && writePacked && writeRootVersion == objRootTree {
		parts := slices.Clone(objs)
		for _, r := range refs {
			parts = append(parts, r.object)
		}
		if w.split, err = newPackSplit(root, parts, fileRefs, from); err != nil {
			return err
		}
		w.split.prev = prevLeaves
	}
	return nil
}

// usePacked makes p the body of w: its objects are p's pack and root, and
// the record names p's root. It reports whether the root names a pack of
// the parent's.
func (w *newCheckpoint) usePacked(p packed) bool {
	w.setRoot(p.root.digest)
	w.objects, w.locs, w.packs = p.objects(), p.locs, p.packs
	return p.inherits
}

// setRoot makes w a version-2 checkpoint naming root.
func (w *newCheckpoint) setRoot(root keys.Digest) {
	c := w.c
	w.setBody(encodeCheckpointAfter(&cairn.Checkpoint{ID: c.ID, ThreadID: c.ThreadID, ParentCheckpointID: c.ParentCheckpointID,
		CreatedAt: c.CreatedAt, Reason: c.Reason, Label: c.Label, SourceRunID: c.SourceRunID}, metaRoom))
	w.refs = [keys.NumShards][][]byte{}
	w.mask = 1 << keys.RootShard
	w.root = &root
	w.packs = nil
}

// HasObjects reports whether the store has a bucket for body objects
// (Options.Objects): whether it reads and writes the capacity layout, and
// whether Verify can check that layout's objects (VerifyOptions.Objects).
func (s *Store) HasObjects() bool { return s.objects != nil }

// useObjects reports whether a checkpoint whose version-1 body has n bytes
// goes to the capacity layout.
func (s *Store) useObjects(n int) bool { return s.objects != nil && n > s.inlineLimit }

// putObjects claims the keys of objs for the writer lease w and puts the
// objects, objectParallel at a time. The claims go in batches, claimParallel
// at a time, and the puts of a batch's objects start as soon as that batch's
// claim has committed, while later batches are still being claimed: no
// object is put (the bucket consulted for its key) before its claim is
// committed. Keys a sweep is deleting are waited for and claimed again, then
// put. Before its first object the store binds itself to the bucket
// (bucket.BindStore).
func (s *Store) putObjects(ctx context.Context, w cairn.Writer, objs []object) error {
	if len(objs) == 0 {
		_, err := s.claim(ctx, w, nil)
		return err
	}
	if err := s.bindObjects(ctx); err != nil {
		return err
	}
	byDigest := make(map[keys.Digest]int, len(objs))
	blobs := make([]keys.Blob, 0, len(objs))
	for i, o := range objs {
		byDigest[o.digest] = i
		blobs = append(blobs, keys.Blob{NS: keys.NSObject, Digest: o.digest})
	}
	blobs = sortedBlobs(blobs)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan int, len(objs))
	var (
		mu     sync.Mutex
		putErr error
		wg     sync.WaitGroup
	)
	for range min(objectParallel, len(objs)) {
		wg.Go(func() {
			for i := range ready {
				if pctx.Err() != nil {
					continue
				}
				if _, err := s.objects.PutIfAbsent(pctx, objs[i].key, objs[i].data); err != nil {
					mu.Lock()
					if putErr == nil {
						putErr = fmt.Errorf("etcdstore: put body object %s: %w", objs[i].key, err)
					}
					mu.Unlock()
					cancel()
				}
			}
		})
	}
	claimErr := s.claimThen(pctx, w, blobs, func(claimed []keys.Blob) {
		for _, b := range claimed {
			ready <- byDigest[b.Digest]
		}
	})
	close(ready)
	wg.Wait()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case claimErr != nil && (putErr == nil || !errors.Is(claimErr, context.Canceled)):
		return claimErr
	}
	return putErr
}

// claimThen claims blobs (sorted, distinct) for w as claim does, and calls
// claimed, possibly from several goroutines at once, with the blobs of each
// batch whose claim has committed, as soon as it has. Busy blobs are waited
// for and claimed again until every blob has been passed to claimed once.
func (s *Store) claimThen(ctx context.Context, w cairn.Writer, blobs []keys.Blob, claimed func([]keys.Blob)) error {
	for {
		busy, err := s.claimEach(ctx, w, blobs, claimed)
		if err != nil || len(busy) == 0 {
			return err
		}
		blobs = blobsOf(busy)
		if err := s.waitBlobs(ctx, blobs); err != nil {
			return err
		}
	}
}

// object returns the verified bytes of the object with digest d, from the
// cache or the bucket.
func (s *Store) object(ctx context.Context, d keys.Digest) ([]byte, error) {
	if b, ok := s.objCache.get(d); ok {
		return b, nil
	}
	if s.objects == nil {
		return nil, objError(d, fmt.Errorf("the store has no object bucket (Options.Objects)"))
	}
	b, err := objFetchObject(func(key string) ([]byte, error) { return s.objects.Get(ctx, key) }, d)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	s.objCache.put(ctx, d, b)
	return b, nil
}

// root returns the decoded root object with digest d.
func (s *Store) root(ctx context.Context, d keys.Digest) (objRoot, error) {
	b, err := s.object(ctx, d)
	if err != nil {
		return objRoot{}, err
	}
	r, err := objDecodeRoot(b)
	if err != nil {
		return objRoot{}, fmt.Errorf("etcdstore: %w", objError(d, err))
	}
	return r, nil
}

// fetchObjects fetches the objects with digests ds, objectParallel at a
// time, into a map by digest.
func (s *Store) fetchObjects(ctx context.Context, ds []keys.Digest) (map[keys.Digest][]byte, error) {
	got := make([][]byte, len(ds))
	err := forEach(ctx, len(ds), objectParallel, func(ctx context.Context, i int) (err error) {
		got[i], err = s.object(ctx, ds[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[keys.Digest][]byte, len(ds))
	for i, d := range ds {
		out[d] = got[i]
	}
	return out, nil
}

// readBody returns the files, conversation and artifacts of the body whose
// root is root: the root, then its leaves and conversation chunks in
// parallel, each verified against its digest.
func (s *Store) readBody(ctx context.Context, root keys.Digest) ([]cairn.Entry, json.RawMessage, []cairn.Artifact, error) {
	return s.readBodyHint(ctx, root, nil)
}

// readBodyHint is readBody for a record that names the packs of its root
// (hint): when the root is not in the cache, those packs are read whole in
// parallel with the root, so a cold read takes one round of requests
// instead of two. A pack that fails to come is read by range afterwards,
// as without the hint.
func (s *Store) readBodyHint(ctx context.Context, root keys.Digest, hint []keys.Digest) ([]cairn.Entry, json.RawMessage, []cairn.Artifact, error) {
	var whole map[keys.Digest][]byte
	var r objRoot
	var err error
	if _, cached := s.objCache.get(root); cached || len(hint) == 0 || s.objects == nil {
		r, err = s.root(ctx, root)
	} else {
		got := make([][]byte, len(hint))
		var wg sync.WaitGroup
		for i, d := range hint {
			wg.Go(func() { got[i], _ = s.objects.Get(ctx, objectKey(d)) })
		}
		r, err = s.root(ctx, root)
		wg.Wait()
		whole = make(map[keys.Digest][]byte, len(hint))
		for i, d := range hint {
			if got[i] != nil {
				whole[d] = got[i]
			}
		}
	}
	if err != nil {
		return nil, nil, nil, err
	}
	got, err := s.fetchVerified(ctx, append(slices.Clone(r.leaves), r.conv...), whole)
	if err != nil {
		return nil, nil, nil, err
	}
	// Each part was verified as it was read (or when it entered the
	// cache): assembleBody only decodes.
	files, conv, arts, err := assembleBody(&r, func(d keys.Digest) ([]byte, error) {
		if b, ok := got[d]; ok {
			return b, nil
		}
		return nil, objError(d, bucket.ErrNotFound)
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("etcdstore: %w", err)
	}
	return files, conv, arts, nil
}

// parseRoot decodes the root digest of a version-2 checkpoint record.
func parseRoot(s string) (keys.Digest, error) {
	var d keys.Digest
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != keys.DigestLen {
		return d, fmt.Errorf("bad root digest %q", s)
	}
	copy(d[:], b)
	return d, nil
}

// uncachedKey marks a context made by withoutCaching.
type uncachedKey struct{}

// withoutCaching returns ctx marked so that the objects read under it are
// not kept in the store's object cache (they are still taken from it): a
// reader that reads each object once, such as the mirror, does not displace
// what the store's other readers keep, nor hold the cache's bytes in a
// process that reads nothing else.
func withoutCaching(ctx context.Context) context.Context {
	return context.WithValue(ctx, uncachedKey{}, true)
}

// objCache is a bounded LRU of verified object bytes by digest. Objects are
// immutable, so an entry never goes stale.
type objCache struct {
	mu    sync.Mutex
	max   int
	size  int
	order *list.List // front: most recently used
	byKey map[keys.Digest]*list.Element
}

type objCacheEntry struct {
	d keys.Digest
	b []byte
}

func newObjCache(max int) *objCache {
	return &objCache{max: max, order: list.New(), byKey: map[keys.Digest]*list.Element{}}
}

func (c *objCache) get(d keys.Digest) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[d]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*objCacheEntry).b, true
}

// put keeps b as the bytes of the object d, unless ctx was made by
// withoutCaching.
func (c *objCache) put(ctx context.Context, d keys.Digest, b []byte) {
	if len(b) > c.max/4 || ctx.Value(uncachedKey{}) != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[d]; ok {
		return
	}
	c.byKey[d] = c.order.PushFront(&objCacheEntry{d, b})
	c.size += len(b)
	for c.size > c.max {
		e := c.order.Back()
		ent := e.Value.(*objCacheEntry)
		c.order.Remove(e)
		delete(c.byKey, ent.d)
		c.size -= len(ent.b)
	}
}

// headObjects remembers, per thread, the objects of the head this store
// appended last in the capacity layout and the revision of the thread record
// that append wrote. A child appended on exactly that thread record inherits
// them: the parent is the head until the child's transaction commits, so its
// objects stay referenced throughout, and need neither a claim nor a put
// (the first of the three ways in "The rule both sides keep").
type headObjects struct {
	mu sync.Mutex
	m  map[string]headSet
	// memos are the threads' last splits (splitmemo.go).
	memos splitMemos
}

type headSet struct {
	head string
	rev  int64
	set  map[keys.Digest]struct{}
	// locs are where the parts of a packed head are.
	locs map[keys.Digest]partLoc
}

// locs returns where the parts of the head of thread are and the revision
// of the thread record they are inherited on, when head is the packed head
// this store appended last there; nil otherwise.
func (h *headObjects) locs(thread, head string) (map[keys.Digest]partLoc, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hs, ok := h.m[thread]
	if !ok || head == "" || hs.head != head {
		return nil, 0
	}
	return hs.locs, hs.rev
}

// split returns the objects of objs that the head of thread has not, when
// head is the head this store appended last there; the others, and the
// thread record revision they are inherited on.
func (h *headObjects) split(thread, head string, objs []object) (fresh, inherited []object, rev int64) {
	h.mu.Lock()
	hs, ok := h.m[thread]
	h.mu.Unlock()
	if !ok || head == "" || hs.head != head {
		return objs, nil, 0
	}
	for _, o := range objs {
		if _, ok := hs.set[o.digest]; ok {
			inherited = append(inherited, o)
		} else {
			fresh = append(fresh, o)
		}
	}
	return fresh, inherited, hs.rev
}

// remember records the objects of head, appended with thread record
// revision rev; a version-1 head (no objects) forgets the thread.
func (h *headObjects) remember(thread, head string, rev int64, objs []object, locs map[keys.Digest]partLoc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(objs) == 0 {
		delete(h.m, thread)
		return
	}
	if len(h.m) >= maxCachedThreads {
		clear(h.m)
	}
	set := make(map[keys.Digest]struct{}, len(objs))
	for _, o := range objs {
		set[o.digest] = struct{}{}
	}
	h.m[thread] = headSet{head: head, rev: rev, set: set, locs: locs}
}
