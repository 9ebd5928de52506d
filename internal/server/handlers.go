package server

import (
	"context"
	"math"
	"time"

	"connectrpc.com/connect"

	"github.com/cairnstore/cairn"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/internal/wire"
)

// pageSize is the number of blob references per streamed message.
const pageSize = 1000

// run resolves the request's store and runs fn on it, converting its error.
func run[Req, Res any](srv *Server, ctx context.Context, req *connect.Request[Req], fn func(st *store, m *Req) (*Res, error)) (*connect.Response[Res], error) {
	st, err := srv.storeOf(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	res, err := fn(st, req.Msg)
	if err != nil {
		return nil, wire.ToConnect(err)
	}
	return connect.NewResponse(res), nil
}

// stream resolves the request's store and runs fn on it, converting its
// error.
func stream[Req any](srv *Server, ctx context.Context, req *connect.Request[Req], fn func(st *store, m *Req) error) error {
	st, err := srv.storeOf(ctx, req.Header())
	if err != nil {
		return err
	}
	if err := fn(st, req.Msg); err != nil {
		return wire.ToConnect(err)
	}
	return nil
}

func invalidID(what string) error {
	return cairn.NewError(cairn.CodeInvalidID, "%s is present but empty", what)
}

// checkpoints implements CheckpointService.
type checkpoints struct{ srv *Server }

func (h *checkpoints) GetCheckpoint(ctx context.Context, req *connect.Request[cairnv1.GetCheckpointRequest]) (*connect.Response[cairnv1.GetCheckpointResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.GetCheckpointRequest) (*cairnv1.GetCheckpointResponse, error) {
		c, err := st.Get(ctx, m.Id)
		if err != nil || c == nil {
			return &cairnv1.GetCheckpointResponse{}, err
		}
		return &cairnv1.GetCheckpointResponse{Checkpoint: wire.ToCheckpoint(c)}, nil
	})
}

func (h *checkpoints) ListCheckpoints(ctx context.Context, req *connect.Request[cairnv1.ListCheckpointsRequest], out *connect.ServerStream[cairnv1.ListCheckpointsResponse]) error {
	return stream(h.srv, ctx, req, func(st *store, m *cairnv1.ListCheckpointsRequest) error {
		cs, err := st.List(ctx, m.ThreadId)
		if err != nil {
			return err
		}
		for i := range cs {
			if err := out.Send(&cairnv1.ListCheckpointsResponse{Checkpoint: wire.ToCheckpoint(&cs[i])}); err != nil {
				return err
			}
		}
		return nil
	})
}

func (h *checkpoints) GetHead(ctx context.Context, req *connect.Request[cairnv1.GetHeadRequest]) (*connect.Response[cairnv1.GetHeadResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.GetHeadRequest) (*cairnv1.GetHeadResponse, error) {
		head, err := st.GetHead(ctx, m.ThreadId)
		return &cairnv1.GetHeadResponse{HeadId: wire.Opt(head)}, err
	})
}

func (h *checkpoints) Append(ctx context.Context, req *connect.Request[cairnv1.AppendRequest]) (*connect.Response[cairnv1.AppendResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.AppendRequest) (*cairnv1.AppendResponse, error) {
		c, badParent := wire.FromCheckpoint(m.Checkpoint)
		expected, badExpected := wire.OptionalID(m.ExpectedHeadId)
		switch {
		case badParent:
			return nil, invalidID("parentCheckpointId")
		case badExpected:
			return nil, invalidID("expectedHeadId")
		}
		res, err := st.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: expected, Writer: wire.FromWriter(m.Writer)})
		return &cairnv1.AppendResponse{HeadId: res.HeadID}, err
	})
}

func (h *checkpoints) DeleteHead(ctx context.Context, req *connect.Request[cairnv1.DeleteHeadRequest]) (*connect.Response[cairnv1.DeleteHeadResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.DeleteHeadRequest) (*cairnv1.DeleteHeadResponse, error) {
		err := st.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: m.ThreadId, CheckpointID: m.CheckpointId, Writer: wire.FromWriter(m.Writer)})
		return &cairnv1.DeleteHeadResponse{}, err
	})
}

func (h *checkpoints) AcquireWriter(ctx context.Context, req *connect.Request[cairnv1.AcquireWriterRequest]) (*connect.Response[cairnv1.AcquireWriterResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.AcquireWriterRequest) (*cairnv1.AcquireWriterResponse, error) {
		l, err := st.AcquireWriter(ctx, m.ThreadId)
		if err != nil {
			return nil, err
		}
		st.remember(l, st.now())
		return &cairnv1.AcquireWriterResponse{Lease: &cairnv1.Lease{
			Writer: wire.ToWriter(l.Writer), ExpiresAt: l.ExpiresAt(), RenewAfterMs: cairn.Millis(l.RenewAfter),
		}}, nil
	})
}

func (h *checkpoints) RenewWriter(ctx context.Context, req *connect.Request[cairnv1.RenewWriterRequest]) (*connect.Response[cairnv1.RenewWriterResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.RenewWriterRequest) (*cairnv1.RenewWriterResponse, error) {
		w := wire.FromWriter(m.Writer)
		l, err := st.lease(ctx, w)
		if err != nil {
			return nil, err
		}
		exp, err := l.Renew(ctx)
		if cairn.CodeOf(err) == cairn.CodeWriterLost {
			st.forget(w)
		}
		return &cairnv1.RenewWriterResponse{ExpiresAt: exp}, err
	})
}

func (h *checkpoints) ReleaseWriter(ctx context.Context, req *connect.Request[cairnv1.ReleaseWriterRequest]) (*connect.Response[cairnv1.ReleaseWriterResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.ReleaseWriterRequest) (*cairnv1.ReleaseWriterResponse, error) {
		w := wire.FromWriter(m.Writer)
		l, err := st.lease(ctx, w)
		if cairn.CodeOf(err) != "" {
			// Not the thread's writer (or not a writer at all): nothing of
			// w's to end, and a release never fails by the contract.
			return &cairnv1.ReleaseWriterResponse{}, nil
		}
		if err != nil {
			return nil, err
		}
		l.Release(ctx)
		st.forget(w)
		return &cairnv1.ReleaseWriterResponse{}, nil
	})
}

// sendRefs streams blob references in pages through send, walking with
// walk.
func sendRefs(walk func(fn func(cairn.BlobReference) error) error, send func([]*cairnv1.BlobReference) error) error {
	page := make([]*cairnv1.BlobReference, 0, pageSize)
	err := walk(func(r cairn.BlobReference) error {
		page = append(page, &cairnv1.BlobReference{Key: r.Key, References: int64(r.References)})
		if len(page) < pageSize {
			return nil
		}
		err := send(page)
		page = make([]*cairnv1.BlobReference, 0, pageSize)
		return err
	})
	if err != nil {
		return err
	}
	if len(page) > 0 {
		return send(page)
	}
	return nil
}

func (h *checkpoints) ListBlobReferences(ctx context.Context, req *connect.Request[cairnv1.ListBlobReferencesRequest], out *connect.ServerStream[cairnv1.ListBlobReferencesResponse]) error {
	return stream(h.srv, ctx, req, func(st *store, _ *cairnv1.ListBlobReferencesRequest) error {
		return sendRefs(func(fn func(cairn.BlobReference) error) error { return st.WalkBlobReferences(ctx, fn) },
			func(p []*cairnv1.BlobReference) error {
				return out.Send(&cairnv1.ListBlobReferencesResponse{References: p})
			})
	})
}

func (h *checkpoints) DeleteCheckpoints(ctx context.Context, req *connect.Request[cairnv1.DeleteCheckpointsRequest]) (*connect.Response[cairnv1.DeleteCheckpointsResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.DeleteCheckpointsRequest) (*cairnv1.DeleteCheckpointsResponse, error) {
		ids, err := st.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: m.ThreadId, Keep: m.Keep, Writer: wire.FromWriter(m.Writer)})
		return &cairnv1.DeleteCheckpointsResponse{RemovedIds: ids}, err
	})
}

func (h *checkpoints) ForkFromCheckpoint(ctx context.Context, req *connect.Request[cairnv1.ForkFromCheckpointRequest]) (*connect.Response[cairnv1.ForkFromCheckpointResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.ForkFromCheckpointRequest) (*cairnv1.ForkFromCheckpointResponse, error) {
		c, err := st.ForkFromCheckpoint(ctx, cairn.ForkInput{
			SourceThreadID: m.SourceThreadId, SourceCheckpointID: m.SourceCheckpointId,
			DestinationThreadID: m.DestinationThreadId, DestinationCheckpointID: m.DestinationCheckpointId,
			CreatedAt: m.CreatedAt, Writer: wire.FromWriter(m.Writer),
		})
		if err != nil {
			return nil, err
		}
		return &cairnv1.ForkFromCheckpointResponse{Checkpoint: wire.ToCheckpoint(c)}, nil
	})
}

func (h *checkpoints) ListThreads(ctx context.Context, req *connect.Request[cairnv1.ListThreadsRequest]) (*connect.Response[cairnv1.ListThreadsResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.ListThreadsRequest) (*cairnv1.ListThreadsResponse, error) {
		ids, err := st.ListThreads(ctx, m.After, int(m.Limit))
		return &cairnv1.ListThreadsResponse{ThreadIds: ids}, err
	})
}

func (h *checkpoints) LoadThread(ctx context.Context, req *connect.Request[cairnv1.LoadThreadRequest]) (*connect.Response[cairnv1.LoadThreadResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.LoadThreadRequest) (*cairnv1.LoadThreadResponse, error) {
		msgs, err := st.Transcripts().LoadThread(ctx, m.ThreadId)
		return &cairnv1.LoadThreadResponse{Messages: msgs}, err
	})
}

func (h *checkpoints) SaveThread(ctx context.Context, req *connect.Request[cairnv1.SaveThreadRequest]) (*connect.Response[cairnv1.SaveThreadResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.SaveThreadRequest) (*cairnv1.SaveThreadResponse, error) {
		return &cairnv1.SaveThreadResponse{}, st.Transcripts().SaveThread(ctx, m.ThreadId, m.Messages)
	})
}

func (h *checkpoints) ClaimBlobs(ctx context.Context, req *connect.Request[cairnv1.ClaimBlobsRequest]) (*connect.Response[cairnv1.ClaimBlobsResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.ClaimBlobsRequest) (*cairnv1.ClaimBlobsResponse, error) {
		busy, err := st.ClaimBlobs(ctx, wire.FromWriter(m.Writer), m.Keys)
		return &cairnv1.ClaimBlobsResponse{Busy: busy}, err
	})
}

func (h *checkpoints) WaitBlobs(ctx context.Context, req *connect.Request[cairnv1.WaitBlobsRequest]) (*connect.Response[cairnv1.WaitBlobsResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.WaitBlobsRequest) (*cairnv1.WaitBlobsResponse, error) {
		return &cairnv1.WaitBlobsResponse{}, st.WaitBlobs(ctx, m.Keys)
	})
}

// instances implements InstanceService.
type instances struct{ srv *Server }

func (h *instances) GetInstance(ctx context.Context, req *connect.Request[cairnv1.GetInstanceRequest]) (*connect.Response[cairnv1.GetInstanceResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.GetInstanceRequest) (*cairnv1.GetInstanceResponse, error) {
		rec, err := st.Instances().Get(ctx, m.Key)
		if err != nil || rec == nil {
			return &cairnv1.GetInstanceResponse{}, err
		}
		return &cairnv1.GetInstanceResponse{Record: wire.ToInstance(rec)}, nil
	})
}

func (h *instances) UpsertInstance(ctx context.Context, req *connect.Request[cairnv1.UpsertInstanceRequest]) (*connect.Response[cairnv1.UpsertInstanceResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.UpsertInstanceRequest) (*cairnv1.UpsertInstanceResponse, error) {
		return &cairnv1.UpsertInstanceResponse{}, st.Instances().Upsert(ctx, wire.FromInstance(m.Record))
	})
}

func (h *instances) DeleteInstance(ctx context.Context, req *connect.Request[cairnv1.DeleteInstanceRequest]) (*connect.Response[cairnv1.DeleteInstanceResponse], error) {
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.DeleteInstanceRequest) (*cairnv1.DeleteInstanceResponse, error) {
		return &cairnv1.DeleteInstanceResponse{}, st.Instances().Delete(ctx, m.Key)
	})
}

// collector implements BlobCollectorService.
type collector struct{ srv *Server }

var errNoCollector = wire.NewError(connect.CodePermissionDenied,
	"the blob collector is disabled: this server was not started with --serve-collector")

// check refuses every call unless the server serves the collector.
func (h *collector) check() error {
	if !h.srv.serveCollector {
		return errNoCollector
	}
	return nil
}

func (h *collector) ReadBlobGC(ctx context.Context, req *connect.Request[cairnv1.ReadBlobGCRequest], out *connect.ServerStream[cairnv1.ReadBlobGCResponse]) error {
	if err := h.check(); err != nil {
		return err
	}
	return stream(h.srv, ctx, req, func(st *store, _ *cairnv1.ReadBlobGCRequest) error {
		var view cairn.BlobGCView
		err := sendRefs(func(fn func(cairn.BlobReference) error) error {
			var err error
			view, err = st.ReadBlobGC(ctx, fn)
			return err
		}, func(p []*cairnv1.BlobReference) error { return out.Send(&cairnv1.ReadBlobGCResponse{References: p}) })
		if err != nil {
			return err
		}
		return out.Send(&cairnv1.ReadBlobGCResponse{View: &cairnv1.BlobGCView{Claimed: view.Claimed, Records: wire.ToRecords(view.Records)}})
	})
}

func (h *collector) MarkBlobs(ctx context.Context, req *connect.Request[cairnv1.MarkBlobsRequest]) (*connect.Response[cairnv1.MarkBlobsResponse], error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.MarkBlobsRequest) (*cairnv1.MarkBlobsResponse, error) {
		recs, err := st.MarkBlobs(ctx, m.Keys, m.Since)
		return &cairnv1.MarkBlobsResponse{Records: wire.ToRecords(recs)}, err
	})
}

func (h *collector) BeginBlobDeletes(ctx context.Context, req *connect.Request[cairnv1.BeginBlobDeletesRequest]) (*connect.Response[cairnv1.BeginBlobDeletesResponse], error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.BeginBlobDeletesRequest) (*cairnv1.BeginBlobDeletesResponse, error) {
		recs, err := st.BeginBlobDeletes(ctx, wire.FromRecords(m.Records))
		return &cairnv1.BeginBlobDeletesResponse{Records: wire.ToRecords(recs)}, err
	})
}

func (h *collector) EndBlobDeletes(ctx context.Context, req *connect.Request[cairnv1.EndBlobDeletesRequest]) (*connect.Response[cairnv1.EndBlobDeletesResponse], error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.EndBlobDeletesRequest) (*cairnv1.EndBlobDeletesResponse, error) {
		return &cairnv1.EndBlobDeletesResponse{}, st.EndBlobDeletes(ctx, wire.FromRecords(m.Records), m.Deleted)
	})
}

func (h *collector) DropBlobRecords(ctx context.Context, req *connect.Request[cairnv1.DropBlobRecordsRequest]) (*connect.Response[cairnv1.DropBlobRecordsResponse], error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	return run(h.srv, ctx, req, func(st *store, m *cairnv1.DropBlobRecordsRequest) (*cairnv1.DropBlobRecordsResponse, error) {
		return &cairnv1.DropBlobRecordsResponse{}, st.DropBlobRecords(ctx, wire.FromRecords(m.Records))
	})
}

// testClock implements TestClockService.
type testClock struct{ srv *Server }

// leaseTiming converts milliseconds of the request into a duration; zero
// selects the default.
func leaseTiming(ms float64, what string) (time.Duration, error) {
	if math.IsNaN(ms) || math.IsInf(ms, 0) || ms < 0 || ms > float64(math.MaxInt64/int64(time.Millisecond)) {
		return 0, wire.NewError(connect.CodeInvalidArgument, what+" must be a finite number of milliseconds, zero or more")
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

func (h *testClock) OpenTestSession(ctx context.Context, req *connect.Request[cairnv1.OpenTestSessionRequest]) (*connect.Response[cairnv1.OpenTestSessionResponse], error) {
	if !h.srv.testClock {
		return nil, errNoTestClock
	}
	t, _ := tenantOf(ctx)
	m := req.Msg
	lease, err := leaseTiming(m.LeaseDurationMs, "lease_duration_ms")
	if err != nil {
		return nil, err
	}
	renew, err := leaseTiming(m.RenewAfterMs, "renew_after_ms")
	if err != nil {
		return nil, err
	}
	now := cairn.SystemClock()
	if m.Now != nil {
		if math.IsNaN(*m.Now) || math.IsInf(*m.Now, 0) {
			return nil, wire.NewError(connect.CodeInvalidArgument, "now must be a finite number of milliseconds")
		}
		now = *m.Now
	}
	s, err := h.srv.openSession(ctx, t, now, lease, renew)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&cairnv1.OpenTestSessionResponse{SessionId: s.id}), nil
}

func (h *testClock) CloseTestSession(ctx context.Context, req *connect.Request[cairnv1.CloseTestSessionRequest]) (*connect.Response[cairnv1.CloseTestSessionResponse], error) {
	if !h.srv.testClock {
		return nil, errNoTestClock
	}
	t, _ := tenantOf(ctx)
	if err := h.srv.closeSession(ctx, t, req.Msg.SessionId); err != nil {
		return nil, err
	}
	return connect.NewResponse(&cairnv1.CloseTestSessionResponse{}), nil
}
