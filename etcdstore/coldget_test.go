package etcdstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// withProcs runs the rest of the test with GOMAXPROCS n.
func withProcs(t *testing.T, n int) {
	t.Helper()
	old := runtime.GOMAXPROCS(n)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
}

// TestAssembleBodyLeafErrors decodes a body of many leaves, on one core and
// on several (assembleBody decodes the leaves in parallel when there are at
// least objDecodeParallel of them), with one or two leaves that hash to
// their digests but do not decode: the read fails naming such a leaf, with
// no files, wherever the leaf is, and a body without one decodes exactly.
func TestAssembleBodyLeafErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(28, 1))
	c := cairn.Checkpoint{Files: objTestFiles(4000, ""), Conversation: objTestConversation(r, 40<<10),
		Artifacts: []cairn.Artifact{{ArtifactID: "a1", Name: "plan.md", Size: 1, BlobKey: objTestArtifactKey("a1"), CreatedAt: 1}}}
	root, _, _, b := objSplit(t, &c)
	rt, err := objDecodeRoot(root.data)
	if err != nil {
		t.Fatal(err)
	}
	n := len(rt.leaves)
	if n < 2*objDecodeParallel {
		t.Fatalf("%d leaves: too few to decode in parallel", n)
	}
	// bad names a body whose leaves at positions at have a byte more than
	// their entries (they hash to the digests its root names): the body's
	// root and bucket, and the keys of the bad leaves.
	bad := func(at ...int) (keys.Digest, objBucket, []string) {
		bucket := objBucket{}
		for k, v := range b {
			bucket[k] = v
		}
		r2 := rt
		r2.leaves = slices.Clone(rt.leaves)
		var named []string
		for _, i := range at {
			o := objNewObject(append(bytes.Clone(b[objectKey(rt.leaves[i].digest)]), 0))
			bucket.put(o)
			r2.leaves[i].digest = o.digest
			named = append(named, o.key)
		}
		ro := objNewObject(objEncodeRoot(&r2))
		bucket.put(ro)
		return ro.digest, bucket, named
	}
	for _, procs := range []int{1, 2, 4} {
		for _, tc := range []struct {
			name string
			at   []int
		}{
			{"none", nil},
			{"first", []int{0}},
			{"middle", []int{n / 2}},
			{"last", []int{n - 1}},
			{"first and last", []int{0, n - 1}},
		} {
			t.Run(fmt.Sprintf("%s/procs=%d", tc.name, procs), func(t *testing.T) {
				withProcs(t, procs)
				d, bucket, named := bad(tc.at...)
				files, conv, arts, err := assembleCheckpointBody(d, bucket.fetch)
				if len(tc.at) == 0 {
					if err != nil || !reflect.DeepEqual(files, c.Files) || !bytes.Equal(conv, c.Conversation) || !reflect.DeepEqual(arts, c.Artifacts) {
						t.Fatalf("the body came back different (%d files, %d conversation bytes): %v", len(files), len(conv), err)
					}
					return
				}
				if !errors.Is(err, errCodec) || !slices.ContainsFunc(named, func(k string) bool { return strings.Contains(err.Error(), k) }) {
					t.Fatalf("assemble: %v, want %v naming one of %v", err, errCodec, named)
				}
				if files != nil || conv != nil || arts != nil {
					t.Fatalf("assemble failed and still returned %d files, %d conversation bytes, %d artifacts", len(files), len(conv), len(arts))
				}
			})
		}
	}
}

// TestColdGetPackFails reads, on fresh stores, a checkpoint whose root names
// two packs while one of them cannot be read (missing from the bucket, or
// altered): the Get fails naming that pack and returns no checkpoint, on
// one core and on several, and once the pack is back a fresh store reads
// the checkpoint exactly (nothing wrong was kept in a cache).
func TestColdGetPackFails(t *testing.T) {
	e := newV2Env(t)
	s := e.store(true, 0)
	w := e.writer(s, "a")
	var c cairn.Checkpoint
	for turn := 1; turn <= 2; turn++ {
		c = capacityTurn("a", turn, 2000, 8000)
		e.append(s, w, c)
	}
	resp, err := e.cli.Get(e.ctx, e.prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var packs []keys.Digest
	for _, kv := range resp.Kvs {
		if m, err := parseMeta(kv); err == nil && m.Root != "" && bytes.Contains(kv.Key, []byte(c.ID)) {
			if packs, err = parsePacks(m.Packs); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(packs) < 2 {
		t.Fatalf("the head names %d packs, want at least 2", len(packs))
	}
	for _, procs := range []int{1, 2} {
		for i, p := range packs {
			key := objectKey(p)
			orig, err := e.mem.Get(e.ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			altered := bytes.Clone(orig)
			altered[len(altered)/2] ^= 1
			for _, tc := range []struct {
				name string
				data []byte
			}{{"missing", nil}, {"altered", altered}} {
				t.Run(fmt.Sprintf("%s/pack=%d/procs=%d", tc.name, i, procs), func(t *testing.T) {
					withProcs(t, procs)
					e.mem.Delete(e.ctx, []string{key})
					if tc.data != nil {
						e.mem.Put(e.ctx, key, tc.data)
					}
					got, err := e.store(true, 0).Get(e.ctx, c.ID)
					if err == nil || !strings.Contains(err.Error(), key) || got != nil {
						t.Fatalf("Get with pack %s %s: %v (checkpoint %v), want an error naming it and no checkpoint", key, tc.name, err, got != nil)
					}
					e.mem.Delete(e.ctx, []string{key})
					e.mem.Put(e.ctx, key, orig)
					got, err = e.store(true, 0).Get(e.ctx, c.ID)
					if err != nil {
						t.Fatal(err)
					}
					sameCheckpoint(t, "pack back", got, c)
				})
			}
		}
	}
}
