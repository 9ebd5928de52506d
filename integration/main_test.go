// Package integration tests cairn against real, separate etcd processes: a
// three-member cluster of the etcd v3.7.3 server this module pins, killed,
// restarted and cut off while writers race; Debian's etcd 3.4; and a cluster
// with TLS client certificates and authentication.
package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnstore/cairn/integration/internal/harness"
)

// Environment variables that tune the suite.
const (
	// envCampaign is the length of the fault campaign (a Go duration). The
	// default keeps the suite within CI's budget: each run goes on past it
	// until it has seen every kind of fault (see TestFaultCampaign and
	// TestOnlineSweepDuringFaults); `make campaign DURATION=30m` sets it for
	// a long run.
	envCampaign = "CAIRN_CAMPAIGN"
	// envArtifacts is the directory for failure artifacts (porcupine
	// visualizations, histories, member logs). The default is
	// integration/artifacts, which git ignores.
	envArtifacts = "CAIRN_ARTIFACTS"
)

// defaultCampaign is the fault campaign's length when envCampaign is unset:
// the least it runs, as it goes on until every kind of fault was applied.
const defaultCampaign = 10 * time.Second

func TestMain(m *testing.M) {
	code := m.Run()
	harness.CleanupBuilds()
	os.Exit(code)
}

// campaignDuration returns the configured campaign length.
func campaignDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv(envCampaign)
	if v == "" {
		return defaultCampaign
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive Go duration such as 90s or 30m", envCampaign, v)
	}
	return d
}

// artifactDir returns the directory, the same for the whole test, where the
// files a failure leaves behind go; it outlives the test. Callers create it
// when they write there.
func artifactDir(t *testing.T) string {
	t.Helper()
	artifactDirs.mu.Lock()
	defer artifactDirs.mu.Unlock()
	if d, ok := artifactDirs.m[t.Name()]; ok {
		return d
	}
	base := os.Getenv(envArtifacts)
	if base == "" {
		root, err := harness.ModuleRoot()
		if err != nil {
			base = filepath.Join(os.TempDir(), "cairn-artifacts")
		} else {
			base = filepath.Join(root, "integration", "artifacts")
		}
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	dir := filepath.Join(base, fmt.Sprintf("%s-%s", name, time.Now().Format("20060102-150405")))
	artifactDirs.m[t.Name()] = dir
	return dir
}

var artifactDirs = struct {
	mu sync.Mutex
	m  map[string]string
}{m: map[string]string{}}
