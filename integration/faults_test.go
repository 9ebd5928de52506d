package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/integration/internal/harness"
	"github.com/cairnstore/cairn/integration/internal/lincheck"
	"github.com/cairnstore/cairn/internal/s3test"
	"github.com/cairnstore/cairn/sweep"
)

// startCluster starts a three-member cluster with peer proxies for the test.
func startCluster(t *testing.T) *harness.Cluster {
	t.Helper()
	return startClusterWith(t, harness.ClusterConfig{PeerProxies: true})
}

// startClusterWith starts a cluster of cfg in a directory of the test's,
// whose members' logs are kept when the test fails.
func startClusterWith(t *testing.T, cfg harness.ClusterConfig) *harness.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg.Dir, cfg.Logf = t.TempDir(), t.Logf
	c, err := harness.StartCluster(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			keepLogs(t, c)
		}
		c.Close()
	})
	return c
}

// keepLogs copies the members' logs to the artifact directory.
func keepLogs(t *testing.T, c *harness.Cluster) {
	dir := artifactDir(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("keep member logs: %v", err)
		return
	}
	for _, m := range c.Members {
		if b, err := os.ReadFile(m.LogPath); err == nil {
			_ = os.WriteFile(filepath.Join(dir, m.Name+".log"), b, 0o644)
		}
	}
	t.Logf("member logs kept in %s", dir)
}

// blobPool uploads the blobs checkpoints reference: file blobs, then two
// artifact blobs at the end.
func blobPool(t *testing.T, b bucket.Putter) []bucket.Blob {
	t.Helper()
	var blobs []bucket.Blob
	for i := 0; i < 12; i++ {
		blobs = append(blobs, bucket.FileBlob([]byte(fmt.Sprintf("file blob %d", i))))
	}
	blobs = append(blobs, bucket.ArtifactBlob([]byte("artifact blob 0")), bucket.ArtifactBlob([]byte("artifact blob 1")))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := bucket.PutBlobs(ctx, b, blobs); err != nil {
		t.Fatal(err)
	}
	return blobs
}

// bindPrefix binds the store of prefix (on cli's cluster) to bkt, as writers
// do before their first upload (bucket.UploadBlobs does), for tests that put
// blobs into the bucket themselves: a sweep refuses a bucket whose objects no
// binding registry covers.
func bindPrefix(t *testing.T, cli *clientv3.Client, prefix string, bkt bucket.Binder) {
	t.Helper()
	st, err := etcdstore.New(cli, prefix, etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bucket.BindStore(ctx, st, bkt); err != nil {
		t.Fatal(err)
	}
}

func newS3(t *testing.T) (*bucket.S3, *s3test.Server) {
	t.Helper()
	srv := s3test.StartVersityGW(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := bucket.NewS3(ctx, bucket.Config{
		Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.Bucket, PathStyle: true,
		AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, srv
}

// faultInjector cycles through the faults until ctx ends: SIGKILL the
// leader (found with the Status API) and restart it, cut a member off from
// its peers (every member has clients pinned to it) by blackholing its peer
// proxy, SIGKILL a follower and restart it, and pause the leader with SIGSTOP
// (writes through the other members then time out with their outcome
// unknown, and the paused leader wakes up deposed).
type faultInjector struct {
	t       *testing.T
	cluster *harness.Cluster
	r       *rand.Rand
	mu      sync.Mutex
	applied []string
	kinds   map[string]int // faults applied, by kind
	// order is the kinds of fault the injector applies, in turn; nil is
	// faultKinds.
	order []string
}

// faultKinds are the kinds of fault, in the order the injector applies them.
var faultKinds = []string{"kill-leader", "partition", "kill-follower", "pause-leader"}

// campaignFaultKinds are TestFaultCampaign's: faultKinds and etcd's NOSPACE
// alarm, whose refusals the linearizability model takes as writes that did
// not happen. The online-sweep campaign leaves the alarm out: under it the
// sweeper prunes without its lock and sweeps no blob (docs/operations.md),
// which that campaign's accounting of sweeper runs does not model.
var campaignFaultKinds = append(slices.Clone(faultKinds), "nospace")

// kindsOrder returns the kinds of fault f applies.
func (f *faultInjector) kindsOrder() []string {
	if f.order != nil {
		return f.order
	}
	return faultKinds
}

func (f *faultInjector) note(kind, format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	f.applied = append(f.applied, msg)
	if f.kinds == nil {
		f.kinds = map[string]int{}
	}
	f.kinds[kind]++
	f.t.Logf("fault: %s", msg)
}

// covered reports whether every kind of fault has been applied at least once.
func (f *faultInjector) covered() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.kinds) == len(f.kindsOrder())
}

func (f *faultInjector) run(ctx context.Context) error {
	kinds := f.kindsOrder()
	for i := 0; ; i++ {
		pause(ctx, f.r, 700*time.Millisecond, 1500*time.Millisecond)
		if ctx.Err() != nil {
			return nil
		}
		hctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		leader, err := f.cluster.Leader(hctx)
		if err != nil {
			cancel()
			return fmt.Errorf("find the leader: %w", err)
		}
		switch kinds[i%len(kinds)] {
		case "kill-leader":
			start := time.Now()
			leader.Kill()
			pause(ctx, f.r, time.Second, 2500*time.Millisecond)
			if err := leader.Restart(); err != nil {
				cancel()
				return err
			}
			f.note("kill-leader", "SIGKILL leader %s, restarted after %v", leader.Name, time.Since(start).Round(time.Millisecond))
		case "kill-follower":
			var m *harness.Member
			for m == nil || m == leader {
				m = f.cluster.Members[f.r.IntN(len(f.cluster.Members))]
			}
			start := time.Now()
			m.Kill()
			pause(ctx, f.r, 500*time.Millisecond, 2*time.Second)
			if err := m.Restart(); err != nil {
				cancel()
				return err
			}
			f.note("kill-follower", "SIGKILL follower %s, restarted after %v", m.Name, time.Since(start).Round(time.Millisecond))
		case "pause-leader":
			start := time.Now()
			leader.Pause()
			pause(ctx, f.r, 1500*time.Millisecond, 3*time.Second)
			leader.Resume()
			f.note("pause-leader", "SIGSTOP leader %s, SIGCONT after %v", leader.Name, time.Since(start).Round(time.Millisecond))
		case "nospace":
			// etcd's NOSPACE alarm, as when the quota is reached: every
			// write that puts a key is refused, cluster-wide, until it is
			// disarmed. The writes refused are STORE_FULL, with no effect.
			start := time.Now()
			if err := f.cluster.RaiseNoSpace(hctx, leader); err != nil {
				cancel()
				return err
			}
			pause(ctx, f.r, time.Second, 2500*time.Millisecond)
			if err := f.cluster.DisarmNoSpace(hctx); err != nil {
				cancel()
				return err
			}
			f.note("nospace", "NOSPACE alarm raised on %s, disarmed after %v", leader.Name, time.Since(start).Round(time.Millisecond))
		case "partition":
			m := f.cluster.Members[f.r.IntN(len(f.cluster.Members))]
			role := "follower"
			if m == leader {
				role = "leader"
			}
			start := time.Now()
			m.Blackhole()
			pause(ctx, f.r, 2*time.Second, 4*time.Second)
			m.Unblackhole()
			f.note("partition", "blackholed the peer traffic of %s %s for %v", role, m.Name, time.Since(start).Round(time.Millisecond))
		}
		err = f.cluster.WaitHealthy(hctx)
		cancel()
		if err != nil {
			return fmt.Errorf("cluster did not heal: %w", err)
		}
	}
}

// heal ends every fault: it lets peer traffic through and restarts members
// that are down, then waits for the cluster.
func heal(t *testing.T, c *harness.Cluster) {
	t.Helper()
	for _, m := range c.Members {
		m.Unblackhole()
		if !m.Running() {
			if err := m.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

// workloadConfig sizes a run of the workload.
type workloadConfig struct {
	threads, writersPerThread, readers, forkers int
	// staleOneIn: one lease in staleOneIn is never renewed (see writer).
	staleOneIn int
}

var defaultWorkload = workloadConfig{threads: 3, writersPerThread: 3, readers: 2, forkers: 1, staleOneIn: 4}

// campaignCoverCap bounds a workload that goes on past its length until it
// is covered.
const campaignCoverCap = 2 * time.Minute

// cancelWhen calls cancel once done reports true, asking every 100 ms from
// after on; it returns without calling cancel when ctx ends first. The
// campaigns use it to run at least some time and then until covered.
func cancelWhen(ctx context.Context, after time.Duration, done func() bool, cancel func()) {
	if after > 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(after):
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	cancel()
}

// runWorkload runs the workers for d while during (when set) runs beside
// them; it returns during's error. When covered is set, the workload goes on
// past d until covered reports true, for at most campaignCoverCap in all.
func (c *campaign) runWorkload(d time.Duration, cfg workloadConfig, during func(ctx context.Context) error, covered func() bool) error {
	limit := d
	if covered != nil {
		limit = max(d, campaignCoverCap)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if covered != nil {
		go cancelWhen(ctx, d, covered, cancel)
	}
	clockCtx, stopClock := context.WithCancel(context.Background())
	defer stopClock()
	go c.clock.run(clockCtx)
	var wg sync.WaitGroup
	seed := uint64(time.Now().UnixNano())
	c.t.Logf("workload seed %d", seed)
	n := 0
	for i := 0; i < cfg.threads; i++ {
		thread := fmt.Sprintf("t%d", i)
		c.addThread(thread)
		for k := 0; k < cfg.writersPerThread; k++ {
			cl := c.newClient(i+k, seed+uint64(n))
			n++
			wg.Go(func() { c.writer(ctx, cl, thread, max(1, cfg.staleOneIn)) })
		}
	}
	for i := 0; i < cfg.readers; i++ {
		cl := c.newClient(i, seed+uint64(n))
		n++
		wg.Go(func() { c.reader(ctx, cl) })
	}
	for i := 0; i < cfg.forkers; i++ {
		cl := c.newClient(i+1, seed+uint64(n))
		n++
		wg.Go(func() { c.forker(ctx, cl, i) })
	}
	var duringErr error
	if during != nil {
		wg.Go(func() { duringErr = during(ctx) })
	}
	wg.Wait()
	return duringErr
}

// report fails t for every finding of r: content, linearizability and
// fences, and logs what was checked.
func (r checkResult) report(t *testing.T) {
	t.Helper()
	for _, f := range r.findings {
		t.Errorf("content: %s", f)
	}
	switch r.lin.Verdict {
	case porcupine.Ok:
		t.Logf("linearizable: %d operations", r.ops)
	default:
		t.Errorf("history is not linearizable (%s); visualization: %s %v", r.lin.Verdict, r.lin.Visualization, r.lin.VisualizationErr)
	}
	t.Logf("fences: %d committed writes, %d claims and %d acquires checked", r.fences.Writes, r.fences.Claims, r.fences.Acquires)
	for _, v := range r.fences.Violations {
		t.Errorf("fence: %s", v)
	}
	for _, u := range r.fences.Unknown {
		t.Errorf("fence: a committed write no recorded operation sent: %s", u)
	}
	for _, u := range r.fences.Unattributed {
		t.Errorf("fence: records written outside every checked write: %s", u)
	}
}

// checkResult is what checkAll found.
type checkResult struct {
	lin      lincheck.Result
	ops      int
	fences   fenceReport
	findings []string
}

// checkAll checks the recorded history for linearizability and etcd's
// history for fences, and reports what it found without failing the test.
func (c *campaign) checkAll(ctx context.Context, name string) (checkResult, error) {
	var res checkResult
	ops := c.hist.Operations()
	res.ops = len(ops)
	c.mu.Lock()
	res.findings = append(res.findings, c.errs...)
	c.mu.Unlock()
	dir := c.artifacts
	if dir == "" {
		dir = artifactDir(c.t)
	}
	res.lin = lincheck.Check(lincheck.Model(cairn.Millis(leaseDuration)), ops, 3*time.Minute, dir, name)
	cli := c.clients[0]
	var err error
	res.fences, err = checkFences(ctx, cli, c.layout, c.allThreads(), c.nonces)
	return res, err
}

// TestFaultCampaign runs the workload against the three-member cluster while
// members are killed, restarted and cut off, then checks that the client
// history is linearizable, that every committed write was made under the
// lease current at its commit, that Verify finds the store consistent
// (reference counts equal the counts recomputed from the checkpoints), that
// the members agree byte for byte, and that a sweep keeps every referenced
// blob. It runs on both layouts: InlineLayout writes version-1 records only;
// ObjectLayout gives the stores a bucket for body objects, so that the large
// half of the checkpoints keep their bodies in objects (their appends claim
// the objects first, and the fence check checks every claim), and after the
// sweep every checkpoint left must still read back exactly. Each layout's
// workload lasts CAIRN_CAMPAIGN (default 10s) and goes on past it until every
// kind of fault has been applied at least once (for at most
// campaignCoverCap), so that a loaded machine gives a slower verdict, not a
// thinner one.
func TestFaultCampaign(t *testing.T) {
	d := campaignDuration(t)
	cluster := startCluster(t)
	for _, l := range []struct {
		name, prefix string
		objects      bool
	}{
		{"InlineLayout", "cairn-it/", false},
		{"ObjectLayout", "cairn-it-objects/", true},
	} {
		t.Run(l.name, func(t *testing.T) { faultCampaign(t, cluster, l.prefix, l.objects, d) })
	}
}

// faultCampaign is one layout's run of TestFaultCampaign, with a bucket of
// its own.
func faultCampaign(t *testing.T, cluster *harness.Cluster, prefix string, objects bool, d time.Duration) {
	bkt, srv := newS3(t)
	cli, err := cluster.Client(cluster.Endpoints()...)
	if err != nil {
		t.Fatal(err)
	}
	bindPrefix(t, cli, prefix, bkt)
	cli.Close()
	blobs := blobPool(t, bkt)
	c := newCampaign(t, cluster.Endpoints(), prefix, blobs)
	defer c.closeStores()
	c.skewClocks()
	if objects {
		c.useObjects(bkt)
	}
	c.setupSource()

	faults := &faultInjector{t: t, cluster: cluster, r: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)), order: campaignFaultKinds}
	start := time.Now()
	if err := c.runWorkload(d, defaultWorkload, faults.run, faults.covered); err != nil {
		t.Errorf("fault injection: %v", err)
	}
	workload := time.Since(start)
	heal(t, cluster)
	c.finalReads(0)
	ops := c.hist.Operations()
	t.Logf("history: %d operations:%s", len(ops), lincheck.Summary(ops))
	t.Logf("%v of workload; faults applied: %d (%s); unknown outcomes resolved with Retry: %d",
		workload.Round(time.Millisecond), len(faults.applied), sortedCounts(faults.kinds), c.retries.Load())
	if faults.kinds["nospace"] > 0 && !strings.Contains(lincheck.Summary(ops), "STORE_FULL") {
		t.Errorf("etcd's NOSPACE alarm was raised %d times, and no write was refused with STORE_FULL", faults.kinds["nospace"])
	}
	if !faults.covered() {
		t.Errorf("the campaign of %v applied %d faults (%s); want every kind of fault (%s) at least once",
			workload.Round(time.Millisecond), len(faults.applied), sortedCounts(faults.kinds), strings.Join(campaignFaultKinds, ", "))
	}
	if n := c.logs.count("session lease lost"); n > 0 {
		t.Errorf("a store lost the etcd lease behind its writer records %d times; the model assumes writer records end only by release or takeover", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := c.checkAll(ctx, "fault-campaign")
	if err != nil {
		t.Fatal(err)
	}
	res.report(t)
	if res.fences.Writes == 0 || res.fences.Acquires == 0 {
		t.Errorf("the fence check saw %d writes and %d acquires; want both > 0", res.fences.Writes, res.fences.Acquires)
	}
	if objects && res.fences.Claims == 0 {
		t.Errorf("the fence check saw no claim on the object layout")
	}

	c.closeStores()
	checker := c.newStore(0)
	rep, err := checker.Verify(ctx, etcdstore.VerifyOptions{Objects: objects})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	t.Logf("Verify at revision %d: %d threads, %d checkpoints, %d blob keys, %d references, %d garbage", rep.Revision, rep.Threads, rep.Checkpoints, rep.BlobKeys, rep.References, len(rep.Garbage))
	if !rep.OK() {
		for _, p := range rep.Problems {
			t.Errorf("Verify: %s", p)
		}
	}
	checkMembersAgree(t, ctx, cluster)

	// The sweeper, as an operator runs it after an incident: keep the
	// newest three checkpoints of every thread, delete every unreferenced
	// blob, and --verify the store.
	code, logs := runSweeper(t, []string{
		"--once", "--verify", "--prefix=" + c.prefix, "--etcd-endpoints=" + strings.Join(cluster.Endpoints(), ","),
		"--s3-endpoint=" + srv.Endpoint, "--s3-bucket=" + srv.Bucket, "--s3-region=" + srv.Region, "--s3-path-style",
		"--keep=3", "--older-than=0s",
	}, map[string]string{"CAIRN_S3_ACCESS_KEY_ID": srv.AccessKeyID, "CAIRN_S3_SECRET_ACCESS_KEY": srv.SecretAccessKey})
	verified := logLines(logs, `"msg":"store verified"`)
	if code != 0 || len(verified) != 1 || !strings.Contains(verified[0], `"problems":0,`) {
		t.Errorf("sweeper --once --verify exited %d; its log:\n%s", code, logs)
	} else {
		t.Logf("sweeper: %s", verified[0])
	}
	checkReferencedBlobsKept(t, ctx, bkt, checker)
	if objects {
		c.checkReadBack(ctx, bkt)
	}
}

// checkReadBack reads every checkpoint left after the sweep through a store
// of its own (its object cache empty) and compares each with what was
// written: the sweep kept every object a live checkpoint needs.
func (c *campaign) checkReadBack(ctx context.Context, bkt *bucket.S3) {
	t := c.t
	t.Helper()
	store := c.newStore(1)
	read, v2 := 0, 0
	for _, thread := range c.allThreads() {
		cps, err := store.List(ctx, thread)
		if err != nil {
			t.Errorf("after the sweep, list %s: %v", thread, err)
			continue
		}
		for _, cp := range cps {
			c.mu.Lock()
			want, ok := c.appended[cp.ID]
			c.mu.Unlock()
			if !ok || !sameCheckpoint(cp, want) {
				t.Errorf("after the sweep, checkpoint %s of %s differs from what was written (known: %v)", cp.ID, thread, ok)
			}
			read++
			if len(cp.Files) > 8 {
				v2++
			}
		}
	}
	meta := 0
	for _, err := range bucket.Objects(ctx, bkt, sweep.MetaPrefix, 0) {
		if err != nil {
			t.Fatal(err)
		}
		meta++
	}
	t.Logf("after the sweep: %d checkpoints read back exactly, %d of them large; %d body objects left in the bucket", read, v2, meta)
	if v2 == 0 || meta == 0 {
		t.Errorf("after the sweep, %d large checkpoints and %d body objects are left; the object layout was not exercised", v2, meta)
	}
}

// checkMembersAgree compares the members' key-value hashes at one revision.
func checkMembersAgree(t *testing.T, ctx context.Context, cluster *harness.Cluster) {
	t.Helper()
	cli, err := cluster.Client(cluster.Endpoints()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "cairn-hash-probe")
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	var hashes []string
	var first uint32
	for i, m := range cluster.Members {
		var h uint32
		var herr error
		for try := 0; try < 50; try++ { // a member may still be catching up
			r, err := cli.HashKV(ctx, m.ClientURL, rev)
			if herr = err; err == nil {
				h = r.Hash
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if herr != nil {
			t.Fatalf("HashKV of %s at revision %d: %v", m.Name, rev, herr)
		}
		hashes = append(hashes, fmt.Sprintf("%s=%08x", m.Name, h))
		if i == 0 {
			first = h
		} else if h != first {
			t.Errorf("members disagree at revision %d: %s", rev, strings.Join(hashes, " "))
		}
	}
	t.Logf("members agree at revision %d: %s", rev, strings.Join(hashes, " "))
}

// checkReferencedBlobsKept checks that each blob a checkpoint references is
// still in the bucket.
func checkReferencedBlobsKept(t *testing.T, ctx context.Context, bkt *bucket.S3, stores ...*etcdstore.Store) {
	t.Helper()
	var refs []string // distinct, over the stores that share the bucket
	for _, store := range stores {
		list, err := store.ListBlobReferences(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list {
			if _, err := bkt.Head(ctx, r.Key); err != nil {
				t.Errorf("blob %s has %d references but the bucket lost it: %v", r.Key, r.References, err)
			}
			if !slices.Contains(refs, r.Key) {
				refs = append(refs, r.Key)
			}
		}
	}
	left := 0
	for _, prefix := range []string{sweep.FilePrefix, sweep.ArtifactPrefix} {
		for _, err := range bucket.Objects(ctx, bkt, prefix, 0) {
			if err != nil {
				t.Fatal(err)
			}
			left++
		}
	}
	t.Logf("bucket: %d blobs left, %d referenced", left, len(refs))
	if left != len(refs) {
		t.Errorf("the sweep left %d blobs for %d referenced keys", left, len(refs))
	}
}
