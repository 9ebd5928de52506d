package etcdstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// coldGetThread appends, on a store of the capacity layout over mem, a
// thread of two checkpoints of n entries as B3O does: the second with 1% of
// the entries new against the first and the conversation unchanged. It
// returns the id of the second.
func coldGetThread(tb testing.TB, ctx context.Context, s *Store, n int) string {
	tb.Helper()
	l, err := s.AcquireWriter(ctx, "cold")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Release(context.Background())
	files := objTestFiles(n, "")
	conv := packBenchConversation(true, 3) // ~60 KiB, as B3O's 64 KiB
	parent := ""
	for i := range 2 {
		for j := n - max(1, n/100); j < n; j++ {
			files[j].BlobKey = objTestFileKey(fmt.Sprint("turn", i, j))
		}
		c := cairn.Checkpoint{ID: fmt.Sprintf("cold-%d", i), ThreadID: "cold", ParentCheckpointID: parent, CreatedAt: float64(i + 1),
			Reason: cairn.ReasonAutomatic, Files: files, Conversation: conv}
		if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: parent, Writer: l.Writer}); err != nil {
			tb.Fatal(err)
		}
		parent = c.ID
	}
	return parent
}

// BenchmarkColdGet is a Get of a checkpoint of the capacity layout (root
// version 5: packed, compressed, patched leaves) on a fresh store, so the
// root and its packs come from the bucket (in process, no latency), against
// a Get of the same checkpoint in version 1: what a cold read costs on the
// client besides its round trips (decompression, hashing, decoding,
// assembly). The store is opened outside the timer.
func BenchmarkColdGet(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		for _, objects := range []bool{true, false} {
			name := fmt.Sprintf("entries=%d/layout=1", n)
			if objects {
				name = fmt.Sprintf("entries=%d/layout=packed", n)
			}
			b.Run(name, func(b *testing.B) {
				_, cli := embedetcd.ForTest(b)
				ctx := context.Background()
				mem := bucket.NewMemory(nil)
				o := Options{}
				if objects {
					o.Objects = mem
				}
				s, err := New(cli, "cold/", o)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				id := coldGetThread(b, ctx, s, n)
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					fresh, err := New(cli, "cold/", o)
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					c, err := fresh.Get(ctx, id)
					if err != nil || c == nil || len(c.Files) != n {
						b.Fatalf("get %s: %v", id, err)
					}
					b.StopTimer()
					fresh.Close()
					b.StartTimer()
				}
			})
		}
	}
}

// BenchmarkMemberFrames decodes the leaves of a 20,000-entry body as a cold
// read of a packed root does, one zstd frame a member (packDecode), against
// the same bytes as one frame: what the format's frame a member costs.
func BenchmarkMemberFrames(b *testing.B) {
	files := objTestFiles(20000, "")
	var leaves [][]byte
	start := 0
	for i := range files {
		if objPackLeafCut(files[i].Path, i-start+1) || i == len(files)-1 {
			leaves = append(leaves, objEncodeLeaf(files[start:i+1]))
			start = i + 1
		}
	}
	frames := make([][]byte, len(leaves))
	raws := make([]int, len(leaves))
	var all []byte
	for i, l := range leaves {
		frames[i], raws[i] = packCompress(l)
		all = append(all, l...)
	}
	b.Run(fmt.Sprintf("frames=%d", len(frames)), func(b *testing.B) {
		b.SetBytes(int64(len(all)))
		for b.Loop() {
			for i, f := range frames {
				if _, err := packDecode(f, raws[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("frames=1", func(b *testing.B) {
		enc, err := zstdEncoder()
		if err != nil {
			b.Fatal(err)
		}
		one := enc.EncodeAll(all, nil)
		dec, err := zstdDecoder()
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(all)))
		for b.Loop() {
			if _, err := dec.DecodeAll(one, make([]byte, 0, len(all))); err != nil {
				b.Fatal(err)
			}
		}
	})
}
