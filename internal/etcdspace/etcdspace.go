// Package etcdspace reads how full an etcd cluster is and brings it back
// from its NOSPACE alarm: the status of each member (database size, size in
// use, quota), the alarms raised, what a store's records hold by kind, and
// the recovery (compact, defragment member by member, disarm). cairn doctor
// and the sidecar's gauges use it; docs/operations.md describes the
// procedure.
package etcdspace

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn/keys"
)

// Member is the space status of one etcd member.
type Member struct {
	ID       uint64 `json:"id"`
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	// DBSize is the size of the member's database file, the figure etcd
	// compares with its quota; DBSizeInUse the part of it that holds data
	// (the rest is free pages a defragmentation gives back); Quota the
	// member's --quota-backend-bytes (0 when the member does not report it).
	DBSize      int64 `json:"dbSize"`
	DBSizeInUse int64 `json:"dbSizeInUse"`
	Quota       int64 `json:"quota"`
	// Err is why the member's status could not be read; the sizes are then 0.
	Err string `json:"error,omitempty"`
}

// Used returns DBSize as a fraction of Quota, or 0 when Quota is unknown.
func (m Member) Used() float64 {
	if m.Quota <= 0 {
		return 0
	}
	return float64(m.DBSize) / float64(m.Quota)
}

// Status is the space status of a cluster.
type Status struct {
	Members []Member `json:"members"`
	// NoSpace lists the members whose NOSPACE alarm is raised. While any
	// is, etcd refuses every request that puts a key, cluster-wide.
	NoSpace []uint64 `json:"noSpaceAlarms"`
	// Revision is the cluster's current revision.
	Revision int64 `json:"revision"`
}

// Alarmed reports whether a NOSPACE alarm is raised.
func (s Status) Alarmed() bool { return len(s.NoSpace) > 0 }

// Read returns the status of every member of the cluster cli talks to. Each
// of the client's endpoints is asked for its status, which names its member;
// a member that none of them reaches is tried at its advertised client URL,
// and reported with Err when that fails too. The error is for the member
// list and the alarm list.
func Read(ctx context.Context, cli *clientv3.Client) (Status, error) {
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("etcdspace: member list: %w", err)
	}
	var st Status
	byID := map[uint64]*clientv3.StatusResponse{}
	endpoint := map[uint64]string{}
	for _, ep := range cli.Endpoints() {
		sr, err := cli.Status(ctx, hostPort(ep))
		if err == nil {
			byID[sr.Header.GetMemberId()], endpoint[sr.Header.GetMemberId()] = sr, hostPort(ep)
		}
	}
	for _, m := range ml.Members {
		mem := Member{ID: m.ID, Name: m.Name, Endpoint: endpoint[m.ID]}
		sr := byID[m.ID]
		if sr == nil {
			if len(m.ClientURLs) == 0 {
				mem.Err = "the member has no client URL"
				st.Members = append(st.Members, mem)
				continue
			}
			mem.Endpoint = hostPort(m.ClientURLs[0])
			sctx, cancel := context.WithTimeout(ctx, memberTimeout)
			sr, err = cli.Status(sctx, mem.Endpoint)
			cancel()
			if err != nil {
				mem.Err = err.Error()
				st.Members = append(st.Members, mem)
				continue
			}
		}
		mem.DBSize, mem.DBSizeInUse, mem.Quota = sr.DbSize, sr.DbSizeInUse, sr.DbSizeQuota
		st.Revision = max(st.Revision, sr.Header.GetRevision())
		st.Members = append(st.Members, mem)
	}
	al, err := cli.AlarmList(ctx)
	if err != nil {
		return st, fmt.Errorf("etcdspace: alarm list: %w", err)
	}
	for _, a := range al.Alarms {
		if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
			st.NoSpace = append(st.NoSpace, a.MemberID)
		}
	}
	return st, nil
}

// memberTimeout bounds the status request to a member outside the client's
// endpoints, at its advertised URL.
const memberTimeout = 5 * time.Second

// hostPort returns the host:port of a member's client URL, the form the
// client's maintenance calls dial (a URL with its scheme they do not).
func hostPort(u string) string {
	if p, err := url.Parse(u); err == nil && p.Host != "" {
		return p.Host
	}
	return u
}

// KindUsage is what the records of one kind hold: their number and the bytes
// of their keys and values (the live data; etcd's database holds more: the
// history not yet compacted, and its own overhead).
type KindUsage struct {
	Kind  string `json:"kind"`
	Keys  int    `json:"keys"`
	Bytes int64  `json:"bytes"`
}

// Usage reads every key under the layout's prefix, a page at a time, and
// returns what each kind of record holds (keys.Layout.Kind; "other" for keys
// of no known kind), largest first. Reads are served under the alarm.
func Usage(ctx context.Context, cli *clientv3.Client, layout keys.Layout) ([]KindUsage, error) {
	root := layout.Root()
	start, end := string(root), string(keys.PrefixEnd(root))
	by := map[string]*KindUsage{}
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(256)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, start, opts...)
		if err != nil {
			return nil, fmt.Errorf("etcdspace: read %q: %w", start, err)
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			k := layout.Kind(kv.Key)
			if k == "" {
				k = "other"
			}
			u := by[k]
			if u == nil {
				u = &KindUsage{Kind: k}
				by[k] = u
			}
			u.Keys++
			u.Bytes += int64(len(kv.Key) + len(kv.Value))
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	out := make([]KindUsage, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b KindUsage) int {
		if a.Bytes != b.Bytes {
			return int(b.Bytes - a.Bytes)
		}
		return compareStrings(a.Kind, b.Kind)
	})
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// RecoverOptions configures Recover.
type RecoverOptions struct {
	// Threshold is the fraction of its quota every member's database must
	// be below, after the defragmentation, for the alarm to be disarmed;
	// 0 selects 0.8. It must be below 1: disarming a member still at its
	// quota only lets the next write raise the alarm again.
	Threshold float64
	// Log, when set, is told each step.
	Log func(step string)
}

// RecoverReport says what Recover did.
type RecoverReport struct {
	CompactedAt int64  `json:"compactedAt"`
	Before      Status `json:"before"`
	After       Status `json:"after"`
	Disarmed    bool   `json:"disarmed"`
}

// ErrStillFull is returned by Recover when a member's database is still at
// or above the threshold after the defragmentation: the alarm stays, and
// more must be deleted first (sweeper --once, cairn.KeepNewest).
var ErrStillFull = errors.New("etcdspace: a member is still above the threshold after defragmentation; the alarm stays raised")

// Recover frees the space that deletes left in etcd and lifts the alarm:
// it compacts the history at the current revision (physically, so the
// space is free when it returns), defragments each member in turn (one at a
// time, so that the others keep serving), reads the status again and, when
// every member's database is below opts.Threshold of its quota, disarms the
// NOSPACE alarms. Otherwise it returns ErrStillFull with the report, and the
// alarms stay. Compaction discards the history before the current revision:
// a read or watch at an older revision fails with ErrCompacted afterwards.
func Recover(ctx context.Context, cli *clientv3.Client, opts RecoverOptions) (RecoverReport, error) {
	if opts.Threshold == 0 {
		opts.Threshold = 0.8
	}
	if opts.Threshold <= 0 || opts.Threshold >= 1 {
		return RecoverReport{}, fmt.Errorf("etcdspace: threshold %v is not between 0 and 1", opts.Threshold)
	}
	say := func(format string, args ...any) {
		if opts.Log != nil {
			opts.Log(fmt.Sprintf(format, args...))
		}
	}
	var rep RecoverReport
	var err error
	if rep.Before, err = Read(ctx, cli); err != nil {
		return rep, err
	}
	for _, m := range rep.Before.Members {
		if m.Err != "" {
			return rep, fmt.Errorf("etcdspace: member %s (%x) is not answering, recover when every member is: %s", m.Name, m.ID, m.Err)
		}
	}
	say("compacting at revision %d", rep.Before.Revision)
	if _, err := cli.Compact(ctx, rep.Before.Revision, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, errCompacted) {
		return rep, fmt.Errorf("etcdspace: compact: %w", err)
	}
	rep.CompactedAt = rep.Before.Revision
	for _, m := range rep.Before.Members {
		say("defragmenting member %s (%s)", m.Name, m.Endpoint)
		if _, err := cli.Defragment(ctx, m.Endpoint); err != nil {
			return rep, fmt.Errorf("etcdspace: defragment %s: %w", m.Endpoint, err)
		}
	}
	if rep.After, err = Read(ctx, cli); err != nil {
		return rep, err
	}
	for _, m := range rep.After.Members {
		if m.Quota > 0 && float64(m.DBSize) >= opts.Threshold*float64(m.Quota) {
			return rep, ErrStillFull
		}
	}
	for _, id := range rep.After.NoSpace {
		say("disarming the NOSPACE alarm of member %x", id)
		if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: id, Alarm: etcdserverpb.AlarmType_NOSPACE}); err != nil {
			return rep, fmt.Errorf("etcdspace: disarm: %w", err)
		}
	}
	rep.Disarmed = len(rep.After.NoSpace) > 0
	if rep.After, err = Read(ctx, cli); err != nil {
		return rep, err
	}
	return rep, nil
}

// errCompacted is etcd's answer to a compaction at a revision already
// compacted: nothing is left to do.
var errCompacted = rpctypes.ErrCompacted
