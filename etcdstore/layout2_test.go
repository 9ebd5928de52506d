package etcdstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/keys"
	"github.com/cairnstore/cairn/sweep"
)

// v2Env is one etcd member and one prefix, with stores of either layout on
// it and one object bucket.
type v2Env struct {
	t      *testing.T
	ctx    context.Context
	cli    *clientv3.Client
	prefix string
	mem    *bucket.Memory
}

func newV2Env(t *testing.T) *v2Env {
	t.Helper()
	_, cli := embedetcd.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &v2Env{t: t, ctx: ctx, cli: cli, prefix: "v2/", mem: bucket.NewMemory(nil)}
}

// store opens a store on the env's prefix: with the bucket for objects when
// objects is set, else of version 1 only.
func (e *v2Env) store(objects bool, inline int) *Store {
	e.t.Helper()
	o := Options{InlineLimit: inline}
	if objects {
		o.Objects = e.mem
	}
	s, err := New(e.cli, e.prefix, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { s.Close() })
	return s
}

func (e *v2Env) writer(s *Store, thread string) cairn.Writer {
	e.t.Helper()
	l, err := s.AcquireWriter(e.ctx, thread)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { l.Release(context.Background()) })
	return l.Writer
}

func (e *v2Env) append(s *Store, w cairn.Writer, c cairn.Checkpoint) {
	e.t.Helper()
	if _, err := s.Append(e.ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: c.ParentCheckpointID, Writer: w}); err != nil {
		e.t.Fatalf("append %s: %v", c.ID, err)
	}
}

// keysUnder returns the store's etcd keys under prefix with their values.
func (e *v2Env) keysUnder(prefix []byte) map[string][]byte {
	e.t.Helper()
	resp, err := e.cli.Get(e.ctx, string(prefix), clientv3.WithPrefix())
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.Value
	}
	return out
}

// capacityTurn returns turn t of a thread of the capacity workload in
// small: n files whose blob keys change for n/50 files a turn, and a
// conversation that grows by conv bytes a turn.
func capacityTurn(thread string, t, n, conv int) cairn.Checkpoint {
	files := make([]cairn.Entry, n)
	for i := range files {
		v := 0
		if step := max(1, n/50); i/step < t {
			v = i / step // files changed in turn v and not since
		}
		files[i] = cairn.Entry{Path: fmt.Sprintf("src/pkg%02d/file%04d.go", i%37, i), Kind: cairn.KindFile,
			BlobKey: objTestFileKey(fmt.Sprintf("%d-v%d", i, v)), Size: int64(100 + i)}
	}
	var msgs []string
	for i := 0; i < t*conv/200+1; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":"turn %d message %d: %s"}`, t, i, strings.Repeat("lorem ipsum ", 14)))
	}
	parent := ""
	if t > 1 {
		parent = fmt.Sprintf("%s-%d", thread, t-1)
	}
	return cairn.Checkpoint{
		ID: fmt.Sprintf("%s-%d", thread, t), ThreadID: thread, ParentCheckpointID: parent, CreatedAt: float64(1000 + t),
		Reason: cairn.ReasonAutomatic, Label: "turn", SourceRunID: "run",
		Files: files, Conversation: json.RawMessage("[" + strings.Join(msgs, ",") + "]"),
		Artifacts: []cairn.Artifact{{ArtifactID: "a", Name: "out.txt", MimeType: "text/plain", Size: 1,
			BlobKey: objTestArtifactKey(fmt.Sprint(t)), CreatedAt: float64(t)}},
	}
}

func sameCheckpoint(t *testing.T, what string, got *cairn.Checkpoint, want cairn.Checkpoint) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: checkpoint %s is missing", what, want.ID)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("%s: checkpoint %s came back different (%d files, %d conversation bytes; want %d, %d)",
			what, want.ID, len(got.Files), len(got.Conversation), len(want.Files), len(want.Conversation))
	}
}

// TestObjectsAppendLayout checks what an append writes in each layout: a body
// within the inline limit stays version 1; a larger one leaves etcd a
// record naming its root, one shard-4 record and no body or v1 reference
// records, and its objects and nothing else in the bucket; reads return it
// exactly, and no claim outlives the append.
func TestObjectsAppendLayout(t *testing.T) {
	e := newV2Env(t)
	cases := []struct {
		name   string
		inline int
		files  int
		v2     bool
	}{
		{"SmallStaysInline", 0, 10, false},
		{"LargeGoesToObjects", 0, 2000, true},
		{"TinyLimit", 1, 1, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.t = t
			e.prefix = fmt.Sprintf("append-%d/", i)
			s := e.store(true, tc.inline)
			w := e.writer(s, "a")
			c := capacityTurn("a", 1, tc.files, 4000)
			before := len(memKeysOf(t, e.mem, cairn.ObjectPrefix))
			e.append(s, w, c)
			l := s.layout
			recs := e.keysUnder(l.Checkpoints("a"))
			if len(recs) != 1 {
				t.Fatalf("%d checkpoint records", len(recs))
			}
			var m ckptMeta
			for k, v := range recs {
				var err error
				if m, err = decodeMeta(v); err != nil {
					t.Fatal(err)
				}
				if tc.v2 && len(k)+len(v) > 1024 {
					t.Errorf("the version-2 record takes %d bytes", len(k)+len(v))
				}
			}
			if got := m.Layout == layoutObjects; got != tc.v2 {
				t.Fatalf("layout %d, want version 2: %v", m.Layout, tc.v2)
			}
			root := e.keysUnder(l.RefShard(keys.RootShard))
			v1refs := 0
			for shard := range byte(keys.NumShards) {
				v1refs += len(e.keysUnder(l.RefShard(shard)))
			}
			chunks := e.keysUnder(l.Chunks("a"))
			objs := len(memKeysOf(t, e.mem, cairn.ObjectPrefix)) - before
			if tc.v2 {
				if len(root) != 1 || v1refs != 0 || len(chunks) != 0 || objs == 0 {
					t.Fatalf("version 2 left %d shard-4 records, %d v1 reference records, %d body chunks, %d objects", len(root), v1refs, len(chunks), objs)
				}
				for _, v := range root {
					if fmt.Sprintf("%x", v) != m.Root {
						t.Fatalf("the shard-4 record holds %x, the record names %s", v, m.Root)
					}
				}
			} else if len(root) != 0 || v1refs == 0 || objs != 0 {
				t.Fatalf("version 1 left %d shard-4 records, %d reference records, %d objects", len(root), v1refs, objs)
			}
			if claims := e.keysUnder(l.Claims()); len(claims) != 0 {
				t.Fatalf("%d claims outlive the append", len(claims))
			}
			got, err := s.Get(e.ctx, c.ID)
			if err != nil {
				t.Fatal(err)
			}
			sameCheckpoint(t, "Get", got, c)
			list, err := s.List(e.ctx, "a")
			if err != nil || len(list) != 1 {
				t.Fatalf("List: %d, %v", len(list), err)
			}
			sameCheckpoint(t, "List", &list[0], c)
			refs, err := s.ListBlobReferences(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := wantRefs(c); !reflect.DeepEqual(refs, want) {
				t.Fatalf("ListBlobReferences: %d references, want %d", len(refs), len(want))
			}
			rep, err := s.Verify(e.ctx, VerifyOptions{Objects: true})
			if err != nil || !rep.OK() {
				t.Fatalf("Verify: %v %v", rep.Problems, err)
			}
		})
	}
}

// TestObjectsReadErrors checks that a read of a version-2 checkpoint whose
// object is missing or altered fails naming the object, and that a store
// without Objects refuses to guess.
func TestObjectsReadErrors(t *testing.T) {
	writeUnpacked(t)
	e := newV2Env(t)
	s := e.store(true, 0)
	c := capacityTurn("a", 1, 1000, 4000)
	e.append(s, e.writer(s, "a"), c)
	root, _, _, err := splitCheckpointBody(&c)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := objDecodeRoot(root.data)
	leaf := objectKey(r.leaves[0].digest)
	cases := []struct {
		name    string
		objects bool
		damage  func()
		want    string
	}{
		{"NoObjectBucket", false, func() {}, root.key},
		{"Missing", true, func() { e.mem.Delete(e.ctx, []string{leaf}) }, leaf},
		{"Altered", true, func() { e.mem.Put(e.ctx, leaf, []byte("L\x01 not the leaf")) }, leaf},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.damage()
			fresh := e.store(tc.objects, 0) // an empty object cache
			_, err := fresh.Get(e.ctx, c.ID)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Get: %v, want an error naming %s", err, tc.want)
			}
			if _, err := fresh.ListBlobReferences(e.ctx); tc.name != "Missing" && tc.name != "Altered" && err == nil {
				t.Fatal("ListBlobReferences counted without the objects")
			}
		})
	}
}

func wantRefs(cs ...cairn.Checkpoint) []cairn.BlobReference {
	n := map[string]int{}
	for _, c := range cs {
		for _, k := range c.BlobKeys() {
			n[k]++
		}
	}
	out := []cairn.BlobReference{}
	for _, k := range slices.Sorted(maps.Keys(n)) {
		out = append(out, cairn.BlobReference{Key: k, References: n[k]})
	}
	return out
}

func memKeysOf(t *testing.T, b bucket.Lister, prefix string) []string {
	t.Helper()
	var out []string
	for o, err := range bucket.Objects(t.Context(), b, prefix, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(o.Key, bucket.BindingPrefix) || o.Key == bucket.RegistryKey {
			continue // the binding registry, not content
		}
		out = append(out, o.Key)
	}
	return out
}

// TestObjectsCompatibility: a store without Objects writes version-1
// checkpoints; the same prefix opened with Objects reads them, appends
// version 2 on top, prunes across both, deletes a version-2 head, forks a
// checkpoint of each layout, counts the references of both exactly, and a
// sweep deletes exactly the garbage: every live blob and object stays.
func TestObjectsCompatibility(t *testing.T) {
	writeUnpacked(t)
	e := newV2Env(t)
	old := e.store(false, 0)
	ol, err := old.AcquireWriter(e.ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	var all []cairn.Checkpoint
	for turn := 1; turn <= 3; turn++ {
		c := capacityTurn("a", turn, 1000, 8000)
		e.append(old, ol.Writer, c)
		all = append(all, c)
	}
	ol.Release(e.ctx)
	leases := map[string]cairn.Writer{}
	s := e.store(true, 0)
	leases["a"] = e.writer(s, "a")
	for _, c := range all {
		got, err := s.Get(e.ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameCheckpoint(t, "v1 read by a v2 store", got, c)
	}
	for turn := 4; turn <= 7; turn++ {
		c := capacityTurn("a", turn, 1000, 8000)
		e.append(s, leases["a"], c)
		all = append(all, c)
	}
	byID := map[string]cairn.Checkpoint{}
	for _, c := range all {
		byID[c.ID] = c
	}
	// Prune across both layouts (a-1 and a-2 go, a-3 of v1 stays), then
	// delete the version-2 head a-7.
	if _, err := s.DeleteCheckpoints(e.ctx, cairn.DeleteCheckpointsInput{ThreadID: "a", Keep: 5, Writer: leases["a"]}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteHead(e.ctx, cairn.DeleteHeadInput{ThreadID: "a", CheckpointID: "a-7", Writer: leases["a"]}); err != nil {
		t.Fatal(err)
	}
	// Fork the v1 a-3 and the v2 a-5.
	forks := map[string]string{"f1": "a-3", "f2": "a-5"}
	for _, dest := range slices.Sorted(maps.Keys(forks)) {
		before := e.keysUnder(s.layout.Root())
		fw := e.writer(s, dest)
		root, err := s.ForkFromCheckpoint(e.ctx, cairn.ForkInput{SourceThreadID: "a", SourceCheckpointID: forks[dest],
			DestinationThreadID: dest, DestinationCheckpointID: dest + "-root", CreatedAt: 5000, Writer: fw})
		if err != nil {
			t.Fatal(err)
		}
		byID[root.ID] = *root
		added := 0
		wk := s.writerKeys(dest)
		for k, v := range e.keysUnder(s.layout.Root()) {
			if _, ok := before[k]; !ok && k != wk.Owner && k != wk.Expiry {
				added += len(k) + len(v)
			}
		}
		t.Logf("fork %s of %s: %d etcd bytes", dest, forks[dest], added)
		if dest == "f2" && added > 2048 {
			t.Errorf("the fork of a version-2 checkpoint takes %d etcd bytes", added)
		}
		tr, err := s.Transcripts().LoadThread(e.ctx, dest)
		if err != nil || !bytes.Equal(tr, byID[forks[dest]].Conversation) {
			t.Fatalf("LoadThread(%s): %d bytes, %v", dest, len(tr), err)
		}
	}
	live := []string{"a-3", "a-4", "a-5", "a-6", "f1-root", "f2-root"}
	var liveCps []cairn.Checkpoint
	for _, id := range live {
		got, err := s.Get(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		sameCheckpoint(t, "after prune and fork", got, byID[id])
		liveCps = append(liveCps, byID[id])
	}
	for _, id := range []string{"a-1", "a-2", "a-7"} {
		if got, err := s.Get(e.ctx, id); got != nil || err != nil {
			t.Fatalf("Get(%s) = %v, %v after its removal", id, got != nil, err)
		}
	}
	refs, err := s.ListBlobReferences(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := wantRefs(liveCps...); !reflect.DeepEqual(refs, want) {
		t.Fatalf("ListBlobReferences: %d references, want %d", len(refs), len(want))
	}
	if _, err := old.ListBlobReferences(e.ctx); err == nil {
		t.Fatal("a store without Objects counted version-2 references it cannot read")
	}
	rep, err := s.Verify(e.ctx, VerifyOptions{Objects: true})
	if err != nil || !rep.OK() {
		t.Fatalf("Verify: %v %v", rep.Problems, err)
	}

	// The bucket: the bytes of every blob ever used, and a blob never used.
	wantLive := e.putBlobs(all, liveCps)
	// The objects of the live version-2 checkpoints (a-4, a-5, a-6 and the
	// fork of a-5, which shares a-5's root).
	for _, id := range []string{"a-4", "a-5", "a-6"} {
		addUnpackedObjects(t, wantLive, byID[id])
	}
	objsBefore := len(memKeysOf(t, e.mem, cairn.ObjectPrefix))
	srep := e.sweepKeeps(s, wantLive, live, byID)
	objsAfter := len(memKeysOf(t, e.mem, cairn.ObjectPrefix))
	t.Logf("sweep deleted %d keys, %d of them objects (%d objects kept)", len(srep.Deleted), objsBefore-objsAfter, objsAfter)
	if objsBefore == objsAfter {
		t.Fatal("the sweep deleted no object of the removed version-2 checkpoint")
	}
}

// sweepKeeps sweeps the env's bucket (grace 0) and fails the test unless
// it then holds exactly the keys of want and every checkpoint of live reads
// back from a fresh store as byID has it.
func (e *v2Env) sweepKeeps(s *Store, want map[string]bool, live []string, byID map[string]cairn.Checkpoint) sweep.Report {
	t := e.t
	t.Helper()
	time.Sleep(2 * time.Millisecond) // every upload strictly older than the sweep's now
	srep, err := sweep.Sweep(e.ctx, s, e.mem, sweep.Options{OlderThan: 0})
	if err != nil {
		t.Fatal(err)
	}
	sameBucketKeys(t, e.mem, want)
	for _, id := range live {
		got, err := e.store(true, 0).Get(e.ctx, id) // a fresh cache
		if err != nil {
			t.Fatal(err)
		}
		sameCheckpoint(t, "after the sweep", got, byID[id])
	}
	return srep
}

// TestObjectCache checks the LRU bound and order.
func TestObjectCache(t *testing.T) {
	c := newObjCache(100)
	ctx := context.Background()
	d := func(i byte) keys.Digest { return keys.Digest{i} }
	for i := range byte(10) {
		c.put(ctx, d(i), make([]byte, 20))
	}
	if c.size > 100 {
		t.Fatalf("cache holds %d bytes, more than its bound", c.size)
	}
	if _, ok := c.get(d(0)); ok {
		t.Fatal("the least recently used entry survived")
	}
	if _, ok := c.get(d(9)); !ok {
		t.Fatal("the newest entry is gone")
	}
	c.put(ctx, d(50), make([]byte, 30)) // more than a quarter: not cached
	if _, ok := c.get(d(50)); ok {
		t.Fatal("an entry above a quarter of the bound was cached")
	}
	c.put(withoutCaching(ctx), d(51), make([]byte, 10))
	if _, ok := c.get(d(51)); ok {
		t.Fatal("an entry read without caching was cached")
	}
}

// countingObjects counts the puts of body objects an object store is asked
// for.
type countingObjects struct {
	ObjectStore
	mu   sync.Mutex
	puts map[string]int
}

func (c *countingObjects) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	if cairn.IsObjectKey(key) { // not the store's binding
		c.mu.Lock()
		c.puts[key]++
		c.mu.Unlock()
	}
	return c.ObjectStore.PutIfAbsent(ctx, key, data)
}

// List lists the bucket's objects, for the store's binding.
func (c *countingObjects) List(ctx context.Context, prefix, token string, limit int) (bucket.Page, error) {
	return c.ObjectStore.(bucket.Lister).List(ctx, prefix, token, limit)
}

func (c *countingObjects) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.puts
	c.puts = map[string]int{}
	return out
}

// TestObjectsInheritedFromParent checks that an append on top of the head
// this store appended claims and puts only the objects the parent lacks,
// and that once the thread record changed (a prune) it claims and puts them
// all again.
func TestObjectsInheritedFromParent(t *testing.T) {
	writeUnpacked(t)
	e := newV2Env(t)
	objs := &countingObjects{ObjectStore: e.mem, puts: map[string]int{}}
	s, err := New(e.cli, e.prefix, Options{Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := e.writer(s, "a")
	objectsOf := func(c cairn.Checkpoint) map[string]bool {
		root, os, rcs, err := splitCheckpointBody(&c)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{root.key: true}
		for _, o := range os {
			out[o.key] = true
		}
		for _, rc := range rcs {
			out[rc.key] = true
		}
		return out
	}
	var prev map[string]bool
	steps := []struct {
		name      string
		before    func()
		inherited bool
	}{
		{"First", func() {}, false},
		{"OnTheHeadItAppended", func() {}, true},
		{"AfterAPrune", func() {
			if _, err := s.DeleteCheckpoints(e.ctx, cairn.DeleteCheckpointsInput{ThreadID: "a", Keep: 1, Writer: w}); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for i, st := range steps {
		st.before()
		c := capacityTurn("a", i+1, 2000, 20000)
		e.append(s, w, c)
		all := objectsOf(c)
		want := map[string]bool{}
		for k := range all {
			if !st.inherited || !prev[k] {
				want[k] = true
			}
		}
		got := objs.take()
		if len(got) != len(want) {
			t.Errorf("%s: %d objects put, want %d (of %d)", st.name, len(got), len(want), len(all))
		}
		for k := range want {
			if got[k] == 0 {
				t.Errorf("%s: object %s was not put", st.name, k)
			}
		}
		if claims := e.keysUnder(s.layout.Claims()); len(claims) != 0 {
			t.Fatalf("%s: %d claims outlive the append", st.name, len(claims))
		}
		t.Logf("%s: %d of %d objects put", st.name, len(got), len(all))
		prev = all
	}
	rep, err := s.Verify(e.ctx, VerifyOptions{Objects: true})
	if err != nil || !rep.OK() {
		t.Fatalf("Verify: %v %v", rep.Problems, err)
	}
}

// TestObjectsRootVersions: a store whose checkpoints have roots of version 1
// (reference chunks in key order, as written before version 2) and version 2
// (in leaf order) reads both, counts both exactly, verifies both, and its
// sweep keeps exactly the objects and blobs of the live checkpoints of both.
func TestObjectsRootVersions(t *testing.T) {
	writeUnpacked(t)
	e := newV2Env(t)
	s := e.store(true, 0)
	w := e.writer(s, "a")
	var all []cairn.Checkpoint
	versions := map[string]byte{}
	for turn := 1; turn <= 6; turn++ {
		version := byte(objRootTree)
		if turn <= 3 {
			version = objVersion
		}
		c := capacityTurn("a", turn, 1000, 8000)
		writeRootVersion = version
		e.append(s, w, c)
		writeRootVersion = objRootTree
		all = append(all, c)
		versions[c.ID] = version
	}
	// A fork of a version-1 checkpoint shares its root.
	fw := e.writer(s, "f")
	fork, err := s.ForkFromCheckpoint(e.ctx, cairn.ForkInput{SourceThreadID: "a", SourceCheckpointID: "a-2",
		DestinationThreadID: "f", DestinationCheckpointID: "f-root", CreatedAt: 5000, Writer: fw})
	if err != nil {
		t.Fatal(err)
	}
	// Prune a-1: live are a-2 and a-3 (version 1), a-4 to a-6 (version 2)
	// and f-root (a-2's root).
	if _, err := s.DeleteCheckpoints(e.ctx, cairn.DeleteCheckpointsInput{ThreadID: "a", Keep: 5, Writer: w}); err != nil {
		t.Fatal(err)
	}
	live := append(slices.Clone(all[1:]), *fork)
	for _, c := range live {
		got, err := e.store(true, 0).Get(e.ctx, c.ID) // a fresh cache: every object from the bucket
		if err != nil {
			t.Fatal(err)
		}
		sameCheckpoint(t, "mixed root versions", got, c)
		if c.ID == "f-root" {
			continue
		}
		cc := c
		root, _, _, err := splitCheckpointBodyAt(&cc, versions[c.ID])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.mem.Get(e.ctx, root.key); err != nil {
			t.Fatalf("%s: no root of version %d in the bucket: %v", c.ID, versions[c.ID], err)
		}
	}
	refs, err := s.ListBlobReferences(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := wantRefs(live...); !reflect.DeepEqual(refs, want) {
		t.Fatalf("ListBlobReferences: %d references, want %d", len(refs), len(want))
	}
	rep, err := s.Verify(e.ctx, VerifyOptions{Objects: true})
	if err != nil || !rep.OK() {
		t.Fatalf("Verify: %v %v", rep.Problems, err)
	}

	wantLive := map[string]bool{}
	for _, c := range all {
		for _, k := range c.BlobKeys() {
			e.mem.Put(e.ctx, k, []byte(k))
		}
	}
	for _, c := range live {
		for _, k := range c.BlobKeys() {
			wantLive[k] = true
		}
		if c.ID == "f-root" {
			continue
		}
		cc := c
		root, objs, rcs, err := splitCheckpointBodyAt(&cc, versions[c.ID])
		if err != nil {
			t.Fatal(err)
		}
		wantLive[root.key] = true
		for _, o := range objs {
			wantLive[o.key] = true
		}
		for _, rc := range rcs {
			wantLive[rc.key] = true
		}
	}
	time.Sleep(2 * time.Millisecond) // every upload strictly older than the sweep's now
	if _, err := sweep.Sweep(e.ctx, s, e.mem, sweep.Options{OlderThan: 0}); err != nil {
		t.Fatal(err)
	}
	if got, want := memKeysOf(t, e.mem, ""), slices.Sorted(maps.Keys(wantLive)); !slices.Equal(got, want) {
		t.Fatalf("after the sweep the bucket holds %d keys, want %d", len(got), len(want))
	}
	for _, c := range live {
		got, err := e.store(true, 0).Get(e.ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameCheckpoint(t, "after the sweep", got, c)
	}
}

// TestObjectsPutWaitsForADeletingObject: an object whose key a sweep is
// deleting is neither put nor relied on while the delete may land; the
// append puts the other objects (their claims committed), waits until the
// record settles, claims the key again, puts it, and appends.
func TestObjectsPutWaitsForADeletingObject(t *testing.T) {
	writeUnpacked(t)
	e := newV2Env(t)
	objs := &countingObjects{ObjectStore: e.mem, puts: map[string]int{}}
	s, err := New(e.cli, e.prefix, Options{Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := e.writer(s, "a")
	c := capacityTurn("a", 1, 1000, 8000)
	root, os, rcs, err := splitCheckpointBody(&c)
	if err != nil {
		t.Fatal(err)
	}
	want := len(os) + len(rcs) + 1
	busy := keys.Blob{NS: keys.NSObject, Digest: root.digest}
	rec := string(s.layout.GCRecord(busy))
	if _, err := e.cli.Put(e.ctx, rec, gcValue(gcDeletingByte, 1)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Append(e.ctx, cairn.AppendInput{Checkpoint: c, Writer: w})
		done <- err
	}()
	// Wait (polling, no timing assumed) until every other object was put.
	for {
		objs.mu.Lock()
		n := len(objs.puts)
		objs.mu.Unlock()
		if n >= want-1 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the append ended (%v) while a key it needs was deleting", err)
		case <-e.ctx.Done():
			t.Fatalf("only %d of %d objects put", n, want-1)
		case <-time.After(time.Millisecond):
		}
	}
	objs.mu.Lock()
	rootPuts := objs.puts[root.key]
	objs.mu.Unlock()
	if rootPuts != 0 {
		t.Fatal("the root was put while its key was deleting")
	}
	select {
	case err := <-done:
		t.Fatalf("the append ended (%v) while a key it needs was deleting", err)
	default:
	}
	// The sweep settles its delete: the record goes.
	if _, err := e.cli.Delete(e.ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := objs.take(); len(got) != want || got[root.key] != 1 {
		t.Fatalf("%d objects put (root %d times), want %d", len(got), got[root.key], want)
	}
	got, err := e.store(true, 0).Get(e.ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, "after the wait", got, c)
}

// writeUnpacked makes the appends of the test write the capacity layout as
// stores wrote it before packs (every leaf and chunk an object of its own).
func writeUnpacked(t *testing.T) {
	t.Helper()
	writePacked = false
	t.Cleanup(func() { writePacked = true })
}

// sameBucketKeys fails the test unless mem holds exactly the keys of want.
func sameBucketKeys(t *testing.T, mem *bucket.Memory, want map[string]bool) {
	t.Helper()
	got := memKeysOf(t, mem, "")
	if w := slices.Sorted(maps.Keys(want)); !slices.Equal(got, w) {
		var missing, extra []string
		for _, k := range w {
			if !slices.Contains(got, k) {
				missing = append(missing, k)
			}
		}
		for _, k := range got {
			if !want[k] {
				extra = append(extra, k)
			}
		}
		t.Fatalf("after the sweep the bucket holds %d keys, want %d: missing %q, extra %q", len(got), len(w), missing, extra)
	}
}

// putBlobs puts the blobs of every checkpoint of all and one blob none
// uses, and returns the blob keys of live.
func (e *v2Env) putBlobs(all, live []cairn.Checkpoint) map[string]bool {
	for _, c := range all {
		for _, k := range c.BlobKeys() {
			e.mem.Put(e.ctx, k, []byte(k))
		}
	}
	e.mem.Put(e.ctx, objTestFileKey("garbage"), []byte("g"))
	out := map[string]bool{}
	for _, c := range live {
		for _, k := range c.BlobKeys() {
			out[k] = true
		}
	}
	return out
}

// addUnpackedObjects adds to want the keys of the objects of c in the
// unpacked form (root version 2).
func addUnpackedObjects(t *testing.T, want map[string]bool, c cairn.Checkpoint) {
	t.Helper()
	root, objs, rcs, err := splitCheckpointBody(&c)
	if err != nil {
		t.Fatal(err)
	}
	want[root.key] = true
	for _, o := range objs {
		want[o.key] = true
	}
	for _, rc := range rcs {
		want[rc.key] = true
	}
}
