// Package cli holds what cairn's commands (sweeper, cairn, cairnd) share on
// the command line: flags that fall back to CAIRN_ environment variables
// (and, for etcd, to etcdctl's ETCDCTL_ variables), the etcd and S3 settings
// with their validation, connecting to etcd and opening the bucket with a
// start-up probe whose errors say what to fix, and the slog logger.
//
// A flag wins over its CAIRN_ variable, which wins over an alias such as
// ETCDCTL_ENDPOINTS, which wins over the default. Every error of parsing or
// validation matches ErrUsage; commands exit with code 2 on it.
package cli
