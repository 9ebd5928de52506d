package server_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/embedetcd"
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
	conv, _ := json.Marshal([]map[string]string{{"role": "assistant", "content": strings.Repeat("lorem ipsum ", 20000)}})
	head := ""
	for i := 0; ; i++ {
		id := fmt.Sprintf("c%d", i)
		_, err := a.Append(ctx, cairn.AppendInput{Checkpoint: cairn.Checkpoint{ID: id, ThreadID: "t", ParentCheckpointID: head,
			Reason: cairn.ReasonAutomatic, Conversation: conv}, ExpectedHeadID: head, Writer: lease.Writer})
		if err == nil {
			head = id
			if i > 1000 {
				t.Fatal("the quota was never reached")
			}
			continue
		}
		var ue *remote.UnknownOutcomeError
		if errors.As(err, &ue) || !errors.Is(err, cairn.ErrStoreFull) || connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Fatalf("append %d: %v (code %q, connect %v), want STORE_FULL as resource_exhausted", i, err, cairn.CodeOf(err), connect.CodeOf(err))
		}
		break
	}
	if h, err := a.GetHead(ctx, "t"); err != nil || h != head {
		t.Fatalf("head %q, %v under the alarm; want %q", h, err, head)
	}
	if _, err := a.AcquireWriter(ctx, "other"); !errors.Is(err, cairn.ErrStoreFull) {
		t.Fatalf("AcquireWriter under the alarm: %v", err)
	}
}
