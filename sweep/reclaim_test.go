package sweep_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/sweep"
)

// TestDeadClaimIsReclaimed measures liveness under the rule that no clock
// decides a delete: a blob claimed by a lease whose holder stops (it never
// appends, renews or releases, and nobody takes the thread over) is kept while
// the lease's record exists, and deleted once etcd's leader has ended the
// record's lease: within the grace (here zero) + the record's TTL + one sweep
// interval. The store's clock stands still the whole time, so only etcd's
// timer can end the claim. The delay is logged; the bound it is checked
// against is generous (a liveness check, not a performance figure).
func TestDeadClaimIsReclaimed(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for an etcd lease to expire")
	}
	_, cli := embedetcd.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	frozen := func() float64 { return 4e12 } // the writer's and the sweeper's clock, past every upload
	const lease = 2 * time.Second
	open := func() *etcdstore.Store {
		s, err := etcdstore.New(cli, "reclaim/", etcdstore.Options{Options: cairn.Options{Now: frozen, LeaseDuration: lease, RenewAfter: lease / 3}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	writer, sweeper := open(), open()
	blobs := bucket.NewMemory(nil)
	b := bucket.FileBlob([]byte("claimed, never used"))
	l, err := writer.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if busy, err := writer.ClaimBlobs(ctx, l.Writer, []string{b.Key}); err != nil || len(busy) != 0 {
		t.Fatalf("ClaimBlobs: %v, %v", busy, err)
	}
	if err := bucket.BindStore(ctx, writer, blobs); err != nil {
		t.Fatal(err)
	}
	if err := blobs.Put(ctx, b.Key, b.Data); err != nil {
		t.Fatal(err)
	}
	abandoned := time.Now()
	const interval = 500 * time.Millisecond
	var kept int
	for {
		rep, err := sweep.Sweep(ctx, sweeper, blobs, sweep.Options{Now: func() time.Time { return time.UnixMilli(int64(frozen())) }})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(rep.Deleted, b.Key) {
			break
		}
		if rep.Claimed != 1 {
			t.Fatalf("a sweep reported %d claimed keys and did not delete the blob; want it claimed until it is deleted", rep.Claimed)
		}
		kept++
		if time.Since(abandoned) > time.Minute {
			t.Fatalf("the claim of an abandoned lease still protects its blob after %v", time.Since(abandoned))
		}
		time.Sleep(interval)
	}
	delay := time.Since(abandoned)
	if delay < lease {
		t.Errorf("the blob was deleted %v after its claim, before the record's TTL of %v could end it", delay, lease)
	}
	t.Logf("a dead claim was reclaimed %v after its holder stopped (grace 0, record TTL %v, sweep interval %v, %d sweeps kept it)",
		delay.Round(10*time.Millisecond), cairn.RecordTTL(lease), interval, kept)
	if _, err := writer.Append(ctx, cairn.AppendInput{Writer: l.Writer, Checkpoint: cairn.Checkpoint{
		ID: "c1", ThreadID: "t", CreatedAt: 1, Reason: cairn.ReasonAutomatic, Conversation: []byte("[]"),
		Files: []cairn.Entry{{Path: "f", Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(b.Data))}},
	}}); !errors.Is(err, cairn.ErrWriterLost) {
		t.Fatalf("Append of the deleted blob by the ended lease = %v; want WRITER_LOST", err)
	}
}
