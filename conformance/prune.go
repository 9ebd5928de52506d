package conformance

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"

	"github.com/cairnstore/cairn"
)

func (e *env) prune(thread string, keep float64, w cairn.Writer) ([]string, error) {
	e.t.Helper()
	e.note(thread)
	return e.s.(cairn.Pruner).DeleteCheckpoints(e.ctx, cairn.DeleteCheckpointsInput{ThreadID: thread, Keep: keep, Writer: w})
}

// mustPrune prunes thread with its cached lease and checks the removed ids.
func (e *env) mustPrune(thread string, keep float64, want ...string) {
	e.t.Helper()
	got, err := e.prune(thread, keep, e.writer(thread))
	if err != nil {
		e.t.Fatalf("DeleteCheckpoints(%q, keep %v): %v", thread, keep, err)
	}
	if len(got) != 0 || len(want) != 0 {
		if !slices.Equal(got, want) {
			e.t.Errorf("DeleteCheckpoints(%q, keep %v) removed %q, want %q", thread, keep, got, want)
		}
	}
}

func (e *env) pruneFails(what string, want error, thread string, keep float64, w cairn.Writer) {
	e.t.Helper()
	e.fails(what, want, func() error {
		removed, err := e.prune(thread, keep, w)
		if err != nil && len(removed) != 0 {
			e.t.Errorf("%s: DeleteCheckpoints returned ids %q together with its error", what, removed)
		}
		return err
	})
}

// dropLease releases the cached lease of thread so that another caller can
// take the thread.
func (e *env) dropLease(thread string) {
	if l := e.leases[thread]; l != nil {
		l.Release(e.ctx)
		delete(e.leases, thread)
	}
}

// pruneCases check DeleteCheckpoints (contract A10, A11) and KeepNewest.
func pruneCases() []storeCase {
	cs := []storeCase{
		{"KeepValidation", func(e *env) {
			e.chain(threadA, "1", "2", "3")
			for _, keep := range []float64{0, -1, 0.5, 1.5, math.NaN(), math.Inf(1), math.Inf(-1), cairn.MaxSafeInteger + 1, math.Copysign(0, -1), 1e300} {
				e.pruneFails("keep "+rowName(formatFloat(keep)), cairn.ErrInvalidEntry, threadA, keep, e.writer(threadA))
			}
		}},
		{"KeepLargerThanChain", func(e *env) {
			e.chain(threadA, "1", "2", "3")
			for _, keep := range []float64{3, 4, 100, cairn.MaxSafeInteger} {
				e.unchanged("keep "+formatFloat(keep), func() { e.mustPrune(threadA, keep) })
			}
		}},
		{"EmptyThread", func(e *env) {
			e.chain(threadA, "1")
			e.unchanged("DeleteCheckpoints on an empty thread", func() { e.mustPrune(threadC, 1) })
		}},
		{"KeepOne", func(e *env) {
			e.chain(threadA, "1", "2", "3", "4")
			e.mustPrune(threadA, 1, "1", "2", "3")
			e.expectHead(threadA, "4")
			e.expectIDs(threadA, "4")
			e.expectRefs(fileKey(4), 1)
			for _, id := range []string{"1", "2", "3"} {
				if c := e.get(id); c != nil {
					e.t.Errorf("Get(%s) after pruning = %s, want nil", id, show(*c))
				}
			}
		}},
		{"ParentChainNotCreatedAt", func(e *env) {
			// createdAt falls along the chain r <- s <- t <- u, so the newest
			// by createdAt are the oldest on the chain.
			parent := ""
			for i, id := range []string{"r", "s", "t", "u"} {
				c := cp(id, parent, threadA)
				c.CreatedAt = float64(40 - 10*i)
				e.mustAppend(c, parent)
				parent = id
			}
			e.mustPrune(threadA, 2, "r", "s")
			e.expectHead(threadA, "u")
			e.expectIDs(threadA, "u", "t")
			if c := e.get("r"); c != nil {
				e.t.Error("Get(r) after pruning is not nil")
			}
		}},
		{"RemovedOldestFirst", func(e *env) {
			e.chain(threadA, "5", "4", "3", "2", "1")
			e.mustPrune(threadA, 2, "5", "4", "3")
			e.expectIDs(threadA, "1", "2")
			e.mustPrune(threadA, 1, "2")
			e.expectIDs(threadA, "1")
		}},
		{"ReferenceCountsGoDown", func(e *env) {
			shared := fileKey(1000)
			parent := ""
			for i, id := range []string{"1", "2", "3", "4"} {
				c := withFiles(cp(id, parent, threadA), file("s", shared), file("u", fileKey(i+1)))
				if i == 0 {
					c.Artifacts = []cairn.Artifact{artifact("a", artifactKey(1))}
				}
				e.mustAppend(c, parent)
				parent = id
			}
			e.mustAppend(withFiles(cp("b", "", threadB), file("s", shared)), "")
			e.expectRefs(artifactKey(1), 1, fileKey(1), 1, fileKey(2), 1, fileKey(3), 1, fileKey(4), 1, shared, 5)
			e.mustPrune(threadA, 2, "1", "2")
			e.expectRefs(fileKey(3), 1, fileKey(4), 1, shared, 3)
		}},
		{"OtherThreadsUntouched", func(e *env) {
			e.chain(threadA, "1", "2", "3")
			e.chain(threadB, "b1", "b2")
			before := e.state()
			e.mustPrune(threadA, 1, "1", "2")
			after := e.state()
			if after.heads[threadB] != before.heads[threadB] || len(after.lists[threadB]) != len(before.lists[threadB]) {
				e.t.Errorf("pruning thread-a changed thread-b: head %q -> %q, %d -> %d checkpoints",
					before.heads[threadB], after.heads[threadB], len(before.lists[threadB]), len(after.lists[threadB]))
			}
		}},
		{"AppendAfterPrune", func(e *env) {
			e.chain(threadA, "1", "2", "3")
			e.mustPrune(threadA, 1, "1", "2")
			e.chain(threadA, "4")
			e.expectIDs(threadA, "3", "4")
			// A pruned id no longer exists, so it may be used again.
			e.mustAppend(cp("1", "4", threadA), "4")
			e.expectHead(threadA, "1")
		}},
		{"DeleteHeadAfterPruneLeavesNoHead", func(e *env) {
			e.chain(threadA, "1", "2", "3")
			e.mustPrune(threadA, 1, "1", "2")
			e.mustDeleteHead(threadA, "3")
			e.expectHead(threadA, "")
			e.expectIDs(threadA)
			e.expectRefs()
			e.chain(threadA, "9")
			e.expectIDs(threadA, "9")
		}},
		{"DeleteHeadAfterPruneKeepTwo", func(e *env) {
			e.chain(threadA, "1", "2", "3")
			e.mustPrune(threadA, 2, "1")
			e.mustDeleteHead(threadA, "3")
			e.expectHead(threadA, "2")
			e.mustDeleteHead(threadA, "2")
			e.expectHead(threadA, "")
			e.deleteHeadFails("DeleteHead of the pruned root", cairn.ErrNotHead, e.writer(threadA), threadA, "1")
		}},
		{"KeepNewest", func(e *env) {
			e.chain(threadA, "1", "2", "3", "4", "5")
			e.dropLease(threadA)
			removed, err := cairn.KeepNewest(e.ctx, e.s, threadA, 2)
			noErr(e.t, "KeepNewest", err)
			if !slices.Equal(removed, []string{"1", "2", "3"}) {
				e.t.Errorf("KeepNewest removed %q, want [1 2 3]", removed)
			}
			e.expectIDs(threadA, "4", "5")
			e.mustAcquire(threadA) // KeepNewest released its lease
		}},
		{"KeepNewestReleasesOnError", func(e *env) {
			e.chain(threadA, "1", "2")
			e.dropLease(threadA)
			e.fails("KeepNewest with keep 0", cairn.ErrInvalidEntry, func() error {
				_, err := cairn.KeepNewest(e.ctx, e.s, threadA, 0)
				return err
			})
			e.mustAcquire(threadA)
		}},
		{"KeepNewestWriterConflict", func(e *env) {
			e.chain(threadA, "1", "2")
			e.fails("KeepNewest while another writer holds the thread", cairn.ErrWriterConflict, func() error {
				_, err := cairn.KeepNewest(e.ctx, e.s, threadA, 1)
				return err
			})
			e.chain(threadA, "3") // the holder still holds the lease
		}},
		{"Context/Canceled", func(e *env) {
			e.chain(threadA, "1", "2")
			ctx, cancel := context.WithCancel(e.ctx)
			cancel()
			w := e.writer(threadA)
			e.fails("DeleteCheckpoints with a cancelled context", context.Canceled, func() error {
				_, err := e.s.(cairn.Pruner).DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: threadA, Keep: 1, Writer: w})
				return err
			})
			e.dropLease(threadA)
			e.fails("KeepNewest with a cancelled context", context.Canceled, func() error {
				_, err := cairn.KeepNewest(ctx, e.s, threadA, 1)
				return err
			})
			e.mustAcquire(threadA)
		}},
		{"KeepNewestWithoutPruner", func(e *env) {
			e.chain(threadA, "1", "2")
			e.dropLease(threadA)
			plain := struct{ cairn.Store }{e.s}
			e.unchanged("KeepNewest on a store without Pruner", func() {
				_, err := cairn.KeepNewest(e.ctx, plain, threadA, 1)
				if !errors.Is(err, cairn.ErrUnsupported) {
					e.t.Errorf("KeepNewest on a store without Pruner: got %v, want ErrUnsupported", err)
				}
			})
			e.mustAcquire(threadA)
		}},
	}
	type row struct {
		name   string
		want   error
		writer writerKind
		thread string
		keep   float64
	}
	rows := []row{
		{"InvalidThreadBeforeWriterMismatch", cairn.ErrInvalidID, currentWriter(threadB), "", 1},
		{"InvalidWriterThread", cairn.ErrInvalidID, editedWriter(threadA, func(w *cairn.Writer) { w.ThreadID = invalidUTF8 }), threadA, 0},
		{"WriterMismatchBeforeKeep", cairn.ErrWriterLost, currentWriter(threadB), threadA, 0},
		{"KeepBeforeExpiredWriter", cairn.ErrInvalidEntry, expiredWriter(threadA), threadA, 0},
		{"KeepBeforeReleasedWriter", cairn.ErrInvalidEntry, releasedWriter(threadA), threadA, math.NaN()},
		{"ExpiredWriter", cairn.ErrWriterLost, expiredWriter(threadA), threadA, 1},
		{"TakenOverWriter", cairn.ErrWriterLost, takenOverWriter(threadA), threadA, 1},
		{"ReleasedWriter", cairn.ErrWriterLost, releasedWriter(threadA), threadA, 1},
		{"OtherThreadsWriter", cairn.ErrWriterLost, currentWriter(threadB), threadA, 1},
		{"WrongToken", cairn.ErrWriterLost, editedWriter(threadA, func(w *cairn.Writer) { w.OwnerToken += "x" }), threadA, 1},
		{"WrongFence", cairn.ErrWriterLost, editedWriter(threadA, func(w *cairn.Writer) { w.Fence++ }), threadA, 1},
		{"NeverIssuedWriter", cairn.ErrWriterLost, neverIssuedWriter(threadA), threadA, 1},
	}
	for _, r := range rows {
		cs = append(cs, storeCase{"Order/" + r.name, func(e *env) {
			e.chain(threadA, "1", "2", "3")
			e.chain(threadB, "b1")
			w := r.writer(e)
			e.pruneFails("DeleteCheckpoints", r.want, r.thread, r.keep, w)
		}})
	}
	return append(cs, pruneBoundCases()...)
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
