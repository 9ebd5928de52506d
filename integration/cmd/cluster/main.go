// Command cluster starts, on loopback, the topology of docker-compose.yml as
// local processes: three etcd v3.7.3 members (the etcdmember program of this
// module) with auto-compaction on, and versitygw with the bucket created. It
// prints the endpoints and the sweeper's environment, and runs until it gets
// SIGINT or SIGTERM, then stops everything. `make cluster` runs it.
//
// With --regions it starts the three-region test bed instead: one member in
// each of regions A, B and C, with round trips of 70 ms (A-B), 140 ms (A-C)
// and 100 ms (B-C) between them, each region's clients reaching their own
// member through a proxy of about 1 ms, and etcd's timers tuned for that
// (`make cluster CLUSTER_ARGS=--regions`).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cairnstore/cairn/integration/internal/harness"
)

func main() {
	dir := flag.String("dir", "", "directory for the data and logs (default: a new temporary directory, removed at exit)")
	members := flag.Int("members", 3, "number of etcd members")
	bucketName := flag.String("bucket", "cairn", "S3 bucket to create")
	region := flag.String("region", "us-east-1", "S3 region")
	regions := flag.Bool("regions", false, "start the three-region test bed (regions A, B, C; round trips 70/140/100 ms) instead of --members members on loopback")
	flag.Parse()
	if err := run(*dir, *members, *bucketName, *region, *regions); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(dir string, members int, bucketName, region string, regions bool) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "cairn-cluster-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	defer harness.CleanupBuilds()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := harness.ClusterConfig{
		Dir: dir, Size: members,
		Args: []string{"--auto-compaction-mode=periodic", "--auto-compaction-retention=1h"},
	}
	if regions {
		cfg.Regions, members = harness.ThreeRegions, len(harness.ThreeRegions)
	}
	fmt.Println("building and starting", members, "etcd members in", dir)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cluster, err := harness.StartCluster(sctx, cfg)
	if err != nil {
		return err
	}
	defer cluster.Shutdown()
	s3, err := harness.StartS3(sctx, harness.S3Config{
		Dir: dir, Bucket: bucketName, Region: region,
		AccessKeyID: "cairnlocal", SecretAccessKey: "cairnlocalsecret",
	})
	if err != nil {
		return err
	}
	defer s3.Stop()

	eps := strings.Join(cluster.Endpoints(), ",")
	fmt.Printf(`
etcd endpoints: %s
etcd logs:      %s/try0/m*.log
S3 endpoint:    %s (bucket %s, region %s, path-style)
S3 log:         %s

The sweeper's settings for this cluster:

export CAIRN_ETCD_ENDPOINTS=%s
export CAIRN_S3_ENDPOINT=%s CAIRN_S3_BUCKET=%s CAIRN_S3_REGION=%s CAIRN_S3_PATH_STYLE=true
export CAIRN_S3_ACCESS_KEY_ID=%s CAIRN_S3_SECRET_ACCESS_KEY=%s

`, eps, dir, s3.Endpoint, s3.Bucket, s3.Region, s3.LogPath, eps, s3.Endpoint, s3.Bucket, s3.Region, s3.AccessKeyID, s3.SecretAccessKey)
	if regions {
		hb, el := harness.RegionTimers(cfg.Regions)
		fmt.Printf("Regions (etcd: --heartbeat-interval=%d --election-timeout=%d; the shortest lease TTL etcd grants is %v):\n",
			hb.Milliseconds(), el.Milliseconds(), harness.MinLeaseTTL(el))
		for _, m := range cluster.Members {
			fmt.Printf("  region %s: member %s, its clients' endpoint %s\n", m.Region.Name, m.Name, m.RegionURL)
		}
		for i, a := range cluster.Members {
			for _, b := range cluster.Members[i+1:] {
				fmt.Printf("  round trip %s-%s: %v\n", a.Region.Name, b.Region.Name, harness.RTT(a.Region, b.Region))
			}
		}
		fmt.Println("Point a region's service at its own endpoint (CAIRN_ETCD_ENDPOINTS) to see what it pays from there.")
	}
	fmt.Println("\nRunning until Ctrl-C.")

	// Report a member that dies on its own.
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Println("\nstopping")
			return nil
		case <-t.C:
			for _, m := range cluster.Members {
				if !m.Running() {
					return fmt.Errorf("member %s exited; see %s", m.Name, m.LogPath)
				}
			}
		}
	}
}
