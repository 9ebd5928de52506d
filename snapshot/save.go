package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/cairnstore/cairn"
)

// defaultStaleHeadRetries is SaveInput.StaleHeadRetries when it is 0.
const defaultStaleHeadRetries = 3

// SaveInput is the argument of Save.
type SaveInput struct {
	// ThreadID is the thread to append to. Required.
	ThreadID string
	// Dir is the directory to capture. When it is "", FS is captured.
	Dir string
	FS  fs.FS
	// Artifacts are captured with the files.
	Artifacts []ArtifactSource
	// Conversation is the checkpoint's transcript. nil takes the thread's
	// transcript when the store is a cairn.Forker, and JSON null otherwise.
	Conversation json.RawMessage
	// ID is the new checkpoint's id; "" selects a random UUID.
	ID string
	// Reason defaults to cairn.ReasonNamed, as upstream's save.
	Reason string
	// Label and SourceRunID are stored as given.
	Label       string
	SourceRunID string
	// CreatedAt is in milliseconds; 0 selects the current time.
	CreatedAt float64
	// Options tune the capture.
	Options Options
	// StaleHeadRetries bounds how many times Save re-reads the head and
	// appends again after cairn.ErrStaleHead or cairn.ErrParentMismatch; 0
	// selects 3, and a negative value none.
	StaleHeadRetries int
}

// SaveResult is the result of a successful Save.
type SaveResult struct {
	Checkpoint cairn.Checkpoint
	Stats      CaptureStats
	// Attempts is the number of appends tried, 1 unless the head moved.
	Attempts int
}

// Save is upstream's snapshots.save: it acquires the thread's writer lease
// (and renews it every RenewAfter while it works), captures Dir or FS with
// the artifacts under that lease with the head's checkpoint as the parent
// (Uploader.Parent), and appends the checkpoint with the head as parent and
// expected head. On cairn.ErrStaleHead or cairn.ErrParentMismatch it reads
// the head again and appends again, at most StaleHeadRetries more times; when
// the head changed it first captures again on the new head, since the
// capture relied on the old head's references. It releases the lease once,
// whatever happens.
//
// It returns an *Error matching ErrClaimsRequired when st is not a
// cairn.BlobClaimer, ErrInvalidWorkspace when neither Dir nor FS is given;
// the store's errors as they are (cairn.ErrWriterConflict when another writer
// holds the lease, cairn.ErrInvalidID, cairn.ErrWriterLost when the lease was
// lost; a renewal failure wins over the error it caused); the errors of
// CaptureDir; and cairn.ErrStaleHead when the retries ran out.
func Save(ctx context.Context, st cairn.Store, b Blobs, in SaveInput) (*SaveResult, error) {
	claimer, ok := st.(cairn.BlobClaimer)
	if !ok {
		return nil, &Error{Code: CodeClaimsRequired, Message: fmt.Sprintf("the store %T has no online sweep protocol (cairn.BlobClaimer)", st)}
	}
	if in.Dir == "" && in.FS == nil {
		return nil, &Error{Code: CodeInvalidWorkspace, Message: "SaveInput needs a Dir or an FS"}
	}
	lease, err := st.AcquireWriter(ctx, in.ThreadID)
	if err != nil {
		return nil, err
	}
	defer lease.Release(context.WithoutCancel(ctx))
	wctx, stop := keepRenewed(ctx, lease)
	res, err := save(wctx, st, claimer, b, lease.Writer, in)
	if rerr := stop(); rerr != nil {
		return nil, fmt.Errorf("snapshot: save: the writer lease was lost while saving: %w", rerr)
	}
	return res, err
}

func save(ctx context.Context, st cairn.Store, claimer cairn.BlobClaimer, b Blobs, w cairn.Writer, in SaveInput) (*SaveResult, error) {
	conv := in.Conversation
	if conv == nil {
		if fk, ok := st.(cairn.Forker); ok {
			var err error
			if conv, err = fk.Transcripts().LoadThread(ctx, in.ThreadID); err != nil {
				return nil, err
			}
		}
	}
	cp := cairn.Checkpoint{
		ID:           in.ID,
		ThreadID:     in.ThreadID,
		CreatedAt:    in.CreatedAt,
		Reason:       in.Reason,
		Label:        in.Label,
		SourceRunID:  in.SourceRunID,
		Conversation: conv,
	}
	if cp.ID == "" {
		cp.ID = newUUID()
	}
	if cp.Reason == "" {
		cp.Reason = cairn.ReasonNamed
	}
	if cp.CreatedAt == 0 {
		cp.CreatedAt = nowMillis()
	}
	retries := in.StaleHeadRetries
	if retries == 0 {
		retries = defaultStaleHeadRetries
	}
	var m *Manifest
	captured := "\x00" // the head the capture relied on; never a valid id
	for attempt := 1; ; attempt++ {
		head, err := st.GetHead(ctx, in.ThreadID)
		if err != nil {
			return nil, err
		}
		if head != captured {
			// The capture relies on the head's references: capture again
			// on a new head (with the stat cache, only the claims and the
			// new blobs cost anything).
			if m, err = captureOn(ctx, st, claimer, b, w, head, in); err != nil {
				return nil, err
			}
			captured = head
		}
		cp.ParentCheckpointID = head
		cp.Files, cp.Artifacts = m.Files, m.Artifacts
		_, err = st.Append(ctx, cairn.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: w})
		if err == nil {
			return &SaveResult{Checkpoint: cp, Stats: m.Stats, Attempts: attempt}, nil
		}
		if (errors.Is(err, cairn.ErrStaleHead) || errors.Is(err, cairn.ErrParentMismatch)) && attempt <= retries {
			continue
		}
		return nil, err
	}
}

// captureOn captures the input with head's checkpoint as the parent.
func captureOn(ctx context.Context, st cairn.Store, claimer cairn.BlobClaimer, b Blobs, w cairn.Writer, head string, in SaveInput) (*Manifest, error) {
	up := Uploader{Bucket: b, Claimer: claimer, Writer: w}
	if head != "" {
		parent, err := st.Get(ctx, head)
		if err != nil {
			return nil, err
		}
		up.Parent = parent // nil when the head went meanwhile: claim everything
	}
	if in.Dir != "" {
		return CaptureDir(ctx, in.Dir, in.Artifacts, up, &in.Options)
	}
	return CaptureFS(ctx, in.FS, in.Artifacts, up, &in.Options)
}

// keepRenewed renews the lease every RenewAfter until stop is called, and
// ends the returned context when a renewal fails. stop returns the renewal
// error, if any.
func keepRenewed(ctx context.Context, lease *cairn.Lease) (context.Context, func() error) {
	wctx, cancel := context.WithCancelCause(ctx)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	var renewErr error
	every := lease.RenewAfter
	if every <= 0 {
		every = time.Second
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-wctx.Done():
				return
			case <-t.C:
				if _, err := lease.Renew(wctx); err != nil {
					if wctx.Err() == nil {
						renewErr = err
						cancel(err)
					}
					return
				}
			}
		}
	}()
	return wctx, func() error {
		close(quit)
		wg.Wait()
		cancel(nil)
		return renewErr
	}
}

// ForkInput is the argument of Fork.
type ForkInput struct {
	// SourceCheckpointID is the checkpoint to fork. Required.
	SourceCheckpointID string
	// SourceThreadID is its thread; "" reads it from the checkpoint.
	SourceThreadID string
	// DestinationThreadID is the new, empty thread. Required.
	DestinationThreadID string
	// DestinationCheckpointID is the new root's id; "" selects a random UUID.
	DestinationCheckpointID string
	// CreatedAt is in milliseconds; 0 selects the current time.
	CreatedAt float64
}

// Fork is upstream's snapshots.fork: it acquires the destination thread's
// writer lease (not renewed: a fork is one request), calls
// cairn.Forker.ForkFromCheckpoint, releases the lease, and returns the new
// root.
//
// It returns an *Error matching ErrMissingCheckpoint when SourceThreadID is
// "" and the source does not exist, ErrForkUnavailable when st is not a
// cairn.Forker (after acquiring and releasing the lease, as upstream does),
// and the store's errors as they are (cairn.ErrInvalidID,
// cairn.ErrWriterConflict, cairn.ErrForkDestinationNotEmpty,
// cairn.ErrForkSourceNotFound, ...).
func Fork(ctx context.Context, st cairn.Store, in ForkInput) (*cairn.Checkpoint, error) {
	if in.SourceThreadID == "" {
		src, err := Get(ctx, st, in.SourceCheckpointID)
		if err != nil {
			return nil, err
		}
		in.SourceThreadID = src.ThreadID
	}
	lease, err := st.AcquireWriter(ctx, in.DestinationThreadID)
	if err != nil {
		return nil, err
	}
	defer lease.Release(context.WithoutCancel(ctx))
	fk, ok := st.(cairn.Forker)
	if !ok {
		return nil, &Error{Code: CodeForkUnavailable, Message: fmt.Sprintf("the store %T cannot fork (cairn.Forker)", st)}
	}
	if in.DestinationCheckpointID == "" {
		in.DestinationCheckpointID = newUUID()
	}
	if in.CreatedAt == 0 {
		in.CreatedAt = nowMillis()
	}
	return fk.ForkFromCheckpoint(ctx, cairn.ForkInput{
		SourceThreadID:          in.SourceThreadID,
		SourceCheckpointID:      in.SourceCheckpointID,
		DestinationThreadID:     in.DestinationThreadID,
		DestinationCheckpointID: in.DestinationCheckpointID,
		CreatedAt:               in.CreatedAt,
		Writer:                  lease.Writer,
	})
}

func nowMillis() float64 { return float64(time.Now().UnixMicro()) / 1000 }

// newUUID returns a random (version 4) UUID, as upstream's randomUUID().
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
