package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/integration/internal/lincheck"
	"github.com/cairnstore/cairn/internal/skewclock"
	"github.com/cairnstore/cairn/keys"
)

// The workload: several logical clients per thread race for the thread's
// writer lease and, holding it, append, delete the head, prune and renew;
// some stop renewing and keep writing with a lease that expires and is taken
// over; readers read every thread; forkers fork a frozen source thread into
// fresh threads and write there. Every store call is recorded for the
// linearizability check and tagged for the fence check.

// Lease timings of the workload's stores, on the logical clock. The etcd
// lease behind the writer records (fence.Manager) gets a TTL of the same
// number of real seconds, far longer than any fault, so writer records end
// only by the contract's rules: release, or takeover after expiry on the
// logical clock.
const (
	leaseDuration = 60 * time.Second
	renewAfter    = 20 * time.Second
	clockStart    = 1_000_000.0
	// clockStep is how far the logical clock moves every clockTick: a lease
	// lasts leaseDuration/clockStep ticks of real time unless renewed.
	clockStep = 5_000.0
	clockTick = 150 * time.Millisecond
)

// logicalClock is the store clock of the workload: milliseconds, moved only
// by advance, shared by every store of the campaign.
type logicalClock struct{ ms atomic.Int64 }

func newLogicalClock() *logicalClock {
	c := &logicalClock{}
	c.ms.Store(int64(clockStart))
	return c
}

func (c *logicalClock) Now() float64       { return float64(c.ms.Load()) }
func (c *logicalClock) advance(ms float64) { c.ms.Add(int64(ms)) }

// run moves the clock every clockTick until ctx ends.
func (c *logicalClock) run(ctx context.Context) {
	t := time.NewTicker(clockTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.advance(clockStep)
		}
	}
}

// campaign holds what the workers of one run share.
type campaign struct {
	t         *testing.T
	prefix    string
	layout    keys.Layout
	clock     *logicalClock
	hist      *lincheck.History
	nonces    *nonceLog
	opTimeout time.Duration
	blobs     []bucket.Blob
	// objects, when set, is the bucket of the stores' body objects: the
	// campaign then runs on the capacity layout (useObjects).
	objects etcdstore.ObjectStore

	clients []*clientv3.Client // one per member, pinned to it

	mu       sync.Mutex
	threads  []string                    // every thread written
	ids      map[string][]string         // thread -> checkpoint ids issued
	appended map[string]cairn.Checkpoint // id -> what was appended
	stores   []*etcdstore.Store
	logs     *logCapture
	errs     []string // findings outside the history (content checks)
	retries  atomic.Int64
	// artifacts, when set, replaces artifactDir for the visualization of
	// an expected violation.
	artifacts string
	// skewed, when set, gives every client a clock of its own (skewClocks).
	skewed bool
	// localReads is etcdstore.Options.LocalReads of the stores created
	// after useLocalReads.
	localReads bool
}

// useLocalReads makes the stores created after it answer Gets from their
// member's state where they can (etcdstore.Options.LocalReads).
func (c *campaign) useLocalReads() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.localReads = true
}

// localReadCounts sums the Gets the campaign's stores answered locally and
// those that fell back.
func (c *campaign) localReadCounts() (served, fellBack int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.stores {
		a, b := s.LocalReadCounts()
		served, fellBack = served+a, fellBack+b
	}
	return served, fellBack
}

// skewClocks gives every client created after it a clock of its own: the
// logical clock, offset by up to ±maxClockOffset and running at a rate within
// 1 ± maxClockRateError of it, as processes in several regions disagree.
// Each operation's history records the reads of its client's own clock,
// which are what its store compared in etcd, so the model stays exact.
func (c *campaign) skewClocks() { c.skewed = true }

// newCampaign prepares a campaign on the given member endpoints: one client
// per member, each with the recording interceptor, and extra interceptors
// (the broken store's) before it.
func newCampaign(t *testing.T, endpoints []string, prefix string, blobs []bucket.Blob, extra ...grpc.UnaryClientInterceptor) *campaign {
	t.Helper()
	layout := keys.NewLayout(prefix)
	c := &campaign{
		t: t, prefix: prefix, layout: layout, clock: newLogicalClock(), hist: lincheck.NewHistory(),
		nonces: newNonceLog(layout), opTimeout: 1500 * time.Millisecond, blobs: blobs,
		ids: map[string][]string{}, appended: map[string]cairn.Checkpoint{}, logs: &logCapture{},
	}
	interceptors := append(append([]grpc.UnaryClientInterceptor{}, extra...), c.nonces.recordNonce)
	for _, ep := range endpoints {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{ep},
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
			DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(interceptors...)},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		c.clients = append(c.clients, cli)
	}
	return c
}

// newStore returns a store of its own (as a separate process would have) on
// the client of a member.
func (c *campaign) newStore(member int) *etcdstore.Store {
	return c.newStoreWith(member, c.clock.Now)
}

// newStoreWith is newStore with the clock now.
func (c *campaign) newStoreWith(member int, now func() float64) *etcdstore.Store {
	s, err := etcdstore.New(c.clients[member%len(c.clients)], c.prefix, etcdstore.Options{
		Options: cairn.Options{Now: now, LeaseDuration: leaseDuration, RenewAfter: renewAfter},
		Logger:  slog.New(c.logs),
		Objects: c.objects, InlineLimit: campaignInlineLimit, LocalReads: c.localReads,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.stores = append(c.stores, s)
	c.mu.Unlock()
	return s
}

// campaignInlineLimit is the stores' InlineLimit on the capacity layout:
// the small checkpoints of the workload stay inline (version 1), the large
// ones (checkpoint) keep their bodies in objects (version 2), so that both
// kinds of record meet in the same threads, forks and prunes.
const campaignInlineLimit = 1 << 10

// useObjects makes the campaign's stores, created after it, write the
// capacity layout with objs as the bucket of their body objects. Call it
// before the first store is created.
func (c *campaign) useObjects(objs etcdstore.ObjectStore) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.stores) > 0 {
		c.t.Fatal("useObjects after a store was created")
	}
	c.objects = objs
}

// closeStores closes every store: their etcd sessions end and the writer
// records still attached to them go. Closing revokes an etcd lease, which can
// wait for as long as the lease's TTL when the cluster is unhealthy, so the
// stores close concurrently and the wait is bounded.
func (c *campaign) closeStores() {
	c.mu.Lock()
	stores := c.stores
	c.stores = nil
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() { s.Close() })
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		c.t.Logf("closing the stores took more than 15s; going on without them")
	}
}

func (c *campaign) addThread(t string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.threads, t) {
		c.threads = append(c.threads, t)
	}
}

func (c *campaign) allThreads() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.threads)
}

func (c *campaign) newID(thread string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := fmt.Sprintf("%s.c%d", thread, len(c.ids[thread])+1)
	c.ids[thread] = append(c.ids[thread], id)
	return id
}

func (c *campaign) someID(r *rand.Rand, thread string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := c.ids[thread]
	if len(ids) == 0 {
		return thread + ".c1"
	}
	return ids[r.IntN(len(ids))]
}

func (c *campaign) finding(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// checkpoint builds a checkpoint that references a few blobs of the pool and,
// when register is set, remembers it as the content of id. On the capacity
// layout every other checkpoint is large: some forty entries and a
// conversation of a few KiB that every checkpoint shares but for its last
// message, well above campaignInlineLimit, so that its body goes to objects
// and successive checkpoints share some of them.
func (c *campaign) checkpoint(r *rand.Rand, id, thread, parent string, register bool) cairn.Checkpoint {
	return c.checkpointOf(r, id, thread, parent, register, c.objects != nil && r.IntN(2) == 0)
}

// checkpointOf is checkpoint, large or small as asked.
func (c *campaign) checkpointOf(r *rand.Rand, id, thread, parent string, register, large bool) cairn.Checkpoint {
	var files []cairn.Entry
	n := 1 + r.IntN(3)
	if large {
		n = 32 + r.IntN(16)
	}
	for i := 0; i < n; i++ {
		b := c.blobs[r.IntN(len(c.blobs)-2)]
		files = append(files, cairn.Entry{Path: fmt.Sprintf("src/f%d.txt", i), Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(b.Data))})
	}
	files = append(files, cairn.Entry{Path: "empty", Kind: cairn.KindDir})
	var arts []cairn.Artifact
	if r.IntN(3) == 0 {
		b := c.blobs[len(c.blobs)-1-r.IntN(2)]
		arts = append(arts, cairn.Artifact{ArtifactID: "a-" + id, Name: "report.txt", MimeType: "text/plain", Size: int64(len(b.Data)), BlobKey: b.Key, CreatedAt: c.clock.Now()})
	}
	msgs := []map[string]string{{"role": "user", "content": "checkpoint " + id}}
	if large {
		msgs = append(sharedConversation(), msgs...)
	}
	conv, _ := json.Marshal(msgs)
	cp := cairn.Checkpoint{
		ID: id, ThreadID: thread, ParentCheckpointID: parent, CreatedAt: c.clock.Now(), Reason: cairn.ReasonAutomatic,
		Files: files, Conversation: conv, Artifacts: arts,
	}
	if register {
		c.mu.Lock()
		c.appended[id] = cp.Clone()
		c.mu.Unlock()
	}
	return cp
}

// sharedConversation returns the messages every large checkpoint of the
// campaign starts with: about 6 KiB.
func sharedConversation() []map[string]string {
	var msgs []map[string]string
	for i := 0; i < 24; i++ {
		msgs = append(msgs, map[string]string{"role": "assistant", "content": fmt.Sprintf("turn %d: %s", i, strings.Repeat("the workspace changed; ", 10))})
	}
	return msgs
}

// sameCheckpoint reports whether a read checkpoint equals what was written.
func sameCheckpoint(a, b cairn.Checkpoint) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// logCapture is a slog handler that keeps the stores' messages.
type logCapture struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Level.String()+" "+r.Message)
	return nil
}
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }

func (l *logCapture) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// classify maps a store error to a contract code, or to an unknown outcome:
// an *etcdstore.UnknownOutcomeError, a context or transport error, or any
// other error that does not say the write was refused.
func classify(err error) (code string, unknown bool) {
	var uo *etcdstore.UnknownOutcomeError
	if errors.As(err, &uo) {
		return "", true
	}
	var ce *cairn.Error
	if errors.As(err, &ce) {
		return string(ce.Code), false
	}
	return "", true
}

// client is one logical client: one operation at a time, a fresh porcupine
// client id after every operation of unknown outcome.
type client struct {
	c     *campaign
	id    int
	store *etcdstore.Store
	r     *rand.Rand
	now   func() float64 // the clock of the client's store
}

func (c *campaign) newClient(member int, seed uint64) *client {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	now := c.clock.Now
	if c.skewed {
		offset, rate := skewclock.Random(r, maxClockOffset, maxClockRateError)
		now = skewclock.New(c.clock.Now, offset, rate).Now
	}
	return &client{c: c, id: c.hist.NewClient(), store: c.newStoreWith(member, now), r: r, now: now}
}

// do runs one recorded operation. fn returns the operation's output on
// success. Reads that fail are left out of the history: they changed
// nothing. A write of unknown outcome that failed with an
// *etcdstore.UnknownOutcomeError is, half the time, resolved with its Retry:
// when Retry succeeds the write happened exactly once, within the extended
// interval; otherwise its outcome stays unknown.
func (cl *client) do(in lincheck.Input, fence int64, fn func(ctx context.Context) (lincheck.Output, error)) (lincheck.Output, error) {
	c := cl.c
	tag := &opTag{client: cl.id, kind: in.Kind.String(), thread: in.Thread, fence: fence, failed: &atomic.Int32{}}
	ctx, cancel := context.WithTimeout(withTag(context.Background(), tag), c.opTimeout)
	defer cancel()
	in.Now0 = cl.now()
	call := c.hist.Now()
	out, err := fn(ctx)
	if in.Kind == lincheck.Release && tag.failed.Load() > 0 {
		err = errors.New("release: an RPC failed, so the record may or may not be gone")
	}
	if err != nil {
		code, unknown := classify(err)
		var uo *etcdstore.UnknownOutcomeError
		if unknown && errors.As(err, &uo) && cl.r.IntN(2) == 0 {
			c.retries.Add(1)
			rctx, rcancel := context.WithTimeout(withTag(context.Background(), tag), 2*c.opTimeout)
			if rerr := uo.Retry(rctx); rerr == nil && in.Kind != lincheck.Prune {
				err, unknown, out = nil, false, lincheck.Output{}
			}
			rcancel()
		}
		switch {
		case err == nil:
		case !in.Kind.IsWrite():
			return out, err
		case unknown:
			out = lincheck.Output{Unknown: true}
		default:
			out = lincheck.Output{Err: code}
		}
	}
	in.Now1 = cl.now()
	ret := c.hist.Now()
	c.hist.Add(cl.id, in, call, ret, out)
	if out.Unknown {
		cl.id = c.hist.NewClient()
	}
	return out, err
}

// acquire takes the thread's writer lease.
func (cl *client) acquire(thread string) (*cairn.Lease, lincheck.Output) {
	var lease *cairn.Lease
	out, _ := cl.do(lincheck.Input{Kind: lincheck.Acquire, Thread: thread}, 0, func(ctx context.Context) (lincheck.Output, error) {
		l, err := cl.store.AcquireWriter(ctx, thread)
		if err != nil {
			return lincheck.Output{}, err
		}
		lease = l
		return lincheck.Output{Token: l.OwnerToken, Fence: l.Fence, Exp: l.ExpiresAt()}, nil
	})
	return lease, out
}

func writerInput(kind lincheck.Kind, w cairn.Writer) lincheck.Input {
	return lincheck.Input{Kind: kind, Thread: w.ThreadID, Token: w.OwnerToken, Fence: w.Fence}
}

func (cl *client) renew(l *cairn.Lease) lincheck.Output {
	out, _ := cl.do(writerInput(lincheck.Renew, l.Writer), l.Fence, func(ctx context.Context) (lincheck.Output, error) {
		exp, err := l.Renew(ctx)
		return lincheck.Output{Exp: exp}, err
	})
	return out
}

func (cl *client) release(l *cairn.Lease) {
	cl.do(writerInput(lincheck.Release, l.Writer), l.Fence, func(ctx context.Context) (lincheck.Output, error) {
		l.Release(ctx)
		return lincheck.Output{}, nil
	})
}

func (cl *client) append(w cairn.Writer, cp cairn.Checkpoint, expected string) lincheck.Output {
	in := writerInput(lincheck.Append, w)
	in.ID, in.Parent, in.Expected = cp.ID, cp.ParentCheckpointID, expected
	out, _ := cl.do(in, w.Fence, func(ctx context.Context) (lincheck.Output, error) {
		_, err := cl.store.Append(ctx, cairn.AppendInput{Checkpoint: cp, ExpectedHeadID: expected, Writer: w})
		return lincheck.Output{}, err
	})
	return out
}

func (cl *client) deleteHead(w cairn.Writer, id string) lincheck.Output {
	in := writerInput(lincheck.DeleteHead, w)
	in.ID = id
	out, _ := cl.do(in, w.Fence, func(ctx context.Context) (lincheck.Output, error) {
		return lincheck.Output{}, cl.store.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: w.ThreadID, CheckpointID: id, Writer: w})
	})
	return out
}

func (cl *client) prune(w cairn.Writer, keep int) lincheck.Output {
	in := writerInput(lincheck.Prune, w)
	in.Keep = keep
	out, _ := cl.do(in, w.Fence, func(ctx context.Context) (lincheck.Output, error) {
		removed, err := cl.store.DeleteCheckpoints(ctx, cairn.DeleteCheckpointsInput{ThreadID: w.ThreadID, Keep: float64(keep), Writer: w})
		return lincheck.Output{Removed: strings.Join(removed, lincheck.Sep)}, err
	})
	return out
}

func (cl *client) fork(w cairn.Writer, srcThread, srcID, destID string) lincheck.Output {
	in := writerInput(lincheck.Fork, w)
	in.ID = destID
	fi := cairn.ForkInput{
		SourceThreadID: srcThread, SourceCheckpointID: srcID, DestinationThreadID: w.ThreadID,
		DestinationCheckpointID: destID, CreatedAt: cl.c.clock.Now(), Writer: w,
	}
	cl.c.mu.Lock()
	src := cl.c.appended[srcID]
	cl.c.appended[destID] = cairn.ForkRoot(&src, &fi)
	cl.c.mu.Unlock()
	out, _ := cl.do(in, w.Fence, func(ctx context.Context) (lincheck.Output, error) {
		root, err := cl.store.ForkFromCheckpoint(ctx, fi)
		if err == nil {
			cl.checkContent("fork", *root)
		}
		return lincheck.Output{}, err
	})
	return out
}

func (cl *client) getHead(thread string) (string, bool) {
	out, err := cl.do(lincheck.Input{Kind: lincheck.GetHead, Thread: thread}, 0, func(ctx context.Context) (lincheck.Output, error) {
		h, err := cl.store.GetHead(ctx, thread)
		return lincheck.Output{Head: h}, err
	})
	return out.Head, err == nil
}

func (cl *client) list(thread string) {
	cl.do(lincheck.Input{Kind: lincheck.List, Thread: thread}, 0, func(ctx context.Context) (lincheck.Output, error) {
		cps, err := cl.store.List(ctx, thread)
		if err != nil {
			return lincheck.Output{}, err
		}
		var ids, parents []string
		for i, cp := range cps {
			ids, parents = append(ids, cp.ID), append(parents, cp.ParentCheckpointID)
			if i > 0 && (cps[i-1].CreatedAt > cp.CreatedAt || cps[i-1].CreatedAt == cp.CreatedAt && cps[i-1].ID >= cp.ID) {
				cl.c.finding("list(%s) is not sorted by createdAt, then id: %q before %q", thread, cps[i-1].ID, cp.ID)
			}
			cl.checkContent("list", cp)
		}
		return lincheck.Output{Items: lincheck.Items(ids, parents)}, nil
	})
}

func (cl *client) get(thread, id string) {
	in := lincheck.Input{Kind: lincheck.Get, Thread: thread, ID: id}
	cl.do(in, 0, func(ctx context.Context) (lincheck.Output, error) {
		cp, err := cl.store.Get(ctx, id)
		if err != nil || cp == nil {
			return lincheck.Output{}, err
		}
		cl.checkContent("get", *cp)
		return lincheck.Output{Found: true, Parent: cp.ParentCheckpointID}, nil
	})
}

// checkContent compares a checkpoint read back with the one written: a
// write either happened whole or not at all.
func (cl *client) checkContent(op string, got cairn.Checkpoint) {
	cl.c.mu.Lock()
	want, ok := cl.c.appended[got.ID]
	cl.c.mu.Unlock()
	if !ok {
		cl.c.finding("%s returned checkpoint %q that no client wrote", op, got.ID)
		return
	}
	if !sameCheckpoint(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		cl.c.finding("%s returned checkpoint %q different from what was written:\n got %s\nwant %s", op, got.ID, g, w)
	}
}
