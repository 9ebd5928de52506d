package helpflags

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	help := `Usage: cairn capture [flags] DIR

Flags:
  --label
    	the checkpoint's label
  --stat-cache
    	file of digests; auto: one per directory (default auto) [CAIRN_STAT_CACHE]

Store flags (as the sweeper's):
  --etcd-endpoints
    	comma-separated etcd endpoints (host:port or URL) (default 127.0.0.1:2379) [CAIRN_ETCD_ENDPOINTS, ETCDCTL_ENDPOINTS]
`
	own, err := Parse(help, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []Flag{
		{Name: "label", Usage: "the checkpoint's label"},
		{Name: "stat-cache", Usage: "file of digests; auto: one per directory", Default: "auto", Env: []string{"CAIRN_STAT_CACHE"}},
	}
	if !slices.EqualFunc(own, want, func(a, b Flag) bool {
		return a.Name == b.Name && a.Usage == b.Usage && a.Default == b.Default && slices.Equal(a.Env, b.Env)
	}) {
		t.Errorf("Parse = %+v, want %+v", own, want)
	}
	store, err := Parse(help, "Store flags")
	if err != nil {
		t.Fatal(err)
	}
	if len(store) != 1 || store[0].Default != "127.0.0.1:2379" || !slices.Equal(store[0].Env, []string{"CAIRN_ETCD_ENDPOINTS", "ETCDCTL_ENDPOINTS"}) {
		t.Errorf("the store flags: %+v", store)
	}
	if _, err := Parse(help, "Other flags"); err == nil {
		t.Error("a missing section parsed")
	}
	if _, err := Parse("Flags:\n  -keep int\n    \tkeep N\n", ""); err == nil {
		t.Error("the flag package's own format parsed as PrintFlags'")
	}
}
