// Package topology reads how an etcd cluster spread over regions is laid
// out and behaves: its members, the region of each, the leader, the round
// trips etcd itself measured between members, and which member serves the
// most writes. cairn doctor prints it and warns when the leader is outside
// the region that writes most (docs/regions.md); the integration harness
// reads the same round trips to check its simulated WAN.
package topology

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is one etcd member as the cluster reports it.
type Member struct {
	ID        uint64 `json:"id"`
	Name      string `json:"name"`
	Region    string `json:"region"`
	ClientURL string `json:"clientURL"`
	Leader    bool   `json:"leader"`
	Learner   bool   `json:"learner,omitempty"`
	// Revision is the member's applied revision when it was asked.
	Revision int64 `json:"revision"`
	// Writes counts the write requests (Txn, Put, DeleteRange) the member
	// has handled for its clients since it started: clients talk to their
	// region's member, so it shows where the writes come from. Read-only
	// transactions are counted too; etcd does not tell them apart.
	Writes float64 `json:"writes"`
	// Err is why the member could not be asked; the fields above it are then
	// partly empty.
	Err string `json:"error,omitempty"`
}

// Probe is the mean of etcd's probes from one member to another
// (etcd_network_peer_round_trip_time_seconds): over a WAN proxy that delays
// one direction it is one member's share of the round trip.
type Probe struct {
	Mean    time.Duration
	Samples uint64
}

// RTT is the round trip etcd measured between two members: the sum of the
// means of their probes of each other.
type RTT struct {
	A, B    string        `json:"-"`
	Pair    string        `json:"pair"`
	Mean    time.Duration `json:"mean"`
	Samples uint64        `json:"samples"`
}

// Report is what Inspect found.
type Report struct {
	Members []Member `json:"members"`
	RTTs    []RTT    `json:"rtts"`
	// Warnings are the findings that need an operator's action.
	Warnings []string `json:"warnings"`
}

// Inspect asks every member of the cluster for its status and its metrics
// (its client URL's /metrics, through hc) and returns the topology. region
// names each member's region from its name; nil takes the name itself. It
// warns when a member cannot be asked, when no member or several claim to
// lead, and when the leader's region is not the one whose member handled the
// most writes. Errors: the member list's; a member that fails is reported in
// Member.Err and Warnings instead.
func Inspect(ctx context.Context, cli *clientv3.Client, hc *http.Client, region func(name string) string) (Report, error) {
	if region == nil {
		region = func(name string) string { return name }
	}
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("topology: member list: %w", err)
	}
	var r Report
	names := map[string]string{} // member id in hex -> name
	probes := map[[2]string]Probe{}
	leaders := map[uint64]bool{}
	for _, m := range ml.Members {
		mem := Member{ID: m.ID, Name: m.Name, Region: region(m.Name), Learner: m.IsLearner}
		names[strconv.FormatUint(m.ID, 16)] = m.Name
		if len(m.ClientURLs) == 0 {
			mem.Err = "not started (no client URL)"
			r.Members = append(r.Members, mem)
			continue
		}
		mem.ClientURL = m.ClientURLs[0]
		st, err := cli.Maintenance.Status(ctx, mem.ClientURL)
		if err != nil {
			mem.Err = err.Error()
			r.Members = append(r.Members, mem)
			continue
		}
		leaders[st.Leader] = true
		if st.Header != nil {
			mem.Revision = st.Header.Revision
		}
		fams, err := Metrics(ctx, hc, mem.ClientURL)
		if err != nil {
			mem.Err = err.Error()
		} else {
			mem.Writes = Writes(fams)
			for to, p := range PeerProbes(fams) {
				probes[[2]string{m.Name, to}] = p
			}
		}
		r.Members = append(r.Members, mem)
	}
	for i := range r.Members {
		r.Members[i].Leader = leaders[r.Members[i].ID]
	}
	for i, a := range r.Members {
		for _, b := range r.Members[i+1:] {
			ab, ok1 := probes[[2]string{a.Name, hexID(b.ID)}]
			ba, ok2 := probes[[2]string{b.Name, hexID(a.ID)}]
			if ok1 && ok2 {
				r.RTTs = append(r.RTTs, RTT{A: a.Name, B: b.Name, Pair: a.Name + "-" + b.Name, Mean: ab.Mean + ba.Mean, Samples: min(ab.Samples, ba.Samples)})
			}
		}
	}
	r.Warnings = warnings(r.Members)
	return r, nil
}

func hexID(id uint64) string { return strconv.FormatUint(id, 16) }

// warnings returns what needs action in members.
func warnings(members []Member) []string {
	var out []string
	var leader *Member
	nLeaders := 0
	for i, m := range members {
		if m.Err != "" {
			out = append(out, fmt.Sprintf("member %s (%s) could not be asked: %s", m.Name, m.ClientURL, m.Err))
		}
		if m.Leader {
			leader = &members[i]
			nLeaders++
		}
	}
	switch {
	case nLeaders == 0:
		out = append(out, "no member reports a leader")
	case nLeaders > 1:
		out = append(out, fmt.Sprintf("%d members claim to lead", nLeaders))
	}
	writes := map[string]float64{}
	for _, m := range members {
		writes[m.Region] += m.Writes
	}
	regions := make([]string, 0, len(writes))
	for reg := range writes {
		regions = append(regions, reg)
	}
	slices.Sort(regions)
	most := ""
	for _, reg := range regions {
		if writes[reg] > 0 && (most == "" || writes[reg] > writes[most]) {
			most = reg
		}
	}
	if leader != nil && nLeaders == 1 && most != "" && writes[most] > writes[leader.Region] {
		out = append(out, fmt.Sprintf("the leader %s is in region %s, but region %s handles the most writes (%.0f against %.0f): every write from %s pays a round trip to %s; move the leader (etcdctl move-leader)",
			leader.Name, leader.Region, most, writes[most], writes[leader.Region], most, leader.Region))
	}
	return out
}

// Metrics reads and parses the Prometheus metrics an etcd member serves on
// its client URL.
func Metrics(ctx context.Context, hc *http.Client, clientURL string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(clientURL, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("topology: metrics of %s: %w", clientURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("topology: metrics of %s: %s", clientURL, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("topology: metrics of %s: %w", clientURL, err)
	}
	return fams, nil
}

// PeerProbes returns a member's probes of its peers, by the peer's id in
// hex (the metric's "To" label), from its metrics.
func PeerProbes(fams map[string]*dto.MetricFamily) map[string]Probe {
	out := map[string]Probe{}
	for _, metric := range fams["etcd_network_peer_round_trip_time_seconds"].GetMetric() {
		to := label(metric, "To")
		h := metric.GetHistogram()
		if to == "" || h == nil || h.GetSampleCount() == 0 {
			continue
		}
		out[to] = Probe{Mean: time.Duration(h.GetSampleSum() / float64(h.GetSampleCount()) * float64(time.Second)), Samples: h.GetSampleCount()}
	}
	return out
}

// Writes returns how many Txn, Put and DeleteRange requests a member has
// handled, from its metrics (grpc_server_handled_total).
func Writes(fams map[string]*dto.MetricFamily) float64 {
	var n float64
	for _, metric := range fams["grpc_server_handled_total"].GetMetric() {
		if label(metric, "grpc_service") != "etcdserverpb.KV" {
			continue
		}
		switch label(metric, "grpc_method") {
		case "Txn", "Put", "DeleteRange":
			n += metric.GetCounter().GetValue()
		}
	}
	return n
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
