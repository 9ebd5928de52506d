// Command cluster starts, on loopback, the topology of docker-compose.yml as
// local processes: three etcd v3.7.3 members (the etcdmember program of this
// module) with auto-compaction on, and versitygw with the bucket created. It
// prints the endpoints and the sweeper's environment, and runs until it gets
// SIGINT or SIGTERM, then stops everything. `make cluster` runs it.
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
	flag.Parse()
	if err := run(*dir, *members, *bucketName, *region); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(dir string, members int, bucketName, region string) error {
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

	fmt.Println("building and starting", members, "etcd members in", dir)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cluster, err := harness.StartCluster(sctx, harness.ClusterConfig{
		Dir: dir, Size: members,
		Args: []string{"--auto-compaction-mode=periodic", "--auto-compaction-retention=1h"},
	})
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

Running until Ctrl-C.
`, eps, dir, s3.Endpoint, s3.Bucket, s3.Region, s3.LogPath, eps, s3.Endpoint, s3.Bucket, s3.Region, s3.AccessKeyID, s3.SecretAccessKey)

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
