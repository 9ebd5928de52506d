package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestFrom(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/cairnstore/cairn", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	in := from(bi, true)
	if in.Version != "v0.3.0" || in.Revision != "0123abcd" || !in.Modified || in.GoVersion != "go1.26.8" {
		t.Fatalf("from = %+v", in)
	}
	if s := in.String(); !strings.HasPrefix(s, "v0.3.0, revision 0123abcd (modified), go1.26.8 ") {
		t.Errorf("String() = %q", s)
	}

	none := from(nil, false)
	if none.Version != "(devel)" || none.Revision != "unknown" {
		t.Errorf("without build info: %+v", none)
	}

	stamped, stampedRevision = "v9.9.9", "feedbeef-dirty"
	defer func() { stamped, stampedRevision = "", "" }()
	if in := from(bi, true); in.Version != "v9.9.9" || in.Revision != "feedbeef" || !in.Modified {
		t.Errorf("stamped: got %+v, want v9.9.9 at feedbeef, modified", in)
	}
}

func TestIsVersionFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true},
		{[]string{"-version"}, true},
		{[]string{"--version", "--once"}, false},
		{[]string{"version"}, false},
		{nil, false},
	} {
		if got := IsVersionFlag(tc.args); got != tc.want {
			t.Errorf("IsVersionFlag(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestCollector(t *testing.T) {
	r := prometheus.NewRegistry()
	r.MustRegister(Collector("cairnd"))
	if n, err := testutil.GatherAndCount(r, "cairn_build_info"); err != nil || n != 1 {
		t.Fatalf("cairn_build_info series: %d, %v", n, err)
	}
}
