package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
)

// env is the state of one case: the store under test, its clock, one cached
// writer lease per thread (as the upstream harness keeps), and the threads
// and checkpoint ids the case has touched, which state() reads back.
type env struct {
	t      *testing.T
	ctx    context.Context
	clock  *clock
	s      cairn.Store
	fork   ForkStore // nil unless the suite is the fork suite
	leases map[string]*cairn.Lease
	known  *known
}

type known struct {
	threads map[string]bool
	ids     map[string]bool
}

// row runs fn as a nested subtest that shares the case's store.
func (e *env) row(name string, fn func(e *env)) {
	e.t.Helper()
	e.t.Run(name, func(t *testing.T) {
		r := *e
		r.t = t
		fn(&r)
	})
}

// note records threads and checkpoint ids whose state the case compares.
// Invalid identifiers are ignored, since reads reject them.
func (e *env) note(thread string, ids ...string) {
	if cairn.ValidateID(thread, "") == nil {
		e.known.threads[thread] = true
	}
	for _, id := range ids {
		if cairn.ValidateID(id, "") == nil {
			e.known.ids[id] = true
		}
	}
}

// acquire takes a new writer lease on thread, bypassing the cache.
func (e *env) acquire(thread string) (*cairn.Lease, error) {
	e.t.Helper()
	e.note(thread)
	l, err := e.s.AcquireWriter(e.ctx, thread)
	if err == nil && l == nil {
		e.t.Fatalf("AcquireWriter(%q) returned neither a lease nor an error", thread)
	}
	if err != nil && l != nil {
		e.t.Errorf("AcquireWriter(%q) returned a lease together with the error %v", thread, err)
	}
	return l, err
}

// mustAcquire is acquire that fails the case on error.
func (e *env) mustAcquire(thread string) *cairn.Lease {
	e.t.Helper()
	l, err := e.acquire(thread)
	if err != nil {
		e.t.Fatalf("AcquireWriter(%q): %v", thread, err)
	}
	return l
}

// lease returns the case's cached lease on thread, acquiring it once.
func (e *env) lease(thread string) *cairn.Lease {
	e.t.Helper()
	if l := e.leases[thread]; l != nil {
		return l
	}
	l := e.mustAcquire(thread)
	e.leases[thread] = l
	return l
}

// writer returns the Writer of the cached lease on thread.
func (e *env) writer(thread string) cairn.Writer {
	e.t.Helper()
	return e.lease(thread).Writer
}

func (e *env) appendWith(w cairn.Writer, c cairn.Checkpoint, expected string) (cairn.AppendResult, error) {
	e.t.Helper()
	e.note(c.ThreadID, c.ID)
	return e.s.Append(e.ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: expected, Writer: w})
}

// mustAppend appends c with the cached lease of its thread and checks the
// result.
func (e *env) mustAppend(c cairn.Checkpoint, expected string) {
	e.t.Helper()
	e.mustAppendWith(e.writer(c.ThreadID), c, expected)
}

func (e *env) mustAppendWith(w cairn.Writer, c cairn.Checkpoint, expected string) {
	e.t.Helper()
	res, err := e.appendWith(w, c, expected)
	if err != nil {
		e.t.Fatalf("Append(%q on %q, expected head %q): %v", c.ID, c.ThreadID, expected, err)
	}
	if res.HeadID != c.ID {
		e.t.Errorf("Append(%q) returned head %q, want %q", c.ID, res.HeadID, c.ID)
	}
}

// chain appends the fixture checkpoints ids to thread as one chain, the first
// on the thread's current head.
func (e *env) chain(thread string, ids ...string) {
	e.t.Helper()
	parent := e.head(thread)
	for _, id := range ids {
		e.mustAppend(cp(id, parent, thread), parent)
		parent = id
	}
}

func (e *env) deleteHeadWith(w cairn.Writer, thread, id string) error {
	e.t.Helper()
	e.note(thread, id)
	return e.s.DeleteHead(e.ctx, cairn.DeleteHeadInput{ThreadID: thread, CheckpointID: id, Writer: w})
}

func (e *env) mustDeleteHead(thread, id string) {
	e.t.Helper()
	if err := e.deleteHeadWith(e.writer(thread), thread, id); err != nil {
		e.t.Fatalf("DeleteHead(%q, %q): %v", thread, id, err)
	}
}

func (e *env) head(thread string) string {
	e.t.Helper()
	e.note(thread)
	h, err := e.s.GetHead(e.ctx, thread)
	if err != nil {
		e.t.Fatalf("GetHead(%q): %v", thread, err)
	}
	return h
}

func (e *env) get(id string) *cairn.Checkpoint {
	e.t.Helper()
	e.note("", id)
	c, err := e.s.Get(e.ctx, id)
	if err != nil {
		e.t.Fatalf("Get(%q): %v", id, err)
	}
	return c
}

func (e *env) list(thread string) []cairn.Checkpoint {
	e.t.Helper()
	e.note(thread)
	cs, err := e.s.List(e.ctx, thread)
	if err != nil {
		e.t.Fatalf("List(%q): %v", thread, err)
	}
	return cs
}

func (e *env) listIDs(thread string) []string {
	e.t.Helper()
	var ids []string
	for _, c := range e.list(thread) {
		ids = append(ids, c.ID)
	}
	return ids
}

func (e *env) refs() []cairn.BlobReference {
	e.t.Helper()
	r, err := e.s.ListBlobReferences(e.ctx)
	if err != nil {
		e.t.Fatalf("ListBlobReferences: %v", err)
	}
	return r
}

func (e *env) transcript(thread string) string {
	e.t.Helper()
	e.note(thread)
	msgs, err := e.fork.Transcripts().LoadThread(e.ctx, thread)
	if err != nil {
		e.t.Fatalf("LoadThread(%q): %v", thread, err)
	}
	return compactJSON(msgs)
}

// expectHead checks the head of thread.
func (e *env) expectHead(thread, want string) {
	e.t.Helper()
	if got := e.head(thread); got != want {
		e.t.Errorf("GetHead(%q) = %q, want %q", thread, got, want)
	}
}

// expectIDs checks the ids that List returns for thread, in order.
func (e *env) expectIDs(thread string, want ...string) {
	e.t.Helper()
	if got := e.listIDs(thread); !slices.Equal(got, want) {
		e.t.Errorf("List(%q) ids = %q, want %q", thread, got, want)
	}
}

// expectRefs checks ListBlobReferences. want alternates keys and counts.
func (e *env) expectRefs(want ...any) {
	e.t.Helper()
	wantRefs := []cairn.BlobReference{}
	for i := 0; i+1 < len(want); i += 2 {
		wantRefs = append(wantRefs, cairn.BlobReference{Key: want[i].(string), References: want[i+1].(int)})
	}
	got := e.refs()
	if len(got) == 0 && len(wantRefs) == 0 {
		return
	}
	if !reflect.DeepEqual(got, wantRefs) {
		e.t.Errorf("ListBlobReferences = %s, want %s", showRefs(got), showRefs(wantRefs))
	}
}

// expectCheckpoint checks that the stored checkpoint id equals want.
func (e *env) expectCheckpoint(id string, want cairn.Checkpoint) {
	e.t.Helper()
	got := e.get(id)
	if got == nil {
		e.t.Errorf("Get(%q) = nil, want %s", id, show(want))
		return
	}
	if !sameCheckpoint(*got, want) {
		e.t.Errorf("Get(%q) = %s, want %s", id, show(*got), show(want))
	}
}

// state is what a failed write must leave unchanged: the head and list of
// each known thread, each known checkpoint, the blob references and, for a
// fork-capable store, the transcript of each known thread.
type state struct {
	heads       map[string]string
	lists       map[string][]cairn.Checkpoint
	gets        map[string]*cairn.Checkpoint
	refs        []cairn.BlobReference
	transcripts map[string]string
}

func (e *env) state() state {
	e.t.Helper()
	st := state{heads: map[string]string{}, lists: map[string][]cairn.Checkpoint{}, gets: map[string]*cairn.Checkpoint{}}
	for _, th := range slices.Sorted(maps.Keys(e.known.threads)) {
		st.heads[th] = e.head(th)
		var l []cairn.Checkpoint
		for _, c := range e.list(th) {
			l = append(l, norm(c))
		}
		st.lists[th] = l
	}
	for _, id := range slices.Sorted(maps.Keys(e.known.ids)) {
		if c := e.get(id); c != nil {
			n := norm(*c)
			st.gets[id] = &n
		} else {
			st.gets[id] = nil
		}
	}
	st.refs = e.refs()
	if len(st.refs) == 0 {
		st.refs = nil
	}
	if e.fork != nil {
		st.transcripts = map[string]string{}
		for _, th := range slices.Sorted(maps.Keys(e.known.threads)) {
			st.transcripts[th] = e.transcript(th)
		}
	}
	return st
}

// expectState reports every way in which after differs from before.
func (e *env) expectState(what string, before, after state) {
	e.t.Helper()
	for th, h := range before.heads {
		if a, ok := after.heads[th]; ok && a != h {
			e.t.Errorf("%s: the head of %q changed from %q to %q", what, th, h, a)
		}
	}
	for th, l := range before.lists {
		if a, ok := after.lists[th]; ok && !reflect.DeepEqual(a, l) {
			e.t.Errorf("%s: List(%q) changed from %s to %s", what, th, showList(l), showList(a))
		}
	}
	for id, c := range before.gets {
		a, ok := after.gets[id]
		if !ok || reflect.DeepEqual(a, c) {
			continue
		}
		switch {
		case c == nil:
			e.t.Errorf("%s: checkpoint %q appeared: %s", what, id, show(*a))
		case a == nil:
			e.t.Errorf("%s: checkpoint %q disappeared", what, id)
		default:
			e.t.Errorf("%s: checkpoint %q changed from %s to %s", what, id, show(*c), show(*a))
		}
	}
	if !reflect.DeepEqual(before.refs, after.refs) {
		e.t.Errorf("%s: ListBlobReferences changed from %s to %s", what, showRefs(before.refs), showRefs(after.refs))
	}
	for th, tr := range before.transcripts {
		if a, ok := after.transcripts[th]; ok && a != tr {
			e.t.Errorf("%s: the transcript of %q changed from %s to %s", what, th, tr, a)
		}
	}
}

// fails runs op, which must fail with an error matching want and leave the
// store as it was.
func (e *env) fails(what string, want error, op func() error) {
	e.t.Helper()
	before := e.state()
	err := op()
	expectErr(e.t, what, err, want)
	e.expectState(what, before, e.state())
}

// unchanged runs op, which must leave the store as it was.
func (e *env) unchanged(what string, op func()) {
	e.t.Helper()
	before := e.state()
	op()
	e.expectState(what, before, e.state())
}

// appendFails appends c with w, which must fail with want and change nothing.
func (e *env) appendFails(what string, want error, w cairn.Writer, c cairn.Checkpoint, expected string) {
	e.t.Helper()
	e.note(c.ThreadID, c.ID)
	e.fails(what, want, func() error {
		_, err := e.s.Append(e.ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: expected, Writer: w})
		return err
	})
}

// deleteHeadFails runs DeleteHead, which must fail with want and change
// nothing.
func (e *env) deleteHeadFails(what string, want error, w cairn.Writer, thread, id string) {
	e.t.Helper()
	e.note(thread, id)
	e.fails(what, want, func() error {
		return e.s.DeleteHead(e.ctx, cairn.DeleteHeadInput{ThreadID: thread, CheckpointID: id, Writer: w})
	})
}

// expectErr checks that err matches want under errors.Is.
func expectErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: got no error, want %s", what, errName(want))
		return
	}
	if !errors.Is(err, want) {
		t.Errorf("%s: got error %v, want %s", what, err, errName(want))
	}
}

// noErr fails the case when err is not nil.
func noErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func errName(err error) string {
	var ce *cairn.Error
	if errors.As(err, &ce) {
		return string(ce.Code)
	}
	return err.Error()
}

// Fixtures.

// fileKey returns the file blob key whose digest is n in hex, zero-padded.
func fileKey(n int) string { return fmt.Sprintf("%s%064x", cairn.FileBlobPrefix, n) }

// artifactKey returns the artifact blob key whose digest is n in hex.
func artifactKey(n int) string { return fmt.Sprintf("%s%064x", cairn.ArtifactBlobPrefix, n) }

// hexKey returns prefix followed by 64 copies of the hex digit d.
func hexKey(prefix string, d byte) string { return prefix + strings.Repeat(string(d), 64) }

// number is the number formed by the decimal digits of id, or 1 when it has
// none, as the upstream fixture computes it.
func number(id string) int {
	var b strings.Builder
	for _, r := range id {
		if r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	n, err := strconv.Atoi(b.String())
	if err != nil || n == 0 {
		return 1
	}
	return n
}

// cp is the upstream fixture checkpoint: createdAt is the number of the id,
// one file id+".txt" whose key is that number in hex, and a one-message
// conversation.
func cp(id, parent, thread string) cairn.Checkpoint {
	n := number(id)
	return cairn.Checkpoint{
		ID:                 id,
		ThreadID:           thread,
		ParentCheckpointID: parent,
		CreatedAt:          float64(n),
		Reason:             cairn.ReasonAutomatic,
		Files:              []cairn.Entry{{Path: id + ".txt", Kind: cairn.KindFile, BlobKey: fileKey(n), Size: 1}},
		Conversation:       conversation(id),
	}
}

// conversation is a one-message conversation whose content is text.
func conversation(text string) json.RawMessage {
	s, _ := json.Marshal(text)
	return json.RawMessage(`[{"role":"user","content":` + string(s) + `}]`)
}

func file(path string, key string) cairn.Entry {
	return cairn.Entry{Path: path, Kind: cairn.KindFile, BlobKey: key, Size: 1}
}

func dir(path string) cairn.Entry { return cairn.Entry{Path: path, Kind: cairn.KindDir} }

func artifact(id string, key string) cairn.Artifact {
	return cairn.Artifact{ArtifactID: id, Name: id + ".bin", MimeType: "application/octet-stream", Size: 3, BlobKey: key, CreatedAt: 5}
}

// withFiles returns c with the given files.
func withFiles(c cairn.Checkpoint, files ...cairn.Entry) cairn.Checkpoint {
	c.Files = files
	return c
}

// Comparison.

// norm returns c with only its exported fields, empty lists as nil, and a nil
// conversation as the JSON null it stands for, so that two checkpoints that
// mean the same compare equal under reflect.DeepEqual.
func norm(c cairn.Checkpoint) cairn.Checkpoint {
	out := c
	out.Files = nil
	for _, f := range c.Files {
		out.Files = append(out.Files, cairn.Entry{Path: f.Path, Kind: f.Kind, BlobKey: f.BlobKey, Size: f.Size})
	}
	out.Artifacts = nil
	for _, a := range c.Artifacts {
		out.Artifacts = append(out.Artifacts, cairn.Artifact{ArtifactID: a.ArtifactID, Name: a.Name, MimeType: a.MimeType, Size: a.Size, BlobKey: a.BlobKey, CreatedAt: a.CreatedAt})
	}
	if c.Conversation == nil {
		out.Conversation = json.RawMessage("null")
	} else {
		out.Conversation = bytes.Clone(c.Conversation)
	}
	return out
}

func sameCheckpoint(a, b cairn.Checkpoint) bool { return reflect.DeepEqual(norm(a), norm(b)) }

func compactJSON(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return fmt.Sprintf("invalid JSON %q", raw)
	}
	return b.String()
}

func show(c cairn.Checkpoint) string {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Sprintf("%v (conversation %q)", c, []byte(c.Conversation))
	}
	return string(b)
}

func showList(cs []cairn.Checkpoint) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = show(c)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func showRefs(rs []cairn.BlobReference) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s:%d", r.Key, r.References)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
