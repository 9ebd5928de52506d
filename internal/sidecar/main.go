package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/internal/skewclock"
	"github.com/cairnstore/cairn/sweep"
)

// Env is what Main needs from its process.
type Env struct {
	// Args are the command-line arguments, without the program name.
	Args []string
	// Getenv reads the environment; nil reads none.
	Getenv func(string) string
	// Stderr receives the logs and the usage messages.
	Stderr io.Writer
	// Signals delivers SIGTERM and SIGINT. The first one stops the sweeper at
	// the next safe point; the second one stops it at once.
	Signals <-chan os.Signal
	// Exit, when set, is called with ExitInterrupted on the second signal (the
	// command passes os.Exit). When nil, the second signal cancels every
	// request in flight and Main returns ExitInterrupted.
	Exit func(code int)
	// Listening, when set, is called with the HTTP address once --listen
	// serves.
	Listening func(addr string)
}

// Main runs the sweeper and returns its exit code.
func Main(e Env) int {
	if e.Stderr == nil {
		e.Stderr = io.Discard
	}
	cfg, err := Parse(e.Args, e.Getenv, e.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(e.Stderr, "sweeper: %v\nRun sweeper --help to see the flags.\n", err)
		return ExitUsage
	}
	log := cli.NewLogger(e.Stderr, cfg.LogFormat, cfg.LogLevel)
	log.Info("sweeper starting", "settings", cfg)

	// stop ends at the first signal, hard at the second one or when the
	// shutdown timeout runs out after the first.
	hard, cancelHard := context.WithCancel(context.Background())
	defer cancelHard()
	stop, cancelStop := context.WithCancel(hard)
	defer cancelStop()
	h := &health{}
	h.setReady(false, "starting")
	var forced atomic.Bool
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		var sig os.Signal
		select {
		case sig = <-e.Signals:
		case <-quit:
			return
		}
		log.Warn("signal received: finishing the delete batch in flight, then exiting; a second signal exits at once",
			"signal", sig.String(), "shutdown_timeout", cfg.ShutdownTimeout.String())
		h.setReady(false, "stopping")
		cancelStop()
		timer := time.NewTimer(cfg.ShutdownTimeout)
		defer timer.Stop()
		select {
		case sig = <-e.Signals:
			log.Error("second signal: exiting at once", "signal", sig.String())
			forced.Store(true)
			if e.Exit != nil {
				e.Exit(ExitInterrupted)
			}
		case <-timer.C:
			log.Error("the shutdown timeout ran out: abandoning the requests in flight", "shutdown_timeout", cfg.ShutdownTimeout.String())
		case <-quit:
			return
		}
		cancelHard()
	}()

	code := run(hard, stop, cfg, log, h, e.Listening)
	if forced.Load() {
		return ExitInterrupted
	}
	return code
}

// run connects, checks and runs in the configured mode.
func run(hard, stop context.Context, cfg Config, log *slog.Logger, h *health, listening func(string)) int {
	metrics := NewMetrics(cfg.DryRun)
	if cfg.Listen != "" {
		srv, err := serveHTTP(cfg.Listen, h.handler(metrics), log)
		if err != nil {
			log.Error("cannot serve HTTP", "error", err)
			return ExitFailure
		}
		defer srv.shutdown()
		log.Info("serving /metrics, /healthz and /readyz", "address", srv.addr.String())
		if listening != nil {
			listening(srv.addr.String())
		}
	}
	failed := func(msg string, err error) int {
		if stop.Err() != nil {
			log.Warn("interrupted during start-up", "error", err)
			return ExitInterrupted
		}
		log.Error(msg, "error", err)
		return ExitFailure
	}

	var plans map[string][]sweep.ThreadPlan
	if cfg.ApplyFile != "" {
		var err error
		if plans, err = readPlan(cfg.ApplyFile, cfg.Targets); err != nil {
			log.Error("cannot apply the plan; nothing was done", "error", err)
			return ExitUsage
		}
	}
	// A skewed clock, for tests of clocks that disagree (skewclock.Env):
	// it moves the prune's and the sweep's ages and this process's lease
	// acquires, and nothing else; no decision to delete reads it.
	storeNow, runNow := cairn.SystemClock, time.Now
	if c, err := skewclock.FromEnv(cairn.SystemClock); err != nil {
		log.Error("cannot read the test clock; nothing was done", "error", err)
		return ExitUsage
	} else if c != nil {
		log.Warn("running on a skewed clock, for tests only", "env", skewclock.Env, "clock", c.String())
		storeNow, runNow = c.Now, c.Time
	}
	client, err := cli.ConnectEtcd(stop, cfg.Etcd, cfg.Targets[0].Prefix, cfg.ProbeTimeout)
	if err != nil {
		return failed("etcd check failed; nothing was done", err)
	}
	defer client.Close()
	log.Info("etcd answers", "endpoints", cli.RedactURLs(strings.Join(cfg.Etcd.Endpoints, ",")))
	metrics.WatchEtcd(client, cfg.Etcd.RequestTimeout)
	actx, cancel := context.WithTimeout(stop, cfg.ProbeTimeout)
	if w := cli.EtcdAuthWarning(actx, client, cfg.Etcd); w != "" {
		log.Warn(w)
	}
	cancel()

	// One sweeper per bucket: the targets that share a bucket are pruned one
	// by one and swept together (docs/shared-buckets.md). The group's first
	// prefix in byte order owns the sweeper and its lock, so that every
	// sweeper of the same group takes the same lock.
	groups := GroupByBucket(cfg.Targets)
	var sweepers []*Sweeper
	for gi, g := range groups {
		t := g[0]
		s3 := cfg.S3
		s3.Bucket, s3.Logger = t.Bucket, log
		blobs, err := cli.OpenBucket(stop, s3, cfg.ProbeTimeout)
		if err != nil {
			return failed("bucket check failed; nothing was done", err)
		}
		defer blobs.Close()
		log.Info("bucket answers", "bucket", t.Bucket, "endpoint", cli.RedactURLs(cfg.S3.Endpoint), "prefix", t.Prefix, "prefixes", len(g))

		var stores []*etcdstore.Store
		for _, gt := range g {
			store, err := etcdstore.New(client, gt.Prefix, etcdstore.Options{Options: cairn.Options{Now: storeNow}, Logger: log, Objects: blobs})
			if err != nil {
				return failed("cannot open the store", err)
			}
			defer store.Close()
			stores = append(stores, store)
			metrics.Policies(gt.Name)
		}
		mirror, err := openMirror(stop, cfg, stores[0], len(groups), gi, len(g), log.With("prefix", t.Prefix))
		if err != nil {
			return failed("cannot open the mirror file", err)
		}
		if mirror != nil {
			defer mirror.Close()
		}
		var others []OtherTarget
		for i, gt := range g[1:] {
			var apply []sweep.ThreadPlan
			if plans != nil {
				apply = plans[gt.Prefix]
			}
			others = append(others, OtherTarget{Store: stores[i+1], Policy: gt.Policy, PolicyName: gt.Name, Apply: apply})
		}
		var apply []sweep.ThreadPlan
		if plans != nil {
			apply = plans[t.Prefix]
		}
		sw := NewSweeper(client, stores[0], blobs, RunOptions{
			Policy:          t.Policy,
			PolicyName:      t.Name,
			Apply:           apply,
			OlderThan:       cfg.OlderThan,
			DryRun:          cfg.DryRun,
			MaxDeletes:      cfg.MaxDeletes,
			BatchSize:       cfg.BatchSize,
			Verify:          cfg.Verify,
			Repair:          cfg.Repair,
			AllowEmptyStore: cfg.AllowEmptyStore,
			LockTTL:         cfg.LockTTL,
			RequestTimeout:  cfg.Etcd.RequestTimeout,
			Bucket:          t.Bucket,
			Others:          others,
			Now:             runNow,
			Mirror:          mirror,
			FullRunEvery:    cfg.FullRunEvery,
		}, log.With("prefix", t.Prefix, "bucket", t.Bucket), metrics)
		defer sw.Close()
		sweepers = append(sweepers, sw)
	}
	if cfg.Bind || len(cfg.Unbind) > 0 {
		if err := changeBindings(stop, cfg, sweepers, log); err != nil {
			return failed("the binding registry was not changed completely", err)
		}
		return ExitOK
	}
	h.setReady(true, "")

	// runAll runs every target once, in order; a failed target does not
	// stop the others, a signal does. It returns the first failure.
	runAll := func(mode LockMode) ([]RunReport, error) {
		var reps []RunReport
		var first error
		for _, sw := range sweepers {
			rep, err := sw.Run(hard, stop, mode)
			reps = append(reps, rep)
			if err != nil && first == nil {
				first = err
			}
			if stop.Err() != nil {
				break
			}
		}
		return reps, first
	}
	if cfg.Once {
		reps, err := runAll(LockMode{Timeout: cfg.LockTimeout})
		if cfg.PlanFile != "" && (err == nil || errors.Is(err, sweep.ErrUncovered)) {
			// A refused sweep's plan says what it does not cover.
			plan := PlanFile{Version: planVersion, CreatedAt: time.Now().UTC()}
			for i, g := range groups {
				plan.Targets = append(plan.Targets, planOf(g[0], reps[i]))
				for j, t := range g[1:] {
					// The bucket's sweep is reported on the group's first
					// target.
					plan.Targets = append(plan.Targets, planOf(t, RunReport{Prune: reps[i].OtherPrunes[j]}))
				}
			}
			if err = writePlan(cfg.PlanFile, plan); err == nil {
				log.Info("plan written", "plan", cfg.PlanFile, "targets", len(plan.Targets))
			} else {
				log.Error("cannot write the plan", "plan", cfg.PlanFile, "error", err)
			}
		}
		code := ExitCode(err)
		log.Info("sweeper exiting", "exit_code", code)
		return code
	}
	for {
		_, _ = runAll(LockMode{Wait: true})
		if stop.Err() != nil {
			break
		}
		log.Debug("next run scheduled", "in", cfg.Interval.String())
		timer := time.NewTimer(cfg.Interval)
		select {
		case <-stop.Done():
			timer.Stop()
		case <-timer.C:
		}
		if stop.Err() != nil {
			break
		}
	}
	log.Info("sweeper stopped", "exit_code", ExitOK)
	return ExitOK
}

// changeBindings carries out --bind or --unbind on every sweeper's bucket.
func changeBindings(ctx context.Context, cfg Config, sweepers []*Sweeper, log *slog.Logger) error {
	for _, sw := range sweepers {
		p, ok := sw.blobs.(bucket.Binder)
		if !ok {
			return fmt.Errorf("%w: %T", bucket.ErrCannotBind, sw.blobs)
		}
		own, _, err := sw.store.BucketBinding(ctx)
		if err != nil {
			return err
		}
		if len(cfg.Unbind) > 0 {
			for _, prefix := range cfg.Unbind {
				b := cairn.Binding{Cluster: own.Cluster, Prefix: prefix}
				if err := bucket.Unbind(ctx, sw.blobs, b); err != nil {
					return err
				}
				log.Info("binding removed", "bucket", sw.opts.Bucket, "cluster", b.Cluster, "prefix", b.Prefix)
			}
			continue
		}
		stores := []*etcdstore.Store{sw.store}
		for _, o := range sw.opts.Others {
			stores = append(stores, o.Store)
		}
		for _, st := range stores {
			b, _, err := st.BucketBinding(ctx)
			if err != nil {
				return err
			}
			if err := bucket.Record(ctx, p, b); err != nil {
				return err
			}
			log.Info("binding recorded", "bucket", sw.opts.Bucket, "cluster", b.Cluster, "prefix", b.Prefix)
		}
		if err := bucket.MarkRegistry(ctx, p); err != nil {
			return err
		}
		log.Info("binding registry marked complete", "bucket", sw.opts.Bucket)
	}
	return nil
}

// openMirror opens the incremental sweep's mirror of store, the first of a
// group of size stores (group gi of n): nil with --full-walk, and for a group
// of several stores, which the walk sweeps together. With several groups
// each has its own file, --mirror-file with ".<gi>" added.
func openMirror(ctx context.Context, cfg Config, store *etcdstore.Store, n, gi, size int, log *slog.Logger) (*etcdstore.Mirror, error) {
	if cfg.FullWalk {
		log.Info("the sweep walks every reference (--full-walk)")
		return nil, nil
	}
	if size > 1 {
		log.Info("the prefixes sharing this bucket are swept by a full walk; the mirror serves a bucket of one prefix")
		return nil, nil
	}
	path := cfg.MirrorFile
	if path != "" && n > 1 {
		path = fmt.Sprintf("%s.%d", path, gi)
	}
	m, err := store.OpenMirror(ctx, path)
	if err != nil {
		return nil, err
	}
	m.SetReadRate(cfg.MirrorReadRate)
	switch why := m.Stats().Discarded; {
	case path == "":
		log.Warn("no --mirror-file: the mirror is kept in memory, so the first sweep after each start reads every reference and every root from the bucket")
	case why != "":
		log.Warn("mirror file discarded; the first sweep rebuilds it from every reference", "path", path, "reason", why)
	default:
		log.Info("mirror file opened; the sweep follows the store from its revision", "path", path, "revision", m.Revision())
	}
	return m, nil
}
