package conformance

import (
	"math"
	"time"

	"github.com/cairnstore/cairn"
)

// conflictBound is how long a refused AcquireWriter may take: it must not
// wait for the holder, so anything longer than a slow round trip is waiting.
const conflictBound = 5 * time.Second

const (
	threadA = "thread-a"
	threadB = "thread-b"
	threadC = "thread-c"
)

// invalidUTF8 is the CESU-8 form of U+D800, the Go stand-in for JavaScript's
// lone surrogate '\uD800'.
const invalidUTF8 = "\xed\xa0\x80"

// storeCases is the checkpoint-store suite, in the order it runs.
func storeCases() []storeCase {
	var cs []storeCase
	cs = append(cs, catalogueCases()...)
	cs = append(cs, idCases()...)
	cs = append(cs, appendOrderCases()...)
	cs = append(cs, deleteHeadCases()...)
	cs = append(cs, contentCases()...)
	cs = append(cs, copyCases()...)
	cs = append(cs, referenceCases()...)
	cs = append(cs, listCases()...)
	cs = append(cs, leaseCases()...)
	cs = append(cs, contextCases()...)
	cs = append(cs, concurrencyCases()...)
	cs = append(cs, boundCases()...)
	return cs
}

// catalogueCases are the public cases CC-01 to CC-16 of the upstream
// checkpoint-store suite.
func catalogueCases() []storeCase {
	return []storeCase{
		{"CC-01/UnknownThread", func(e *env) {
			if c := e.get("missing"); c != nil {
				e.t.Errorf("Get(missing) = %s, want nil", show(*c))
			}
			e.expectHead("missing-thread", "")
			if l := e.list("missing-thread"); len(l) != 0 {
				e.t.Errorf("List(missing-thread) = %s, want an empty list", showList(l))
			}
		}},
		{"CC-02/AppendRootThenChild", func(e *env) {
			e.mustAppend(cp("1", "", threadA), "")
			e.mustAppend(cp("2", "1", threadA), "1")
			e.expectHead(threadA, "2")
			e.expectIDs(threadA, "1", "2")
		}},
		{"CC-03/CompareAndSwap", func(e *env) {
			e.chain(threadA, "1")
			e.appendFails("root appended to a thread with a head", cairn.ErrStaleHead, e.writer(threadA), cp("2", "", threadA), "")
			e.appendFails("expected head 1 with a null parent", cairn.ErrParentMismatch, e.writer(threadA), cp("3", "", threadA), "1")
			e.expectHead(threadA, "1")
		}},
		{"CC-04/DuplicateIDBeforeParentCheck", func(e *env) {
			e.chain(threadA, "1")
			e.appendFails("re-append of the head's id", cairn.ErrDuplicateID, e.writer(threadA), cp("1", "", threadA), "1")
		}},
		{"CC-05/ThreadIsolation", func(e *env) {
			e.mustAppend(cp("a", "", threadA), "")
			e.mustAppend(cp("b", "", threadB), "")
			e.expectHead(threadA, "a")
			e.expectHead(threadB, "b")
			e.expectIDs(threadA, "a")
			e.expectIDs(threadB, "b")
		}},
		{"CC-06/ListByCreatedAtThenID", func(e *env) {
			z, a, b := cp("z", "", threadA), cp("a", "z", threadA), cp("b", "a", threadA)
			z.CreatedAt, a.CreatedAt, b.CreatedAt = 2, 1, 1
			e.mustAppend(z, "")
			e.mustAppend(a, "z")
			e.mustAppend(b, "a")
			e.expectIDs(threadA, "a", "b", "z")
		}},
		{"CC-07/UTF8Order", func(e *env) {
			ids := []string{"é", "a", "B", "😀"}
			parent := ""
			for i, id := range ids {
				e.mustAppend(withFiles(cp(id, parent, threadA), file(id+".txt", fileKey(i+1))), parent)
				parent = id
			}
			e.expectIDs(threadA, "B", "a", "é", "😀")
			e.expectRefs(fileKey(1), 1, fileKey(2), 1, fileKey(3), 1, fileKey(4), 1)
		}},
		{"CC-08/MalformedUnicode", func(e *env) {
			w := e.writer(threadA)
			e.appendFails("id U+D800", cairn.ErrInvalidID, w, cp(invalidUTF8, "", threadA), "")
			bad := cairn.FileBlobPrefix + invalidUTF8 + "000000000000000000000000000000000000000000000000000000000000000"
			e.appendFails("blob key with U+D800", cairn.ErrInvalidEntry, w, withFiles(cp("root", "", threadA), file("root.txt", bad)), "")
		}},
		{"CC-09a/CreatedAtNaN", func(e *env) { nonFiniteCreatedAt(e, math.NaN()) }},
		{"CC-09b/CreatedAtPositiveInfinity", func(e *env) { nonFiniteCreatedAt(e, math.Inf(1)) }},
		{"CC-09c/CreatedAtNegativeInfinity", func(e *env) { nonFiniteCreatedAt(e, math.Inf(-1)) }},
		{"CC-10/ImmutableAndDistinctKeys", func(e *env) {
			value := cp("1", "", threadA)
			value.Files = append(value.Files, file("same.txt", fileKey(1)))
			e.mustAppend(value, "")
			value.Files[0].Path = "input-mutated"
			loaded := e.get("1")
			if loaded == nil {
				e.t.Fatal("Get(1) = nil after Append")
			}
			if len(loaded.Files) != 2 {
				e.t.Fatalf("Get(1) has %d files, want 2", len(loaded.Files))
			}
			if &loaded.Files[0] == &value.Files[0] {
				e.t.Error("Get(1) returned the input's Files slice")
			}
			if loaded.Files[0].Path != "1.txt" {
				e.t.Errorf("after mutating the input, Get(1).Files[0].Path = %q, want 1.txt", loaded.Files[0].Path)
			}
			loaded.Files[0].Path = "changed"
			if c := e.get("1"); c == nil || c.Files[0].Path != "1.txt" {
				e.t.Error("mutating the result of Get changed the stored checkpoint")
			}
			listed := e.list(threadA)
			if len(listed) != 1 || len(listed[0].Files) != 2 {
				e.t.Fatalf("List(thread-a) = %s, want one checkpoint with two files", showList(listed))
			}
			listed[0].Files[0].Path = "list-mutated"
			if l := e.list(threadA); l[0].Files[0].Path != "1.txt" {
				e.t.Error("mutating the result of List changed the stored checkpoint")
			}
			e.expectRefs(fileKey(1), 1)
		}},
		{"CC-11/SharedKeyCountsPerCheckpoint", func(e *env) {
			shared := hexKey(cairn.FileBlobPrefix, 'f')
			e.mustAppend(withFiles(cp("1", "", threadA), file("a", shared)), "")
			e.mustAppend(withFiles(cp("2", "1", threadA), file("b", shared)), "1")
			e.expectRefs(shared, 2)
			e.mustDeleteHead(threadA, "2")
			e.expectRefs(shared, 1)
		}},
		{"CC-12/OneWriterPerThread", func(e *env) {
			lease := e.mustAcquire(threadA)
			start := time.Now()
			_, err := e.acquire(threadA)
			expectErr(e.t, "second AcquireWriter(thread-a)", err, cairn.ErrWriterConflict)
			if d := time.Since(start); d > conflictBound {
				e.t.Errorf("the refused AcquireWriter took %v; it must fail without waiting", d)
			}
			second := e.mustAcquire(threadB)
			second.Release(e.ctx)
			lease.Release(e.ctx)
			e.mustAcquire(threadA).Release(e.ctx)
		}},
		{"CC-13/RenewExtends", func(e *env) {
			lease := e.mustAcquire(threadA)
			original := lease.ExpiresAt()
			e.clock.advance(cairn.Millis(lease.RenewAfter))
			got, err := lease.Renew(e.ctx)
			noErr(e.t, "Renew", err)
			if want := e.clock.Now() + leaseMillis; got != want {
				e.t.Errorf("Renew returned expiry %v, want now + lease duration = %v", got, want)
			}
			if lease.ExpiresAt() <= original {
				e.t.Errorf("after Renew, ExpiresAt() = %v, want more than %v", lease.ExpiresAt(), original)
			}
			lease.Release(e.ctx)
		}},
		{"CC-14/StaleLeaseCannotReleaseReplacement", func(e *env) {
			old := e.mustAcquire(threadA)
			e.clock.advance(leaseMillis + 1)
			replacement, err := e.acquire(threadA)
			noErr(e.t, "AcquireWriter after expiry", err)
			old.Release(e.ctx)
			_, err = e.acquire(threadA)
			expectErr(e.t, "AcquireWriter after the stale lease's Release", err, cairn.ErrWriterConflict)
			replacement.Release(e.ctx)
		}},
		{"CC-15/StaleLeaseAfterTakeover", func(e *env) {
			old := e.mustAcquire(threadA)
			e.mustAppendWith(old.Writer, cp("root", "", threadA), "")
			e.clock.advance(leaseMillis + 1)
			staleOps := func(when string) {
				e.fails(when+": Renew", cairn.ErrWriterLost, func() error {
					_, err := old.Renew(e.ctx)
					return err
				})
				e.appendFails(when+": Append", cairn.ErrWriterLost, old.Writer, cp("stale", "root", threadA), "root")
				e.deleteHeadFails(when+": DeleteHead", cairn.ErrWriterLost, old.Writer, threadA, "root")
			}
			staleOps("expired, before takeover")
			next := e.mustAcquire(threadA)
			if next.Fence <= old.Fence {
				e.t.Errorf("takeover fence %d, want more than %d", next.Fence, old.Fence)
			}
			staleOps("after takeover")
			e.unchanged("Release of the old lease", func() { old.Release(e.ctx) })
			_, err := e.acquire(threadA)
			expectErr(e.t, "AcquireWriter after the old lease's Release", err, cairn.ErrWriterConflict)
			next.Release(e.ctx)
		}},
		{"CC-16/DeleteHeadMovesToParent", func(e *env) {
			e.chain(threadA, "1", "2")
			e.deleteHeadFails("DeleteHead of a non-head", cairn.ErrNotHead, e.writer(threadA), threadA, "1")
			e.mustDeleteHead(threadA, "2")
			e.expectHead(threadA, "1")
			e.mustDeleteHead(threadA, "1")
			e.expectHead(threadA, "")
			e.expectRefs()
		}},
	}
}

func nonFiniteCreatedAt(e *env, f float64) {
	c := cp("invalid", "", threadA)
	c.CreatedAt = f
	e.appendFails("Append with a non-finite createdAt", cairn.ErrInvalidEntry, e.writer(threadA), c, "")
	e.expectHead(threadA, "")
	e.expectIDs(threadA)
	e.expectRefs()
}
