package etcdstore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/keys"
)

// packBenchConversation returns the conversation of a thread of turns
// turns, 20 KiB a turn: with repeat, messages that repeat one line (as
// B11's and B20's generator does); otherwise objTestConversation's words
// and numbers.
func packBenchConversation(repeat bool, turns int) []byte {
	if repeat {
		var msgs []string
		line := strings.Repeat("read the failing test, changed the parser, ran the suite again; ", 4)
		for t := 0; t < turns; t++ {
			for size := 0; size < 20<<10; size += len(line) + 60 {
				msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":"thread %d turn %d at %d: %s"}`, 0, t, size, line))
			}
		}
		return []byte("[" + strings.Join(msgs, ",") + "]")
	}
	return objTestConversation(rand.New(rand.NewPCG(7, 8)), turns*20<<10)
}

// packThreadCost splits and packs turns checkpoints of one thread of the
// capacity workload (2,000 files, 20 changed a turn, +20 KiB of
// conversation a turn), each on its parent's packs, and returns the bytes
// stored: members new to their turn, members copied forward by the
// write-time repack, and roots, over turns 2..turns.
func packThreadCost(tb testing.TB, repeat bool, turns int) (fresh, copied, roots int) {
	tb.Helper()
	conv := packBenchConversation(repeat, turns)
	files := make([]cairn.Entry, 2000)
	for i := range files {
		files[i] = cairn.Entry{Path: fmt.Sprintf("repo/pkg%03d/file%05d.go", i/50, i), Kind: cairn.KindFile, BlobKey: objTestFileKey(fmt.Sprint("base", i)), Size: int64(1000 + i)}
	}
	var memo *splitMemo
	var parent map[keys.Digest]partLoc
	for turn := 0; turn < turns; turn++ {
		for i := range files {
			if turn > 0 && i%100 == turn%100 {
				files[i].BlobKey = objTestFileKey(fmt.Sprint("turn", turn, i))
			}
		}
		c := cairn.Checkpoint{Files: files, Conversation: conv[:(turn+1)*len(conv)/turns]}
		var p packed
		p, memo = packTurn(tb, &c, memo, parent)
		for d, l := range p.locs {
			// Every member, and the base of every patch, is in a pack
			// the root names.
			if l.inPack() && !slices.Contains(p.packs, l.pack) || l.delta != nil && !slices.Contains(p.packs, l.delta.pack) {
				tb.Fatalf("turn %d: part %x is at %+v, in a pack its root does not name", turn, d[:4], l)
			}
		}
		if turn > 0 {
			roots += len(p.root.data)
			for d, l := range p.locs {
				if _, ok := parent[d]; ok && parent[d] == l {
					continue // left where it is
				}
				if _, ok := parent[d]; ok {
					copied += l.stored()
				} else {
					fresh += l.stored()
				}
			}
		}
		parent = p.locs
	}
	return fresh, copied, roots
}

// packTurn splits c on memo, the split of the thread's checkpoint before
// (nil for none), as an append does, and packs it on parent, where that
// checkpoint's parts are: the packed root (version 6) and the split's
// memo.
func packTurn(tb testing.TB, c *cairn.Checkpoint, memo *splitMemo, parent map[keys.Digest]partLoc) (packed, *splitMemo) {
	tb.Helper()
	root, objs, refs, next, err := splitTreeCut(c, memo, objPackLeafCut)
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range refs {
		objs = append(objs, r.object)
	}
	ps, err := newPackSplit(root, objs, next.leafRefs(), next.refsFrom())
	if err != nil {
		tb.Fatal(err)
	}
	ps.prev = next.prevLeaves(memo)
	return ps.pack(parent), next
}

// BenchmarkPackedThread reports what a thread of the capacity workload
// stores a turn in the packed form (turns 2 to 20): new members, members
// the write-time repack copies forward, and roots, with B20's repetitive
// conversation and with one of realistic compressibility.
func BenchmarkPackedThread(b *testing.B) {
	for _, repeat := range []bool{true, false} {
		name := "words"
		if repeat {
			name = "repeated"
		}
		b.Run(name, func(b *testing.B) {
			const turns = 20
			var fresh, copied, roots int
			for b.Loop() {
				fresh, copied, roots = packThreadCost(b, repeat, turns)
			}
			n := float64(turns - 1)
			b.ReportMetric(float64(fresh)/n, "fresh-B/turn")
			b.ReportMetric(float64(copied)/n, "copied-B/turn")
			b.ReportMetric(float64(roots)/n, "root-B/turn")
			b.ReportMetric(float64(fresh+copied+roots)/n, "stored-B/turn")
		})
	}
}
