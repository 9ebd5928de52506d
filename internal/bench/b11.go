package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
)

const (
	b11Prefix = "/cairn-bench/b11/"
	// b11Files files a checkpoint, from b11Repos repositories that threads
	// share; b11Changed of them change a turn; the conversation grows by
	// b11ConvTurn bytes a turn; b11Turns turns, every one kept.
	b11Files    = 2_000
	b11Repos    = 4
	b11Changed  = 20
	b11ConvTurn = 20 << 10
	b11Turns    = 20
	// b11Budget is etcd's suggested largest backend.
	b11Budget = 8 << 30
)

// b11 measures the capacity layout: B11Threads threads of b11Turns turns of
// the capacity workload, every checkpoint kept, written once with the
// capacity layout (objects in an in-process bucket) and once in version 1
// (the baseline), each into an etcd member of its own. It reports etcd bytes
// per kept checkpoint, logical (keys and values under the prefix) and
// physical (the member's backend after compaction and defragmentation), the
// checkpoints that fit in 8 GiB, the etcd bytes of a fork, and the latency
// of a Get of a head with a cold and a warm object cache.
func (r *runner) b11(ctx context.Context) ([]Row, error) {
	v2, err := r.b11Side(ctx, true)
	if err != nil {
		return nil, err
	}
	v1, err := r.b11Side(ctx, false)
	if err != nil {
		return nil, err
	}
	result := "met"
	if v2.perKept > 8<<10 || v2.fork > 2<<10 {
		result = "missed"
	}
	return []Row{{
		ID:       "B11",
		Workload: fmt.Sprintf("capacity: %d threads × %d turns, %s files from %d repositories, %d changed and +%s of conversation a turn, all kept", r.cfg.B11Threads, b11Turns, fmtInt(b11Files), b11Repos, b11Changed, fmtBytes(b11ConvTurn)),
		Cairn:    fmt.Sprintf("%s a kept checkpoint (physical %s); fork %s", fmtBytes(v2.perKept), fmtBytes(v2.physPerKept), fmtBytes(v2.fork)),
		Baseline: fmt.Sprintf("%s a kept checkpoint (physical %s); fork %s", fmtBytes(v1.perKept), fmtBytes(v1.physPerKept), fmtBytes(v1.fork)),
		Ratio:    float64(v2.perKept) / float64(v1.perKept),
		Target:   "≤ 8 KiB a kept checkpoint, fork ≤ 2 KiB",
		Result:   result,
		Notes: []string{
			fmt.Sprintf("Version 2 (Options.Objects, in-process bucket): %s logical etcd bytes under the prefix for %d kept checkpoints, %s a checkpoint, %s checkpoints in 8 GiB; backend after compaction and defragmentation %s (%s a checkpoint, member overhead included); %s of objects in the bucket. Version 1 (the baseline): %s logical, %s a checkpoint, %s in 8 GiB; backend %s.",
				fmtBytes(v2.logical), v2.kept, fmtBytes(v2.perKept), fmtInt(b11Budget/max(1, v2.perKept)), fmtBytes(v2.physical), fmtBytes(v2.physPerKept), fmtBytes(v2.objectBytes),
				fmtBytes(v1.logical), fmtBytes(v1.perKept), fmtInt(b11Budget/max(1, v1.perKept)), fmtBytes(v1.physical)),
			fmt.Sprintf("Get of a head: version 2 %s with a cold object cache, %s warm; version 1 %s. Append of a turn (median): version 2 %s, version 1 %s.",
				fmtDur(v2.getCold), fmtDur(v2.getWarm), fmtDur(v1.getWarm), fmtDur(v2.appendMedian), fmtDur(v1.appendMedian)),
			walkNote(v2.walk, v1.walk),
		},
	}}, nil
}

type b11Result struct {
	kept                  int
	logical, perKept      int64
	physical, physPerKept int64
	fork, objectBytes     int64
	getCold, getWarm      time.Duration
	appendMedian          time.Duration
	walk                  b11Walk
}

func (r *runner) b11Side(ctx context.Context, objects bool) (b11Result, error) {
	var res b11Result
	name := "b11-v1"
	if objects {
		name = "b11-v2"
	}
	cli, stop, err := r.etcd(ctx, name)
	if err != nil {
		return res, err
	}
	defer stop()
	mem := bucket.NewMemory(nil)
	opts := etcdstore.Options{Options: storeOptions}
	if objects {
		opts.Objects = mem
	}
	open := func() (*etcdstore.Store, error) { return etcdstore.New(cli, b11Prefix, opts) }
	store, err := open()
	if err != nil {
		return res, err
	}
	defer store.Close()
	var appendT []time.Duration
	var heads []string
	for th := range r.cfg.B11Threads {
		ch, err := newChain(ctx, store, fmt.Sprintf("b11-%d", th))
		if err != nil {
			return res, err
		}
		for turn := range b11Turns {
			in := ch.next(nil, []string{artifactKey(fmt.Sprintf("b11-%d-%d", th, turn))}, b11Conversation(th, turn))
			in.Checkpoint.Files = b11Entries(th, turn)
			start := time.Now()
			if err := ch.append(ctx, in); err != nil {
				return res, err
			}
			appendT = append(appendT, time.Since(start))
		}
		heads = append(heads, ch.head)
		r.logf("B11 (%s): thread %d of %d done", name, th+1, r.cfg.B11Threads)
	}
	res.kept = r.cfg.B11Threads * b11Turns
	res.appendMedian = medianDuration(appendT)
	if res.logical, err = prefixBytes(ctx, cli); err != nil {
		return res, err
	}
	res.perKept = res.logical / int64(res.kept)
	// The fork of a head into a new thread: what it adds under the prefix.
	fl, err := store.AcquireWriter(ctx, "b11-fork")
	if err != nil {
		return res, err
	}
	before := res.logical
	if _, err := store.ForkFromCheckpoint(ctx, cairn.ForkInput{SourceThreadID: "b11-0", SourceCheckpointID: heads[0],
		DestinationThreadID: "b11-fork", DestinationCheckpointID: "b11-fork-root", CreatedAt: 1_800_000_000_000, Writer: fl.Writer}); err != nil {
		return res, err
	}
	fl.Release(ctx) // the writer records are not the fork's
	afterRelease, err := prefixBytes(ctx, cli)
	if err != nil {
		return res, err
	}
	res.fork = afterRelease - before
	// Reads.
	cold, err := open()
	if err != nil {
		return res, err
	}
	defer cold.Close()
	start := time.Now()
	if _, err := cold.Get(ctx, heads[len(heads)-1]); err != nil {
		return res, err
	}
	res.getCold = time.Since(start)
	var warm []time.Duration
	for range 5 {
		start := time.Now()
		if _, err := cold.Get(ctx, heads[len(heads)-1]); err != nil {
			return res, err
		}
		warm = append(warm, time.Since(start))
	}
	res.getWarm = medianDuration(warm)
	// The sweep's walk over everything kept (b11walk.go).
	var counted etcdstore.ObjectStore
	if objects {
		counted = mem
	}
	res.walk, err = measureWalk(ctx, func(o etcdstore.ObjectStore) (*etcdstore.Store, error) {
		wo := opts
		wo.Objects = o
		return etcdstore.New(cli, b11Prefix, wo)
	}, counted, res.kept+1)
	if err != nil {
		return res, err
	}
	// The backend after compaction and defragmentation.
	resp, err := cli.Get(ctx, "\x00")
	if err != nil {
		return res, err
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		return res, err
	}
	ep := cli.Endpoints()[0]
	if _, err := cli.Defragment(ctx, ep); err != nil {
		return res, err
	}
	st, err := cli.Status(ctx, ep)
	if err != nil {
		return res, err
	}
	res.physical = st.DbSize
	res.physPerKept = st.DbSize / int64(res.kept)
	for o, err := range bucket.Objects(ctx, mem, cairn.ObjectPrefix, 0) {
		if err != nil {
			return res, err
		}
		res.objectBytes += o.Size
	}
	return res, nil
}

// prefixBytes sums the sizes of the keys and values under the bench prefix.
func prefixBytes(ctx context.Context, cli *clientv3.Client) (int64, error) {
	resp, err := cli.Get(ctx, b11Prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	var n int64
	for _, kv := range resp.Kvs {
		n += int64(len(kv.Key) + len(kv.Value))
	}
	return n, nil
}

// b11Files_ returns the files of turn turn of thread th: the files of
// repository th mod b11Repos, of which b11Changed a turn got content of the
// thread's own.
func b11Entries(th, turn int) []cairn.Entry {
	repo := th % b11Repos
	files := make([]cairn.Entry, b11Files)
	for i := range files {
		seed := fmt.Sprintf("repo%d-%d", repo, i)
		if last := b11LastChange(i, turn); last >= 0 {
			seed = fmt.Sprintf("thread%d-%d-turn%d", th, i, last)
		}
		files[i] = cairn.Entry{Path: fmt.Sprintf("repo/pkg%03d/file%05d.go", i/50, i), Kind: cairn.KindFile, BlobKey: fileKey(seed), Size: int64(1000 + i)}
	}
	return files
}

// b11LastChange returns the last turn up to turn that changed file i, or -1:
// turn t changes files congruent to t·b11Changed ... spread over the tree.
func b11LastChange(i, turn int) int {
	stride := b11Files / b11Changed
	for t := turn; t >= 1; t-- {
		if i%stride == t%stride {
			return t
		}
	}
	return -1
}

// b11Conversation returns the conversation of a turn: that of the turn
// before with about b11ConvTurn more bytes at its end.
func b11Conversation(th, turn int) json.RawMessage {
	var msgs []string
	line := strings.Repeat("read the failing test, changed the parser, ran the suite again; ", 4)
	for t := 0; t <= turn; t++ {
		for size := 0; size < b11ConvTurn; size += len(line) + 60 {
			msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":"thread %d turn %d at %d: %s"}`, th, t, size, line))
		}
	}
	return json.RawMessage("[" + strings.Join(msgs, ",") + "]")
}

// b11Vocabulary is the fixed vocabulary of b11Prose: 4,096 pseudo-random
// lower-case words of 2 to 11 letters, from a fixed seed.
var b11Vocabulary = func() []string {
	r := rand.New(rand.NewPCG(20, 11))
	words := make([]string, 4096)
	for i := range words {
		w := make([]byte, 2+r.IntN(10))
		for j := range w {
			w[j] = byte('a' + r.IntN(26))
		}
		words[i] = string(w)
	}
	return words
}()

// b11Prose returns the conversation of a turn like b11Conversation, with
// text of a compressibility closer to a transcript's than b11Conversation's
// one repeated line: each turn adds about b11ConvTurn bytes of messages
// whose words are drawn (Zipf-distributed) from b11Vocabulary, with numbers,
// file paths and hex identifiers, by a generator seeded with the thread and
// the turn, so that a turn's conversation is the one before with more at its
// end.
func b11Prose(th, turn int) json.RawMessage {
	var b strings.Builder
	b.WriteByte('[')
	for t := 0; t <= turn; t++ {
		r := rand.New(rand.NewPCG(uint64(th), uint64(t)))
		z := rand.NewZipf(r, 1.1, 2, uint64(len(b11Vocabulary)-1))
		for start := b.Len(); b.Len()-start < b11ConvTurn; {
			if b.Len() > 1 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"role":%q,"content":"`, [...]string{"user", "assistant", "tool"}[r.IntN(3)])
			for k := 20 + r.IntN(200); k > 0; k-- {
				switch x := r.IntN(40); {
				case x == 0:
					fmt.Fprintf(&b, "%d ", r.IntN(100_000))
				case x == 1:
					fmt.Fprintf(&b, "src/%s/%s.go:%d ", b11Vocabulary[z.Uint64()], b11Vocabulary[z.Uint64()], r.IntN(500))
				case x == 2:
					fmt.Fprintf(&b, "%016x ", r.Uint64())
				default:
					b.WriteString(b11Vocabulary[z.Uint64()])
					b.WriteByte(' ')
				}
			}
			b.WriteString(`"}`)
		}
	}
	b.WriteByte(']')
	return json.RawMessage(b.String())
}
