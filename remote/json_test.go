package remote_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/server/servertest"
	"github.com/cairnstore/cairn/remote"
)

// TestProtocols: the client works over the Connect protocol with JSON (the
// form fetch and curl use) and over gRPC (HTTP/2): a checkpoint goes in and
// comes back, and a contract error keeps its code. JSON cannot carry text
// that is not UTF-8, which the contract lets paths, names and labels hold
// (and ids, to reject them): such text needs the binary form.
func TestProtocols(t *testing.T) {
	env := servertest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		name string
		opts []connect.ClientOption
	}{
		{"ConnectJSON", []connect.ClientOption{connect.WithProtoJSON()}},
		{"GRPC", []connect.ClientOption{connect.WithGRPC()}},
		{"GRPCWeb", []connect.ClientOption{connect.WithGRPCWeb()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := remote.New(env.URL, remote.Options{Token: servertest.TokenA, HTTPClient: env.HTTP.Client(), ClientOptions: c.opts})
			thread := "thread-" + c.name
			l, err := s.AcquireWriter(ctx, thread)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			in := cairn.Checkpoint{
				ID: "c-" + c.name, ThreadID: thread, CreatedAt: 1.25, Reason: cairn.ReasonNamed, Label: "é",
				Files:        []cairn.Entry{{Path: "dir", Kind: cairn.KindDir}, {Path: "dir/a", Kind: cairn.KindFile, BlobKey: "sandbox-files/sha256/" + hex64(7), Size: 9}},
				Conversation: []byte(`{"m": [1, 2.50, "x"]}`),
			}
			if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: in, Writer: l.Writer}); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, in.ID)
			if err != nil || got == nil {
				t.Fatalf("Get: %v, %v", got, err)
			}
			if string(got.Conversation) != string(in.Conversation) || got.Label != in.Label || len(got.Files) != 2 || got.Files[1] != in.Files[1] {
				t.Fatalf("got %v %q, want %v %q", got, got.Conversation, in, in.Conversation)
			}
			if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: in, Writer: l.Writer}); !errors.Is(err, cairn.ErrDuplicateID) {
				t.Fatalf("second Append: %v, want DUPLICATE_ID", err)
			}
		})
	}
}

func hex64(i int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 64)
	for j := range b {
		b[j] = digits[(i+j)%16]
	}
	return string(b)
}
