package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/internal/etcdspace"
	"github.com/cairnstore/cairn/internal/topology"
)

var doctorCmd = &command{
	name: "doctor", args: "[flags]", nargs: 0, store: true,
	summary: "show how full etcd is and how its members are spread over regions; with --recover, bring it back from its NOSPACE alarm",
	help: `Reads the space status of every etcd member (database size, size in use, quota)
and the alarms raised, and what the records under --prefix hold, by kind. It
changes nothing, and exits 4 when etcd's NOSPACE alarm is raised: etcd then
refuses every write that adds data (SANDBOX_SNAPSHOT_STORE_FULL), for every
prefix, until the space is freed and the alarm disarmed.

It also shows the members' regions (--regions, or each member's name), the
leader, the round trips etcd measured between members, and the writes each
member handled, from their /metrics; it exits 4 too when a member cannot be
asked, when there is no single leader, or when the leader is outside the
region that writes most (every write from there pays a round trip to the
leader: move it with etcdctl move-leader). docs/regions.md has the topology.

The way back (docs/operations.md): free space with deletes, which etcd still
takes (sweeper --once, or cairn.KeepNewest, prune with deletes only under the
alarm), then run cairn doctor --recover: it compacts etcd's history at the
current revision, defragments the members one at a time, and disarms the
alarm once every member's database is below --threshold of its quota
(otherwise it exits 4 and leaves the alarm: delete more first). Compaction
discards etcd's history: reads at older revisions fail afterwards.

Example:
  cairn doctor
  cairn doctor --recover --threshold 0.7
  cairn doctor --regions etcd-1=eu,etcd-2=us,etcd-3=ap
  cairn doctor -o json`,
	setup: func(s *cli.Set) func(context.Context, *call) error {
		recoverFlag := s.Bool("recover", false, "compact, defragment every member and disarm the NOSPACE alarm once usage is below --threshold")
		threshold := s.Float64("threshold", 0.8, "the fraction of its quota every member must be below for --recover to disarm the alarm")
		regions := s.String("regions", "", "the region of each member, as name=region,... (a member not listed is in the region of its name)")
		output := outputFlag(s)
		return func(ctx context.Context, c *call) error {
			if *threshold <= 0 || *threshold >= 1 {
				return cli.Usagef("--threshold must be between 0 and 1, got %v", *threshold)
			}
			regionOf, err := parseRegions(*regions)
			if err != nil {
				return err
			}
			if err := c.open(ctx); err != nil {
				return err
			}
			var rep doctorReport
			if *recoverFlag {
				r, rerr := etcdspace.Recover(ctx, c.client, etcdspace.RecoverOptions{Threshold: *threshold, Log: func(step string) {
					if *output != "json" {
						fmt.Fprintln(c.p.stderr, step)
					}
				}})
				rep.Recover, rep.Status = &r, r.After
				if rerr != nil && !errors.Is(rerr, etcdspace.ErrStillFull) {
					return fmt.Errorf("recover: %w", rerr)
				}
				err = rerr
			} else if rep.Status, err = etcdspace.Read(ctx, c.client); err != nil {
				return fmt.Errorf("read etcd's status: %w", err)
			}
			if rep.Usage, err = etcdspace.Usage(ctx, c.client, c.store.Layout()); err != nil {
				return err
			}
			tc, terr := c.conn.etcd.TLSConfig()
			if terr != nil {
				return terr
			}
			hc := &http.Client{Timeout: c.conn.probe, Transport: &http.Transport{TLSClientConfig: tc}}
			top, terr := topology.Inspect(ctx, c.client, hc, regionOf)
			if terr != nil {
				return terr
			}
			rep.Topology = &top
			if *output == "json" {
				if err := writeJSON(c.p.stdout, rep); err != nil {
					return err
				}
			} else if err := rep.text(c.p.stdout); err != nil {
				return err
			}
			switch {
			case len(rep.Topology.Warnings) > 0 && err == nil && !rep.Status.Alarmed():
				return fmt.Errorf("%w: %s", errProblems, strings.Join(rep.Topology.Warnings, "; "))
			case rep.Recover != nil && rep.Recover.After.Alarmed():
				return fmt.Errorf("%w: the NOSPACE alarm stays raised: a member is still at or above %v of its quota after the defragmentation; delete more (sweeper --once) and run --recover again",
					errProblems, *threshold)
			case rep.Status.Alarmed():
				return fmt.Errorf("%w: etcd's NOSPACE alarm is raised: writes are refused until space is freed (sweeper --once) and cairn doctor --recover runs", errProblems)
			}
			return nil
		}
	},
}

// doctorReport is what cairn doctor prints.
type doctorReport struct {
	Status  etcdspace.Status         `json:"status"`
	Usage   []etcdspace.KindUsage    `json:"usage"`
	Recover *etcdspace.RecoverReport `json:"recover,omitempty"`
	// Topology is the members' regions, the leader and the round trips.
	Topology *topology.Report `json:"topology,omitempty"`
}

// parseRegions reads --regions: name=region pairs separated by commas. The
// function it returns gives a member's region, or its name when it is not
// listed.
func parseRegions(s string) (func(name string) string, error) {
	m := map[string]string{}
	for pair := range strings.SplitSeq(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		name, region, ok := strings.Cut(pair, "=")
		if !ok || name == "" || region == "" {
			return nil, cli.Usagef("--regions takes name=region pairs separated by commas, got %q", pair)
		}
		m[name] = region
	}
	return func(name string) string {
		if r, ok := m[name]; ok {
			return r
		}
		return name
	}, nil
}

func (r doctorReport) text(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tENDPOINT\tDB SIZE\tIN USE\tQUOTA\tUSED")
	for _, m := range r.Status.Members {
		if m.Err != "" {
			fmt.Fprintf(tw, "%s (%x)\t%s\t-\t-\t-\t%s\n", m.Name, m.ID, m.Endpoint, m.Err)
			continue
		}
		fmt.Fprintf(tw, "%s (%x)\t%s\t%s\t%s\t%s\t%.0f%%\n", m.Name, m.ID, m.Endpoint, mib(m.DBSize), mib(m.DBSizeInUse), mib(m.Quota), 100*m.Used())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Status.Alarmed() {
		fmt.Fprintf(w, "alarm: NOSPACE raised on %d member(s): etcd refuses every write that adds data\n", len(r.Status.NoSpace))
	} else {
		fmt.Fprintln(w, "alarm: none")
	}
	if r.Recover != nil {
		fmt.Fprintf(w, "recover: compacted at revision %d, defragmented %d member(s), disarmed %v\n",
			r.Recover.CompactedAt, len(r.Recover.Before.Members), r.Recover.Disarmed)
	}
	fmt.Fprintln(w, "records under the prefix (live keys and values; etcd also holds their history until compacted):")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tKEYS\tBYTES")
	for _, u := range r.Usage {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", u.Kind, u.Keys, mib(u.Bytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Topology == nil {
		return nil
	}
	fmt.Fprintln(w, "members by region:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tREGION\tROLE\tREVISION\tWRITES HANDLED")
	for _, m := range r.Topology.Members {
		role := "follower"
		switch {
		case m.Err != "":
			role = "unreachable"
		case m.Leader:
			role = "leader"
		case m.Learner:
			role = "learner"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f\n", m.Name, m.Region, role, m.Revision, m.Writes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, rtt := range r.Topology.RTTs {
		fmt.Fprintf(w, "round trip %s: %v (%d probes)\n", rtt.Pair, rtt.Mean.Round(100*time.Microsecond), rtt.Samples)
	}
	for _, warn := range r.Topology.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	return nil
}

// mib formats a byte count in MiB, or in bytes below 1 MiB.
func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
