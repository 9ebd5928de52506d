package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// gcStore is a store with both sides of the online sweep protocol.
type gcStore interface {
	cairn.Store
	cairn.BlobClaimer
	cairn.BlobCollector
}

// gcEnv is one store under a scenario: its clock, its leases and the record
// sets the scenario kept, by name.
type gcEnv struct {
	t      *testing.T
	ctx    context.Context
	s      gcStore
	clock  *clock
	leases map[string]*cairn.Lease
	recs   map[string][]cairn.GCRecord
}

// gcStep is one operation of a scenario. Its outcome, a string without the
// store's own versions, must be the same on every store, and equal want
// when want is set.
type gcStep struct {
	do   func(e *gcEnv) string
	want string
}

// bk is the blob key named n in scenarios: names starting with "a" are
// artifact keys, the others file keys, and their digests end in the name's
// number, so that the keys sort like their names (artifacts first).
func bk(n string) string {
	ns := "sandbox-files/sha256/"
	if strings.HasPrefix(n, "a") {
		ns = "sandbox-artifacts/sha256/"
	}
	return ns + strings.Repeat("0", 62) + fmt.Sprintf("%02x", n[len(n)-1])
}

// gcCheckpoint is a checkpoint whose files use the blob keys named ns.
func gcCheckpoint(id, thread, parent string, ns ...string) cairn.Checkpoint {
	c := cairn.Checkpoint{ID: id, ThreadID: thread, ParentCheckpointID: parent, CreatedAt: 1, Reason: cairn.ReasonNamed}
	for i, n := range ns {
		c.Files = append(c.Files, cairn.Entry{Path: fmt.Sprintf("f%d", i), Kind: cairn.KindFile, BlobKey: bk(n), Size: 1})
	}
	return c
}

var bkNames = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"k1", "k2", "k3", "k4", "k5", "a1", "a2"} {
		m[bk(n)] = n
	}
	return m
}()

func name(key string) string {
	if n, ok := bkNames[key]; ok {
		return n
	}
	return key
}

func bks(names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = bk(n)
	}
	return out
}

func names(ks []string) string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = name(k)
	}
	return strings.Join(out, " ")
}

func outcome(err error) string {
	var ce *cairn.Error
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &ce):
		return string(ce.Code)
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return "error: " + err.Error()
}

func recsString(recs []cairn.GCRecord) string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%s:%s@%v", name(r.Key), r.State, r.Since))
	}
	return "[" + strings.Join(out, " ") + "]"
}

func acquire(l, thread string) gcStep {
	return gcStep{do: func(e *gcEnv) string {
		lease, err := e.s.AcquireWriter(e.ctx, thread)
		if err == nil {
			e.leases[l] = lease
		}
		return outcome(err)
	}}
}

func release(l string) gcStep {
	return gcStep{do: func(e *gcEnv) string {
		e.leases[l].Release(e.ctx)
		return "ok"
	}}
}

func renew(l string) gcStep {
	return gcStep{do: func(e *gcEnv) string {
		_, err := e.leases[l].Renew(e.ctx)
		return outcome(err)
	}}
}

func advance(ms float64) gcStep {
	return gcStep{do: func(e *gcEnv) string {
		e.clock.Add(ms)
		return "ok"
	}}
}

func claimAs(w func(e *gcEnv) cairn.Writer, want string, ks ...string) gcStep {
	return gcStep{want: want, do: func(e *gcEnv) string {
		busy, err := e.s.ClaimBlobs(e.ctx, w(e), ks)
		if err != nil {
			return outcome(err)
		}
		return "busy=[" + names(busy) + "]"
	}}
}

func claim(l, want string, ns ...string) gcStep {
	return claimAs(func(e *gcEnv) cairn.Writer { return e.leases[l].Writer }, want, bks(ns...)...)
}

func appendC(l, id, parent, want string, ns ...string) gcStep {
	return gcStep{want: want, do: func(e *gcEnv) string {
		w := e.leases[l].Writer
		c := gcCheckpoint(id, w.ThreadID, parent, ns...)
		_, err := e.s.Append(e.ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: parent, Writer: w})
		return outcome(err)
	}}
}

// mark keeps the records created under set.
func mark(set string, since float64, want string, ks ...string) gcStep {
	return gcStep{want: want, do: func(e *gcEnv) string {
		recs, err := e.s.MarkBlobs(e.ctx, ks, since)
		if err != nil {
			return outcome(err)
		}
		e.recs[set] = recs
		return recsString(recs)
	}}
}

// begin keeps the records moved under to.
func begin(from, to, want string) gcStep {
	return gcStep{want: want, do: func(e *gcEnv) string {
		recs, err := e.s.BeginBlobDeletes(e.ctx, e.recs[from])
		if err != nil {
			return outcome(err)
		}
		e.recs[to] = recs
		return recsString(recs)
	}}
}

func end(set string, deleted bool) gcStep {
	return gcStep{want: "ok", do: func(e *gcEnv) string { return outcome(e.s.EndBlobDeletes(e.ctx, e.recs[set], deleted)) }}
}

func drop(set string) gcStep {
	return gcStep{want: "ok", do: func(e *gcEnv) string { return outcome(e.s.DropBlobRecords(e.ctx, e.recs[set])) }}
}

// pick keeps, under to, the records of from whose keys are named.
func pick(from, to string, ns ...string) gcStep {
	return gcStep{do: func(e *gcEnv) string {
		e.recs[to] = nil
		for _, r := range e.recs[from] {
			if slices.Contains(ns, name(r.Key)) {
				e.recs[to] = append(e.recs[to], r)
			}
		}
		return recsString(e.recs[to])
	}}
}

// edit keeps under to the records of from, changed by f.
func edit(from, to string, f func(*cairn.GCRecord)) gcStep {
	return gcStep{do: func(e *gcEnv) string {
		e.recs[to] = slices.Clone(e.recs[from])
		for i := range e.recs[to] {
			f(&e.recs[to][i])
		}
		return recsString(e.recs[to])
	}}
}

// read reads the GC view and keeps its records under set.
func read(set, want string) gcStep {
	return gcStep{want: want, do: func(e *gcEnv) string {
		var refs []string
		view, err := e.s.ReadBlobGC(e.ctx, func(r cairn.BlobReference) error {
			refs = append(refs, fmt.Sprintf("%s:%d", name(r.Key), r.References))
			return nil
		})
		if err != nil {
			return outcome(err)
		}
		e.recs[set] = view.Records
		return fmt.Sprintf("claimed=[%s] records=%s refs=[%s]", names(view.Claimed), recsString(view.Records), strings.Join(refs, " "))
	}}
}

func wait(timeout time.Duration, want string, ns ...string) gcStep {
	return gcStep{want: want, do: func(e *gcEnv) string {
		ctx, cancel := context.WithTimeout(e.ctx, timeout)
		defer cancel()
		return outcome(e.s.WaitBlobs(ctx, bks(ns...)))
	}}
}

// gcScenarios are run on the memory store and the etcd store alike.
var gcScenarios = []struct {
	name  string
	steps []gcStep
}{
	{"MarkBeginEnd", []gcStep{
		acquire("A", "t"),
		mark("m", 10, "[a1:candidate@10 k1:candidate@10 k2:candidate@10]", bks("k2", "k1", "a1", "k1")...),
		read("v", "claimed=[] records=[a1:candidate@10 k1:candidate@10 k2:candidate@10] refs=[]"),
		begin("v", "d", "[a1:deleting@10 k1:deleting@10 k2:deleting@10]"),
		claim("A", "busy=[k1]", "k1", "k3"),
		wait(50*time.Millisecond, "deadline", "k3", "k1"),
		wait(time.Second, "ok", "k3"),
		end("d", true),
		wait(time.Second, "ok", "k1", "k2"),
		claim("A", "busy=[]", "k1"),
		read("v", "claimed=[k1 k3] records=[] refs=[]"),
	}},
	{"ClaimAfterMarkAbortsDelete", []gcStep{
		acquire("A", "t"),
		read("v0", "claimed=[] records=[] refs=[]"),
		mark("m", 5, "[k1:candidate@5 k2:candidate@5]", bks("k1", "k2")...),
		claim("A", "busy=[]", "k1"),
		begin("m", "d", "[k2:deleting@5]"),
		read("v", "claimed=[k1] records=[k2:deleting@5] refs=[]"),
	}},
	{"MarkSkipsClaimedAndRecorded", []gcStep{
		acquire("A", "t"),
		claim("A", "busy=[]", "k1"),
		mark("m", 1, "[k2:candidate@1 k3:candidate@1]", bks("k1", "k2", "k3")...),
		mark("m2", 2, "[]", bks("k1", "k2", "k3")...),
		read("v", "claimed=[k1] records=[k2:candidate@1 k3:candidate@1] refs=[]"),
	}},
	{"AppendEndsClaims", []gcStep{
		acquire("A", "t"),
		claim("A", "busy=[]", "k1", "k2", "a1"),
		read("v", "claimed=[a1 k1 k2] records=[] refs=[]"),
		appendC("A", "c1", "", "ok", "k1"),
		read("v", "claimed=[] records=[] refs=[k1:1]"),
		mark("m", 3, "[a1:candidate@3 k1:candidate@3 k2:candidate@3]", bks("k1", "k2", "a1")...),
	}},
	{"FailedAppendKeepsClaims", []gcStep{
		acquire("A", "t"),
		claim("A", "busy=[]", "k1"),
		appendC("A", "c1", "nope", string(cairn.CodeStaleHead), "k1"),
		read("v", "claimed=[k1] records=[] refs=[]"),
	}},
	{"ReleaseEndsClaims", []gcStep{
		acquire("A", "t"),
		acquire("B", "u"),
		claim("A", "busy=[]", "k1", "k2"),
		claim("B", "busy=[]", "k2", "k3"),
		release("A"),
		read("v", "claimed=[k2 k3] records=[] refs=[]"),
		claim("A", string(cairn.CodeWriterLost), "k4"),
		mark("m", 1, "[k1:candidate@1 k4:candidate@1]", bks("k1", "k2", "k3", "k4")...),
	}},
	{"ExpiryKeepsClaimsUntilTheRecordEnds", []gcStep{
		acquire("A", "t"),
		claim("A", "busy=[]", "k1"),
		advance(60_000),
		read("v", "claimed=[k1] records=[] refs=[]"),
		advance(60_000),
		read("v", "claimed=[k1] records=[] refs=[]"),
		mark("m0", 6, "[]", bks("k1")...),
		renew("A"), // finds the lease expired; the record is still A's
		read("v", "claimed=[k1] records=[] refs=[]"),
		acquire("B", "t"), // a takeover ends A's claims
		claim("A", string(cairn.CodeWriterLost), "k2"),
		mark("m", 7, "[k1:candidate@7]", bks("k1")...),
	}},
	{"TakeoverEndsClaims", []gcStep{
		acquire("A", "t"),
		claim("A", "busy=[]", "k1", "k2"),
		advance(120_000),
		acquire("B", "t"),
		claim("B", "busy=[]", "k2"),
		read("v", "claimed=[k2] records=[] refs=[]"),
		claim("A", string(cairn.CodeWriterLost), "k1"),
		mark("m", 1, "[k1:candidate@1]", bks("k1", "k2")...),
	}},
	{"EndNotDeletedKeepsSince", []gcStep{
		acquire("A", "t"),
		mark("m", 42, "[k1:candidate@42]", bks("k1")...),
		begin("m", "d", "[k1:deleting@42]"),
		end("d", false),
		read("v", "claimed=[] records=[k1:candidate@42] refs=[]"),
		end("d", true), // stale: the record moved on
		read("v2", "claimed=[] records=[k1:candidate@42] refs=[]"),
		begin("m", "d2", "[]"), // stale version
		begin("v", "d3", "[k1:deleting@42]"),
		claim("A", "busy=[k1]", "k1"),
		end("d3", true),
		claim("A", "busy=[]", "k1"),
		read("v", "claimed=[k1] records=[] refs=[]"),
	}},
	{"DropOnlyCandidatesOfTheVersion", []gcStep{
		mark("m", 1, "[k1:candidate@1 k2:candidate@1 k3:candidate@1]", bks("k1", "k2", "k3")...),
		pick("m", "p1", "k1"),
		drop("p1"),
		pick("m", "p2", "k2"),
		begin("p2", "d2", "[k2:deleting@1]"),
		drop("p2"),      // stale version
		drop("d2"),      // not a candidate
		end("p2", true), // stale version
		read("v", "claimed=[] records=[k2:deleting@1 k3:candidate@1] refs=[]"),
		drop("m"),
		read("v", "claimed=[] records=[k2:deleting@1] refs=[]"),
	}},
	{"RecordFieldsTheCallerChanged", []gcStep{
		mark("m", 5, "[k1:candidate@5 k2:candidate@5]", bks("k1", "k2")...),
		edit("m", "e", func(r *cairn.GCRecord) { r.Since, r.State = 99, cairn.GCDeleting }),
		begin("e", "d", "[k1:deleting@5 k2:deleting@5]"),
		edit("d", "e2", func(r *cairn.GCRecord) { r.Since = -1 }),
		end("e2", false),
		read("v", "claimed=[] records=[k1:candidate@5 k2:candidate@5] refs=[]"),
		edit("v", "e3", func(r *cairn.GCRecord) { r.Since = 0 }),
		drop("e3"),
		read("v", "claimed=[] records=[] refs=[]"),
	}},
	{"Duplicates", []gcStep{
		acquire("A", "t"),
		claim("A", "busy=[]", "k1", "k1", "k2", "k1"),
		mark("m", 1, "[k3:candidate@1]", bks("k3", "k3", "k1")...),
		edit("m", "twice", func(*cairn.GCRecord) {}),
		gcStep{do: func(e *gcEnv) string {
			e.recs["twice"] = append(e.recs["twice"], e.recs["twice"]...)
			return "ok"
		}},
		begin("twice", "d", "[k3:deleting@1]"),
		read("v", "claimed=[k1 k2] records=[k3:deleting@1] refs=[]"),
	}},
	{"InvalidInput", []gcStep{
		acquire("A", "t"),
		claimAs(func(e *gcEnv) cairn.Writer { return cairn.Writer{ThreadID: "", OwnerToken: "x", Fence: 1} }, string(cairn.CodeInvalidID), "not-a-key"),
		claimAs(func(e *gcEnv) cairn.Writer { return e.leases["A"].Writer }, string(cairn.CodeInvalidEntry), bk("k1"), "sandbox-files/sha256/ABC"),
		claimAs(func(e *gcEnv) cairn.Writer { w := e.leases["A"].Writer; w.Fence++; return w }, string(cairn.CodeWriterLost), bk("k1")),
		claimAs(func(e *gcEnv) cairn.Writer { w := e.leases["A"].Writer; w.OwnerToken = "other"; return w }, string(cairn.CodeWriterLost), bk("k1")),
		claimAs(func(e *gcEnv) cairn.Writer { return e.leases["A"].Writer }, "busy=[]"),
		mark("m", 1, string(cairn.CodeInvalidEntry), bk("k1"), "sandbox-files/sha256/"),
		gcStep{want: string(cairn.CodeInvalidEntry), do: func(e *gcEnv) string {
			_, err := e.s.BeginBlobDeletes(e.ctx, []cairn.GCRecord{{Key: "x", State: cairn.GCCandidate, Version: 1}})
			return outcome(err)
		}},
		gcStep{want: string(cairn.CodeInvalidEntry), do: func(e *gcEnv) string {
			return outcome(e.s.EndBlobDeletes(e.ctx, []cairn.GCRecord{{Key: bk("k1")}, {Key: "x"}}, true))
		}},
		gcStep{want: string(cairn.CodeInvalidEntry), do: func(e *gcEnv) string {
			return outcome(e.s.DropBlobRecords(e.ctx, []cairn.GCRecord{{Key: "sandbox-artifacts/sha256/zz"}}))
		}},
		gcStep{want: string(cairn.CodeInvalidEntry), do: func(e *gcEnv) string { return outcome(e.s.WaitBlobs(e.ctx, []string{"x"})) }},
		read("v", "claimed=[] records=[] refs=[]"),
	}},
	{"EmptyInput", []gcStep{
		mark("m", 1, "[]"),
		begin("none", "d", "[]"),
		end("none", true),
		drop("none"),
		wait(time.Second, "ok"),
	}},
}

// runGCScenarios runs every scenario on the stores newStore makes and
// returns each step's outcomes, by scenario.
func runGCScenarios(t *testing.T, newStore func(t *testing.T, opts cairn.Options) gcStore) map[string][]string {
	out := map[string][]string{}
	for _, sc := range gcScenarios {
		t.Run(sc.name, func(t *testing.T) {
			c := &clock{ms: 1_000_000}
			e := &gcEnv{t: t, ctx: testContext(t), clock: c, leases: map[string]*cairn.Lease{}, recs: map[string][]cairn.GCRecord{}}
			e.s = newStore(t, cairn.Options{Now: c.Now, LeaseDuration: 100 * time.Second, RenewAfter: 30 * time.Second})
			for i, st := range sc.steps {
				got := st.do(e)
				if st.want != "" && got != st.want {
					t.Errorf("step %d: got %s, want %s", i, got, st.want)
				}
				out[sc.name] = append(out[sc.name], got)
			}
		})
	}
	return out
}

// TestGCAgreesWithMemory runs the same scenarios on cairn's memory store,
// whose semantics are the specification, and on the etcd store, and compares
// every outcome.
func TestGCAgreesWithMemory(t *testing.T) {
	var mem, etcd map[string][]string
	t.Run("Memory", func(t *testing.T) {
		mem = runGCScenarios(t, func(t *testing.T, opts cairn.Options) gcStore {
			s, err := cairn.NewMemoryStore(opts)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("Etcd", func(t *testing.T) {
		_, cli := embedetcd.ForTest(t)
		var n atomic.Int64
		etcd = runGCScenarios(t, func(t *testing.T, opts cairn.Options) gcStore {
			return newStore(t, cli, fmt.Sprintf("gc-%d/", n.Add(1)), etcdstore.Options{Options: opts})
		})
	})
	for _, sc := range gcScenarios {
		m, e := mem[sc.name], etcd[sc.name]
		for i := range max(len(m), len(e)) {
			if i >= len(m) || i >= len(e) || m[i] != e[i] {
				t.Errorf("%s step %d: memory %q, etcd %q", sc.name, i, at(m, i), at(e, i))
			}
		}
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "<none>"
}

// gcStoreDeleter is also a Pruner, so that old references go away.
type gcStoreDeleter interface {
	gcStore
	cairn.Pruner
}

// runOnlineSweep runs writers and a sweeper at once against a model bucket:
// writers claim their checkpoint's keys, upload those the bucket lacks
// (waiting for busy ones), append and prune; the sweeper marks what one read
// shows unreferenced and unclaimed, begins the deletes of candidates that a
// second read still shows so, deletes their bytes and ends the deletes. At
// the end, every key a checkpoint references must be in the bucket.
func runOnlineSweep(t *testing.T, s gcStoreDeleter) {
	ctx := testContext(t)
	var mu sync.Mutex
	bucket := map[string]bool{}
	universe := make([]string, 24)
	for i := range universe {
		universe[i] = fileKey(fmt.Sprintf("sweep-%d", i))
	}
	const writers, turns = 2, 30
	var wg sync.WaitGroup
	var done atomic.Bool
	errs := make(chan error, writers+1)
	for w := range writers {
		wg.Go(func() {
			thread := fmt.Sprintf("w%d", w)
			l, err := s.AcquireWriter(ctx, thread)
			if err != nil {
				errs <- err
				return
			}
			defer l.Release(ctx)
			head := ""
			for turn := range turns {
				var ks []string
				for i, k := range universe {
					if (i*7+turn*5+w*3)%4 == 0 { // a quarter, shifting every turn
						ks = append(ks, k)
					}
				}
				for pending := ks; len(pending) > 0; {
					busy, err := s.ClaimBlobs(ctx, l.Writer, pending)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					for _, k := range pending {
						if !slices.Contains(busy, k) {
							bucket[k] = true // reuse or upload: the bytes are there now
						}
					}
					mu.Unlock()
					if len(busy) > 0 {
						if err := s.WaitBlobs(ctx, busy); err != nil {
							errs <- err
							return
						}
					}
					pending = busy
				}
				time.Sleep(10 * time.Millisecond) // the capture's own work
				c := cairn.Checkpoint{ID: fmt.Sprintf("%s-%d", thread, turn), ThreadID: thread, ParentCheckpointID: head, CreatedAt: float64(turn), Reason: cairn.ReasonAutomatic}
				for i, k := range ks {
					c.Files = append(c.Files, cairn.Entry{Path: fmt.Sprintf("f%d", i), Kind: cairn.KindFile, BlobKey: k, Size: 1})
				}
				if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: head, Writer: l.Writer}); err != nil {
					errs <- err
					return
				}
				head = c.ID
				if _, err := s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: thread, Keep: 1, Writer: l.Writer}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	sweeps, deleted := 0, 0
	var sweeper sync.WaitGroup
	sweeper.Go(func() {
		view := func() (cairn.BlobGCView, map[string]bool, error) {
			refs := map[string]bool{}
			v, err := s.ReadBlobGC(ctx, func(r cairn.BlobReference) error {
				refs[r.Key] = true
				return nil
			})
			return v, refs, err
		}
		for !done.Load() {
			sweeps++
			v, refs, err := view()
			if err != nil {
				errs <- err
				return
			}
			var unused []string
			for _, k := range universe {
				if _, rec := v.Record(k); !refs[k] && !v.IsClaimed(k) && !rec {
					unused = append(unused, k)
				}
			}
			if _, err := s.MarkBlobs(ctx, unused, float64(sweeps)); err != nil {
				errs <- err
				return
			}
			v, refs, err = view()
			if err != nil {
				errs <- err
				return
			}
			var cands, stale []cairn.GCRecord
			for _, r := range v.Records {
				switch {
				case r.State != cairn.GCCandidate:
				case refs[r.Key] || v.IsClaimed(r.Key):
					stale = append(stale, r)
				default:
					cands = append(cands, r)
				}
			}
			if err := s.DropBlobRecords(ctx, stale); err != nil {
				errs <- err
				return
			}
			moved, err := s.BeginBlobDeletes(ctx, cands)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			for _, r := range moved {
				delete(bucket, r.Key)
				deleted++
			}
			mu.Unlock()
			if err := s.EndBlobDeletes(ctx, moved, true); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	done.Store(true)
	sweeper.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	refs, err := s.ListBlobReferences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		if !bucket[r.Key] {
			t.Errorf("key %s is referenced %d times but its bytes were deleted", r.Key, r.References)
		}
	}
	t.Logf("%d sweeps deleted %d blobs while %d writers took %d turns each", sweeps, deleted, writers, turns)
}

func TestOnlineSweepKeepsReferencedBlobs(t *testing.T) {
	t.Run("Memory", func(t *testing.T) {
		s, err := cairn.NewMemoryStore(cairn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		runOnlineSweep(t, s)
	})
	t.Run("Etcd", func(t *testing.T) {
		_, cli := embedetcd.ForTest(t)
		runOnlineSweep(t, newStore(t, cli, "online/", etcdstore.Options{}))
	})
}
