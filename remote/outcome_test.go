package remote_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/server/servertest"
	"github.com/cairnstore/cairn/remote"
)

// loseAnswers sends every request and then reports a failure instead of
// the response, as a connection lost after the server answered would.
type loseAnswers struct{ next http.RoundTripper }

func (l loseAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := l.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return nil, errors.New("connection reset after the request was sent")
}

// TestUnknownOutcome: a write whose answer is lost is reported as an
// unknown outcome, never as a failure that changed nothing (here it did
// land), and a read's transport error is an ordinary error.
func TestUnknownOutcome(t *testing.T) {
	env := servertest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	good := remote.New(env.URL, remote.Options{Token: servertest.TokenA})
	lossy := remote.New(env.URL, remote.Options{Token: servertest.TokenA, HTTPClient: &http.Client{Transport: loseAnswers{http.DefaultTransport}}})

	l, err := good.AcquireWriter(ctx, "thread")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	c := cairn.Checkpoint{ID: "c1", ThreadID: "thread", CreatedAt: 1, Reason: cairn.ReasonAutomatic}
	_, err = lossy.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: l.Writer})
	var uo *remote.UnknownOutcomeError
	if !errors.As(err, &uo) || uo.Op != "append" {
		t.Fatalf("Append whose answer was lost: %v, want *remote.UnknownOutcomeError of append", err)
	}
	if head, err := good.GetHead(ctx, "thread"); err != nil || head != "c1" {
		t.Fatalf("head after the lost answer: %q, %v; want c1 (the append landed)", head, err)
	}
	// Repeating the write with the same id tells what happened.
	if _, err := good.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: l.Writer}); !errors.Is(err, cairn.ErrDuplicateID) {
		t.Fatalf("repeated Append: %v, want DUPLICATE_ID", err)
	}

	_, err = lossy.GetHead(ctx, "thread")
	if err == nil || errors.As(err, &uo) {
		t.Fatalf("GetHead whose answer was lost: %v, want a plain error", err)
	}
}
