package cairnd_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/internal/embedetcd"
	"github.com/cairnstore/cairn/internal/s3test"
	"github.com/cairnstore/cairn/internal/server/servertest"
	"github.com/cairnstore/cairn/internal/sharedtest"
	"github.com/cairnstore/cairn/internal/sidecar"
	"github.com/cairnstore/cairn/remote"
)

// TestThreeTenantsOneBucket: cairnd serves three tenants with one
// --s3-bucket, as docs/shared-buckets.md configures it. A sweeper of one
// tenant's prefix refuses (exit 5, a log line naming the bucket and the other
// prefixes), in a dry run too, and deletes nothing; one sweeper whose policy
// file lists the three prefixes on the bucket deletes exactly the garbage of
// all three; every tenant's checkpoint stays readable through cairnd.
func TestThreeTenantsOneBucket(t *testing.T) {
	etcd, _ := embedetcd.ForTest(t)
	s3 := s3test.StartFake(t, s3test.FakeOptions{})
	env := map[string]string{cli.EnvS3AccessKeyID: s3.AccessKeyID, cli.EnvS3SecretAccessKey: s3.SecretAccessKey}
	getenv := func(k string) string { return env[k] }
	s3flags := []string{"--s3-endpoint=" + s3.Endpoint, "--s3-region=" + s3.Region, "--s3-bucket=" + s3.Bucket, "--s3-path-style"}
	prefixes := []string{"tenant-a/", "tenant-b/", "tenant-c/"}
	addr, _, _, _ := startedOn(t, etcd, getenv, append([]string{
		"--tokens", "a tenant-a/ token-a;b tenant-b/ token-b;c tenant-c/ token-c"}, s3flags...)...)

	bkt, err := bucket.NewS3(t.Context(), bucket.Config{Endpoint: s3.Endpoint, Region: s3.Region, Bucket: s3.Bucket, PathStyle: true,
		AccessKeyID: s3.AccessKeyID, SecretAccessKey: s3.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bkt.Close() })
	var tenants []*sharedtest.Tenant
	for i, p := range prefixes {
		st := remote.New("http://"+addr, remote.Options{Token: "token-" + string(rune('a'+i))})
		tenants = append(tenants, sharedtest.Write(t, st, p, bkt, 500))
	}
	before := sharedtest.ContentKeys(t, bkt)

	sweeper := func(args ...string) (int, string) {
		t.Helper()
		log := &servertest.LogBuffer{}
		args = append(append([]string{"--etcd-endpoints=" + strings.Join(etcd.Endpoints(), ","), "--probe-timeout=5s",
			"--once", "--older-than=0s", "--log-format=json"}, s3flags...), args...)
		code := sidecar.Main(sidecar.Env{Args: args, Getenv: getenv, Stderr: log})
		return code, log.String()
	}
	for _, dry := range []bool{true, false} {
		args := []string{"--prefix=tenant-a/", "--keep=1"}
		if dry {
			args = append(args, "--dry-run")
		}
		code, log := sweeper(args...)
		if code != sidecar.ExitUncovered {
			t.Fatalf("a sweeper of tenant-a/ alone (dry run %v) exited %d; want %d:\n%s", dry, code, sidecar.ExitUncovered, log)
		}
		line := ""
		for l := range strings.Lines(log) {
			if strings.Contains(l, "sweep refused") && strings.Contains(l, `"bucket":"`+s3.Bucket+`"`) {
				line = l
			}
		}
		if !strings.Contains(line, "tenant-b/") || !strings.Contains(line, "tenant-c/") {
			t.Fatalf("no log line names the bucket and the uncovered prefixes (dry run %v):\n%s", dry, log)
		}
	}
	if after := sharedtest.ContentKeys(t, bkt); !slices.Equal(after, before) {
		t.Fatalf("a refused sweeper changed the bucket: %d keys, then %d", len(before), len(after))
	}
	if err := sharedtest.AllReadable(t.Context(), bkt, tenants); err != nil {
		t.Fatal(err)
	}

	policy := "prefixes:\n"
	for _, p := range prefixes {
		policy += "  - prefix: " + p + "\n    keep: 1\n"
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, log := sweeper("--policy-file=" + path); code != sidecar.ExitOK {
		t.Fatalf("the sweeper of the three prefixes exited %d:\n%s", code, log)
	}
	garbage := sharedtest.Garbage(tenants)
	want := slices.DeleteFunc(slices.Clone(before), func(k string) bool { _, ok := slices.BinarySearch(garbage, k); return ok })
	if after := sharedtest.ContentKeys(t, bkt); !slices.Equal(after, want) {
		t.Fatalf("after the sweep the bucket holds %d keys; want %d (all but the %d garbage blobs)", len(after), len(want), len(garbage))
	}
	if err := sharedtest.AllReadable(t.Context(), bkt, tenants); err != nil {
		t.Fatal(err)
	}
}
