package etcdstore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// objBenchCheckpoint is the capacity workload's checkpoint at n files: a
// 400 KiB conversation and an artifact.
func objBenchCheckpoint(n int) cairn.Checkpoint {
	r := rand.New(rand.NewPCG(16, 17))
	return cairn.Checkpoint{Files: objTestFiles(n, ""), Conversation: objTestConversation(r, 400<<10),
		Artifacts: []cairn.Artifact{{ArtifactID: "a1", Name: "plan.md", Size: 100, BlobKey: objTestArtifactKey("a1"), CreatedAt: 1}}}
}

// The benchmarks report MB/s of the version-1 encoded body (entries and
// conversation), the work a split or an assembly does.
func benchmarkObjectSplit(b *testing.B, n int) {
	c := objBenchCheckpoint(n)
	b.SetBytes(int64(len(encodeCheckpoint(&c))))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := splitCheckpointBody(&c); err != nil {
			b.Fatal(err)
		}
	}
}

func benchmarkObjectAssemble(b *testing.B, n int) {
	c := objBenchCheckpoint(n)
	root, _, _, bucket := objSplit(b, &c)
	b.SetBytes(int64(len(encodeCheckpoint(&c))))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := assembleCheckpointBody(root.digest, bucket.fetch); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkObjectSplit2000(b *testing.B)     { benchmarkObjectSplit(b, 2000) }
func BenchmarkObjectSplit20000(b *testing.B)    { benchmarkObjectSplit(b, 20000) }
func BenchmarkObjectAssemble2000(b *testing.B)  { benchmarkObjectAssemble(b, 2000) }
func BenchmarkObjectAssemble20000(b *testing.B) { benchmarkObjectAssemble(b, 20000) }

// BenchmarkObjectCountReferences counts 20 checkpoints of the capacity workload.
func BenchmarkObjectCountReferences(b *testing.B) {
	r := rand.New(rand.NewPCG(18, 19))
	c := cairn.Checkpoint{Files: objTestFiles(2000, "")}
	bucket := objBucket{}
	var listings [][]keys.Digest
	for turn := range 20 {
		c = c.Clone()
		for _, i := range r.Perm(len(c.Files))[:20] {
			c.Files[i].BlobKey = objTestFileKey(fmt.Sprint(turn, i))
		}
		_, _, refs, _ := splitCheckpointBody(&c)
		bucket.putRefs(refs)
		listings = append(listings, objDigests(refs))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := countReferences(listings, bucket.fetch); err != nil {
			b.Fatal(err)
		}
	}
}
