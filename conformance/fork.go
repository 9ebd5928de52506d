package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/cairnstore/cairn"
)

const (
	source      = "source"
	destination = "destination"
)

// sourceRoot is the fixture checkpoint that the fork cases fork from.
func sourceRoot() cairn.Checkpoint {
	return cairn.Checkpoint{
		ID: "source-root", ThreadID: source, CreatedAt: 10, Reason: cairn.ReasonNamed,
		Label: "source label", SourceRunID: "run-1",
		Files:        []cairn.Entry{file("a.txt", hexKey(cairn.FileBlobPrefix, 'a'))},
		Conversation: conversation("checkpoint conversation"),
	}
}

// forkInput is the default fork: source-root of thread source into the
// thread destination as fork-root, with the cached destination lease.
func (e *env) forkInput() cairn.ForkInput {
	e.t.Helper()
	return forkInputWith(e.writer(destination))
}

// forkInputWith is the default fork with writer w; it takes no lease.
func forkInputWith(w cairn.Writer) cairn.ForkInput {
	return cairn.ForkInput{
		SourceThreadID: source, SourceCheckpointID: "source-root",
		DestinationThreadID: destination, DestinationCheckpointID: "fork-root",
		CreatedAt: 20, Writer: w,
	}
}

func (e *env) doFork(in cairn.ForkInput) (*cairn.Checkpoint, error) {
	e.t.Helper()
	e.note(in.SourceThreadID, in.SourceCheckpointID)
	e.note(in.DestinationThreadID, in.DestinationCheckpointID)
	e.note(destination)
	e.note(source)
	c, err := e.fork.ForkFromCheckpoint(e.ctx, in)
	if err != nil && c != nil {
		e.t.Errorf("ForkFromCheckpoint returned a checkpoint together with the error %v", err)
	}
	if err == nil && c == nil {
		e.t.Fatal("ForkFromCheckpoint returned neither a checkpoint nor an error")
	}
	return c, err
}

func (e *env) mustFork(in cairn.ForkInput) *cairn.Checkpoint {
	e.t.Helper()
	c, err := e.doFork(in)
	if err != nil {
		e.t.Fatalf("ForkFromCheckpoint(%s/%s -> %s/%s): %v", in.SourceThreadID, in.SourceCheckpointID, in.DestinationThreadID, in.DestinationCheckpointID, err)
	}
	return c
}

// forkFails forks with in, which must fail with want and change nothing: no
// head, list, checkpoint, transcript or blob reference of any thread
// involved.
func (e *env) forkFails(what string, want error, in cairn.ForkInput) {
	e.t.Helper()
	e.note(in.SourceThreadID, in.SourceCheckpointID)
	e.note(in.DestinationThreadID, in.DestinationCheckpointID)
	e.note(destination)
	e.note(source)
	e.fails(what, want, func() error { _, err := e.doFork(in); return err })
}

func (e *env) saveTranscript(thread, msgs string) {
	e.t.Helper()
	e.note(thread)
	noErr(e.t, "SaveThread("+thread+")", e.fork.Transcripts().SaveThread(e.ctx, thread, json.RawMessage(msgs)))
}

// forkRootOf is the checkpoint a fork of src with in must create.
func forkRootOf(src cairn.Checkpoint, in cairn.ForkInput) cairn.Checkpoint {
	return cairn.Checkpoint{
		ID: in.DestinationCheckpointID, ThreadID: in.DestinationThreadID, CreatedAt: in.CreatedAt,
		Reason: cairn.ReasonForkRoot, Files: src.Files, Conversation: src.Conversation, Artifacts: src.Artifacts,
	}
}

// forkCases is the fork suite.
func forkCases() []storeCase {
	var cs []storeCase
	cs = append(cs, forkCatalogueCases()...)
	cs = append(cs, forkOrderCases()...)
	cs = append(cs, forkBehaviourCases()...)
	cs = append(cs, transcriptCases()...)
	cs = append(cs, forkBoundCases()...)
	return cs
}

// forkCatalogueCases are the public cases FC-01 and FC-03 to FC-10.
func forkCatalogueCases() []storeCase {
	return []storeCase{
		{"FC-01/CopiesHistoricalCheckpoint", func(e *env) {
			src := sourceRoot()
			e.mustAppend(src, "")
			e.mustAppend(cairn.Checkpoint{ID: "source-head", ThreadID: source, ParentCheckpointID: "source-root", CreatedAt: 11, Reason: cairn.ReasonNamed, Conversation: conversation("newer")}, "source-root")
			e.saveTranscript(source, string(conversation("current source message")))
			in := e.forkInput()
			got := e.mustFork(in)
			want := forkRootOf(src, in)
			if !sameCheckpoint(*got, want) {
				e.t.Errorf("fork returned %s, want %s", show(*got), show(want))
			}
			e.expectCheckpoint("fork-root", want)
			if tr, wantTr := e.transcript(destination), compactJSON(src.Conversation); tr != wantTr {
				e.t.Errorf("destination transcript %s, want the source checkpoint's conversation %s", tr, wantTr)
			}
			e.expectHead(source, "source-head")
			e.expectHead(destination, "fork-root")
			e.expectIDs(destination, "fork-root")
		}},
		{"FC-03/MissingSource", func(e *env) {
			in := e.forkInput()
			in.SourceCheckpointID = "missing"
			e.forkFails("fork of a missing source", cairn.ErrForkSourceNotFound, in)
		}},
		{"FC-04/SourceThreadMismatch", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			in := e.forkInput()
			in.SourceThreadID = "another-source"
			e.forkFails("fork naming the wrong source thread", cairn.ErrForkSourceThreadMismatch, in)
		}},
		{"FC-05/SameThread", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			e.saveTranscript(source, `[{"role":"user","content":"kept"}]`)
			in := e.forkInput()
			in.DestinationThreadID = source
			in.Writer = e.writer(source)
			e.forkFails("fork into the source thread", cairn.ErrForkSourceThreadMismatch, in)
		}},
		{"FC-06/MissingWriter", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			in := forkInputWith(cairn.Writer{ThreadID: destination, OwnerToken: "missing-owner", Fence: 1})
			e.forkFails("fork with a writer never issued", cairn.ErrWriterLost, in)
		}},
		{"FC-07/WrongThreadWriter", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			in := forkInputWith(e.writer("another-thread"))
			e.forkFails("fork with another thread's writer", cairn.ErrWriterLost, in)
		}},
		{"FC-08/ReleasedWriter", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			in := e.forkInput()
			e.dropLease(destination)
			e.forkFails("fork with a released writer", cairn.ErrWriterLost, in)
		}},
		{"FC-09/DestinationTranscript", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			e.saveTranscript(destination, `[{"role":"user","content":"already here"}]`)
			e.forkFails("fork into a thread with a transcript", cairn.ErrForkDestinationNotEmpty, e.forkInput())
		}},
		{"FC-10/OrphanedCheckpointID", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			orphan := sourceRoot()
			orphan.ID, orphan.ThreadID = "orphaned-id", "orphan-thread"
			e.mustAppend(orphan, "")
			in := e.forkInput()
			in.DestinationCheckpointID = "orphaned-id"
			e.forkFails("fork to an id used in another thread", cairn.ErrForkDestinationNotEmpty, in)
		}},
	}
}

// forkOrderCases check that ForkFromCheckpoint reports the first failed check:
// identifiers, createdAt, equal threads, source existence, source thread,
// writer thread, lease, destination emptiness.
func forkOrderCases() []storeCase {
	type row struct {
		name  string
		want  error
		setup func(e *env)
		edit  func(e *env, in *cairn.ForkInput)
	}
	otherWriter := func(e *env, in *cairn.ForkInput) { in.Writer = e.writer("another-thread") }
	sameThread := func(e *env, in *cairn.ForkInput) {
		in.DestinationThreadID = source
		in.Writer = e.writer(source)
	}
	nan := func(e *env, in *cairn.ForkInput) { in.CreatedAt = math.NaN() }
	missing := func(e *env, in *cairn.ForkInput) { in.SourceCheckpointID = "missing" }
	transcript := func(e *env) { e.saveTranscript(destination, "[]") }
	all := func(fs ...func(e *env, in *cairn.ForkInput)) func(e *env, in *cairn.ForkInput) {
		return func(e *env, in *cairn.ForkInput) {
			for _, f := range fs {
				f(e, in)
			}
		}
	}
	rows := []row{
		{"InvalidSourceThread", cairn.ErrInvalidID, nil, func(e *env, in *cairn.ForkInput) { in.SourceThreadID = "" }},
		{"InvalidSourceCheckpoint", cairn.ErrInvalidID, nil, func(e *env, in *cairn.ForkInput) { in.SourceCheckpointID = invalidUTF8 }},
		{"InvalidDestinationThread", cairn.ErrInvalidID, nil, func(e *env, in *cairn.ForkInput) { in.DestinationThreadID = invalidUTF8 }},
		{"InvalidDestinationCheckpoint", cairn.ErrInvalidID, nil, func(e *env, in *cairn.ForkInput) { in.DestinationCheckpointID = "" }},
		{"InvalidWriterThread", cairn.ErrInvalidID, nil, func(e *env, in *cairn.ForkInput) { in.Writer.ThreadID = "" }},
		{"InvalidIDBeforeCreatedAt", cairn.ErrInvalidID, nil, all(nan, func(e *env, in *cairn.ForkInput) { in.DestinationCheckpointID = invalidUTF8 })},
		{"InvalidIDBeforeSameThread", cairn.ErrInvalidID, nil, all(sameThread, func(e *env, in *cairn.ForkInput) { in.SourceCheckpointID = "" })},
		{"CreatedAtNaN", cairn.ErrInvalidEntry, nil, nan},
		{"CreatedAtInfinity", cairn.ErrInvalidEntry, nil, func(e *env, in *cairn.ForkInput) { in.CreatedAt = math.Inf(1) }},
		{"CreatedAtNegativeInfinity", cairn.ErrInvalidEntry, nil, func(e *env, in *cairn.ForkInput) { in.CreatedAt = math.Inf(-1) }},
		{"CreatedAtBeforeSameThread", cairn.ErrInvalidEntry, nil, all(sameThread, nan)},
		{"CreatedAtBeforeMissingSource", cairn.ErrInvalidEntry, nil, all(missing, nan)},
		{"CreatedAtBeforeWrongWriter", cairn.ErrInvalidEntry, nil, all(otherWriter, nan)},
		{"SameThreadBeforeMissingSource", cairn.ErrForkSourceThreadMismatch, nil, all(sameThread, missing)},
		{"MissingSourceBeforeWrongWriter", cairn.ErrForkSourceNotFound, nil, all(missing, otherWriter)},
		{"MissingSourceBeforeDestinationNotEmpty", cairn.ErrForkSourceNotFound, transcript, missing},
		{"SourceMismatchBeforeWrongWriter", cairn.ErrForkSourceThreadMismatch, nil, all(otherWriter, func(e *env, in *cairn.ForkInput) { in.SourceThreadID = "another-source" })},
		{"SourceMismatchBeforeDestinationNotEmpty", cairn.ErrForkSourceThreadMismatch, transcript, func(e *env, in *cairn.ForkInput) { in.SourceThreadID = "another-source" }},
		{"WrongThreadWriterBeforeDestinationID", cairn.ErrWriterLost, nil, all(otherWriter, func(e *env, in *cairn.ForkInput) { in.DestinationCheckpointID = "source-root" })},
		{"SourceWriter", cairn.ErrWriterLost, nil, func(e *env, in *cairn.ForkInput) { in.Writer = e.writer(source) }},
		{"SourceTokenOnDestination", cairn.ErrWriterLost, nil, func(e *env, in *cairn.ForkInput) {
			w := e.writer(source)
			e.dropLease(destination)
			in.Writer = cairn.Writer{ThreadID: destination, OwnerToken: w.OwnerToken, Fence: w.Fence}
		}},
		{"ExpiredWriterBeforeDestinationNotEmpty", cairn.ErrWriterLost, transcript, func(e *env, in *cairn.ForkInput) { e.clock.advance(leaseMillis + 1) }},
		{"WriterAtExpiresAt", cairn.ErrWriterLost, nil, func(e *env, in *cairn.ForkInput) { e.clock.set(e.lease(destination).ExpiresAt()) }},
		{"TakenOverWriter", cairn.ErrWriterLost, nil, func(e *env, in *cairn.ForkInput) {
			e.clock.advance(leaseMillis + 1)
			e.mustAcquire(destination)
		}},
		{"WrongFence", cairn.ErrWriterLost, nil, func(e *env, in *cairn.ForkInput) { in.Writer.Fence++ }},
		{"WrongToken", cairn.ErrWriterLost, nil, func(e *env, in *cairn.ForkInput) { in.Writer.OwnerToken += "x" }},
	}
	var cs []storeCase
	for _, r := range rows {
		cs = append(cs, storeCase{"Order/" + r.name, func(e *env) {
			e.mustAppend(sourceRoot(), "")
			if r.setup != nil {
				r.setup(e)
			}
			in := e.forkInput()
			r.edit(e, &in)
			e.forkFails("ForkFromCheckpoint", r.want, in)
		}})
	}
	return cs
}

// forkBehaviourCases check the effects of a fork: the fork root, destination
// emptiness, reference counts, copies, and concurrent forks.
func forkBehaviourCases() []storeCase {
	return []storeCase{
		{"DestinationNotEmpty/EmptyTranscript", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			e.saveTranscript(destination, "[]")
			e.forkFails("fork into a thread with an empty transcript", cairn.ErrForkDestinationNotEmpty, e.forkInput())
		}},
		{"DestinationNotEmpty/Checkpoint", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			e.chain(destination, "d1")
			e.forkFails("fork into a thread with a checkpoint", cairn.ErrForkDestinationNotEmpty, e.forkInput())
		}},
		{"DestinationNotEmpty/IDInSourceThread", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			in := e.forkInput()
			in.DestinationCheckpointID = "source-root"
			e.forkFails("fork to the source checkpoint's own id", cairn.ErrForkDestinationNotEmpty, in)
		}},
		{"DestinationNotEmpty/SecondFork", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			e.mustFork(e.forkInput())
			in := e.forkInput()
			in.DestinationCheckpointID = "fork-root-2"
			e.forkFails("second fork into one thread", cairn.ErrForkDestinationNotEmpty, in)
		}},
		{"DestinationNotEmpty/AfterDeleteOfForkRoot", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			e.mustFork(e.forkInput())
			e.mustDeleteHead(destination, "fork-root")
			e.expectHead(destination, "")
			e.expectIDs(destination)
			in := e.forkInput()
			in.DestinationCheckpointID = "fork-root-2"
			e.forkFails("fork into a thread whose transcript remains", cairn.ErrForkDestinationNotEmpty, in)
		}},
		{"LeasesAreNotDestinationState", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			for range 2 {
				e.mustAcquire(destination).Release(e.ctx)
			}
			e.mustFork(e.forkInput())
		}},
		{"RootShape", func(e *env) {
			src := sourceRoot()
			src.Artifacts = []cairn.Artifact{artifact("art", artifactKey(5))}
			src.Files = append(src.Files, dir("empty"))
			e.mustAppend(src, "")
			in := e.forkInput()
			in.CreatedAt = -2.5
			got := e.mustFork(in)
			if got.Label != "" || got.SourceRunID != "" {
				e.t.Errorf("fork root carries label %q and sourceRunId %q, want neither", got.Label, got.SourceRunID)
			}
			if got.ParentCheckpointID != "" || got.Reason != cairn.ReasonForkRoot || got.CreatedAt != -2.5 {
				e.t.Errorf("fork root %s, want a root with reason fork-root and createdAt -2.5", show(*got))
			}
			e.expectCheckpoint("fork-root", forkRootOf(src, in))
			e.expectCheckpoint("source-root", src)
		}},
		{"ReferenceCounts", func(e *env) {
			src := sourceRoot()
			src.Files = []cairn.Entry{file("x", fileKey(1)), file("y", fileKey(1)), file("z", fileKey(2)), dir("d")}
			src.Artifacts = []cairn.Artifact{artifact("a", artifactKey(1)), artifact("b", artifactKey(1))}
			e.mustAppend(src, "")
			e.expectRefs(artifactKey(1), 1, fileKey(1), 1, fileKey(2), 1)
			e.mustFork(e.forkInput())
			e.expectRefs(artifactKey(1), 2, fileKey(1), 2, fileKey(2), 2)
			e.mustDeleteHead(destination, "fork-root")
			e.expectRefs(artifactKey(1), 1, fileKey(1), 1, fileKey(2), 1)
		}},
		{"Copies", func(e *env) {
			src := fullCheckpoint("source-root", "", source)
			e.mustAppend(src, "")
			in := e.forkInput()
			got := e.mustFork(in)
			scribble(got)
			e.expectCheckpoint("fork-root", forkRootOf(src, in))
			e.expectCheckpoint("source-root", src)
			stored := e.get("fork-root")
			if stored == nil {
				e.t.Fatal("Get(fork-root) = nil")
			}
			scribble(stored)
			e.expectCheckpoint("source-root", src)
			msgs, err := e.fork.Transcripts().LoadThread(e.ctx, destination)
			noErr(e.t, "LoadThread", err)
			for i := range msgs {
				msgs[i] = ' '
			}
			if tr := e.transcript(destination); tr != compactJSON(src.Conversation) {
				e.t.Errorf("transcript %s after mutating a loaded copy, want %s", tr, compactJSON(src.Conversation))
			}
			e.expectCheckpoint("fork-root", forkRootOf(src, in))
		}},
		{"SourceUnchanged", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			e.chain(source, "s2")
			e.saveTranscript(source, `[{"role":"user","content":"source transcript"}]`)
			in := e.forkInput()
			in.SourceCheckpointID = "source-root"
			before := e.state()
			e.mustFork(in)
			after := e.state()
			if before.heads[source] != after.heads[source] || showList(before.lists[source]) != showList(after.lists[source]) || before.transcripts[source] != after.transcripts[source] {
				e.t.Error("forking changed the source thread")
			}
		}},
		{"SourceLeaseHeldElsewhere", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			e.lease(source) // held by someone else for the whole fork
			e.mustFork(e.forkInput())
			e.chain(source, "s2")
		}},
		{"AppendAfterFork", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			e.mustFork(e.forkInput())
			e.mustAppend(cp("d2", "fork-root", destination), "fork-root")
			e.expectIDs(destination, "d2", "fork-root")
			e.expectHead(destination, "d2")
		}},
		{"ForkOfForkRoot", func(e *env) {
			src := sourceRoot()
			e.mustAppend(src, "")
			e.mustFork(e.forkInput())
			in := cairn.ForkInput{SourceThreadID: destination, SourceCheckpointID: "fork-root", DestinationThreadID: "third",
				DestinationCheckpointID: "third-root", CreatedAt: 30, Writer: e.writer("third")}
			got := e.mustFork(in)
			if !sameCheckpoint(*got, forkRootOf(src, in)) {
				e.t.Errorf("fork of a fork root = %s, want %s", show(*got), show(forkRootOf(src, in)))
			}
			e.expectRefs(hexKey(cairn.FileBlobPrefix, 'a'), 3)
		}},
		{"Concurrent", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			w := e.writer(destination)
			e.note(destination)
			const n = 8
			errs := race(n, func(i int) error {
				in := cairn.ForkInput{SourceThreadID: source, SourceCheckpointID: "source-root", DestinationThreadID: destination,
					DestinationCheckpointID: fmt.Sprintf("fork-%d", i), CreatedAt: 20, Writer: w}
				_, err := e.fork.ForkFromCheckpoint(e.ctx, in)
				return err
			})
			if ok := tally(e, "racing fork", errs, cairn.ErrForkDestinationNotEmpty); ok != 1 {
				e.t.Fatalf("%d racing forks into one thread succeeded, want exactly 1", ok)
			}
			for i, err := range errs {
				if err == nil {
					e.expectHead(destination, fmt.Sprintf("fork-%d", i))
					e.expectIDs(destination, fmt.Sprintf("fork-%d", i))
				} else if c := e.get(fmt.Sprintf("fork-%d", i)); c != nil {
					e.t.Errorf("a failed fork left checkpoint %s", show(*c))
				}
			}
			e.expectRefs(hexKey(cairn.FileBlobPrefix, 'a'), 2)
		}},
	}
}

// transcriptCases check the transcript store that forks write to.
func transcriptCases() []storeCase {
	ts := func(e *env) cairn.TranscriptStore { return e.fork.Transcripts() }
	return []storeCase{
		{"Context/Canceled", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			ctx, cancel := context.WithCancel(e.ctx)
			cancel()
			in := e.forkInput()
			e.note(destination, in.DestinationCheckpointID)
			e.fails("ForkFromCheckpoint with a cancelled context", context.Canceled, func() error {
				_, err := e.fork.ForkFromCheckpoint(ctx, in)
				return err
			})
			e.fails("LoadThread with a cancelled context", context.Canceled, func() error {
				_, err := ts(e).LoadThread(ctx, source)
				return err
			})
			e.fails("SaveThread with a cancelled context", context.Canceled, func() error {
				return ts(e).SaveThread(ctx, destination, json.RawMessage("[]"))
			})
			e.mustFork(in)
		}},
		{"Transcripts/UnknownThreadIsEmptyList", func(e *env) {
			if tr := e.transcript("unknown"); tr != "[]" {
				e.t.Errorf("LoadThread(unknown) = %s, want []", tr)
			}
		}},
		{"Transcripts/FullReplace", func(e *env) {
			e.saveTranscript("t", `[{"role":"user","content":"one"},{"role":"user","content":"two"}]`)
			e.saveTranscript("t", `[{"role":"user","content":"three"}]`)
			if tr := e.transcript("t"); tr != `[{"role":"user","content":"three"}]` {
				e.t.Errorf("LoadThread(t) = %s after a second SaveThread", tr)
			}
			e.saveTranscript("t", "[]")
			if tr := e.transcript("t"); tr != "[]" {
				e.t.Errorf("LoadThread(t) = %s after saving []", tr)
			}
		}},
		{"Transcripts/InvalidJSON", func(e *env) {
			e.saveTranscript("t", `[1]`)
			for _, bad := range []string{"{", "", "[1,]", "[1] [2]"} {
				e.fails("SaveThread "+rowName(bad), cairn.ErrInvalidEntry, func() error {
					return ts(e).SaveThread(e.ctx, "t", json.RawMessage(bad))
				})
			}
		}},
		{"Transcripts/InvalidThreadID", func(e *env) {
			for _, bad := range []string{"", invalidUTF8} {
				e.fails("LoadThread "+rowName(bad), cairn.ErrInvalidID, func() error { _, err := ts(e).LoadThread(e.ctx, bad); return err })
				e.fails("SaveThread "+rowName(bad), cairn.ErrInvalidID, func() error { return ts(e).SaveThread(e.ctx, bad, json.RawMessage("[]")) })
			}
		}},
		{"Transcripts/Copies", func(e *env) {
			in := json.RawMessage(`[{"role":"user","content":"x"}]`)
			noErr(e.t, "SaveThread", ts(e).SaveThread(e.ctx, "t", in))
			for i := range in {
				in[i] = ' '
			}
			out, err := ts(e).LoadThread(e.ctx, "t")
			noErr(e.t, "LoadThread", err)
			for i := range out {
				out[i] = ' '
			}
			if tr := e.transcript("t"); tr != `[{"role":"user","content":"x"}]` {
				e.t.Errorf("LoadThread(t) = %s after mutating the saved and loaded bytes", tr)
			}
		}},
		{"Transcripts/SeparateFromCheckpoints", func(e *env) {
			e.chain(threadA, "1")
			e.unchanged("SaveThread", func() {
				noErr(e.t, "SaveThread", ts(e).SaveThread(e.ctx, "other", json.RawMessage(`[1]`)))
			})
			e.saveTranscript(threadA, `[2]`)
			e.expectHead(threadA, "1")
		}},
	}
}
