package conformance

import (
	"fmt"
	"math"
	"strings"

	"github.com/cairnstore/cairn"
)

// rowName turns an arbitrary string into a readable subtest name.
func rowName(s string) string {
	q := fmt.Sprintf("%q", s)
	if len(q) > 42 {
		q = q[:40] + "…"
	}
	return q
}

// idCases check the identifier rules: non-empty valid UTF-8, nothing else.
func idCases() []storeCase {
	return []storeCase{
		{"ID/Accepted", func(e *env) {
			ids := []string{" ", "with space", "a/b", "/lead", "trail/", "a\x00b", "\x00", ".", "..", "é", "😀", "\x01\x7f", "%2F", "a:b", "\uffff", strings.Repeat("long", 254)} // the longest is 1016 bytes, with its child's 1022
			for i, id := range ids {
				e.row(rowName(id), func(e *env) {
					c := withFiles(cp(id, "", id), file(fmt.Sprintf("f%d", i), fileKey(i+1)))
					e.mustAppend(c, "")
					e.expectHead(id, id)
					e.expectIDs(id, id)
					e.expectCheckpoint(id, c)
					child := withFiles(cp(id+"/child", id, id), dir("d"))
					e.mustAppend(child, id)
					e.expectHead(id, id+"/child")
				})
			}
		}},
		{"ID/NoNormalization", func(e *env) {
			// U+00E9 and e followed by U+0301 are distinct identifiers.
			e.mustAppend(cp("\u00e9", "", threadA), "")
			e.mustAppend(cp("e\u0301", "\u00e9", threadA), "\u00e9")
			e.mustAppend(cp("x", "", "\u00e9"), "")
			e.mustAppend(cp("y", "", "e\u0301"), "")
			e.expectIDs("\u00e9", "x")
			e.expectIDs("e\u0301", "y")
		}},
		{"ID/Rejected", func(e *env) {
			e.chain(threadA, "1", "2")
			lease := e.lease(threadA)
			for _, bad := range []string{"", invalidUTF8, "a\xffb"} {
				e.row(rowName(bad), func(e *env) { e.rejectsID(bad, lease) })
			}
			e.expectHead(threadA, "2")
		}},
	}
}

// writerKind prepares the writer of an order case. It runs after the setup
// and may move the clock or take leases.
type writerKind func(e *env) cairn.Writer

func currentWriter(thread string) writerKind {
	return func(e *env) cairn.Writer { return e.writer(thread) }
}

// expiredWriter is thread's cached lease after the clock passed its expiry.
func expiredWriter(thread string) writerKind {
	return func(e *env) cairn.Writer {
		w := e.writer(thread)
		e.clock.advance(leaseMillis + 1)
		return w
	}
}

// takenOverWriter is thread's cached lease after it expired and a new lease
// replaced it.
func takenOverWriter(thread string) writerKind {
	return func(e *env) cairn.Writer {
		w := e.writer(thread)
		e.clock.advance(leaseMillis + 1)
		e.mustAcquire(thread)
		return w
	}
}

// releasedWriter is thread's cached lease after its Release.
func releasedWriter(thread string) writerKind {
	return func(e *env) cairn.Writer {
		l := e.lease(thread)
		l.Release(e.ctx)
		delete(e.leases, thread)
		return l.Writer
	}
}

// editedWriter is thread's cached lease with a field changed.
func editedWriter(thread string, edit func(w *cairn.Writer)) writerKind {
	return func(e *env) cairn.Writer {
		w := e.writer(thread)
		edit(&w)
		return w
	}
}

func neverIssuedWriter(thread string) writerKind {
	return func(e *env) cairn.Writer {
		e.lease(thread) // someone else holds the thread
		return cairn.Writer{ThreadID: thread, OwnerToken: "missing-owner", Fence: 1}
	}
}

// Edits that make a checkpoint invalid in one way.
func badCreatedAt(c *cairn.Checkpoint) { c.CreatedAt = math.NaN() }
func badEntry(c *cairn.Checkpoint)     { c.Files = []cairn.Entry{file("/absolute", fileKey(1))} }
func badArtifact(c *cairn.Checkpoint) {
	c.Artifacts = []cairn.Artifact{artifact("x", hexKey(cairn.FileBlobPrefix, '1'))}
}
func badConversation(c *cairn.Checkpoint) { c.Conversation = []byte(`[{"role":`) }

// orderRow is one case of a check-order table: a setup common to the table, a
// writer, an edit of the default input, and the error of the first failed
// check.
type orderRow struct {
	name   string
	want   error
	writer writerKind
	edit   func(in *cairn.AppendInput)
}

func editCheckpoint(edits ...func(c *cairn.Checkpoint)) func(in *cairn.AppendInput) {
	return func(in *cairn.AppendInput) {
		for _, f := range edits {
			f(&in.Checkpoint)
		}
	}
}

// appendOrderCases check that Append reports the first failed check, in the
// order of the contract: identifiers, writer thread, createdAt, entries,
// artifacts, conversation, lease, duplicate id, head, parent. The setup is
// thread-a: a1 <- a2 (head) and thread-b: b1; the default input appends n3 on
// a2 with thread-a's lease.
func appendOrderCases() []storeCase {
	id := func(v string) func(c *cairn.Checkpoint) { return func(c *cairn.Checkpoint) { c.ID = v } }
	thread := func(v string) func(c *cairn.Checkpoint) { return func(c *cairn.Checkpoint) { c.ThreadID = v } }
	parent := func(v string) func(c *cairn.Checkpoint) {
		return func(c *cairn.Checkpoint) { c.ParentCheckpointID = v }
	}
	expect := func(v string) func(in *cairn.AppendInput) {
		return func(in *cairn.AppendInput) { in.ExpectedHeadID = v }
	}
	both := func(fs ...func(in *cairn.AppendInput)) func(in *cairn.AppendInput) {
		return func(in *cairn.AppendInput) {
			for _, f := range fs {
				f(in)
			}
		}
	}
	blankWriterThread := editedWriter(threadB, func(w *cairn.Writer) { w.ThreadID = "" })
	rows := []orderRow{
		{"InvalidThreadBeforeWriterMismatch", cairn.ErrInvalidID, currentWriter(threadA), editCheckpoint(thread(""))},
		{"MalformedThreadBeforeWriterMismatch", cairn.ErrInvalidID, currentWriter(threadA), editCheckpoint(thread(invalidUTF8))},
		{"InvalidWriterThreadBeforeMismatch", cairn.ErrInvalidID, blankWriterThread, nil},
		{"InvalidIDBeforeWriterMismatch", cairn.ErrInvalidID, currentWriter(threadB), editCheckpoint(id(""))},
		{"InvalidExpectedHeadBeforeInvalidEntry", cairn.ErrInvalidID, currentWriter(threadA), both(expect(invalidUTF8), editCheckpoint(badCreatedAt))},
		{"InvalidParentBeforeWriterMismatch", cairn.ErrInvalidID, currentWriter(threadB), editCheckpoint(parent(invalidUTF8))},
		{"InvalidIDBeforeExpiredWriter", cairn.ErrInvalidID, expiredWriter(threadA), editCheckpoint(id(invalidUTF8))},
		{"WriterMismatchBeforeCreatedAt", cairn.ErrWriterLost, currentWriter(threadB), editCheckpoint(badCreatedAt)},
		{"WriterMismatchBeforeEntries", cairn.ErrWriterLost, currentWriter(threadB), editCheckpoint(badEntry)},
		{"WriterMismatchBeforeArtifacts", cairn.ErrWriterLost, currentWriter(threadB), editCheckpoint(badArtifact)},
		{"WriterMismatchBeforeConversation", cairn.ErrWriterLost, currentWriter(threadB), editCheckpoint(badConversation)},
		{"WriterMismatchBeforeDuplicate", cairn.ErrWriterLost, currentWriter(threadB), editCheckpoint(id("a1"))},
		{"CreatedAtBeforeExpiredWriter", cairn.ErrInvalidEntry, expiredWriter(threadA), editCheckpoint(badCreatedAt)},
		{"EntriesBeforeExpiredWriter", cairn.ErrInvalidEntry, expiredWriter(threadA), editCheckpoint(badEntry)},
		{"EntriesBeforeTakenOverWriter", cairn.ErrInvalidEntry, takenOverWriter(threadA), editCheckpoint(badEntry)},
		{"ArtifactsBeforeReleasedWriter", cairn.ErrInvalidEntry, releasedWriter(threadA), editCheckpoint(badArtifact)},
		{"ConversationBeforeWrongToken", cairn.ErrInvalidEntry, editedWriter(threadA, func(w *cairn.Writer) { w.OwnerToken += "x" }), editCheckpoint(badConversation)},
		{"EntriesBeforeDuplicate", cairn.ErrInvalidEntry, currentWriter(threadA), editCheckpoint(id("a1"), badEntry)},
		{"EntriesBeforeStaleHead", cairn.ErrInvalidEntry, currentWriter(threadA), both(expect("a1"), editCheckpoint(parent("a1"), badEntry))},
		{"ExpiredWriter", cairn.ErrWriterLost, expiredWriter(threadA), nil},
		{"TakenOverWriter", cairn.ErrWriterLost, takenOverWriter(threadA), nil},
		{"ReleasedWriter", cairn.ErrWriterLost, releasedWriter(threadA), nil},
		{"NeverIssuedWriter", cairn.ErrWriterLost, neverIssuedWriter(threadA), nil},
		{"WrongToken", cairn.ErrWriterLost, editedWriter(threadA, func(w *cairn.Writer) { w.OwnerToken += "x" }), nil},
		{"WrongFence", cairn.ErrWriterLost, editedWriter(threadA, func(w *cairn.Writer) { w.Fence++ }), nil},
		{"LowerFence", cairn.ErrWriterLost, editedWriter(threadA, func(w *cairn.Writer) { w.Fence-- }), nil},
		{"ExpiredWriterBeforeDuplicate", cairn.ErrWriterLost, expiredWriter(threadA), editCheckpoint(id("a1"))},
		{"TakenOverWriterBeforeStaleHead", cairn.ErrWriterLost, takenOverWriter(threadA), both(expect("a1"), editCheckpoint(parent("a1")))},
		{"WrongFenceBeforeParentMismatch", cairn.ErrWriterLost, editedWriter(threadA, func(w *cairn.Writer) { w.Fence++ }), editCheckpoint(parent(""))},
		{"DuplicateBeforeStaleHead", cairn.ErrDuplicateID, currentWriter(threadA), both(expect("a1"), editCheckpoint(id("a1"), parent("a1")))},
		{"DuplicateInAnotherThread", cairn.ErrDuplicateID, currentWriter(threadA), editCheckpoint(id("b1"))},
		{"DuplicateOfHeadBeforeParentMismatch", cairn.ErrDuplicateID, currentWriter(threadA), editCheckpoint(id("a2"), parent(""))},
		{"StaleHeadBeforeParentMismatch", cairn.ErrStaleHead, currentWriter(threadA), both(expect("a1"), editCheckpoint(parent("zz")))},
		{"NullExpectedHeadOnNonEmptyThread", cairn.ErrStaleHead, currentWriter(threadA), both(expect(""), editCheckpoint(parent("")))},
		{"ExpectedHeadOnEmptyThread", cairn.ErrStaleHead, currentWriter(threadC), both(expect("x"), editCheckpoint(thread(threadC), parent("x")))},
		{"ParentMismatchNullParent", cairn.ErrParentMismatch, currentWriter(threadA), editCheckpoint(parent(""))},
		{"ParentMismatchAncestor", cairn.ErrParentMismatch, currentWriter(threadA), editCheckpoint(parent("a1"))},
		{"ParentMismatchMissingParent", cairn.ErrParentMismatch, currentWriter(threadA), editCheckpoint(parent("nope"))},
		{"ParentMismatchOnEmptyThread", cairn.ErrParentMismatch, currentWriter(threadC), both(expect(""), editCheckpoint(thread(threadC), parent("a2")))},
	}
	var cs []storeCase
	for _, r := range rows {
		cs = append(cs, storeCase{"Append/Order/" + r.name, func(e *env) {
			e.chain(threadA, "a1", "a2")
			e.chain(threadB, "b1")
			w := r.writer(e)
			in := cairn.AppendInput{Checkpoint: cp("n3", "a2", threadA), ExpectedHeadID: "a2", Writer: w}
			if r.edit != nil {
				r.edit(&in)
			}
			e.appendFails("Append", r.want, in.Writer, in.Checkpoint, in.ExpectedHeadID)
		}})
	}
	return cs
}

// deleteHeadCases check DeleteHead: only the head goes, the head moves to the
// parent, ids become reusable, and the check order of the contract.
func deleteHeadCases() []storeCase {
	cs := []storeCase{
		{"DeleteHead/NotHeadForAncestor", func(e *env) {
			e.chain(threadA, "1", "2")
			e.deleteHeadFails("DeleteHead of the head's parent", cairn.ErrNotHead, e.writer(threadA), threadA, "1")
		}},
		{"DeleteHead/NotHeadOnEmptyThread", func(e *env) {
			e.chain(threadA, "1")
			e.deleteHeadFails("DeleteHead on an empty thread", cairn.ErrNotHead, e.writer(threadC), threadC, "1")
		}},
		{"DeleteHead/NotHeadForAnotherThreadsHead", func(e *env) {
			e.chain(threadA, "1")
			e.chain(threadB, "2")
			e.deleteHeadFails("DeleteHead of thread-b's head on thread-a", cairn.ErrNotHead, e.writer(threadA), threadA, "2")
		}},
		{"DeleteHead/NotHeadForMissingID", func(e *env) {
			e.chain(threadA, "1")
			e.deleteHeadFails("DeleteHead of a missing id", cairn.ErrNotHead, e.writer(threadA), threadA, "missing")
		}},
		{"DeleteHead/MovesHeadToParent", func(e *env) {
			e.chain(threadA, "1", "2", "3")
			e.mustDeleteHead(threadA, "3")
			e.expectHead(threadA, "2")
			e.expectIDs(threadA, "1", "2")
			if c := e.get("3"); c != nil {
				e.t.Errorf("Get(3) after DeleteHead = %s, want nil", show(*c))
			}
			e.expectRefs(fileKey(1), 1, fileKey(2), 1)
		}},
		{"DeleteHead/RootLeavesNoHead", func(e *env) {
			e.chain(threadA, "1")
			e.mustDeleteHead(threadA, "1")
			e.expectHead(threadA, "")
			e.expectIDs(threadA)
			if c := e.get("1"); c != nil {
				e.t.Errorf("Get(1) after DeleteHead = %s, want nil", show(*c))
			}
			e.expectRefs()
		}},
		{"DeleteHead/IDReusable", func(e *env) {
			e.chain(threadA, "1", "2")
			e.mustDeleteHead(threadA, "2")
			again := cp("2", "1", threadA)
			again.Reason = "again"
			e.mustAppend(again, "1")
			e.expectCheckpoint("2", again)
			e.mustDeleteHead(threadA, "2")
			e.mustAppend(cp("2", "", threadB), "")
			e.expectHead(threadB, "2")
			e.expectHead(threadA, "1")
		}},
		{"DeleteHead/KeepsWriterLease", func(e *env) {
			e.chain(threadA, "1")
			e.mustDeleteHead(threadA, "1")
			_, err := e.acquire(threadA)
			expectErr(e.t, "AcquireWriter after DeleteHead", err, cairn.ErrWriterConflict)
			e.chain(threadA, "2")
			e.expectHead(threadA, "2")
		}},
	}
	type row struct {
		name   string
		want   error
		writer writerKind
		thread string
		id     string
	}
	rows := []row{
		{"InvalidThreadBeforeWriterMismatch", cairn.ErrInvalidID, currentWriter(threadA), "", "2"},
		{"InvalidCheckpointIDBeforeWriterMismatch", cairn.ErrInvalidID, currentWriter(threadB), threadA, ""},
		{"InvalidWriterThread", cairn.ErrInvalidID, editedWriter(threadA, func(w *cairn.Writer) { w.ThreadID = invalidUTF8 }), threadA, "2"},
		{"WriterMismatchBeforeNotHead", cairn.ErrWriterLost, currentWriter(threadB), threadA, "1"},
		{"ExpiredWriterBeforeNotHead", cairn.ErrWriterLost, expiredWriter(threadA), threadA, "1"},
		{"ExpiredWriterOnEmptyThread", cairn.ErrWriterLost, expiredWriter(threadC), threadC, "1"},
		{"ExpiredWriter", cairn.ErrWriterLost, expiredWriter(threadA), threadA, "2"},
		{"TakenOverWriter", cairn.ErrWriterLost, takenOverWriter(threadA), threadA, "2"},
		{"ReleasedWriter", cairn.ErrWriterLost, releasedWriter(threadA), threadA, "2"},
		{"WrongFence", cairn.ErrWriterLost, editedWriter(threadA, func(w *cairn.Writer) { w.Fence++ }), threadA, "2"},
		{"WrongToken", cairn.ErrWriterLost, editedWriter(threadA, func(w *cairn.Writer) { w.OwnerToken = "" }), threadA, "2"},
	}
	for _, r := range rows {
		cs = append(cs, storeCase{"DeleteHead/Order/" + r.name, func(e *env) {
			e.chain(threadA, "1", "2")
			e.chain(threadB, "b1")
			w := r.writer(e)
			e.deleteHeadFails("DeleteHead", r.want, w, r.thread, r.id)
		}})
	}
	return cs
}

// rejectsID checks that every method refuses the identifier bad with
// ErrInvalidID and changes nothing: bad in each identifier of Get, List,
// GetHead, AcquireWriter, Append and DeleteHead on thread threadA, at head
// "2", with its lease.
func (e *env) rejectsID(bad string, lease *cairn.Lease) {
	e.t.Helper()
	e.fails("Get", cairn.ErrInvalidID, func() error { _, err := e.s.Get(e.ctx, bad); return err })
	e.fails("List", cairn.ErrInvalidID, func() error { _, err := e.s.List(e.ctx, bad); return err })
	e.fails("GetHead", cairn.ErrInvalidID, func() error { _, err := e.s.GetHead(e.ctx, bad); return err })
	e.fails("AcquireWriter", cairn.ErrInvalidID, func() error {
		l, err := e.s.AcquireWriter(e.ctx, bad)
		if l != nil {
			l.Release(e.ctx)
		}
		return err
	})
	c := cp("3", "2", threadA)
	c.ThreadID = bad
	e.appendFails("Append with an invalid thread id", cairn.ErrInvalidID, lease.Writer, c, "2")
	w := lease.Writer
	w.ThreadID = bad
	e.appendFails("Append with an invalid writer thread id", cairn.ErrInvalidID, w, cp("3", "2", threadA), "2")
	c = cp("3", "2", threadA)
	c.ID = bad
	e.appendFails("Append with an invalid checkpoint id", cairn.ErrInvalidID, lease.Writer, c, "2")
	if bad != "" { // "" is null for the expected head and the parent
		e.appendFails("Append with an invalid expected head", cairn.ErrInvalidID, lease.Writer, cp("3", "2", threadA), bad)
		e.appendFails("Append with an invalid parent", cairn.ErrInvalidID, lease.Writer, cp("3", bad, threadA), "2")
	}
	e.deleteHeadFails("DeleteHead with an invalid thread id", cairn.ErrInvalidID, lease.Writer, bad, "2")
	e.deleteHeadFails("DeleteHead with an invalid checkpoint id", cairn.ErrInvalidID, lease.Writer, threadA, bad)
	e.deleteHeadFails("DeleteHead with an invalid writer thread id", cairn.ErrInvalidID, w, threadA, "2")
}
