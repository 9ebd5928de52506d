package topology

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn/internal/embedetcd"
)

func TestWarnings(t *testing.T) {
	m := func(name, region string, leader bool, writes float64) Member {
		return Member{Name: name, Region: region, Leader: leader, Writes: writes, ClientURL: "http://" + name}
	}
	cases := []struct {
		name    string
		members []Member
		want    []string // substrings, one per warning, in order
	}{
		{"LeaderWhereTheWritesAre", []Member{m("m1", "A", true, 900), m("m2", "B", false, 10), m("m3", "C", false, 5)}, nil},
		{"LeaderAway", []Member{m("m1", "A", false, 900), m("m2", "B", false, 10), m("m3", "C", true, 5)},
			[]string{"the leader m3 is in region C, but region A handles the most writes"}},
		{"RegionsSummed", []Member{m("m1", "A", true, 300), m("m2", "B", false, 200), m("m3", "B", false, 200)},
			[]string{"region B handles the most writes (400 against 300)"}},
		{"Tie", []Member{m("m1", "A", false, 9), m("m2", "B", false, 9), m("m3", "C", true, 9)}, nil},
		{"NoWritesYet", []Member{m("m1", "A", false, 0), m("m2", "B", true, 0)}, nil},
		{"NoLeader", []Member{m("m1", "A", false, 9), m("m2", "B", false, 1)}, []string{"no member reports a leader"}},
		{"TwoLeaders", []Member{m("m1", "A", true, 9), m("m2", "B", true, 1)}, []string{"2 members claim to lead"}},
		{"Unreachable", []Member{m("m1", "A", true, 9), {Name: "m2", Region: "B", ClientURL: "http://m2", Err: "connection refused"}},
			[]string{"member m2 (http://m2) could not be asked: connection refused"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := warnings(tc.members)
			if len(got) != len(tc.want) {
				t.Fatalf("warnings = %q, want %d matching %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

// TestInspect reads a one-member cluster: the member leads, its writes are
// counted from its own metrics, and nothing needs action.
func TestInspect(t *testing.T) {
	srv, cli := embedetcd.ForTest(t)
	_ = srv
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 5 {
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Inspect(ctx, cli, &http.Client{Timeout: 10 * time.Second}, func(string) string { return "here" })
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Members) != 1 {
		t.Fatalf("members = %+v, want 1", r.Members)
	}
	m := r.Members[0]
	if !m.Leader || m.Region != "here" || m.Err != "" || m.Writes < 5 || m.Revision < 6 {
		t.Errorf("member = %+v; want the leader, in region here, with at least 5 writes and revision 6", m)
	}
	if len(r.RTTs) != 0 || len(r.Warnings) != 0 {
		t.Errorf("round trips %v and warnings %q for one member, want none", r.RTTs, r.Warnings)
	}
}
