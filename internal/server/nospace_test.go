package server_test

import (
	"errors"
	"testing"

	"connectrpc.com/connect"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/fulltest"
	"github.com/cairnstore/cairn/internal/server"
	"github.com/cairnstore/cairn/internal/server/servertest"
	"github.com/cairnstore/cairn/remote"
)

// TestStoreFull fills cairnd's etcd (a small quota) through the Go client
// until an append is refused: the refusal must be resource_exhausted with
// the code SANDBOX_SNAPSHOT_STORE_FULL, not an unknown outcome, every
// acknowledged append must be there, and reads must keep working.
func TestStoreFull(t *testing.T) {
	_, cli := embedetcd.ForTestWith(t, embedetcd.Config{QuotaBackendBytes: 8 << 20})
	// Bodies in etcd (no object store), so that appends fill it.
	env := servertest.StartReplica(t, &servertest.Env{Etcd: cli}, func(c *server.Config) { c.Store.Objects = nil })
	ctx := testCtx(t)
	a := remote.New(env.URL, remote.Options{Token: servertest.TokenA})
	lease, err := a.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	conv := fulltest.Conversation(240_000)
	acked := fulltest.Fill(t, ctx, a, []cairn.Writer{lease.Writer}, func(n int, thread, parent string) cairn.Checkpoint {
		return fulltest.Checkpoint(fulltest.ID(thread, n), thread, parent, conv)
	})
	head := acked["t"][len(acked["t"])-1].ID
	// The refusal reached the client as resource_exhausted.
	_, err = a.Append(ctx, cairn.AppendInput{Checkpoint: fulltest.Checkpoint("more", "t", head, conv), ExpectedHeadID: head, Writer: lease.Writer})
	if !errors.Is(err, cairn.ErrStoreFull) || connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("append under the alarm: %v (code %q, connect %v), want STORE_FULL as resource_exhausted", err, cairn.CodeOf(err), connect.CodeOf(err))
	}
	if h, err := a.GetHead(ctx, "t"); err != nil || h != head {
		t.Fatalf("head %q, %v under the alarm; want %q", h, err, head)
	}
	if _, err := a.AcquireWriter(ctx, "other"); !errors.Is(err, cairn.ErrStoreFull) {
		t.Fatalf("AcquireWriter under the alarm: %v", err)
	}
}
