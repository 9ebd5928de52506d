package etcdstore

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/keys"
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
// read of a root of version 5 does, one zstd frame a member (packDecode), as
// one of version 6 does, a frame a run of consecutive leaves (runs of 16,
// 64 and 256 KiB: the format's is objRunMax), and as one frame: what a
// frame a member costs and what runs keep of it. stored-bytes is what the
// leaves take in the pack.
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
	stored := 0
	for _, f := range frames {
		stored += len(f)
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
		b.ReportMetric(float64(stored), "stored-bytes")
	})
	// Runs of consecutive leaves, at most max bytes uncompressed each (the
	// writer's runWriter), decoded and cut as a cold read of a root of
	// version 6 does: a frame a run.
	for _, max := range []int{16 << 10, objRunMax, 256 << 10} {
		w := runWriter{runs: true, locs: map[keys.Digest]partLoc{}}
		var ds []keys.Digest
		for _, l := range leaves {
			d := keys.Digest(sha256.Sum256(l))
			if len(w.pending) > 0 && len(w.buf)+len(l) > max {
				w.end()
			}
			w.locs[d] = partLoc{}
			w.pending, w.at = append(w.pending, d), append(w.at, len(w.buf))
			w.buf = append(w.buf, l...)
			ds = append(ds, d)
		}
		w.end()
		runs := map[runPlace][]partLoc{}
		for _, d := range ds {
			l := w.locs[d]
			runs[l.run()] = append(runs[l.run()], l)
		}
		b.Run(fmt.Sprintf("runs=%dKiB/frames=%d", max>>10, len(runs)), func(b *testing.B) {
			b.SetBytes(int64(len(all)))
			for b.Loop() {
				for rp, ls := range runs {
					run, err := packDecode(w.data[rp.off:rp.off+rp.size], rp.raw)
					if err != nil {
						b.Fatal(err)
					}
					for _, l := range ls {
						if _, err := cutMember(run, l); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.ReportMetric(float64(len(w.data)), "stored-bytes")
		})
	}
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
