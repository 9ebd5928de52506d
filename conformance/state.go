package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cairnstore/cairn"
)

// fullCheckpoint has every kind of content that must be copied.
func fullCheckpoint(id, parent, thread string) cairn.Checkpoint {
	c := cp(id, parent, thread)
	c.Label, c.SourceRunID = "label", "run"
	c.Files = append(c.Files, dir("d"), file("x/y", fileKey(40)))
	c.Artifacts = []cairn.Artifact{artifact("art", artifactKey(41))}
	return c
}

// scribble changes every mutable part of c in place: entries, artifacts and
// conversation bytes.
func scribble(c *cairn.Checkpoint) {
	for i := range c.Files {
		c.Files[i].Path = "scribbled"
		c.Files[i].BlobKey = "scribbled"
	}
	for i := range c.Artifacts {
		c.Artifacts[i].Name = "scribbled"
		c.Artifacts[i].BlobKey = "scribbled"
	}
	for i := range c.Conversation {
		c.Conversation[i] = 'X'
	}
}

// copyCases check that the store shares no memory with its callers: neither
// with the input of Append nor with the results of Get and List.
func copyCases() []storeCase {
	return []storeCase{
		{"Copies/AppendInput", func(e *env) {
			in := fullCheckpoint("1", "", threadA)
			pristine := in.Clone()
			e.mustAppend(in, "")
			scribble(&in)
			e.expectCheckpoint("1", pristine)
		}},
		{"Copies/AppendInputConversationBytes", func(e *env) {
			in := cp("1", "", threadA)
			want := in.Clone()
			e.mustAppend(in, "")
			in.Conversation[0] = '{'
			e.expectCheckpoint("1", want)
			if got := e.get("1"); got != nil && string(got.Conversation) != string(want.Conversation) {
				e.t.Errorf("conversation changed to %q after mutating the input", got.Conversation)
			}
		}},
		{"Copies/GetResult", func(e *env) {
			c := fullCheckpoint("1", "", threadA)
			e.mustAppend(c, "")
			got := e.get("1")
			if got == nil {
				e.t.Fatal("Get(1) = nil")
			}
			other := e.get("1")
			scribble(got)
			e.expectCheckpoint("1", c)
			if other == nil || !sameCheckpoint(*other, c) {
				e.t.Error("mutating one result of Get changed another")
			}
			if l := e.list(threadA); len(l) != 1 || !sameCheckpoint(l[0], c) {
				e.t.Errorf("mutating the result of Get changed List: %s", showList(l))
			}
		}},
		{"Copies/ListResult", func(e *env) {
			e.mustAppend(fullCheckpoint("1", "", threadA), "")
			e.mustAppend(fullCheckpoint("2", "1", threadA), "1")
			l := e.list(threadA)
			for i := range l {
				scribble(&l[i])
			}
			e.expectCheckpoint("1", fullCheckpoint("1", "", threadA))
			e.expectCheckpoint("2", fullCheckpoint("2", "1", threadA))
			again := e.list(threadA)
			if len(again) != 2 || !sameCheckpoint(again[0], fullCheckpoint("1", "", threadA)) || !sameCheckpoint(again[1], fullCheckpoint("2", "1", threadA)) {
				e.t.Errorf("mutating the result of List changed List: %s", showList(again))
			}
		}},
		{"Copies/BlobReferences", func(e *env) {
			e.chain(threadA, "1")
			r := e.refs()
			if len(r) == 1 {
				r[0].References = 9
				r[0].Key = "scribbled"
			}
			e.expectRefs(fileKey(1), 1)
		}},
	}
}

// referenceCases check blob reference counting: one reference per checkpoint
// per distinct key, two namespaces, nothing for directories, down on
// DeleteHead and gone at zero, sorted by key bytes.
func referenceCases() []storeCase {
	return []storeCase{
		{"References/EmptyStore", func(e *env) { e.expectRefs() }},
		{"References/DistinctKeysPerCheckpoint", func(e *env) {
			c := withFiles(cp("1", "", threadA), file("a", fileKey(1)), file("b", fileKey(1)), file("c", fileKey(2)), file("d/e", fileKey(1)))
			c.Artifacts = []cairn.Artifact{artifact("x", artifactKey(1)), artifact("y", artifactKey(1)), artifact("x", artifactKey(1))}
			e.mustAppend(c, "")
			e.expectRefs(artifactKey(1), 1, fileKey(1), 1, fileKey(2), 1)
		}},
		{"References/FileAndArtifactNamespaces", func(e *env) {
			c := withFiles(cp("1", "", threadA), file("a", fileKey(7)))
			c.Artifacts = []cairn.Artifact{artifact("x", artifactKey(7))}
			e.mustAppend(c, "")
			c2 := withFiles(cp("2", "1", threadA), file("a", fileKey(7)))
			e.mustAppend(c2, "1")
			e.expectRefs(artifactKey(7), 1, fileKey(7), 2)
			e.mustDeleteHead(threadA, "2")
			e.expectRefs(artifactKey(7), 1, fileKey(7), 1)
		}},
		{"References/DirEntriesCountNothing", func(e *env) {
			e.mustAppend(withFiles(cp("1", "", threadA), dir("a"), dir("b/c")), "")
			e.expectRefs()
			e.mustAppend(withFiles(cp("2", "1", threadA)), "1")
			e.expectRefs()
		}},
		{"References/AcrossThreads", func(e *env) {
			shared := fileKey(5)
			e.mustAppend(withFiles(cp("a", "", threadA), file("f", shared)), "")
			e.mustAppend(withFiles(cp("b", "", threadB), file("g", shared)), "")
			e.expectRefs(shared, 2)
			e.mustDeleteHead(threadA, "a")
			e.expectRefs(shared, 1)
			e.mustDeleteHead(threadB, "b")
			e.expectRefs()
		}},
		{"References/DeleteHeadDecrementsAndForgets", func(e *env) {
			e.mustAppend(withFiles(cp("1", "", threadA), file("a", fileKey(1)), file("b", fileKey(2))), "")
			c2 := withFiles(cp("2", "1", threadA), file("b", fileKey(2)), file("c", fileKey(3)), file("d", fileKey(3)))
			c2.Artifacts = []cairn.Artifact{artifact("z", artifactKey(3))}
			e.mustAppend(c2, "1")
			e.expectRefs(artifactKey(3), 1, fileKey(1), 1, fileKey(2), 2, fileKey(3), 1)
			e.mustDeleteHead(threadA, "2")
			e.expectRefs(fileKey(1), 1, fileKey(2), 1)
			e.mustDeleteHead(threadA, "1")
			e.expectRefs()
		}},
		{"References/SortedByKeyBytes", func(e *env) {
			e.mustAppend(withFiles(cp("1", "", threadA), file("a", fileKey(0xff)), file("b", fileKey(0x10)), file("c", hexKey(cairn.FileBlobPrefix, 'a'))), "")
			c := cp("2", "1", threadA)
			c.Artifacts = []cairn.Artifact{artifact("z", hexKey(cairn.ArtifactBlobPrefix, 'f')), artifact("y", artifactKey(3))}
			e.mustAppend(c, "1")
			e.expectRefs(artifactKey(3), 1, hexKey(cairn.ArtifactBlobPrefix, 'f'), 1,
				fileKey(2), 1, fileKey(0x10), 1, fileKey(0xff), 1, hexKey(cairn.FileBlobPrefix, 'a'), 1)
		}},
	}
}

// listCases check the order of List: createdAt, then the bytes of the id.
func listCases() []storeCase {
	return []storeCase{
		{"List/UTF8NotUTF16", func(e *env) {
			// In UTF-16, U+10000 (a surrogate pair) sorts before U+E000 and
			// U+FFFD; in UTF-8 it sorts after them.
			ids := []string{"\U00010000", "\uE000", "\uFFFD", "\U0010FFFF", "\u07FF"}
			parent := ""
			for _, id := range ids {
				c := cp(id, parent, threadA)
				c.CreatedAt = 7
				e.mustAppend(c, parent)
				parent = id
			}
			e.expectIDs(threadA, "\u07FF", "\uE000", "\uFFFD", "\U00010000", "\U0010FFFF")
		}},
		{"List/NegativeAndFractionalCreatedAt", func(e *env) {
			parent := ""
			for _, r := range []struct {
				id string
				at float64
			}{{"d", 3}, {"b", -1.5}, {"c", 0.25}, {"a", -1.5}, {"e", 0}, {"f", -1e-9}, {"g", 0.2500001}} {
				c := cp(r.id, parent, threadA)
				c.CreatedAt = r.at
				e.mustAppend(c, parent)
				parent = r.id
			}
			e.expectIDs(threadA, "a", "b", "f", "e", "c", "g", "d")
		}},
		{"List/IDBytes", func(e *env) {
			parent := ""
			for _, id := range []string{"a/b", "a", "B", "a\x00", "A", "a ", "\x00"} {
				c := cp(id, parent, threadA)
				c.CreatedAt = 0
				c.Files = nil
				e.mustAppend(c, parent)
				parent = id
			}
			e.expectIDs(threadA, "\x00", "A", "B", "a", "a\x00", "a ", "a/b")
		}},
		{"List/EveryCheckpointOfTheThread", func(e *env) {
			e.chain(threadA, "5", "3", "4", "1", "2")
			e.chain(threadB, "9")
			l := e.list(threadA)
			if len(l) != 5 {
				e.t.Fatalf("List(thread-a) has %d checkpoints, want 5", len(l))
			}
			for _, c := range l {
				if got := e.get(c.ID); got == nil || !sameCheckpoint(*got, c) {
					e.t.Errorf("List entry %s differs from Get", show(c))
				}
			}
			e.expectIDs(threadA, "1", "2", "3", "4", "5")
		}},
	}
}

// contextCases check that a store returns context errors as they are and
// changes nothing when the context has ended.
func contextCases() []storeCase {
	ended := func(e *env, name string, want error, ctx context.Context) {
		e.chain(threadA, "1")
		w := e.writer(threadA)
		e.note(threadA, "2")
		ops := []struct {
			name string
			op   func() error
		}{
			{"Get", func() error { _, err := e.s.Get(ctx, "1"); return err }},
			{"List", func() error { _, err := e.s.List(ctx, threadA); return err }},
			{"GetHead", func() error { _, err := e.s.GetHead(ctx, threadA); return err }},
			{"ListBlobReferences", func() error { _, err := e.s.ListBlobReferences(ctx); return err }},
			{"Append", func() error {
				_, err := e.s.Append(ctx, cairn.AppendInput{Checkpoint: cp("2", "1", threadA), ExpectedHeadID: "1", Writer: w})
				return err
			}},
			{"DeleteHead", func() error {
				return e.s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: threadA, CheckpointID: "1", Writer: w})
			}},
			{"AcquireWriter", func() error {
				l, err := e.s.AcquireWriter(ctx, threadB)
				if l != nil {
					l.Release(e.ctx)
				}
				return err
			}},
			{"Renew", func() error { _, err := e.lease(threadA).Renew(ctx); return err }},
		}
		for _, o := range ops {
			e.fails(fmt.Sprintf("%s with a %s context", o.name, name), want, o.op)
		}
		// The store still works with a live context.
		e.chain(threadA, "2")
	}
	return []storeCase{
		{"Context/Canceled", func(e *env) {
			ctx, cancel := context.WithCancel(e.ctx)
			cancel()
			ended(e, "cancelled", context.Canceled, ctx)
		}},
		{"Context/DeadlineExceeded", func(e *env) {
			ctx, cancel := context.WithDeadline(e.ctx, time.Now().Add(-time.Second))
			defer cancel()
			ended(e, "expired", context.DeadlineExceeded, ctx)
		}},
	}
}

// concurrency is the number of goroutines of the concurrency cases.
const concurrency = 12

// race runs f(i) for i in [0, n) in n goroutines that start together, and
// returns their errors.
func race(n int, f func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = f(i)
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// tally counts nil errors and errors matching want, and reports the others.
func tally(e *env, what string, errs []error, want error) (ok int) {
	e.t.Helper()
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, want):
			e.t.Errorf("%s #%d: got error %v, want nil or %s", what, i, err, errName(want))
		}
	}
	return ok
}

// concurrencyCases check that compare-and-swap writes are linearizable:
// racing writers see exactly one winner.
func concurrencyCases() []storeCase {
	return []storeCase{
		{"Concurrency/AppendSameExpectedHead", func(e *env) {
			root := withFiles(cp("root", "", threadA), file("s", fileKey(1000)))
			root.CreatedAt = -1
			e.mustAppend(root, "")
			w := e.writer(threadA)
			errs := race(concurrency, func(i int) error {
				c := withFiles(cp(fmt.Sprintf("c%d", i), "root", threadA), file("s", fileKey(1000)), file("u", fileKey(i+1)))
				_, err := e.s.Append(e.ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: "root", Writer: w})
				return err
			})
			if ok := tally(e, "racing Append", errs, cairn.ErrStaleHead); ok != 1 {
				e.t.Fatalf("%d racing appends on one head succeeded, want exactly 1", ok)
			}
			winner := -1
			for i, err := range errs {
				if err == nil {
					winner = i
				}
			}
			head := fmt.Sprintf("c%d", winner)
			e.expectHead(threadA, head)
			e.expectIDs(threadA, "root", head)
			e.expectRefs(fileKey(winner+1), 1, fileKey(1000), 2)
		}},
		{"Concurrency/AcquireWriterOneWinner", func(e *env) {
			leases := make([]*cairn.Lease, concurrency)
			errs := race(concurrency, func(i int) error {
				l, err := e.s.AcquireWriter(e.ctx, threadA)
				leases[i] = l
				return err
			})
			if ok := tally(e, "racing AcquireWriter", errs, cairn.ErrWriterConflict); ok != 1 {
				e.t.Fatalf("%d racing AcquireWriter calls succeeded, want exactly 1", ok)
			}
			for i, l := range leases {
				if errs[i] == nil {
					e.mustAppendWith(l.Writer, cp("1", "", threadA), "")
					l.Release(e.ctx)
				}
			}
			e.mustAcquire(threadA)
		}},
		{"Concurrency/SameIDAcrossThreads", func(e *env) {
			writers := make([]cairn.Writer, concurrency)
			for i := range writers {
				writers[i] = e.writer(fmt.Sprintf("t%02d", i))
			}
			errs := race(concurrency, func(i int) error {
				_, err := e.s.Append(e.ctx, cairn.AppendInput{Checkpoint: cp("same", "", writers[i].ThreadID), Writer: writers[i]})
				return err
			})
			if ok := tally(e, "racing Append of one id", errs, cairn.ErrDuplicateID); ok != 1 {
				e.t.Fatalf("%d racing appends of one id succeeded, want exactly 1", ok)
			}
			heads := 0
			for i := range writers {
				if e.head(writers[i].ThreadID) == "same" {
					heads++
				}
			}
			if heads != 1 {
				e.t.Errorf("%d threads have head \"same\", want 1", heads)
			}
			e.expectRefs(fileKey(1), 1)
		}},
		{"Concurrency/IndependentThreads", func(e *env) {
			errs := race(concurrency, func(i int) error {
				th := fmt.Sprintf("t%02d", i)
				l, err := e.s.AcquireWriter(e.ctx, th)
				if err != nil {
					return err
				}
				defer l.Release(e.ctx)
				parent := ""
				for j := range 3 {
					id := fmt.Sprintf("%s-%d", th, j)
					c := withFiles(cp(id, parent, th), file("shared", fileKey(1)), file("own", fileKey(100+i)))
					if _, err := e.s.Append(e.ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: parent, Writer: l.Writer}); err != nil {
						return err
					}
					parent = id
				}
				return nil
			})
			for i, err := range errs {
				if err != nil {
					e.t.Errorf("thread %d: %v", i, err)
				}
			}
			want := []any{fileKey(1), 3 * concurrency}
			for i := range concurrency {
				want = append(want, fileKey(100+i), 3)
			}
			e.expectRefs(want...)
			for i := range concurrency {
				th := fmt.Sprintf("t%02d", i)
				e.expectHead(th, th+"-2")
			}
		}},
	}
}
