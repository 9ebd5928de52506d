package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ThreeRegions is the test bed of a cluster spread over three regions: round
// trips A-B 70 ms, A-C 140 ms and B-C 100 ms between members, about 1 ms
// between each region's clients and its member.
var ThreeRegions = []Region{
	{Name: "A", PeerDelay: 55 * time.Millisecond},
	{Name: "B", PeerDelay: 15 * time.Millisecond},
	{Name: "C", PeerDelay: 85 * time.Millisecond},
}

// PeerRTT is the round trip between two members, as configured and as etcd
// measured it.
type PeerRTT struct {
	A, B       string // member names
	Configured time.Duration
	Measured   time.Duration
	Samples    uint64 // the fewer of the two directions' probes
}

// Ratio returns Measured / Configured.
func (r PeerRTT) Ratio() float64 { return float64(r.Measured) / float64(r.Configured) }

func (r PeerRTT) String() string {
	return fmt.Sprintf("%s-%s %v measured %v (%.2fx, %d samples)", r.A, r.B, r.Configured,
		r.Measured.Round(100*time.Microsecond), r.Ratio(), r.Samples)
}

// PeerRTTs returns, for each pair of members that etcd has probed both ways,
// the round trip etcd measured between them and the one the regions
// configure. Each member probes each peer and reports the mean in
// etcd_network_peer_round_trip_time_seconds on its /metrics (client URL). A
// probe from X to Y crosses only Y's proxy, whose delay is on the way back,
// so it measures Y's one-way delay; the round trip between X and Y is the
// sum of the two directions' means.
func (c *Cluster) PeerRTTs(ctx context.Context) ([]PeerRTT, error) {
	ids := map[string]*Member{} // member id in hex -> member
	for _, st := range c.Statuses(ctx) {
		if st.Err != nil {
			return nil, fmt.Errorf("harness: status of %s: %w", st.Member.Name, st.Err)
		}
		ids[strconv.FormatUint(st.ID, 16)] = st.Member
	}
	type probe struct {
		mean    time.Duration
		samples uint64
	}
	probes := map[[2]*Member]probe{}
	for _, m := range c.Members {
		fams, err := c.metrics(ctx, m)
		if err != nil {
			return nil, err
		}
		// A member reports the metric once it has probed a peer.
		for _, metric := range fams["etcd_network_peer_round_trip_time_seconds"].GetMetric() {
			var to *Member
			for _, l := range metric.GetLabel() {
				if l.GetName() == "To" {
					to = ids[l.GetValue()]
				}
			}
			h := metric.GetHistogram()
			if to == nil || h == nil || h.GetSampleCount() == 0 {
				continue
			}
			probes[[2]*Member{m, to}] = probe{time.Duration(h.GetSampleSum() / float64(h.GetSampleCount()) * float64(time.Second)), h.GetSampleCount()}
		}
	}
	var out []PeerRTT
	for i, a := range c.Members {
		for _, b := range c.Members[i+1:] {
			ab, ok1 := probes[[2]*Member{a, b}]
			ba, ok2 := probes[[2]*Member{b, a}]
			if !ok1 || !ok2 {
				continue
			}
			out = append(out, PeerRTT{A: a.Name, B: b.Name, Configured: RTT(a.Region, b.Region),
				Measured: ab.mean + ba.mean, Samples: min(ab.samples, ba.samples)})
		}
	}
	return out, nil
}

// metrics reads and parses a member's /metrics.
func (c *Cluster) metrics(ctx context.Context, m *Member) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(m.ClientURL, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	if c.tls != nil {
		hc.Transport = &http.Transport{TLSClientConfig: c.tls}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("harness: metrics of %s: %w", m.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("harness: metrics of %s: %w", m.Name, err)
	}
	return fams, nil
}

// RegionOf returns the member of the named region, or nil.
func (c *Cluster) RegionOf(name string) *Member {
	for _, m := range c.Members {
		if m.Region.Name == name {
			return m
		}
	}
	return nil
}

// Jitter makes the delay of what the member sends its peers vary uniformly
// within ±rv around its region's PeerDelay (etcd's proxy draws each write's
// delay); Jitter(0) restores the fixed delay. It needs ClusterConfig.Regions.
func (m *Member) Jitter(rv time.Duration) {
	m.proxy.DelayRx(m.Region.PeerDelay, rv)
}
