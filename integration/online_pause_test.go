package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
)

// TestSweeperPausedAfterBeginningADelete stops a sweeper run with SIGSTOP
// right after it moved a garbage key to the deleting state and before its
// delete request reached the bucket, keeps it stopped until the next run has
// taken the lock and settled the key (deleted it, removed the record), lets a
// writer claim the key, upload it again and append a checkpoint that
// references it, and then continues the stopped run. The stopped run lost its
// lock, so it must change nothing, and the checkpoint's blob must still be
// there.
//
// The S3 delete is the one write of a run that carries no lock guard (S3
// takes no fencing token), so what protects the blob is time: a batch's
// delete must start and end within a third of the lock's TTL of its move to
// deleting (sweep.Options.DeleteWithin), and the lock cannot pass to the next
// run sooner than two thirds of the TTL after that move. Without that bound
// the woken run deletes the blob the head references. A check of the time
// before the request is not enough: the run is stopped right after its move
// to deleting, and a request whose send begins before the stop can still be
// written when it wakes; the bucket's send deadline (bucket.WithSendDeadline)
// refuses every write on the request's connection past the bound.
func TestSweeperPausedAfterBeginningADelete(t *testing.T) {
	cluster := startCluster(t)
	bin := buildSweeper(t)
	e := newOnlineEnv(t, cluster, bin, "cairn-paused-delete/", true)
	e.pausedDeleteProbe(t)
}

func (e *onlineEnv) pausedDeleteProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cli, err := e.cluster.Client(e.cluster.Endpoints()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	store, err := etcdstore.New(cli, e.prefix, etcdstore.Options{Options: cairn.Options{LeaseDuration: onlineLease, RenewAfter: onlineLease / 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const thread = "probe"
	turn := 0
	// capture appends a checkpoint of the given blobs, claimed and uploaded.
	capture := func(blobs ...bucket.Blob) (bucket.UploadResult, error) {
		turn++
		lease, err := store.AcquireWriter(ctx, thread)
		if err != nil {
			return bucket.UploadResult{}, err
		}
		defer lease.Release(ctx)
		head, err := store.GetHead(ctx, thread)
		if err != nil {
			return bucket.UploadResult{}, err
		}
		cp := cairn.Checkpoint{ID: fmt.Sprintf("probe-%d", turn), ThreadID: thread, ParentCheckpointID: head,
			CreatedAt: float64(time.Now().UnixMilli()), Reason: cairn.ReasonAutomatic, Conversation: []byte(`[]`)}
		for i, b := range blobs {
			cp.Files = append(cp.Files, cairn.Entry{Path: fmt.Sprintf("f%d.txt", i), Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(b.Data))})
		}
		up, err := bucket.UploadBlobs(ctx, store, lease.Writer, e.bkt, blobs)
		if err != nil {
			return up, err
		}
		_, err = store.Append(ctx, cairn.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: lease.Writer})
		return up, err
	}
	// The store is not empty: a checkpoint that references one blob.
	if _, err := capture(e.pool[0]); err != nil {
		t.Fatal(err)
	}
	args, env := e.sweeperArgs("--lock-timeout=20s", "--keep=0")
	for attempt := 1; attempt <= 30; attempt++ {
		garbage := bucket.FileBlob(fmt.Appendf(nil, "garbage of attempt %d\n", attempt))
		if _, err := bucket.PutBlobs(ctx, e.bkt, []bucket.Blob{garbage}); err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Get(ctx, "cairn-probe")
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithCancel(ctx)
		watch := cli.Watch(wctx, string(e.layout.GCRecords()), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		a, err := startSweeperProc(fmt.Sprintf("attempt-%d-stopped", attempt), e.bin, args, env, e, nil)
		if err != nil {
			t.Fatal(err)
		}
		stopped := make(chan time.Time, 1)
		go func() {
			for resp := range watch {
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypePut && len(ev.Kv.Value) > 0 && ev.Kv.Value[0] == 'd' {
						a.signal(syscall.SIGSTOP)
						stopped <- time.Now()
						return
					}
				}
			}
		}()
		var at time.Time
		select {
		case at = <-stopped:
		case <-a.done:
		}
		wcancel()
		if at.IsZero() {
			t.Logf("attempt %d: the run ended (exit %d) before it began a delete", attempt, a.code)
			continue
		}
		// Did the delete request leave before the stop? A request already
		// sent may still be on its way through a loaded S3 server: wait long
		// enough that it has landed (300 ms once was not, at load 6), or the
		// probe would take a delete that was sent for one that was not.
		time.Sleep(time.Second)
		if _, err := e.bkt.Head(ctx, garbage.Key); err != nil {
			a.signal(syscall.SIGCONT)
			code, _ := a.wait(time.Minute)
			t.Logf("attempt %d: stopped too late, the delete had been sent (run exit %d)", attempt, code)
			continue
		}
		t.Logf("attempt %d: the run is stopped with %s deleting and its bytes still in the bucket", attempt, garbage.Key)
		// The next run takes the lock once the stopped one's session has
		// expired, and settles the key.
		b, err := startSweeperProc(fmt.Sprintf("attempt-%d-next", attempt), e.bin, args, env, e, nil)
		if err != nil {
			t.Fatal(err)
		}
		codeB, _ := b.wait(time.Minute)
		if codeB != 0 {
			a.kill()
			t.Fatalf("the next run exited %d; its log:\n%s", codeB, joinLines(b.log()))
		}
		_, deleting, err := e.gcSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the next run settled the key after %v: %s; records deleting now: %d",
			time.Since(at).Round(time.Millisecond), lastLine(b.logged(`"msg":"batch deleted"`)), len(deleting))
		// A writer claims the key, finds it gone, uploads it, appends.
		up, err := capture(e.pool[0], garbage)
		if err != nil {
			a.kill()
			t.Fatalf("capture that reuses the key: %v", err)
		}
		t.Logf("a writer claimed the key and appended a checkpoint that references it (uploaded %d, present %d)", len(up.Uploaded), len(up.Present))
		if _, err := bucket.ReadBlob(ctx, e.bkt, garbage.Key); err != nil {
			t.Fatalf("the blob is missing right after the append: %v", err)
		}
		stoppedFor := time.Since(at)
		a.signal(syscall.SIGCONT)
		codeA, _ := a.wait(time.Minute)
		t.Logf("the stopped run, continued after %v, exited %d: %s", stoppedFor.Round(time.Millisecond), codeA, lastLine(a.logged(`"phase":"summary"`)))
		if _, err := bucket.ReadBlob(ctx, e.bkt, garbage.Key); err != nil {
			t.Errorf("LOSS: the head references %s, which a sweeper run that had lost its lock deleted after it woke up: %v", garbage.Key, err)
		}
		return
	}
	t.Fatalf("in 30 attempts no run was stopped between beginning a delete and sending it")
}

func lastLine(lines []string) string {
	if len(lines) == 0 {
		return "(none)"
	}
	return lines[len(lines)-1]
}

func joinLines(lines []string) string { return strings.Join(lines, "\n") }
