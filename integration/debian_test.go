package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/conformance"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/integration/internal/harness"
)

// envDebianEtcd overrides the path of Debian's etcd binary.
const envDebianEtcd = "CAIRN_DEBIAN_ETCD"

// debianEtcd is where Debian's etcd-server package installs the server.
const debianEtcd = "/usr/bin/etcd"

// TestConformanceOnDebianEtcd34 runs every conformance suite against the
// store on Debian's etcd-server package (etcd 3.4), one member on loopback
// with a temporary data directory and the server's default limits. `make
// tools` installs the package; without it the test fails, it never skips.
func TestConformanceOnDebianEtcd34(t *testing.T) {
	bin := os.Getenv(envDebianEtcd)
	if bin == "" {
		bin = debianEtcd
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
		t.Fatalf("Debian's etcd server is missing at %s (%v). Install it with `make tools` as root on Debian "+
			"(apt-get install etcd-server), or point %s at an etcd 3.4 binary.", bin, err, envDebianEtcd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := harness.StartCluster(ctx, harness.ClusterConfig{Dir: t.TempDir(), Size: 1, Binary: bin, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cli, err := cluster.Client(cluster.Endpoints()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	st, err := cli.Status(ctx, cluster.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(st.Version, "3.4.") {
		t.Fatalf("%s is etcd %s, want 3.4.x", bin, st.Version)
	}
	t.Logf("etcd server %s from %s", st.Version, bin)

	// What differs on 3.4, none of which the store uses: the streaming
	// range of 3.7 is unknown to it, and the status lacks the 3.6 fields.
	t.Run("ServerDifferences", func(t *testing.T) {
		ch, err := cli.GetStream(ctx, "any", clientv3.WithPrefix())
		if err == nil {
			_, err = clientv3.GetStreamToGetResponse(ch)
		}
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("GetStream on %s: %v, want Unimplemented", st.Version, err)
		}
		if st.StorageVersion != "" || st.DbSizeQuota != 0 {
			t.Errorf("status on %s: storage version %q, quota %d; want the 3.6 fields empty", st.Version, st.StorageVersion, st.DbSizeQuota)
		}
	})

	var n atomic.Int64
	newStore := func(t *testing.T, opts cairn.Options) *etcdstore.Store {
		s, err := etcdstore.New(cli, fmt.Sprintf("debian-%d/", n.Add(1)), etcdstore.Options{Options: opts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	storeFactory := func(t *testing.T, opts cairn.Options) cairn.Store { return newStore(t, opts) }
	conformance.RunStoreTests(t, storeFactory)
	conformance.RunPruneTests(t, storeFactory)
	conformance.RunForkTests(t, func(t *testing.T, opts cairn.Options) conformance.ForkStore { return newStore(t, opts) })
	conformance.RunThreadListerTests(t, storeFactory)
	conformance.RunBlobReferenceWalkerTests(t, storeFactory)
	conformance.RunBlobGCTests(t, storeFactory)
	conformance.RunClockSkewTests(t, func(t *testing.T, a, b cairn.Options) (cairn.Store, cairn.Store) {
		prefix := fmt.Sprintf("debian-%d/", n.Add(1))
		var pair [2]cairn.Store
		for i, opts := range []cairn.Options{a, b} {
			s, err := etcdstore.New(cli, prefix, etcdstore.Options{Options: opts})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			pair[i] = s
		}
		return pair[0], pair[1]
	})
	conformance.RunInstanceStoreTests(t, func(t *testing.T) cairn.InstanceStore { return newStore(t, cairn.Options{}).Instances() })

	// Verify, on 3.4 too, every store the suites left behind.
	vctx, vcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer vcancel()
	checkpoints := 0
	for i := int64(1); i <= n.Load(); i++ {
		s, err := etcdstore.New(cli, fmt.Sprintf("debian-%d/", i), etcdstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := s.Verify(vctx, etcdstore.VerifyOptions{})
		s.Close()
		if err != nil {
			t.Fatalf("Verify of store %d on etcd %s: %v", i, st.Version, err)
		}
		checkpoints += rep.Checkpoints
		for _, p := range rep.Problems {
			t.Errorf("Verify of store %d on etcd %s: %s", i, st.Version, p)
		}
	}
	t.Logf("Verify: %d stores, %d checkpoints", n.Load(), checkpoints)
}
