package faulty

import (
	"context"
	"slices"
	"unicode/utf16"

	"github.com/cairnstore/cairn"
)

// The wrappers below add one fault to a reference store of package cairn.

// UTF16List is a MemoryStore whose List breaks createdAt ties by UTF-16 code
// units instead of UTF-8 bytes.
type UTF16List struct{ *cairn.MemoryStore }

// List implements cairn.Store.
func (s UTF16List) List(ctx context.Context, thread string) ([]cairn.Checkpoint, error) {
	cs, err := s.MemoryStore.List(ctx, thread)
	slices.SortStableFunc(cs, func(a, b cairn.Checkpoint) int {
		if a.CreatedAt != b.CreatedAt {
			if a.CreatedAt < b.CreatedAt {
				return -1
			}
			return 1
		}
		return slices.Compare(utf16.Encode([]rune(a.ID)), utf16.Encode([]rune(b.ID)))
	})
	return cs, err
}

// HeadFirst is a MemoryStore whose Append compares the head before it checks
// the writer lease.
type HeadFirst struct{ *cairn.MemoryStore }

// Append implements cairn.Store.
func (s HeadFirst) Append(ctx context.Context, in cairn.AppendInput) (cairn.AppendResult, error) {
	probe := in
	probe.Checkpoint = in.Checkpoint.Clone()
	if err := cairn.CheckAppendInput(&probe); err != nil {
		return cairn.AppendResult{}, err
	}
	head, err := s.GetHead(ctx, in.Checkpoint.ThreadID)
	if err != nil {
		return cairn.AppendResult{}, err
	}
	if head != in.ExpectedHeadID {
		return cairn.AppendResult{}, cairn.NewError(cairn.CodeStaleHead, "head is %q", head)
	}
	return s.MemoryStore.Append(ctx, in)
}

// ForkLabel is a MemoryForkStore whose fork root keeps the source's label.
type ForkLabel struct{ *cairn.MemoryForkStore }

// ForkFromCheckpoint implements cairn.Forker.
func (s ForkLabel) ForkFromCheckpoint(ctx context.Context, in cairn.ForkInput) (*cairn.Checkpoint, error) {
	root, err := s.MemoryForkStore.ForkFromCheckpoint(ctx, in)
	if err != nil {
		return nil, err
	}
	if src, _ := s.Get(ctx, in.SourceCheckpointID); src != nil {
		root.Label = src.Label
	}
	return root, nil
}

// MergingInstances is a MemoryInstanceStore whose Upsert merges optional
// fields instead of replacing the record.
type MergingInstances struct{ *cairn.MemoryInstanceStore }

// Upsert implements cairn.InstanceStore.
func (s MergingInstances) Upsert(ctx context.Context, rec cairn.InstanceRecord) error {
	if old, _ := s.Get(ctx, rec.Key); old != nil {
		if rec.LatestSnapshotID == "" {
			rec.LatestSnapshotID = old.LatestSnapshotID
		}
		if rec.LatestRunID == "" {
			rec.LatestRunID = old.LatestRunID
		}
	}
	return s.MemoryInstanceStore.Upsert(ctx, rec)
}

// ImpatientWait is a MemoryStore whose WaitBlobs returns at once, even while
// a key is in GCDeleting.
type ImpatientWait struct{ *cairn.MemoryStore }

// WaitBlobs implements cairn.BlobClaimer.
func (s ImpatientWait) WaitBlobs(ctx context.Context, keys []string) error {
	return cairn.CheckBlobKeys(keys)
}

// NoBinding is a MemoryStore that implements cairn.Bound but never reports
// its Options.Binding: it would write to buckets without recording a
// binding, and a sweep of another store on the bucket could not refuse.
type NoBinding struct{ *cairn.MemoryStore }

// BucketBinding implements cairn.Bound: none.
func (s NoBinding) BucketBinding(context.Context) (cairn.Binding, bool, error) {
	return cairn.Binding{}, false, nil
}

// SameBinding is a MemoryStore that reports one binding whatever its
// Options.Binding: every store would look like every other to a sweep.
type SameBinding struct{ *cairn.MemoryStore }

// BucketBinding implements cairn.Bound: always the same.
func (s SameBinding) BucketBinding(context.Context) (cairn.Binding, bool, error) {
	return cairn.Binding{Cluster: "memory", Prefix: "shared/"}, true, nil
}
