package remote

import (
	"context"
	"encoding/json"
	"time"

	"connectrpc.com/connect"

	"github.com/cairnstore/cairn"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/internal/wire"
)

// The methods whose request holds identifiers only run, before any request,
// the checks of the contract that need no state, in its order, and the
// lease's token bound (cairn.CheckOwnerToken) where the lease is the next
// check: the server refuses a request of such a method past
// server.SmallRequestBytes before reading it, and a caller gets the
// contract's code for an identifier of any length, as from any other store.

// firstErr returns the first error that is not nil.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Get implements cairn.Store.
func (s *Store) Get(ctx context.Context, id string) (*cairn.Checkpoint, error) {
	if err := cairn.ValidateID(id, "checkpoint id"); err != nil {
		return nil, err
	}
	res, err := call(ctx, "get", false, s.cp.GetCheckpoint, &cairnv1.GetCheckpointRequest{Id: id})
	if err != nil || res.Checkpoint == nil {
		return nil, err
	}
	c, _ := wire.FromCheckpoint(res.Checkpoint)
	return &c, nil
}

// List implements cairn.Store. The checkpoints arrive as a stream, one per
// message, so a thread of large checkpoints needs no single large response.
func (s *Store) List(ctx context.Context, threadID string) ([]cairn.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := cairn.ValidateID(threadID, "thread id"); err != nil {
		return nil, err
	}
	st, err := s.cp.ListCheckpoints(ctx, connect.NewRequest(&cairnv1.ListCheckpointsRequest{ThreadId: threadID}))
	if err != nil {
		return nil, fail(ctx, "list", false, err)
	}
	defer st.Close()
	out := []cairn.Checkpoint{}
	for st.Receive() {
		c, _ := wire.FromCheckpoint(st.Msg().Checkpoint)
		out = append(out, c)
	}
	if err := st.Err(); err != nil {
		return nil, fail(ctx, "list", false, err)
	}
	return out, nil
}

// GetHead implements cairn.Store.
func (s *Store) GetHead(ctx context.Context, threadID string) (string, error) {
	if err := cairn.ValidateID(threadID, "thread id"); err != nil {
		return "", err
	}
	res, err := call(ctx, "getHead", false, s.cp.GetHead, &cairnv1.GetHeadRequest{ThreadId: threadID})
	if err != nil {
		return "", err
	}
	return wire.OptionalString(res.HeadId), nil
}

// Append implements cairn.Store. Its errors are those of cairn.Store, or an
// *UnknownOutcomeError.
func (s *Store) Append(ctx context.Context, in cairn.AppendInput) (cairn.AppendResult, error) {
	res, err := call(ctx, "append", true, s.cp.Append, &cairnv1.AppendRequest{
		Checkpoint: wire.ToCheckpoint(&in.Checkpoint), ExpectedHeadId: wire.Opt(in.ExpectedHeadID), Writer: wire.ToWriter(in.Writer),
	})
	if err != nil {
		return cairn.AppendResult{}, err
	}
	return cairn.AppendResult{HeadID: res.HeadId}, nil
}

// DeleteHead implements cairn.Store. Its errors are those of cairn.Store, or
// an *UnknownOutcomeError.
func (s *Store) DeleteHead(ctx context.Context, in cairn.DeleteHeadInput) error {
	if err := firstErr(cairn.CheckDeleteHeadInput(&in), cairn.CheckOwnerToken(in.Writer)); err != nil {
		return err
	}
	_, err := call(ctx, "deleteHead", true, s.cp.DeleteHead, &cairnv1.DeleteHeadRequest{
		ThreadId: in.ThreadID, CheckpointId: in.CheckpointID, Writer: wire.ToWriter(in.Writer),
	})
	return err
}

// AcquireWriter implements cairn.Store. The lease is renewed and released
// through this Store's server URL; any replica behind it serves them. An *UnknownOutcomeError means a
// lease may have been taken that nobody holds; it ends at its expiry.
func (s *Store) AcquireWriter(ctx context.Context, threadID string) (*cairn.Lease, error) {
	if err := cairn.ValidateID(threadID, "thread id"); err != nil {
		return nil, err
	}
	res, err := call(ctx, "acquireWriter", true, s.cp.AcquireWriter, &cairnv1.AcquireWriterRequest{ThreadId: threadID})
	if err != nil {
		return nil, err
	}
	l := res.Lease
	w := wire.FromWriter(l.GetWriter())
	renew := time.Duration(l.GetRenewAfterMs() * float64(time.Millisecond))
	return cairn.NewLease(w, l.GetExpiresAt(), renew, &leaseDriver{s: s, w: w}), nil
}

// leaseDriver renews and releases a lease through RenewWriter and
// ReleaseWriter.
type leaseDriver struct {
	s *Store
	w cairn.Writer
}

// Renew implements cairn.LeaseDriver. A renew is safe to repeat, so its
// errors are never unknown outcomes.
func (d *leaseDriver) Renew(ctx context.Context) (float64, error) {
	res, err := call(ctx, "renew", false, d.s.cp.RenewWriter, &cairnv1.RenewWriterRequest{Writer: wire.ToWriter(d.w)})
	if err != nil {
		return 0, err
	}
	return res.ExpiresAt, nil
}

// Release implements cairn.LeaseDriver. A failed release is not reported:
// the lease then ends at its expiry.
func (d *leaseDriver) Release(ctx context.Context) {
	_, _ = call(ctx, "release", false, d.s.cp.ReleaseWriter, &cairnv1.ReleaseWriterRequest{Writer: wire.ToWriter(d.w)})
}

// ListBlobReferences implements cairn.Store.
func (s *Store) ListBlobReferences(ctx context.Context) ([]cairn.BlobReference, error) {
	out := []cairn.BlobReference{}
	err := s.WalkBlobReferences(ctx, func(r cairn.BlobReference) error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WalkBlobReferences implements cairn.BlobReferenceWalker: the server walks
// one point in time and streams the references in pages.
func (s *Store) WalkBlobReferences(ctx context.Context, fn func(cairn.BlobReference) error) error {
	return walk(ctx, "listBlobReferences", func(ctx context.Context) (receiver[cairnv1.ListBlobReferencesResponse], error) {
		return s.cp.ListBlobReferences(ctx, connect.NewRequest(&cairnv1.ListBlobReferencesRequest{}))
	}, func(m *cairnv1.ListBlobReferencesResponse) error {
		return eachRef(m.References, fn)
	})
}

func eachRef(refs []*cairnv1.BlobReference, fn func(cairn.BlobReference) error) error {
	for _, r := range refs {
		if err := fn(wire.FromRef(r)); err != nil {
			return err
		}
	}
	return nil
}

// receiver is the part of a server stream walk reads.
type receiver[T any] interface {
	Receive() bool
	Msg() *T
	Err() error
	Close() error
}

// walk opens a server stream and calls each for each message, stopping at
// the first error of each, which it returns unchanged; the stream is
// cancelled then.
func walk[T any](ctx context.Context, op string, open func(context.Context) (receiver[T], error), each func(*T) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := open(sctx)
	if err != nil {
		return fail(ctx, op, false, err)
	}
	defer st.Close()
	for st.Receive() {
		if err := each(st.Msg()); err != nil {
			return err
		}
	}
	if err := st.Err(); err != nil {
		return fail(ctx, op, false, err)
	}
	return nil
}

// DeleteCheckpoints implements cairn.Pruner. Its errors are those of
// cairn.Pruner, or an *UnknownOutcomeError.
func (s *Store) DeleteCheckpoints(ctx context.Context, in cairn.DeleteCheckpointsInput) ([]string, error) {
	if err := firstErr(cairn.CheckDeleteCheckpointsInput(&in), cairn.CheckOwnerToken(in.Writer)); err != nil {
		return nil, err
	}
	res, err := call(ctx, "deleteCheckpoints", true, s.cp.DeleteCheckpoints, &cairnv1.DeleteCheckpointsRequest{
		ThreadId: in.ThreadID, Keep: in.Keep, Writer: wire.ToWriter(in.Writer),
	})
	if err != nil {
		return nil, err
	}
	if res.RemovedIds == nil {
		return []string{}, nil
	}
	return res.RemovedIds, nil
}

// ForkFromCheckpoint implements cairn.Forker. Its errors are those of
// cairn.Forker, or an *UnknownOutcomeError.
func (s *Store) ForkFromCheckpoint(ctx context.Context, in cairn.ForkInput) (*cairn.Checkpoint, error) {
	if err := cairn.CheckForkInput(&in); err != nil {
		return nil, err
	}
	res, err := call(ctx, "forkFromCheckpoint", true, s.cp.ForkFromCheckpoint, &cairnv1.ForkFromCheckpointRequest{
		SourceThreadId: in.SourceThreadID, SourceCheckpointId: in.SourceCheckpointID,
		DestinationThreadId: in.DestinationThreadID, DestinationCheckpointId: in.DestinationCheckpointID,
		CreatedAt: in.CreatedAt, Writer: wire.ToWriter(in.Writer),
	})
	if err != nil {
		return nil, err
	}
	c, _ := wire.FromCheckpoint(res.Checkpoint)
	return &c, nil
}

// ListThreads implements cairn.ThreadLister.
func (s *Store) ListThreads(ctx context.Context, after string, limit int) ([]string, error) {
	lim := int32(max(min(limit, 1<<31-1), 0))
	res, err := call(ctx, "listThreads", false, s.cp.ListThreads, &cairnv1.ListThreadsRequest{After: after, Limit: lim})
	if err != nil {
		return nil, err
	}
	if res.ThreadIds == nil {
		return []string{}, nil
	}
	return res.ThreadIds, nil
}

// Transcripts implements cairn.Forker: the transcript store of the same
// server and tenant.
func (s *Store) Transcripts() cairn.TranscriptStore { return transcripts{s} }

type transcripts struct{ s *Store }

// LoadThread implements cairn.TranscriptStore.
func (t transcripts) LoadThread(ctx context.Context, threadID string) (json.RawMessage, error) {
	if err := cairn.ValidateID(threadID, "thread id"); err != nil {
		return nil, err
	}
	res, err := call(ctx, "loadThread", false, t.s.cp.LoadThread, &cairnv1.LoadThreadRequest{ThreadId: threadID})
	if err != nil {
		return nil, err
	}
	return json.RawMessage(res.Messages), nil
}

// SaveThread implements cairn.TranscriptStore. Its errors are those of
// cairn.TranscriptStore, or an *UnknownOutcomeError.
func (t transcripts) SaveThread(ctx context.Context, threadID string, messages json.RawMessage) error {
	_, err := call(ctx, "saveThread", true, t.s.cp.SaveThread, &cairnv1.SaveThreadRequest{ThreadId: threadID, Messages: messages})
	return err
}

// ClaimBlobs implements cairn.BlobClaimer. Claiming is safe to repeat, so
// its errors are never unknown outcomes.
func (s *Store) ClaimBlobs(ctx context.Context, w cairn.Writer, keys []string) ([]string, error) {
	res, err := call(ctx, "claimBlobs", false, s.cp.ClaimBlobs, &cairnv1.ClaimBlobsRequest{Writer: wire.ToWriter(w), Keys: keys})
	if err != nil {
		return nil, err
	}
	if len(res.Busy) == 0 {
		return nil, nil
	}
	return res.Busy, nil
}

// WaitBlobs implements cairn.BlobClaimer. A wait longer than the server's
// request timeout is continued with another request, until ctx ends.
func (s *Store) WaitBlobs(ctx context.Context, keys []string) error {
	for {
		_, err := call(ctx, "waitBlobs", false, s.cp.WaitBlobs, &cairnv1.WaitBlobsRequest{Keys: keys})
		if err == nil || ctx.Err() != nil || connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			return err
		}
	}
}

// Instances returns the instance store of the same server and tenant.
func (s *Store) Instances() cairn.InstanceStore { return instances{s} }

type instances struct{ s *Store }

// Get implements cairn.InstanceStore.
func (i instances) Get(ctx context.Context, key string) (*cairn.InstanceRecord, error) {
	if err := cairn.ValidateInstanceKey(key); err != nil {
		return nil, err
	}
	res, err := call(ctx, "getInstance", false, i.s.inst.GetInstance, &cairnv1.GetInstanceRequest{Key: key})
	if err != nil || res.Record == nil {
		return nil, err
	}
	rec := wire.FromInstance(res.Record)
	return &rec, nil
}

// Upsert implements cairn.InstanceStore; an *UnknownOutcomeError means the
// record may or may not have been replaced.
func (i instances) Upsert(ctx context.Context, rec cairn.InstanceRecord) error {
	if err := cairn.ValidateInstanceRecord(&rec); err != nil {
		return err
	}
	_, err := call(ctx, "upsertInstance", true, i.s.inst.UpsertInstance, &cairnv1.UpsertInstanceRequest{Record: wire.ToInstance(&rec)})
	return err
}

// Delete implements cairn.InstanceStore; an *UnknownOutcomeError means the
// record may or may not have been removed.
func (i instances) Delete(ctx context.Context, key string) error {
	if err := cairn.ValidateInstanceKey(key); err != nil {
		return err
	}
	_, err := call(ctx, "deleteInstance", true, i.s.inst.DeleteInstance, &cairnv1.DeleteInstanceRequest{Key: key})
	return err
}
