package console

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// forkScanThreads bounds the other threads the thread page reads to find
// the forks of a thread: the store does not record a fork's source, so
// the console finds it by content (a fork root is a copy of its source's
// files, conversation and artifacts).
const forkScanThreads = 500

// link is a fork between the shown thread and another: Thread's checkpoint
// Other is the source (In) or the fork root (out) of the shown thread's
// checkpoint Local.
type link struct {
	Thread, Other, Local string
	In                   bool
}

// fingerprint identifies what a fork copies of a checkpoint.
func fingerprint(c *cairn.Checkpoint) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	str := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	num := func(v int64) {
		binary.BigEndian.PutUint64(n[:], uint64(v))
		h.Write(n[:])
	}
	num(int64(len(c.Files)))
	for _, e := range c.Files {
		str(e.Path)
		str(string(e.Kind))
		str(e.BlobKey)
		num(e.Size)
	}
	str(string(c.Conversation))
	num(int64(len(c.Artifacts)))
	for _, a := range c.Artifacts {
		str(a.ArtifactID)
		str(a.Name)
		str(a.MimeType)
		str(a.BlobKey)
		num(a.Size)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// forks finds, among the first forkScanThreads other threads of the
// tenant, the fork roots copied from a checkpoint of list (forks out) and,
// when list starts with a fork root, its source (the latest checkpoint of
// the same content created no later than the root). It reads each other
// thread's first checkpoint, and every checkpoint of the other threads
// only when the thread itself is a fork. scanned says how many threads it
// read; complete is false when there were more.
func (c *Console) forks(ctx context.Context, t int, thread string, list []cairn.Checkpoint) (links []link, scanned int, complete bool, err error) {
	st := c.cfg.Stores[t]
	var others []string
	complete = true
	for after := ""; ; {
		page, err := st.ListThreads(ctx, after, forkScanThreads+1)
		if err != nil {
			return nil, 0, false, err
		}
		if len(page) == 0 {
			break
		}
		for _, id := range page {
			if id != thread {
				others = append(others, id)
			}
		}
		after = page[len(page)-1]
		if len(others) > forkScanThreads {
			others, complete = others[:forkScanThreads], false
			break
		}
	}
	local := map[[sha256.Size]byte]string{}
	for i := range list {
		local[fingerprint(&list[i])] = list[i].ID
	}
	var root *cairn.Checkpoint
	if len(list) > 0 && list[0].Reason == cairn.ReasonForkRoot {
		root = &list[0]
	}
	var rootFP [sha256.Size]byte
	if root != nil {
		rootFP = fingerprint(root)
	}
	found := make([][]link, len(others))
	layout := st.Layout()
	err = forEach(ctx, len(others), func(ctx context.Context, i int) error {
		other := others[i]
		if root != nil {
			all, err := st.List(ctx, other)
			if err != nil {
				return err
			}
			var src *cairn.Checkpoint
			for j := range all {
				if all[j].CreatedAt <= root.CreatedAt && fingerprint(&all[j]) == rootFP {
					src = &all[j]
				}
			}
			if src != nil {
				found[i] = append(found[i], link{Thread: other, Other: src.ID, Local: root.ID, In: true})
			}
			if len(all) > 0 && all[0].Reason == cairn.ReasonForkRoot {
				if id, ok := local[fingerprint(&all[0])]; ok {
					found[i] = append(found[i], link{Thread: other, Other: all[0].ID, Local: id})
				}
			}
			return nil
		}
		pfx := layout.Checkpoints(other)
		resp, err := c.cfg.Client.Get(ctx, string(pfx), clientv3.WithRange(string(keys.PrefixEnd(pfx))), clientv3.WithLimit(1), clientv3.WithKeysOnly())
		if err != nil || len(resp.Kvs) == 0 {
			return err
		}
		kv := resp.Kvs[0]
		_, _, id, err := layout.DecodeCheckpoint(kv.Key)
		if err != nil {
			return err
		}
		ck := rootKey{tenant: t, key: string(kv.Key), rev: kv.ModRevision}
		fp, ok := c.roots.get(ck)
		if !ok {
			first, err := st.Get(ctx, id)
			if err != nil || first == nil {
				return err
			}
			fp = rootPrint{fork: first.Reason == cairn.ReasonForkRoot}
			if fp.fork {
				fp.print = fingerprint(first)
			}
			c.roots.put(ck, fp)
		}
		if !fp.fork {
			return nil
		}
		if lid, ok := local[fp.print]; ok {
			found[i] = append(found[i], link{Thread: other, Other: id, Local: lid})
		}
		return nil
	})
	if err != nil {
		return nil, 0, false, err
	}
	for _, f := range found {
		links = append(links, f...)
	}
	slices.SortFunc(links, func(a, b link) int {
		if a.Thread < b.Thread {
			return -1
		}
		if a.Thread > b.Thread {
			return 1
		}
		return 0
	})
	return links, len(others), complete, nil
}

// rootKey names a thread's first checkpoint record as it was written: its
// etcd key and mod revision. A checkpoint never changes, and a record
// written again (an id reused after a delete) has a new mod revision, so
// what the cache keeps under a rootKey stays true.
type rootKey struct {
	tenant int
	key    string
	rev    int64
}

// rootPrint is what the fork scan needs of a first checkpoint.
type rootPrint struct {
	fork  bool
	print [sha256.Size]byte
}

// maxRoots bounds the cache; it is emptied when full.
const maxRoots = 100_000

// rootCache remembers the first checkpoints the fork scan read.
type rootCache struct {
	mu sync.Mutex
	m  map[rootKey]rootPrint
}

func (r *rootCache) get(k rootKey) (rootPrint, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.m[k]
	return p, ok
}

func (r *rootCache) put(k rootKey, p rootPrint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= maxRoots {
		r.m = map[rootKey]rootPrint{}
	}
	r.m[k] = p
}
