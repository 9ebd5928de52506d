// Package childproc starts helper server processes (etcd members, versitygw)
// so that they die with the process that started them.
package childproc

import "os/exec"

// Start starts cmd as a child that must not outlive this process: on Linux
// the kernel sends it SIGKILL when this process dies, so a crashed test,
// benchmark or demo leaves no server behind. Elsewhere the caller's own
// cleanup is all there is. cmd.SysProcAttr is set here; leave it nil.
func Start(cmd *exec.Cmd) error { return start(cmd) }

// Spawner is the function of the goroutine that, on Linux, starts every child
// and lives as long as the process. Tests that check for leaked goroutines
// ignore it: goleak.IgnoreTopFunction(childproc.Spawner).
const Spawner = "github.com/cairnstore/cairn/internal/childproc.spawner"
