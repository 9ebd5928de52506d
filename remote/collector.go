package remote

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/cairnstore/cairn"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/internal/wire"
)

// The methods of cairn.BlobCollector, served by a cairnd started with
// --serve-collector. Its writes are compare-and-swaps that are safe to
// repeat, so their errors are never unknown outcomes.

// ReadBlobGC implements cairn.BlobCollector.
func (s *Store) ReadBlobGC(ctx context.Context, fn func(cairn.BlobReference) error) (cairn.BlobGCView, error) {
	var view *cairnv1.BlobGCView
	err := walk(ctx, "readBlobGC", func(ctx context.Context) (receiver[cairnv1.ReadBlobGCResponse], error) {
		return s.gc.ReadBlobGC(ctx, connect.NewRequest(&cairnv1.ReadBlobGCRequest{}))
	}, func(m *cairnv1.ReadBlobGCResponse) error {
		if m.View != nil {
			view = m.View
		}
		return eachRef(m.References, fn)
	})
	if err != nil {
		return cairn.BlobGCView{}, err
	}
	if view == nil {
		return cairn.BlobGCView{}, errors.New("remote: readBlobGC: the server's stream ended without the view")
	}
	return cairn.BlobGCView{Claimed: nilIfEmpty(view.Claimed), Records: wire.FromRecords(view.Records)}, nil
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// MarkBlobs implements cairn.BlobCollector.
func (s *Store) MarkBlobs(ctx context.Context, keys []string, since float64) ([]cairn.GCRecord, error) {
	res, err := call(ctx, "markBlobs", false, s.gc.MarkBlobs, &cairnv1.MarkBlobsRequest{Keys: keys, Since: since})
	if err != nil {
		return nil, err
	}
	return wire.FromRecords(res.Records), nil
}

// BeginBlobDeletes implements cairn.BlobCollector.
func (s *Store) BeginBlobDeletes(ctx context.Context, recs []cairn.GCRecord) ([]cairn.GCRecord, error) {
	res, err := call(ctx, "beginBlobDeletes", false, s.gc.BeginBlobDeletes, &cairnv1.BeginBlobDeletesRequest{Records: wire.ToRecords(recs)})
	if err != nil {
		return nil, err
	}
	return wire.FromRecords(res.Records), nil
}

// EndBlobDeletes implements cairn.BlobCollector.
func (s *Store) EndBlobDeletes(ctx context.Context, recs []cairn.GCRecord, deleted bool) error {
	_, err := call(ctx, "endBlobDeletes", false, s.gc.EndBlobDeletes, &cairnv1.EndBlobDeletesRequest{Records: wire.ToRecords(recs), Deleted: deleted})
	return err
}

// DropBlobRecords implements cairn.BlobCollector.
func (s *Store) DropBlobRecords(ctx context.Context, recs []cairn.GCRecord) error {
	_, err := call(ctx, "dropBlobRecords", false, s.gc.DropBlobRecords, &cairnv1.DropBlobRecordsRequest{Records: wire.ToRecords(recs)})
	return err
}
