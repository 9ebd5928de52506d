package harness

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cairnstore/cairn/internal/topology"
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
// sum of the two directions' means (topology.Inspect adds them the same
// way).
func (c *Cluster) PeerRTTs(ctx context.Context) ([]PeerRTT, error) {
	ids := map[*Member]string{} // member -> id in hex
	for _, st := range c.Statuses(ctx) {
		if st.Err != nil {
			return nil, fmt.Errorf("harness: status of %s: %w", st.Member.Name, st.Err)
		}
		ids[st.Member] = strconv.FormatUint(st.ID, 16)
	}
	probes := map[*Member]map[string]topology.Probe{}
	for _, m := range c.Members {
		fams, err := topology.Metrics(ctx, c.HTTPClient(), m.ClientURL)
		if err != nil {
			return nil, err
		}
		probes[m] = topology.PeerProbes(fams)
	}
	var out []PeerRTT
	for i, a := range c.Members {
		for _, b := range c.Members[i+1:] {
			ab, ok1 := probes[a][ids[b]]
			ba, ok2 := probes[b][ids[a]]
			if !ok1 || !ok2 {
				continue
			}
			out = append(out, PeerRTT{A: a.Name, B: b.Name, Configured: RTT(a.Region, b.Region),
				Measured: ab.Mean + ba.Mean, Samples: min(ab.Samples, ba.Samples)})
		}
	}
	return out, nil
}

// HTTPClient returns an HTTP client that reaches the members' client URLs
// (their /metrics) with the harness's TLS settings.
func (c *Cluster) HTTPClient() *http.Client {
	hc := &http.Client{Timeout: 10 * time.Second}
	if c.tls != nil {
		hc.Transport = &http.Transport{TLSClientConfig: c.tls}
	}
	return hc
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
