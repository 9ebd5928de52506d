package conformance

import (
	"fmt"
	"strings"

	"github.com/cairnstore/cairn"
)

// This file checks the bounds of package cairn (cairn.MaxIDBytes and its
// siblings, docs/limits.md): every identifier and name is accepted at its
// bound and refused one byte past it, with the code of the check it belongs
// to and in that check's place in the contract's order, and the refusal
// changes nothing.

// idOf returns a valid identifier of exactly n bytes that begins with tag
// and is padded with NUL bytes, which etcdstore's keys escape to two bytes
// each: the longest key an identifier of n bytes makes.
func idOf(tag string, n int) string { return tag + strings.Repeat("\x00", n-len(tag)) }

// nameOf returns a valid name of exactly n bytes that begins with tag,
// padded with the two-byte 'é', which JSON and the wire carry as is.
func nameOf(tag string, n int) string {
	pad := n - len(tag)
	return tag + strings.Repeat("x", pad%2) + strings.Repeat("é", pad/2)
}

// pathOf returns a valid entry path of exactly n bytes that begins with tag:
// a deep chain of one-letter directories.
func pathOf(tag string, n int) string {
	pad := n - len(tag)
	return strings.Repeat("d/", pad/2) + strings.Repeat("x", pad%2) + tag
}

// boundedCheckpoint is a root checkpoint of thread with id whose every name
// and path is at its bound.
func boundedCheckpoint(id, thread string) cairn.Checkpoint {
	c := cp(id, "", thread)
	c.CreatedAt = 1
	c.Reason = nameOf("reason-", cairn.MaxNameBytes)
	c.Label = nameOf("label-", cairn.MaxNameBytes)
	c.SourceRunID = nameOf("run-", cairn.MaxNameBytes)
	c.Files = []cairn.Entry{file(pathOf("f", cairn.MaxPathBytes), fileKey(1)), dir("d")}
	a := artifact("a", artifactKey(2))
	a.ArtifactID = nameOf("artifact-", cairn.MaxNameBytes)
	a.Name = nameOf("name-", cairn.MaxNameBytes)
	a.MimeType = nameOf("text/", cairn.MaxNameBytes)
	c.Artifacts = []cairn.Artifact{a}
	return c
}

// pastName is one field of a checkpoint set one byte past its bound.
type pastName struct {
	name string
	set  func(c *cairn.Checkpoint)
}

func pastNames() []pastName {
	over := cairn.MaxNameBytes + 1
	return []pastName{
		{"Reason", func(c *cairn.Checkpoint) { c.Reason = nameOf("reason-", over) }},
		{"Label", func(c *cairn.Checkpoint) { c.Label = nameOf("label-", over) }},
		{"SourceRunID", func(c *cairn.Checkpoint) { c.SourceRunID = nameOf("run-", over) }},
		{"EntryPath", func(c *cairn.Checkpoint) { c.Files[0].Path = pathOf("f", cairn.MaxPathBytes+1) }},
		{"ArtifactID", func(c *cairn.Checkpoint) { c.Artifacts[0].ArtifactID = nameOf("artifact-", over) }},
		{"ArtifactName", func(c *cairn.Checkpoint) { c.Artifacts[0].Name = nameOf("name-", over) }},
		{"ArtifactMimeType", func(c *cairn.Checkpoint) { c.Artifacts[0].MimeType = nameOf("text/", over) }},
	}
}

// boundCases are the bound cases of the store suite.
func boundCases() []storeCase {
	atThread, atID, atChild := idOf("t", cairn.MaxIDBytes), idOf("c", cairn.MaxIDBytes), idOf("k", cairn.MaxIDBytes)
	pastID := idOf("c", cairn.MaxIDBytes+1)
	return []storeCase{
		{"Bounds/AtEveryBound", func(e *env) {
			root := boundedCheckpoint(atID, atThread)
			e.mustAppend(root, "")
			e.expectCheckpoint(atID, root)
			child := withFiles(cp(atChild, atID, atThread), dir("c"))
			e.mustAppend(child, atID)
			e.expectHead(atThread, atChild)
			e.expectIDs(atThread, atID, atChild)
			e.mustDeleteHead(atThread, atChild)
			e.expectHead(atThread, atID)
			e.expectRefs(artifactKey(2), 1, fileKey(1), 1)
		}},
		{"Bounds/IDOneBytePast", func(e *env) {
			e.chain(threadA, "1", "2")
			lease := e.lease(threadA)
			e.rejectsID(idOf("p", cairn.MaxIDBytes+1), lease)
			e.expectHead(threadA, "2")
		}},
		{"Bounds/NameOneBytePast", func(e *env) {
			e.chain(threadA, "1")
			for _, p := range pastNames() {
				e.row(p.name, func(e *env) {
					c := boundedCheckpoint("2", threadA)
					c.ParentCheckpointID = "1"
					p.set(&c)
					e.appendFails("Append", cairn.ErrInvalidEntry, e.writer(threadA), c, "1")
				})
			}
			e.expectHead(threadA, "1")
		}},
		{"Bounds/Order/IDPastBoundBeforeWriterThread", func(e *env) {
			e.chain(threadA, "1")
			e.appendFails("Append of a checkpoint id past the bound with a writer of another thread", cairn.ErrInvalidID,
				e.writer(threadB), cp(pastID, "1", threadA), "1")
		}},
		{"Bounds/Order/WriterThreadBeforeNamePastBound", func(e *env) {
			e.chain(threadA, "1")
			c := cp("2", "1", threadA)
			c.Label = nameOf("label-", cairn.MaxNameBytes+1)
			e.appendFails("Append of a label past the bound with a writer of another thread", cairn.ErrWriterLost, e.writer(threadB), c, "1")
		}},
		{"Bounds/Order/NamePastBoundBeforeExpiredWriter", func(e *env) {
			e.chain(threadA, "1")
			w := expiredWriter(threadA)(e)
			c := cp("2", "1", threadA)
			c.Files[0].Path = pathOf("f", cairn.MaxPathBytes+1)
			e.appendFails("Append of a path past the bound with an expired writer", cairn.ErrInvalidEntry, w, c, "1")
		}},
		{"Bounds/OwnerTokenPastBound", func(e *env) {
			e.chain(threadA, "1")
			w := e.writer(threadA)
			w.OwnerToken = nameOf("token-", cairn.MaxOwnerTokenBytes+1)
			e.appendFails("Append", cairn.ErrWriterLost, w, cp("2", "1", threadA), "1")
			e.deleteHeadFails("DeleteHead", cairn.ErrWriterLost, w, threadA, "1")
			e.mustAppend(cp("2", "1", threadA), "1") // the lease itself is still current
		}},
	}
}

// pruneBoundCases are the bound cases of the prune suite.
func pruneBoundCases() []storeCase {
	atThread := idOf("t", cairn.MaxIDBytes)
	return []storeCase{
		{"Bounds/ThreadAtBound", func(e *env) {
			e.chain(atThread, "1", "2", "3")
			e.mustPrune(atThread, 1, "1", "2")
			e.expectIDs(atThread, "3")
		}},
		{"Bounds/ThreadOneBytePast", func(e *env) {
			e.chain(threadA, "1", "2")
			past := idOf("t", cairn.MaxIDBytes+1)
			w := e.writer(threadA)
			e.pruneFails("thread id", cairn.ErrInvalidID, past, 1, w)
			w.ThreadID = past
			e.pruneFails("writer thread id", cairn.ErrInvalidID, threadA, 1, w)
			w = e.writer(threadA)
			w.OwnerToken = nameOf("token-", cairn.MaxOwnerTokenBytes+1)
			e.pruneFails("owner token", cairn.ErrWriterLost, threadA, 1, w)
		}},
	}
}

// deleteThreadBoundCases are the bound cases of the DeleteThread suite.
func deleteThreadBoundCases() []storeCase {
	atThread := idOf("t", cairn.MaxIDBytes)
	return []storeCase{
		{"Bounds/ThreadAtBound", func(e *env) {
			e.chain(atThread, "1", "2")
			e.mustDeleteThread(atThread, "1", "2")
			e.expectHead(atThread, "")
		}},
		{"Bounds/ThreadOneBytePast", func(e *env) {
			e.chain(threadA, "1")
			past := idOf("t", cairn.MaxIDBytes+1)
			w := e.writer(threadA)
			e.fails("DeleteThread, thread id", cairn.ErrInvalidID, func() error { _, err := e.deleteThread(past, w); return err })
			w.ThreadID = past
			e.fails("DeleteThread, writer thread id", cairn.ErrInvalidID, func() error { _, err := e.deleteThread(threadA, w); return err })
			w = e.writer(threadA)
			w.OwnerToken = nameOf("token-", cairn.MaxOwnerTokenBytes+1)
			e.fails("DeleteThread, owner token", cairn.ErrWriterLost, func() error { _, err := e.deleteThread(threadA, w); return err })
			e.expectHead(threadA, "1")
		}},
	}
}

// forkBoundCases are the bound cases of the fork suite.
func forkBoundCases() []storeCase {
	return []storeCase{
		{"Bounds/EveryIDAtBound", func(e *env) {
			src := boundedCheckpoint(idOf("s", cairn.MaxIDBytes), idOf("t", cairn.MaxIDBytes))
			e.mustAppend(src, "")
			dest := idOf("u", cairn.MaxIDBytes)
			in := cairn.ForkInput{
				SourceThreadID: src.ThreadID, SourceCheckpointID: src.ID,
				DestinationThreadID: dest, DestinationCheckpointID: idOf("f", cairn.MaxIDBytes),
				CreatedAt: 20, Writer: e.writer(dest),
			}
			got := e.mustFork(in)
			want := forkRootOf(src, in)
			if !sameCheckpoint(*got, want) {
				e.t.Errorf("fork returned %s, want %s", show(*got), show(want))
			}
			e.expectCheckpoint(in.DestinationCheckpointID, want)
			e.expectHead(dest, in.DestinationCheckpointID)
		}},
		{"Bounds/IDOneBytePast", func(e *env) {
			e.mustAppend(sourceRoot(), "")
			past := idOf("p", cairn.MaxIDBytes+1)
			for i, set := range []func(in *cairn.ForkInput){
				func(in *cairn.ForkInput) { in.SourceThreadID = past },
				func(in *cairn.ForkInput) { in.SourceCheckpointID = past },
				func(in *cairn.ForkInput) { in.DestinationThreadID = past },
				func(in *cairn.ForkInput) { in.DestinationCheckpointID = past },
				func(in *cairn.ForkInput) { in.Writer.ThreadID = past },
			} {
				in := e.forkInput()
				set(&in)
				e.forkFails(fmt.Sprintf("fork with field %d one byte past the bound", i), cairn.ErrInvalidID, in)
			}
			in := e.forkInput()
			in.Writer.OwnerToken = nameOf("token-", cairn.MaxOwnerTokenBytes+1)
			e.forkFails("fork with an owner token past the bound", cairn.ErrWriterLost, in)
		}},
	}
}

// instanceBoundCases are the bound cases of the instance suite.
func instanceBoundCases() []instanceCase {
	at, over := cairn.MaxNameBytes, cairn.MaxNameBytes+1
	full := func(n int) cairn.InstanceRecord {
		return cairn.InstanceRecord{
			Key: idOf("key", cairn.MaxIDBytes), Provider: nameOf("p", n), ProviderSandboxID: nameOf("sb", n),
			LatestSnapshotID: nameOf("snap", n), ThreadID: nameOf("t", n), LatestRunID: nameOf("run", n), UpdatedAt: 1,
		}
	}
	return []instanceCase{
		{"Bounds/AtEveryBound", func(e *instanceEnv) {
			rec := full(at)
			e.upsert(rec)
			e.expect(rec.Key, &rec)
			noErr(e.t, "Delete", e.s.Delete(e.ctx, rec.Key))
			e.expect(rec.Key, nil)
		}},
		{"Bounds/KeyOneBytePast", func(e *instanceEnv) {
			past := idOf("key", cairn.MaxIDBytes+1)
			rec := record()
			rec.Key = past
			expectErr(e.t, "Upsert", e.s.Upsert(e.ctx, rec), cairn.ErrInvalidID)
			_, err := e.s.Get(e.ctx, past)
			expectErr(e.t, "Get", err, cairn.ErrInvalidID)
			expectErr(e.t, "Delete", e.s.Delete(e.ctx, past), cairn.ErrInvalidID)
		}},
		{"Bounds/FieldOneBytePast", func(e *instanceEnv) {
			kept := full(at)
			e.upsert(kept)
			for _, f := range []struct {
				name string
				set  func(r *cairn.InstanceRecord)
			}{
				{"Provider", func(r *cairn.InstanceRecord) { r.Provider = nameOf("p", over) }},
				{"ProviderSandboxID", func(r *cairn.InstanceRecord) { r.ProviderSandboxID = nameOf("sb", over) }},
				{"LatestSnapshotID", func(r *cairn.InstanceRecord) { r.LatestSnapshotID = nameOf("snap", over) }},
				{"ThreadID", func(r *cairn.InstanceRecord) { r.ThreadID = nameOf("t", over) }},
				{"LatestRunID", func(r *cairn.InstanceRecord) { r.LatestRunID = nameOf("run", over) }},
			} {
				rec := kept
				f.set(&rec)
				expectErr(e.t, "Upsert, "+f.name, e.s.Upsert(e.ctx, rec), cairn.ErrInvalidEntry)
			}
			e.expect(kept.Key, &kept)
		}},
	}
}
