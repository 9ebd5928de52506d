package remote_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/server"
	"github.com/cairnstore/cairn/internal/server/servertest"
	"github.com/cairnstore/cairn/remote"
)

// TestOversizeIdentifiers: identifiers and tokens larger than the server
// reads for their procedure (server.SmallRequestBytes) get the contract's
// code, as from every other store, not the server's refusal of the request.
func TestOversizeIdentifiers(t *testing.T) {
	env := servertest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s := remote.New(env.URL, remote.Options{Token: servertest.TokenA})
	l, err := s.AcquireWriter(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	huge := strings.Repeat("x", 2*server.SmallRequestBytes)
	bad := l.Writer
	bad.OwnerToken = huge
	for _, c := range []struct {
		name string
		want error
		op   func() error
	}{
		{"Get", cairn.ErrInvalidID, func() error { _, err := s.Get(ctx, huge); return err }},
		{"List", cairn.ErrInvalidID, func() error { _, err := s.List(ctx, huge); return err }},
		{"GetHead", cairn.ErrInvalidID, func() error { _, err := s.GetHead(ctx, huge); return err }},
		{"AcquireWriter", cairn.ErrInvalidID, func() error { _, err := s.AcquireWriter(ctx, huge); return err }},
		{"DeleteHead", cairn.ErrInvalidID, func() error {
			return s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "main", CheckpointID: huge, Writer: l.Writer})
		}},
		{"DeleteHeadToken", cairn.ErrWriterLost, func() error {
			return s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "main", CheckpointID: "c", Writer: bad})
		}},
		{"DeleteCheckpointsToken", cairn.ErrWriterLost, func() error {
			_, err := s.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: "main", Keep: 1, Writer: bad})
			return err
		}},
		{"Fork", cairn.ErrInvalidID, func() error {
			_, err := s.ForkFromCheckpoint(ctx, cairn.ForkInput{SourceThreadID: "main", SourceCheckpointID: huge, DestinationThreadID: "d", DestinationCheckpointID: "f", Writer: l.Writer})
			return err
		}},
		{"LoadThread", cairn.ErrInvalidID, func() error { _, err := s.Transcripts().LoadThread(ctx, huge); return err }},
		{"GetInstance", cairn.ErrInvalidID, func() error { _, err := s.Instances().Get(ctx, huge); return err }},
		{"UpsertInstance", cairn.ErrInvalidEntry, func() error { return s.Instances().Upsert(ctx, cairn.InstanceRecord{Key: "k", Provider: huge}) }},
		{"DeleteInstance", cairn.ErrInvalidID, func() error { return s.Instances().Delete(ctx, huge) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.op(); !errors.Is(err, c.want) {
				t.Errorf("got %.200v, want %s", err, cairn.CodeOf(c.want))
			}
		})
	}
}
