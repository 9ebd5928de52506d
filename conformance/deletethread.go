package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cairnstore/cairn"
)

func (e *env) deleteThread(thread string, w cairn.Writer) ([]string, error) {
	e.t.Helper()
	e.note(thread)
	return e.s.(cairn.ThreadDeleter).DeleteThread(e.ctx, cairn.DeleteThreadInput{ThreadID: thread, Writer: w})
}

// mustDeleteThread deletes thread with its cached lease and checks the
// removed ids.
func (e *env) mustDeleteThread(thread string, want ...string) {
	e.t.Helper()
	got, err := e.deleteThread(thread, e.writer(thread))
	if err != nil {
		e.t.Fatalf("DeleteThread(%q): %v", thread, err)
	}
	if got == nil {
		e.t.Errorf("DeleteThread(%q) returned nil ids, want a list", thread)
	}
	if !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
		e.t.Errorf("DeleteThread(%q) removed %q, want %q", thread, got, want)
	}
}

// expectGone checks that none of ids can be read.
func (e *env) expectGone(ids ...string) {
	e.t.Helper()
	for _, id := range ids {
		if c := e.get(id); c != nil {
			e.t.Errorf("Get(%s) after DeleteThread = %s, want nil", id, show(*c))
		}
	}
}

// deleteThreadCases check cairn.ThreadDeleter and cairn.DeleteThread.
func deleteThreadCases() []storeCase {
	cs := []storeCase{
		{"RemovesEveryCheckpoint", func(e *env) {
			e.chain(threadA, "1", "2", "3")
			e.chain(threadB, "b1", "b2")
			before := e.state()
			e.mustDeleteThread(threadA, "1", "2", "3")
			e.expectHead(threadA, "")
			e.expectIDs(threadA)
			e.expectGone("1", "2", "3")
			after := e.state()
			if after.heads[threadB] != before.heads[threadB] || len(after.lists[threadB]) != len(before.lists[threadB]) {
				e.t.Errorf("deleting thread-a changed thread-b: head %q -> %q, %d -> %d checkpoints",
					before.heads[threadB], after.heads[threadB], len(before.lists[threadB]), len(after.lists[threadB]))
			}
		}},
		{"ReferenceCountsGoDown", func(e *env) {
			shared := fileKey(1000)
			parent := ""
			for i, id := range []string{"1", "2", "3"} {
				c := withFiles(cp(id, parent, threadA), file("s", shared), file("u", fileKey(i+1)), file("v", shared))
				if i == 0 {
					c.Artifacts = []cairn.Artifact{artifact("a", artifactKey(1))}
				}
				e.mustAppend(c, parent)
				parent = id
			}
			e.mustAppend(withFiles(cp("b", "", threadB), file("s", shared), file("x", fileKey(9))), "")
			e.expectRefs(artifactKey(1), 1, fileKey(1), 1, fileKey(2), 1, fileKey(3), 1, fileKey(9), 1, shared, 4)
			e.mustDeleteThread(threadA, "1", "2", "3")
			e.expectRefs(fileKey(9), 1, shared, 1)
			e.mustDeleteThread(threadB, "b")
			e.expectRefs()
		}},
		{"RemovedInListOrder", func(e *env) {
			// createdAt falls along the chain, so List order is the chain's
			// reverse.
			parent := ""
			for i, id := range []string{"r", "s", "t", "u"} {
				c := cp(id, parent, threadA)
				c.CreatedAt = float64(40 - 10*i)
				e.mustAppend(c, parent)
				parent = id
			}
			e.mustDeleteThread(threadA, "u", "t", "s", "r")
		}},
		{"AfterPrune", func(e *env) {
			e.chain(threadA, "1", "2", "3", "4")
			e.mustPrune(threadA, 2, "1", "2")
			e.mustDeleteThread(threadA, "3", "4")
			e.expectIDs(threadA)
			e.expectRefs()
		}},
		{"EmptyThread", func(e *env) {
			e.chain(threadA, "1")
			e.unchanged("DeleteThread on a thread without checkpoints", func() { e.mustDeleteThread(threadC) })
		}},
		{"Twice", func(e *env) {
			e.chain(threadA, "1", "2")
			e.mustDeleteThread(threadA, "1", "2")
			e.unchanged("DeleteThread again", func() { e.mustDeleteThread(threadA) })
		}},
		{"LeaseStaysAndThreadCanGrowAgain", func(e *env) {
			e.chain(threadA, "1", "2", "3")
			e.mustDeleteThread(threadA, "1", "2", "3")
			// The same lease appends a new root, which may reuse a removed id.
			e.mustAppend(cp("2", "", threadA), "")
			e.chain(threadA, "9")
			e.expectHead(threadA, "9")
			e.expectIDs(threadA, "2", "9")
			e.expectRefs(fileKey(2), 1, fileKey(9), 1)
			old := e.writer(threadA).Fence
			e.dropLease(threadA)
			if l := e.mustAcquire(threadA); l.Writer.Fence <= old {
				e.t.Errorf("fence after DeleteThread and release = %d, want above %d", l.Writer.Fence, old)
			}
		}},
		{"NotListed", func(e *env) {
			lister, ok := e.s.(cairn.ThreadLister)
			if !ok {
				e.t.Skipf("%T does not implement cairn.ThreadLister", e.s)
			}
			e.chain(threadA, "1")
			e.chain(threadB, "b1")
			e.mustDeleteThread(threadA, "1")
			got, err := lister.ListThreads(e.ctx, "", 0)
			noErr(e.t, "ListThreads", err)
			if !slices.Equal(got, []string{threadB}) {
				e.t.Errorf("ListThreads after DeleteThread(%q) = %q, want [%q]", threadA, got, threadB)
			}
		}},
		{"Large", func(e *env) {
			// More checkpoints than one etcd transaction has operations.
			const n = 150
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("c%03d", i)
			}
			e.chain(threadA, ids...)
			e.chain(threadB, "b1")
			e.mustDeleteThread(threadA, ids...)
			e.expectIDs(threadA)
			e.expectHead(threadA, "")
			e.expectGone(ids[0], ids[n/2], ids[n-1])
			e.expectRefs(fileKey(1), 1)
		}},
		{"Helper", func(e *env) {
			e.chain(threadA, "1", "2")
			e.dropLease(threadA)
			removed, err := cairn.DeleteThread(e.ctx, e.s, threadA)
			noErr(e.t, "DeleteThread", err)
			if !slices.Equal(removed, []string{"1", "2"}) {
				e.t.Errorf("DeleteThread removed %q, want [1 2]", removed)
			}
			e.expectIDs(threadA)
			e.mustAcquire(threadA) // DeleteThread released its lease
		}},
		{"HelperWriterConflict", func(e *env) {
			e.chain(threadA, "1", "2")
			e.fails("DeleteThread while another writer holds the thread", cairn.ErrWriterConflict, func() error {
				_, err := cairn.DeleteThread(e.ctx, e.s, threadA)
				return err
			})
			e.chain(threadA, "3") // the holder still holds the lease
		}},
		{"HelperWithoutCapability", func(e *env) {
			e.chain(threadA, "1")
			e.dropLease(threadA)
			plain := struct{ cairn.Store }{e.s}
			e.unchanged("DeleteThread on a store without ThreadDeleter", func() {
				_, err := cairn.DeleteThread(e.ctx, plain, threadA)
				if !errors.Is(err, cairn.ErrUnsupported) {
					e.t.Errorf("DeleteThread on a store without ThreadDeleter: got %v, want ErrUnsupported", err)
				}
			})
			e.mustAcquire(threadA)
		}},
		{"Context/Canceled", func(e *env) {
			e.chain(threadA, "1", "2")
			ctx, cancel := context.WithCancel(e.ctx)
			cancel()
			w := e.writer(threadA)
			e.fails("DeleteThread with a cancelled context", context.Canceled, func() error {
				_, err := e.s.(cairn.ThreadDeleter).DeleteThread(ctx, cairn.DeleteThreadInput{ThreadID: threadA, Writer: w})
				return err
			})
		}},
	}
	type row struct {
		name   string
		want   error
		writer writerKind
		thread string
	}
	rows := []row{
		{"InvalidThreadBeforeWriterMismatch", cairn.ErrInvalidID, currentWriter(threadB), ""},
		{"InvalidWriterThread", cairn.ErrInvalidID, editedWriter(threadA, func(w *cairn.Writer) { w.ThreadID = invalidUTF8 }), threadA},
		{"ExpiredWriter", cairn.ErrWriterLost, expiredWriter(threadA), threadA},
		{"TakenOverWriter", cairn.ErrWriterLost, takenOverWriter(threadA), threadA},
		{"ReleasedWriter", cairn.ErrWriterLost, releasedWriter(threadA), threadA},
		{"OtherThreadsWriter", cairn.ErrWriterLost, currentWriter(threadB), threadA},
		{"WrongToken", cairn.ErrWriterLost, editedWriter(threadA, func(w *cairn.Writer) { w.OwnerToken += "x" }), threadA},
		{"WrongFence", cairn.ErrWriterLost, editedWriter(threadA, func(w *cairn.Writer) { w.Fence++ }), threadA},
		{"NeverIssuedWriter", cairn.ErrWriterLost, neverIssuedWriter(threadA), threadA},
	}
	for _, r := range rows {
		cs = append(cs, storeCase{"Order/" + r.name, func(e *env) {
			e.chain(threadA, "1", "2", "3")
			e.chain(threadB, "b1")
			w := r.writer(e)
			e.fails("DeleteThread", r.want, func() error {
				removed, err := e.deleteThread(r.thread, w)
				if err != nil && len(removed) != 0 {
					e.t.Errorf("DeleteThread returned ids %q together with its error", removed)
				}
				return err
			})
		}})
	}
	return append(cs, deleteThreadBoundCases()...)
}
