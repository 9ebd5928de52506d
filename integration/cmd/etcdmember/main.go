// Command etcdmember is an etcd server built from the etcd v3.7.3 modules
// this repository pins in go.mod. `go install go.etcd.io/etcd/server/v3@v3.7.3`
// cannot build the official binary (its main module has replace directives),
// so this program runs the same server entry point, etcdmain.Main, over the
// same embed package. It takes exactly the flags of the etcd binary (--name,
// --data-dir, --listen-client-urls, --initial-cluster, --cert-file,
// --client-cert-auth, --auto-compaction-retention, ...; see --help) and
// reports itself as etcd 3.7.3 in --version.
//
// The integration tests build it once and start each cluster member as a
// separate process, so that a member can be killed with SIGKILL and started
// again on the same data directory.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
