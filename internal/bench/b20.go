package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
)

const b20Prefix = "/cairn-bench/b20/"

// The targets of B20 (what a checkpoint costs on R2).
const (
	b20MaxObjects   = 3   // metadata objects written a checkpoint
	b20MaxBytesX    = 2.0 // metadata bytes stored a checkpoint, × the turn's new metadata
	b20MaxColdReads = 4   // bucket reads of a cold Get of a 2,000-entry checkpoint
)

// b20Side is one form's figures of B20.
type b20Side struct {
	kept int
	// objects and bytes created under sandbox-meta/ by all the appends.
	objects, bytes int64
	// newMeta is the new metadata of the turns after the first (the changed
	// entries and the conversation's growth), summed, and turns how many.
	newMeta int64
	turns   int
	// reads and bytes of a cold Get of the last head, and its time.
	coldReads, coldBytes int64
	cold                 time.Duration
	// the sweep's walk (ReadBlobGC on a fresh store).
	walk b11Walk
}

// b20 measures what a checkpoint costs in bucket requests and bytes on the
// capacity workload of B11 (B11Threads threads × 20 turns of a 2,000-file
// workspace, 20 files changed and +20 KiB of conversation a turn, every
// checkpoint kept), written in the packed form (the default) and, as the
// baseline, in the unpacked form of root version 2 (Options.Unpacked), each
// into an etcd member and an in-process bucket of its own.
//
// B11's conversation repeats one line, which compresses far better than a
// transcript; the packed form is also measured with b11Prose, a
// conversation of realistic compressibility, and that figure is reported
// next to the target as well.
func (r *runner) b20(ctx context.Context) ([]Row, error) {
	packed, err := r.b20Side(ctx, false, false)
	if err != nil {
		return nil, err
	}
	prose, err := r.b20Side(ctx, false, true)
	if err != nil {
		return nil, err
	}
	unpacked, err := r.b20Side(ctx, true, false)
	if err != nil {
		return nil, err
	}
	per := func(s b20Side) (objs, bytes, newMeta float64) {
		return float64(s.objects) / float64(s.kept), float64(s.bytes) / float64(s.kept), float64(s.newMeta) / float64(max(1, s.turns))
	}
	po, pb, nm := per(packed)
	uo, ub, _ := per(unpacked)
	_, qb, qm := per(prose)
	sweepPer := func(s b20Side) float64 { return float64(s.walk.gets) / float64(max(1, s.kept)) }
	objOK, bytesOK, readsOK := po <= b20MaxObjects, pb <= b20MaxBytesX*nm, packed.coldReads <= b20MaxColdReads
	cell := func(o, b float64, s b20Side) string {
		return fmt.Sprintf("%.2f objects, %s stored a checkpoint; cold get %d reads (%s); sweep %.2f reads a kept checkpoint",
			o, fmtBytes(int64(b)), s.coldReads, fmtBytes(s.coldBytes), sweepPer(s))
	}
	return []Row{{
		ID: "B20",
		Workload: fmt.Sprintf("what a turn costs on R2: %d threads × %d turns, %s files, %d changed and +%s of conversation a turn, all kept; metadata objects and bytes a checkpoint, bucket reads of a cold get and of the sweep",
			r.cfg.B11Threads, b11Turns, fmtInt(b11Files), b11Changed, fmtBytes(b11ConvTurn)),
		Cairn:    "packed: " + cell(po, pb, packed),
		Baseline: "unpacked (root version 2): " + cell(uo, ub, unpacked),
		Ratio:    pb / ub,
		Target:   fmt.Sprintf("≤ %d objects and ≤ %.0f× the turn's new metadata (%s) a checkpoint; cold get ≤ %d reads", b20MaxObjects, b20MaxBytesX, fmtBytes(int64(nm)), b20MaxColdReads),
		Result:   verdict(objOK && bytesOK && readsOK),
		Notes: []string{
			fmt.Sprintf("B20: objects met %v (%.2f), bytes met %v (%s a checkpoint, %.1f× the %s of new metadata a turn: the changed entries and the conversation's growth), cold get reads met %v (%d: the root and, in parallel, each pack it names). The ratio is of the bytes stored. Packed: %s objects, %s for %d checkpoints; unpacked: %s objects, %s.",
				objOK, po, bytesOK, fmtBytes(int64(pb)), pb/nm, fmtBytes(int64(nm)), readsOK, packed.coldReads,
				fmtInt(packed.objects), fmtBytes(packed.bytes), packed.kept, fmtInt(unpacked.objects), fmtBytes(unpacked.bytes)),
			fmt.Sprintf("B20 with a conversation of realistic compressibility (b11Prose: Zipf-distributed words of a fixed 4,096-word vocabulary with numbers, paths and hex identifiers, about 2.5× smaller with zstd in 16 KiB pieces, against about 40× for the repeated line above): packed %s stored a checkpoint, %.1f× the %s of new metadata a turn (target %.0f×: met %v); %.2f objects a checkpoint, cold get %d reads, sweep %.2f reads a kept checkpoint.",
				fmtBytes(int64(qb)), qb/qm, fmtBytes(int64(qm)), b20MaxBytesX, qb <= b20MaxBytesX*qm, float64(prose.objects)/float64(prose.kept), prose.coldReads, sweepPer(prose)),
			fmt.Sprintf("Cold get of the last head (2,000 entries, a fresh store, in-process bucket): packed %s in %d reads, unpacked %s in %d reads. The sweep's walk (ReadBlobGC, fresh store): packed %s reads (%s) for %d kept checkpoints, unpacked %s reads (%s).",
				fmtDur(packed.cold), packed.coldReads, fmtDur(unpacked.cold), unpacked.coldReads,
				fmtInt(packed.walk.gets), fmtBytes(packed.walk.bytes), packed.kept, fmtInt(unpacked.walk.gets), fmtBytes(unpacked.walk.bytes)),
		},
	}}, nil
}

// b20Side writes and measures one form of B20: unpacked (root version 2)
// or packed, with B11's conversation or, with prose, b11Prose.
func (r *runner) b20Side(ctx context.Context, unpacked, prose bool) (b20Side, error) {
	var res b20Side
	name := "b20-packed"
	if unpacked {
		name = "b20-unpacked"
	}
	conversation := b11Conversation
	if prose {
		name += "-prose"
		conversation = b11Prose
	}
	cli, stop, err := r.etcd(ctx, name)
	if err != nil {
		return res, err
	}
	defer stop()
	mem := bucket.NewMemory(nil)
	counted := &countingObjects{ObjectStore: mem}
	opts := etcdstore.Options{Options: storeOptions, Objects: counted, Unpacked: unpacked}
	store, err := etcdstore.New(cli, b20Prefix, opts)
	if err != nil {
		return res, err
	}
	defer store.Close()
	var head string
	for th := range r.cfg.B11Threads {
		ch, err := newChain(ctx, store, fmt.Sprintf("b20-%d", th))
		if err != nil {
			return res, err
		}
		var prev cairn.Checkpoint
		for turn := range b11Turns {
			in := ch.next(nil, []string{artifactKey(fmt.Sprintf("b20-%d-%d", th, turn))}, conversation(th, turn))
			in.Checkpoint.Files = b11Entries(th, turn)
			if err := ch.append(ctx, in); err != nil {
				return res, err
			}
			if turn > 0 {
				res.newMeta += b20NewMeta(&prev, &in.Checkpoint)
				res.turns++
			}
			prev = in.Checkpoint
		}
		head = ch.head
		r.logf("B20 (%s): thread %d of %d done", name, th+1, r.cfg.B11Threads)
	}
	res.kept = r.cfg.B11Threads * b11Turns
	res.objects, res.bytes = counted.created.Load(), counted.creBytes.Load()
	// A cold Get of the last head.
	cold := &countingObjects{ObjectStore: mem}
	co := opts
	co.Objects = cold
	fresh, err := etcdstore.New(cli, b20Prefix, co)
	if err != nil {
		return res, err
	}
	defer fresh.Close()
	start := time.Now()
	got, err := fresh.Get(ctx, head)
	res.cold = time.Since(start)
	if err != nil {
		return res, err
	}
	if got == nil || len(got.Files) != b11Files {
		return res, fmt.Errorf("B20 (%s): a cold get of %q did not return the checkpoint", name, head)
	}
	res.coldReads, res.coldBytes = cold.gets.Load(), cold.bytes.Load()
	res.walk, err = measureWalk(ctx, func(o etcdstore.ObjectStore) (*etcdstore.Store, error) {
		wo := opts
		wo.Objects = o
		return etcdstore.New(cli, b20Prefix, wo)
	}, mem, res.kept)
	return res, err
}

// b20NewMeta is the new metadata of a turn: the encoded size of the entries
// that differ from the parent's (path, kind, blob key and an 8-byte size)
// and the bytes the conversation grew by.
func b20NewMeta(parent, c *cairn.Checkpoint) int64 {
	var n int64
	for i, f := range c.Files {
		if i < len(parent.Files) && parent.Files[i] == f {
			continue
		}
		n += int64(len(f.Path) + len(f.Kind) + len(f.BlobKey) + 8)
	}
	return n + int64(max(0, len(c.Conversation)-len(parent.Conversation)))
}
