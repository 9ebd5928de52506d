package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/sidecar"
)

// metricName matches the sweeper's metric names in a query.
var metricName = regexp.MustCompile(sidecar.MetricPrefix + `[a-z0-9_]+`)

// exported returns the names of the sweeper's metrics, with the series names
// of histograms.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	m := sidecar.NewMetrics(false)
	m.Policies("default")
	_, client := embedetcd.ForTest(t)
	m.WatchEtcd(client, 10*time.Second)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range families {
		out[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[f.GetName()+s] = true
			}
		}
	}
	return out
}

func TestDashboardAndAlertsUseExportedMetrics(t *testing.T) {
	have := exported(t)
	files := []struct {
		name    string
		queries func(t *testing.T, data []byte) []string
	}{
		{"grafana-dashboard.json", func(t *testing.T, data []byte) []string {
			var d struct {
				Panels []struct {
					Title   string `json:"title"`
					Targets []struct {
						Expr string `json:"expr"`
					} `json:"targets"`
				} `json:"panels"`
			}
			if err := json.Unmarshal(data, &d); err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, p := range d.Panels {
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
				for _, q := range p.Targets {
					out = append(out, q.Expr)
				}
			}
			return out
		}},
		{"alerts.yml", func(t *testing.T, data []byte) []string {
			var a struct {
				Groups []struct {
					Rules []struct {
						Alert string `json:"alert"`
						Expr  string `json:"expr"`
					} `json:"rules"`
				} `json:"groups"`
			}
			if err := yaml.Unmarshal(data, &a); err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, g := range a.Groups {
				for _, r := range g.Rules {
					if r.Alert == "" || r.Expr == "" {
						t.Errorf("a rule without alert name or expression: %+v", r)
					}
					out = append(out, r.Expr)
				}
			}
			return out
		}},
	}
	for _, f := range files {
		t.Run(f.name, func(t *testing.T) {
			data, err := os.ReadFile(f.name)
			if err != nil {
				t.Fatal(err)
			}
			queries := f.queries(t, data)
			if len(queries) == 0 {
				t.Fatal("no queries")
			}
			for _, q := range queries {
				names := metricName.FindAllString(q, -1)
				if len(names) == 0 {
					t.Errorf("query %q uses no sweeper metric", q)
				}
				for _, n := range names {
					if !have[n] {
						t.Errorf("query %q uses %s, which the sweeper does not export", q, n)
					}
				}
			}
		})
	}
}

// TestAlertsCoverTheIssue checks that the rules the operators asked for are
// there: a sweeper not succeeding, failing deletes, lock contention and a
// sweep refused in a shared bucket it does not cover.
func TestAlertsCoverTheIssue(t *testing.T) {
	data, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"last_success_timestamp_seconds", "delete_failures_total", `result="lock_held"`, "uncovered_bindings", `result="uncovered"`,
		"etcd_db_size_bytes / cairn_sweeper_etcd_db_quota_bytes) > 0.8", "etcd_nospace_alarm"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("alerts.yml has no rule on %s", want)
		}
	}
	if n := len(slices.Collect(func(yield func(string) bool) {
		for _, m := range metricName.FindAllString(string(data), -1) {
			if !yield(m) {
				return
			}
		}
	})); n == 0 {
		t.Error("alerts.yml uses no sweeper metric")
	}
}
