package snapshot_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/treetest"
	"github.com/cairnstore/cairn/snapshot"
)

var large = flag.Bool("snapshot.large", false, "also run the heap bounds at full size: a 2 GiB file and 100,000 small files")

// genTree writes files small files spread over directories of 200, each
// with contents of its own, and returns the directory.
func genTree(t *testing.T, files int) string {
	t.Helper()
	dir := t.TempDir()
	for i := range files {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/200))
		if i%200 == 0 {
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d.txt", i)), fmt.Appendf(nil, "file %d\n", i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRoundTripGeneratedTree(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	src := genTree(t, 20000)
	m, err := snapshot.CaptureDir(ctx, src, nil, e.uploader(t, "t"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Stats.Files != 20000 || m.Stats.Uploaded != 20000 {
		t.Fatalf("stats %+v", m.Stats)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := snapshot.Restore(ctx, e.blobs, &cairn.Checkpoint{Files: m.Files}, dst, nil); err != nil {
		t.Fatal(err)
	}
	got, want := treetest.Read(t, dst), treetest.Read(t, src)
	if !mapsEqual(got, want) {
		t.Fatalf("restored %d paths, want %d", len(got), len(want))
	}
}

// peakHeap runs fn while sampling the heap, and returns the highest live
// heap (what the last garbage collection found reachable) and the highest
// heap including garbage not yet collected, both above the heap before fn.
func peakHeap(t *testing.T, fn func()) (live, total uint64) {
	t.Helper()
	runtime.GC()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	baseLive, baseTotal := sample[0].Value.Uint64(), sample[1].Value.Uint64()
	var peakLive, peakTotal uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			peakLive = max(peakLive, s[0].Value.Uint64())
			peakTotal = max(peakTotal, s[1].Value.Uint64())
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	fn()
	runtime.GC() // the last cycle's live heap counts too
	close(stop)
	wg.Wait()
	return max(peakLive, baseLive) - baseLive, max(peakTotal, baseTotal) - baseTotal
}

// countClaimer accepts every claim and keeps only their number, so that the
// heap measured is the capture's, not a memory store's.
type countClaimer struct {
	mu sync.Mutex
	n  int
}

func (c *countClaimer) ClaimBlobs(ctx context.Context, w cairn.Writer, keys []string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += len(keys)
	return nil, nil
}

func (c *countClaimer) WaitBlobs(ctx context.Context, keys []string) error { return nil }

const heapBound = 64 << 20

// TestHeapBound: a capture holds no file in memory. Its peak live heap stays
// under 64 MiB for one large sparse file and for many small files. The
// bucket discards the bytes it is sent and the claimer only counts, so only
// the capture's own memory counts.
func TestHeapBound(t *testing.T) {
	bigSize, smallFiles := int64(256<<20), 5000
	if *large {
		bigSize, smallFiles = 2<<30, 100000
	}
	cases := []struct {
		name string
		make func(t *testing.T) string
	}{
		{fmt.Sprintf("one sparse file of %d MiB", bigSize>>20), func(t *testing.T) string {
			dir := t.TempDir()
			f, err := os.Create(filepath.Join(dir, "big.bin"))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(bigSize); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{fmt.Sprintf("%d small files", smallFiles), func(t *testing.T) string { return genTree(t, smallFiles) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.make(t)
			claims := &countClaimer{}
			up := snapshot.Uploader{Bucket: discardBucket{}, Claimer: claims, Writer: cairn.Writer{ThreadID: "t"}}
			var m *snapshot.Manifest
			var err error
			live, total := peakHeap(t, func() {
				m, err = snapshot.CaptureDir(context.Background(), dir, nil, up, nil)
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d files, %d MiB: peak live heap %.1f MiB, peak heap with garbage %.1f MiB", m.Stats.Files, m.Stats.Bytes>>20, float64(live)/(1<<20), float64(total)/(1<<20))
			if claims.n != m.Stats.Files {
				t.Fatalf("%d keys claimed, want %d", claims.n, m.Stats.Files)
			}
			if live >= heapBound {
				t.Fatalf("peak live heap %d bytes, want under %d", live, heapBound)
			}
			// One file leaves no room for garbage to hide a buffer of it.
			if m.Stats.Files == 1 && total >= heapBound {
				t.Fatalf("peak heap %d bytes for one file, want under %d", total, heapBound)
			}
		})
	}
}
