// Package fulltest fills a store's etcd through the store until etcd refuses
// an append for space (its NOSPACE alarm), for the tests of the way out of
// it: the store's own, the sweeper's, cairnd's and cairn doctor's.
package fulltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/remote"
)

// Conversation returns a conversation of about n bytes.
func Conversation(n int) json.RawMessage {
	b, _ := json.Marshal([]map[string]string{{"role": "assistant", "content": strings.Repeat("lorem ipsum ", n/12)}})
	return b
}

// Checkpoint returns checkpoint id of thread on parent, with conv as its
// conversation and no file.
func Checkpoint(id, thread, parent string, conv json.RawMessage) cairn.Checkpoint {
	return cairn.Checkpoint{ID: id, ThreadID: thread, ParentCheckpointID: parent, Reason: cairn.ReasonAutomatic, Conversation: conv}
}

// Fill appends, to the threads of writers in turn, each on its thread's last
// acknowledged checkpoint, the checkpoints make returns (n counts the
// appends from 0), until an append fails. That failure must be
// cairn.ErrStoreFull and not an unknown outcome, or the test fails; so must
// 2,000 appends without one. It returns the acknowledged checkpoints of
// each thread, oldest first.
func Fill(t testing.TB, ctx context.Context, s cairn.Store, writers []cairn.Writer, make func(n int, thread, parent string) cairn.Checkpoint) map[string][]cairn.Checkpoint {
	t.Helper()
	acked := map[string][]cairn.Checkpoint{}
	for n := 0; n < 2000; n++ {
		w := writers[n%len(writers)]
		var parent string
		if a := acked[w.ThreadID]; len(a) > 0 {
			parent = a[len(a)-1].ID
		}
		c := make(n, w.ThreadID, parent)
		_, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, ExpectedHeadID: parent, Writer: w})
		if err == nil {
			acked[w.ThreadID] = append(acked[w.ThreadID], c)
			continue
		}
		var local *etcdstore.UnknownOutcomeError
		var remoteUnknown *remote.UnknownOutcomeError
		if errors.As(err, &local) || errors.As(err, &remoteUnknown) || !errors.Is(err, cairn.ErrStoreFull) {
			t.Fatalf("append %d refused with %v (code %q), want ErrStoreFull and no unknown outcome", n, err, cairn.CodeOf(err))
		}
		return acked
	}
	t.Fatal("etcd took 2,000 appends without refusing one: the quota was never reached")
	return nil
}

// ID names the n-th checkpoint of thread.
func ID(thread string, n int) string { return fmt.Sprintf("%s%03d", thread, n) }
