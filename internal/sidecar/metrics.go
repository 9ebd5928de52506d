package sidecar

import (
	"context"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/buildinfo"
	"github.com/cairnstore/cairn/internal/etcdspace"
	"github.com/cairnstore/cairn/sweep"
)

// MetricPrefix starts the name of every metric of the sweeper.
const MetricPrefix = "cairn_sweeper_"

// results are the values of the result label of runs_total, registered up
// front so that every series exists from the start.
var results = []string{"success", "partial", "failure", "interrupted", "lock_held", "lock_lost", "verify_problems", "uncovered", "under_alarm"}

// Metrics are the sweeper's Prometheus metrics, on a registry of their own
// that also carries the Go and process collectors.
type Metrics struct {
	Registry *prometheus.Registry

	runs               *prometheus.CounterVec
	deleted            prometheus.Counter
	freed              prometheus.Counter
	deleteFailures     prometheus.Counter
	pruned             prometheus.Counter
	duration           prometheus.Histogram
	lastSuccess        prometheus.Gauge
	lastRun            prometheus.Gauge
	dryRun             prometheus.Gauge
	lockHeld           prometheus.Gauge
	bucketBlobs        prometheus.Gauge
	bucketBytes        prometheus.Gauge
	listRequests       *prometheus.CounterVec
	headRequests       prometheus.Counter
	incremental        prometheus.Gauge
	unreferenced       prometheus.Gauge
	references         prometheus.Gauge
	verifyProblems     prometheus.Gauge
	verifyRepaired     prometheus.Counter
	busyThreadsSkipped prometheus.Counter
	// Per retention policy (label policy).
	policyCheckpoints, policyThreads, policyBlobs, policyBytes, policyProtected, policyBusy *prometheus.CounterVec
	// The online sweep protocol.
	marked, aborted    prometheus.Counter
	claimed, unsettled prometheus.Gauge
	waitingCandidates  prometheus.Gauge
	// The binding registry.
	uncovered prometheus.Gauge
	// The incremental sweep's mirror.
	mirrorMismatches                                                  prometheus.Counter
	mirrorRevision, mirrorRebuilds, mirrorRestarts, mirrorObjectReads prometheus.Gauge
	mirrorCountsWritten                                               prometheus.Gauge
}

// NewMetrics creates the metrics on a new registry. dryRun sets the dry_run
// gauge.
func NewMetrics(dryRun bool) *Metrics {
	r := prometheus.NewRegistry()
	f := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Name: MetricPrefix + name, Help: help}
	}
	m := &Metrics{
		Registry: r,
		runs: prometheus.NewCounterVec(prometheus.CounterOpts(f("runs_total",
			"Runs by result: success, partial (some blobs not deleted), failure, interrupted, lock_held, lock_lost, verify_problems, uncovered (the sweep refused: the bucket is bound to a prefix this sweeper does not serve), under_alarm (etcd out of space: pruned with deletes only, swept nothing).")), []string{"result"}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts(f("deleted_blobs_total",
			"Blobs deleted from the bucket (in a dry run: blobs that would have been deleted)."))),
		freed: prometheus.NewCounter(prometheus.CounterOpts(f("freed_bytes_total",
			"Bytes of the deleted blobs, as listed (in a dry run: that would have been freed)."))),
		deleteFailures: prometheus.NewCounter(prometheus.CounterOpts(f("delete_failures_total",
			"Blobs the bucket did not delete; the next run retries them."))),
		pruned: prometheus.NewCounter(prometheus.CounterOpts(f("pruned_checkpoints_total",
			"Checkpoints removed by the retention policy (in a dry run: that would have been removed)."))),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricPrefix + "run_duration_seconds",
			Help:    "Duration of runs that held the lock, whatever their result.",
			Buckets: prometheus.ExponentialBuckets(0.05, 4, 10)}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts(f("last_success_timestamp_seconds",
			"Unix time at which the last successful run ended; alert when it gets old."))),
		lastRun: prometheus.NewGauge(prometheus.GaugeOpts(f("last_run_timestamp_seconds",
			"Unix time at which the last run ended, whatever its result."))),
		dryRun: prometheus.NewGauge(prometheus.GaugeOpts(f("dry_run",
			"1 when the sweeper runs with --dry-run and deletes nothing."))),
		lockHeld: prometheus.NewGauge(prometheus.GaugeOpts(f("lock_held",
			"1 while this sweeper holds the sweeper lock."))),
		bucketBlobs: prometheus.NewGauge(prometheus.GaugeOpts(f("bucket_blobs",
			"Blobs listed under the blob prefixes by the last sweep, before it deleted."))),
		bucketBytes: prometheus.NewGauge(prometheus.GaugeOpts(f("bucket_blob_bytes",
			"Total size of the blobs listed by the last sweep, before it deleted."))),
		listRequests: prometheus.NewCounterVec(prometheus.CounterOpts(f("list_requests_total",
			"LIST requests the sweeps sent to the bucket, by what they listed: objects (the swept prefixes, one request a page) or bindings.")), []string{"listing"}),
		headRequests: prometheus.NewCounter(prometheus.CounterOpts(f("head_requests_total",
			"HEAD requests the incremental sweeps sent for the keys they were about to delete (a listing run sends none)."))),
		incremental: prometheus.NewGauge(prometheus.GaugeOpts(f("last_sweep_incremental",
			"1 when the last sweep named its candidates from the mirror without listing the bucket, 0 when it listed."))),
		unreferenced: prometheus.NewGauge(prometheus.GaugeOpts(f("unreferenced_blobs",
			"Blobs the last sweep found old enough and unreferenced."))),
		references: prometheus.NewGauge(prometheus.GaugeOpts(f("referenced_blob_keys",
			"Distinct blob keys the store referenced during the last sweep."))),
		verifyProblems: prometheus.NewGauge(prometheus.GaugeOpts(f("verify_problems",
			"Problems the last --verify found in the store (0 when it found none)."))),
		verifyRepaired: prometheus.NewCounter(prometheus.CounterOpts(f("verify_repaired_total",
			"Garbage records deleted by --verify --repair."))),
		busyThreadsSkipped: prometheus.NewCounter(prometheus.CounterOpts(f("busy_threads_skipped_total",
			"Threads the prune skipped because a writer held them."))),
		marked: prometheus.NewCounter(prometheus.CounterOpts(f("marked_blobs_total",
			"Blobs found unreferenced and unclaimed for the first time: their grace started."))),
		aborted: prometheus.NewCounter(prometheus.CounterOpts(f("aborted_deletes_total",
			"Deletes called off because a capture claimed the blob after the sweep read it."))),
		claimed: prometheus.NewGauge(prometheus.GaugeOpts(f("claimed_blobs",
			"Unreferenced blobs the last sweep found claimed by a capture that had not appended yet."))),
		unsettled: prometheus.NewGauge(prometheus.GaugeOpts(f("unsettled_deletes",
			"Blobs an earlier run left in the deleting state (outcome unknown) that the last sweep deleted again."))),
		waitingCandidates: prometheus.NewGauge(prometheus.GaugeOpts(f("waiting_candidates",
			"Unreferenced, unclaimed blobs whose grace had not passed at the last sweep."))),
		uncovered: prometheus.NewGauge(prometheus.GaugeOpts(f("uncovered_bindings",
			"Bindings of the bucket (prefixes on an etcd cluster) that the last sweep did not cover, plus 1 when the bucket has no binding registry: above 0 the sweep refused and deleted nothing."))),
		mirrorMismatches: prometheus.NewCounter(prometheus.CounterOpts(f("mirror_mismatches_total",
			"Full runs whose walk of every reference differed from the incremental sweep's mirror: the run deleted nothing and the mirror is rebuilt."))),
		mirrorRevision: prometheus.NewGauge(prometheus.GaugeOpts(f("mirror_revision",
			"etcd revision the incremental sweep's mirror reached at the last run; compare with the cluster's to see its lag."))),
		mirrorRebuilds: prometheus.NewGauge(prometheus.GaugeOpts(f("mirror_rebuilds",
			"Times since start the mirror was built from nothing (no file, or a file discarded as damaged, foreign or of another format)."))),
		mirrorRestarts: prometheus.NewGauge(prometheus.GaugeOpts(f("mirror_watch_restarts",
			"Times since start the mirror's watch ended compacted or failed (a compacted one costs one range read of the reference records)."))),
		mirrorObjectReads: prometheus.NewGauge(prometheus.GaugeOpts(f("mirror_object_reads",
			"Roots and reference chunks the mirror read from the bucket since start (each when it first became referenced)."))),
		mirrorCountsWritten: prometheus.NewGauge(prometheus.GaugeOpts(f("mirror_counts_written",
			"Reference counts the mirror changed in its file since start: what its syncs wrote, which follows what changed in the store, not what it holds."))),
	}
	pol := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts(f(name, help)), []string{"policy"})
	}
	m.policyCheckpoints = pol("policy_checkpoints_removed_total", "Checkpoints the policy removed, those of removed threads included (in a dry run: would have removed).")
	m.policyThreads = pol("policy_threads_removed_total", "Idle threads the policy removed entirely (--delete-idle-threads).")
	m.policyBlobs = pol("policy_blobs_freed_total", "Blobs the sweep of the policy's prefix deleted.")
	m.policyBytes = pol("policy_bytes_freed_total", "Bytes of the blobs the sweep of the policy's prefix deleted.")
	m.policyProtected = pol("policy_protected_skipped_total", "Protected checkpoints the policy kept that its rules would otherwise have removed.")
	m.policyBusy = pol("policy_busy_threads_skipped_total", "Threads the policy skipped because a writer held them.")
	r.MustRegister(m.policyCheckpoints, m.policyThreads, m.policyBlobs, m.policyBytes, m.policyProtected, m.policyBusy)
	r.MustRegister(m.runs, m.deleted, m.freed, m.deleteFailures, m.pruned, m.duration, m.lastSuccess, m.lastRun,
		m.dryRun, m.lockHeld, m.bucketBlobs, m.bucketBytes, m.listRequests, m.headRequests, m.incremental, m.unreferenced, m.references, m.verifyProblems,
		m.verifyRepaired, m.busyThreadsSkipped, m.marked, m.aborted, m.claimed, m.unsettled, m.waitingCandidates, m.uncovered,
		m.mirrorMismatches, m.mirrorRevision, m.mirrorRebuilds, m.mirrorRestarts, m.mirrorObjectReads, m.mirrorCountsWritten)
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts(f("build_info", "Always 1; the labels describe the binary.")),
		[]string{"version", "goversion"})
	version, goVersion := "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version, goVersion = bi.Main.Version, bi.GoVersion
	}
	build.WithLabelValues(version, goVersion).Set(1)
	r.MustRegister(build, buildinfo.Collector("sweeper"))
	for _, res := range results {
		m.runs.WithLabelValues(res)
	}
	if dryRun {
		m.dryRun.Set(1)
	}
	return m
}

// Policies creates the per-policy series of the given policies at zero, so
// that they exist before the first run.
func (m *Metrics) Policies(names ...string) {
	if m == nil {
		return
	}
	for _, n := range names {
		for _, v := range []*prometheus.CounterVec{m.policyCheckpoints, m.policyThreads, m.policyBlobs, m.policyBytes, m.policyProtected, m.policyBusy} {
			v.WithLabelValues(n)
		}
	}
}

// setLockHeld records whether this sweeper holds the lock.
func (m *Metrics) setLockHeld(held bool) {
	if m == nil {
		return
	}
	v := 0.0
	if held {
		v = 1
	}
	m.lockHeld.Set(v)
}

// observe records the outcome of one run.
func (m *Metrics) observe(rep RunReport, err error) {
	if m == nil {
		return
	}
	result := Result(err)
	if rep.UnderAlarm && err == nil {
		result = "under_alarm" // not a success: nothing was swept
	}
	m.runs.WithLabelValues(result).Inc()
	now := time.Now()
	m.lastRun.Set(float64(now.UnixNano()) / 1e9)
	if result == "success" {
		m.lastSuccess.Set(float64(now.UnixNano()) / 1e9)
	}
	if !rep.Locked && !rep.UnderAlarm {
		return
	}
	if rep.Locked {
		m.duration.Observe(rep.Duration.Seconds())
	}
	policy := rep.Policy
	if policy == "" {
		policy = "default"
	}
	m.observePrune(policy, rep.Prune)
	for i, p := range rep.OtherPrunes {
		if i < len(rep.OtherPolicies) {
			m.observePrune(rep.OtherPolicies[i], p)
		}
	}
	if rep.Swept {
		m.policyBlobs.WithLabelValues(policy).Add(float64(len(rep.Sweep.Deleted)))
		m.policyBytes.WithLabelValues(policy).Add(float64(rep.Sweep.BytesFreed))
	}
	if rep.Swept {
		n := len(rep.Sweep.Uncovered)
		if rep.Sweep.Unregistered {
			n++
		}
		m.uncovered.Set(float64(n))
		m.deleted.Add(float64(len(rep.Sweep.Deleted)))
		m.freed.Add(float64(rep.Sweep.BytesFreed))
		m.deleteFailures.Add(float64(len(rep.Sweep.Failed)))
		if rep.Sweep.Incremental {
			// Nothing was listed: the last listing's figures stand.
			m.incremental.Set(1)
		} else {
			m.incremental.Set(0)
			m.bucketBlobs.Set(float64(rep.Sweep.Listed))
			m.bucketBytes.Set(float64(rep.Sweep.ListedBytes))
			m.references.Set(float64(rep.Sweep.References))
		}
		m.headRequests.Add(float64(rep.Sweep.HeadRequests))
		m.listRequests.WithLabelValues("objects").Add(float64(rep.Sweep.ListRequests))
		m.listRequests.WithLabelValues("bindings").Add(float64(rep.Sweep.BindingListRequests))
		m.unreferenced.Set(float64(rep.Sweep.Candidates))
		m.marked.Add(float64(rep.Sweep.Marked))
		m.aborted.Add(float64(len(rep.Sweep.Aborted)))
		m.claimed.Set(float64(rep.Sweep.Claimed))
		m.unsettled.Set(float64(rep.Sweep.Unsettled))
		m.waitingCandidates.Set(float64(rep.Sweep.Waiting))
	}
	if rep.Verify != nil {
		m.verifyProblems.Set(float64(len(rep.Verify.Problems)))
		m.verifyRepaired.Add(float64(rep.Verify.Repaired))
	}
}

// observePrune records one prefix's prune, under its policy's name.
func (m *Metrics) observePrune(policy string, p sweep.PruneReport) {
	m.pruned.Add(float64(p.Removed))
	m.busyThreadsSkipped.Add(float64(len(p.Busy)))
	m.policyCheckpoints.WithLabelValues(policy).Add(float64(p.Removed))
	m.policyThreads.WithLabelValues(policy).Add(float64(p.ThreadsDeleted))
	m.policyProtected.WithLabelValues(policy).Add(float64(p.Protected))
	m.policyBusy.WithLabelValues(policy).Add(float64(len(p.Busy)))
}

// mirrorMismatch counts a full run whose comparison failed.
func (m *Metrics) mirrorMismatch() {
	if m == nil {
		return
	}
	m.mirrorMismatches.Inc()
}

// observeMirror publishes the mirror's counters and revision.
func (m *Metrics) observeMirror(st etcdstore.MirrorStats, rev int64) {
	if m == nil {
		return
	}
	m.mirrorRevision.Set(float64(rev))
	m.mirrorRebuilds.Set(float64(st.Rebuilds))
	m.mirrorRestarts.Set(float64(st.WatchRestarts))
	m.mirrorObjectReads.Set(float64(st.ObjectReads))
	m.mirrorCountsWritten.Set(float64(st.CountsWritten))
}

// WatchEtcd adds the space gauges of the cluster client talks to, read at
// each scrape (etcdspace.Read, within timeout): per member, the database
// size (what etcd compares with its quota), the size in use and the quota
// (--quota-backend-bytes), and whether a NOSPACE alarm is raised. Alert
// before the database reaches its quota: deploy/alerts.yml warns at 80%.
func (m *Metrics) WatchEtcd(client *clientv3.Client, timeout time.Duration) {
	m.Registry.MustRegister(&etcdSpace{client: client, timeout: timeout})
}

var (
	etcdDBSize = prometheus.NewDesc(MetricPrefix+"etcd_db_size_bytes",
		"Size of the etcd member's database file, the figure etcd compares with its quota (NOSPACE alarm when reached).", []string{"member"}, nil)
	etcdDBInUse = prometheus.NewDesc(MetricPrefix+"etcd_db_size_in_use_bytes",
		"Part of the etcd member's database that holds data; the rest is free pages a defragmentation gives back.", []string{"member"}, nil)
	etcdDBQuota = prometheus.NewDesc(MetricPrefix+"etcd_db_quota_bytes",
		"The etcd member's space quota (--quota-backend-bytes).", []string{"member"}, nil)
	etcdNoSpace = prometheus.NewDesc(MetricPrefix+"etcd_nospace_alarm",
		"1 while etcd's NOSPACE alarm is raised: etcd refuses every write that adds data, for every prefix.", nil, nil)
	etcdStatusUp = prometheus.NewDesc(MetricPrefix+"etcd_status_up",
		"1 when the last scrape read etcd's space status, 0 when it could not.", nil, nil)
)

// etcdSpace collects the space gauges at each scrape.
type etcdSpace struct {
	client  *clientv3.Client
	timeout time.Duration
}

func (e *etcdSpace) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{etcdDBSize, etcdDBInUse, etcdDBQuota, etcdNoSpace, etcdStatusUp} {
		ch <- d
	}
}

func (e *etcdSpace) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	st, err := etcdspace.Read(ctx, e.client)
	up := 1.0
	if err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(etcdStatusUp, prometheus.GaugeValue, up)
	for _, mem := range st.Members {
		if mem.Err != "" {
			continue
		}
		name := mem.Name
		if name == "" {
			name = strconv.FormatUint(mem.ID, 16)
		}
		ch <- prometheus.MustNewConstMetric(etcdDBSize, prometheus.GaugeValue, float64(mem.DBSize), name)
		ch <- prometheus.MustNewConstMetric(etcdDBInUse, prometheus.GaugeValue, float64(mem.DBSizeInUse), name)
		if mem.Quota > 0 {
			ch <- prometheus.MustNewConstMetric(etcdDBQuota, prometheus.GaugeValue, float64(mem.Quota), name)
		}
	}
	if err == nil {
		alarm := 0.0
		if st.Alarmed() {
			alarm = 1
		}
		ch <- prometheus.MustNewConstMetric(etcdNoSpace, prometheus.GaugeValue, alarm)
	}
}
