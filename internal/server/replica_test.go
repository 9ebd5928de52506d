package server_test

import (
	"errors"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	"github.com/cairnstore/cairn"
	cairnv1 "github.com/cairnstore/cairn/gen/cairn/v1"
	"github.com/cairnstore/cairn/gen/cairn/v1/cairnv1connect"
	"github.com/cairnstore/cairn/internal/server/servertest"
	"github.com/cairnstore/cairn/internal/wire"
	"github.com/cairnstore/cairn/remote"
)

// TestLeaseAcrossReplicas: a lease handed out by one replica is renewed,
// used and released through another replica of the same service (a load
// balancer sends a client's calls anywhere), and another tenant's token
// cannot renew it there.
func TestLeaseAcrossReplicas(t *testing.T) {
	one := servertest.Start(t, nil)
	two := servertest.StartReplica(t, one, nil)
	ctx := testCtx(t)
	a1 := remote.New(one.URL, remote.Options{Token: servertest.TokenA})
	a2 := remote.New(two.URL, remote.Options{Token: servertest.TokenA})
	raw := cairnv1connect.NewCheckpointServiceClient(http.DefaultClient, two.URL)
	call := func(token string, w cairn.Writer) (*cairnv1.RenewWriterResponse, error) {
		req := connect.NewRequest(&cairnv1.RenewWriterRequest{Writer: wire.ToWriter(w)})
		req.Header().Set("Authorization", "Bearer "+token)
		resp, err := raw.RenewWriter(ctx, req)
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}

	l, err := a1.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call(servertest.TokenB, l.Writer); !lost(err) {
		t.Fatalf("renew by tenant B through replica two: %v, want WRITER_LOST", err)
	}
	resp, err := call(servertest.TokenA, l.Writer)
	if err != nil {
		t.Fatalf("renew through replica two: %v", err)
	}
	if resp.ExpiresAt < l.ExpiresAt() {
		t.Fatalf("renewed expiry %v before the acquired one %v", resp.ExpiresAt, l.ExpiresAt())
	}
	c := cairn.Checkpoint{ID: "c1", ThreadID: "t", CreatedAt: 1, Reason: cairn.ReasonAutomatic}
	if _, err := a2.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: l.Writer}); err != nil {
		t.Fatalf("append through replica two: %v", err)
	}
	rel := connect.NewRequest(&cairnv1.ReleaseWriterRequest{Writer: wire.ToWriter(l.Writer)})
	rel.Header().Set("Authorization", "Bearer "+servertest.TokenA)
	if _, err := raw.ReleaseWriter(ctx, rel); err != nil {
		t.Fatalf("release through replica two: %v", err)
	}
	if _, err := l.Renew(ctx); !errors.Is(err, cairn.ErrWriterLost) {
		t.Fatalf("renew through replica one after the release through two: %v, want WRITER_LOST", err)
	}
	if _, err := call(servertest.TokenA, l.Writer); !lost(err) {
		t.Fatalf("renew through replica two after its release: %v, want WRITER_LOST", err)
	}
	// A release of a writer nobody holds succeeds and changes nothing.
	if _, err := raw.ReleaseWriter(ctx, rel); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if _, err := a2.AcquireWriter(ctx, "t"); err != nil {
		t.Fatalf("acquire after the release: %v", err)
	}
}

// lost reports whether err is a Connect error carrying WRITER_LOST.
func lost(err error) bool {
	out, _ := wire.FromConnect(err, false)
	return errors.Is(out, cairn.ErrWriterLost)
}
