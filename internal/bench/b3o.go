package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
)

const (
	b3oPrefix   = "/cairn-bench/b3o/"
	b3oV1Prefix = "/cairn-bench/b3o-v1/"
	// b3oObjectParallel is the store's bound on object puts in flight
	// (etcdstore's objectParallel), for the notes.
	b3oObjectParallel = 32
)

// b3oSide is one layout's figures of B3O.
type b3oSide struct {
	append, getWarm, getCold []time.Duration
	// etcd requests and the bytes they carried, of one append.
	requests, sent int
	// objects put and their bytes, of one append.
	puts, putBytes int64
	cpu            time.Duration
}

// b3Objects is B3 on the capacity layout when only 1% of the entries are new
// against the parent: a thread of B3Entries entries, B3Entries/100 of them
// with keys new to each checkpoint, the 64 KiB conversation unchanged, the
// bodies in objects on versitygw (Options.Objects, the default inline limit).
// The baseline is version 1 on the same workload, the same member, in
// alternation. Each append is followed by a Get on the store that appended
// (its object cache warm) and a Get on a fresh store (cold: the root, every
// leaf and the conversation chunks come from the bucket).
func (r *runner) b3Objects(ctx context.Context) (Row, error) {
	cfg := r.cfg
	bin, err := findVersityGW(cfg.VersityGW)
	if err != nil {
		return Row{}, err
	}
	gw, err := startGateway(ctx, bin, filepath.Join(r.tmp, "versitygw-b3o"))
	if err != nil {
		return Row{}, err
	}
	defer gw.stop()
	objs, err := bucket.NewS3(ctx, bucket.Config{Endpoint: gw.Endpoint, Region: gwRegion, Bucket: gwBucket, PathStyle: true, AccessKeyID: gwAccess, SecretAccessKey: gwSecret})
	if err != nil {
		return Row{}, err
	}
	defer objs.Close()
	counted := &countingObjects{ObjectStore: objs}
	cli, stop, err := r.etcd(ctx, "b3o")
	if err != nil {
		return Row{}, err
	}
	defer stop()
	open := func(prefix string, objects bool) (*etcdstore.Store, error) {
		o := etcdstore.Options{Options: storeOptions}
		if objects {
			o.Objects = counted
		}
		return etcdstore.New(cli, prefix, o)
	}
	changing := max(1, cfg.B3Entries/100)
	type side struct {
		name   string
		prefix string
		store  *etcdstore.Store
		ch     *chain
		t      *tree
		res    b3oSide
	}
	var sides []*side
	for _, s := range []struct {
		prefix  string
		objects bool
	}{{b3oPrefix, true}, {b3oV1Prefix, false}} {
		store, err := open(s.prefix, s.objects)
		if err != nil {
			return Row{}, err
		}
		defer store.Close()
		ch, err := newChain(ctx, store, "b3o-thread")
		if err != nil {
			return Row{}, err
		}
		// Both sides share the stable keys: they are the same workspace.
		t := newTree(fileKeys("b3o-stable", cfg.B3Entries-changing), changing, conversation(b3ConvBytes))
		sides = append(sides, &side{prefix: s.prefix, store: store, ch: ch, t: t})
	}
	v2, v1 := sides[0], sides[1]
	v2.name, v1.name = "version 2", "version 1"
	// one appends the side's next checkpoint and reads it back twice.
	one := func(ctx context.Context, s *side, record bool) error {
		in := s.t.nextInput(s.ch)
		actx, at := withTally(ctx, true)
		puts0, bytes0 := counted.puts.Load(), counted.putBytes.Load()
		c0 := cpuTime()
		start := time.Now()
		if err := s.ch.append(actx, in); err != nil {
			return err
		}
		a := time.Since(start)
		cpu := cpuTime() - c0
		puts, putBytes := counted.puts.Load()-puts0, counted.putBytes.Load()-bytes0
		start = time.Now()
		got, err := s.store.Get(ctx, in.Checkpoint.ID)
		warm := time.Since(start)
		if err != nil {
			return err
		}
		if got == nil || len(got.Files) != cfg.B3Entries {
			return fmt.Errorf("B3O (%s): get %q did not return the checkpoint just appended", s.name, in.Checkpoint.ID)
		}
		fresh, err := open(s.prefix, s == v2)
		if err != nil {
			return err
		}
		defer fresh.Close()
		start = time.Now()
		got, err = fresh.Get(ctx, in.Checkpoint.ID)
		cold := time.Since(start)
		if err != nil {
			return err
		}
		if got == nil || len(got.Files) != cfg.B3Entries {
			return fmt.Errorf("B3O (%s): a fresh store's get %q did not return the checkpoint", s.name, in.Checkpoint.ID)
		}
		if !record {
			return nil
		}
		s.res.append, s.res.getWarm, s.res.getCold = append(s.res.append, a), append(s.res.getWarm, warm), append(s.res.getCold, cold)
		s.res.cpu += cpu
		s.res.puts, s.res.putBytes = puts, putBytes
		calls := at.snapshot()
		s.res.requests, s.res.sent = len(calls), 0
		for _, c := range calls {
			s.res.sent += c.req
		}
		return nil
	}
	// The first checkpoint of each side writes everything; the second is
	// the first with 1% new.
	for _, s := range sides {
		for range 2 {
			if err := one(ctx, s, false); err != nil {
				return Row{}, err
			}
		}
	}
	// Between rounds only a compaction: a prune would change the thread
	// record, after which the next version-2 append claims and puts every
	// object rather than those its parent lacks.
	err = r.alternate("B3O", cfg.Rounds, func() error { return tidy(ctx, cli, nil) }, func(int) error {
		for range cfg.B3Iterations {
			if err := one(ctx, v2, true); err != nil {
				return err
			}
		}
		return nil
	}, func(int) error {
		for range cfg.B3Iterations {
			if err := one(ctx, v1, true); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Row{}, err
	}
	ratio := float64(medianDuration(v2.res.append)) / float64(medianDuration(v1.res.append))
	n := time.Duration(len(v2.res.append))
	cell := func(s *side) string {
		return fmt.Sprintf("append %s; get %s warm, %s cold", fmtDur(medianDuration(s.res.append)), fmtDur(medianDuration(s.res.getWarm)), fmtDur(medianDuration(s.res.getCold)))
	}
	return Row{
		ID:       "B3O",
		Workload: fmt.Sprintf("B3 with 1%% new: append + get of a %s-entry checkpoint of which %s entries are new against the parent, capacity layout (objects on versitygw)", fmtInt(int64(cfg.B3Entries)), fmtInt(int64(changing))),
		Cairn:    cell(v2),
		Baseline: "version 1: " + cell(v1),
		Ratio:    ratio,
		Target:   "append ratio < 1 (faster than version 1)",
		Result:   verdict(ratio < 1),
		Notes: []string{
			fmt.Sprintf("the ratio is of the append medians. A version-2 append sends %d etcd requests carrying %s (the claims of the objects its parent lacks, then the one append transaction) and puts %d objects (%s) in the bucket, %d at a time; a version-1 append sends %d requests carrying %s. The new keys are together in the tree, so the objects are one pack (the leaves that hold them, as patches of their parent's versions where smaller; their reference chunks are made from the leaves) and the root. \"Warm\" is a Get on the store that appended, \"cold\" on a fresh store, which fetches the root and, in parallel, the packs its record names (at most 3), then cuts and verifies every leaf and conversation chunk from them; %d pairs per side and round, medians. Cold get: version 2 %.2f× version 1 (target ≤ 1.5×).",
				v2.res.requests, fmtBytes(int64(v2.res.sent)), v2.res.puts, fmtBytes(v2.res.putBytes), b3oObjectParallel, v1.res.requests, fmtBytes(int64(v1.res.sent)), cfg.B3Iterations,
				float64(medianDuration(v2.res.getCold))/float64(medianDuration(v1.res.getCold))),
			fmt.Sprintf("CPU time of the benchmark process per append: version 2 %s, version 1 %s.", fmtDur(v2.res.cpu/n), fmtDur(v1.res.cpu/max(1, time.Duration(len(v1.res.append))))),
		},
	}, nil
}

// b3Rows runs B3 and B3O: the second row is B3 on the capacity layout with
// 1% of the entries new.
func (r *runner) b3Rows(ctx context.Context) ([]Row, error) {
	rows, err := r.b3(ctx)
	if err != nil {
		return nil, err
	}
	row, err := r.b3Objects(ctx)
	if err != nil {
		return nil, fmt.Errorf("B3O: %w", err)
	}
	return append(rows, row), nil
}
