// Package harness starts the processes the integration tests run against:
// etcd cluster members (the etcdmember program of this module, or any etcd
// binary such as Debian's /usr/bin/etcd), TCP proxies in front of their peer
// URLs for network faults, and versitygw as the S3 server. Every process runs
// on loopback, is killed when the process that started it dies (Linux), and
// is stopped by Close.
//
// The package has no dependency on package testing, so that `make cluster`
// can start the same topology by hand.
package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/cairnstore/cairn/internal/versitygw"
)

// Environment variables that override the binaries the harness starts.
const (
	// EnvMember is the path of an etcd server binary to use instead of
	// building ./integration/cmd/etcdmember.
	EnvMember = "CAIRN_ETCDMEMBER"
	// EnvVersityGW is the path of the versitygw binary.
	EnvVersityGW = versitygw.EnvBinary
)

// memberPackage is the package of the member program, relative to the module
// root.
const memberPackage = "./integration/cmd/etcdmember"

var (
	memberOnce sync.Once
	memberPath string
	memberErr  error
)

// MemberBinary returns the path of the etcd member program: $CAIRN_ETCDMEMBER
// when set, else the program built once per process with `go build` from this
// module into a temporary directory (the Go build cache makes later builds
// quick). The temporary directory is removed by CleanupBuilds.
func MemberBinary() (string, error) {
	memberOnce.Do(func() { memberPath, memberErr = buildMember() })
	return memberPath, memberErr
}

var buildDirs struct {
	mu   sync.Mutex
	dirs []string
}

// CleanupBuilds removes the binaries built by this process. Test binaries call
// it from TestMain after the tests.
func CleanupBuilds() {
	buildDirs.mu.Lock()
	defer buildDirs.mu.Unlock()
	for _, d := range buildDirs.dirs {
		os.RemoveAll(d)
	}
	buildDirs.dirs = nil
	builds.mu.Lock()
	clear(builds.paths)
	builds.mu.Unlock()
}

func buildMember() (string, error) {
	if p := os.Getenv(EnvMember); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("%s=%s is not an executable file", EnvMember, p)
		}
		return p, nil
	}
	return Build(memberPackage)
}

var builds = struct {
	mu    sync.Mutex
	paths map[string]string
}{paths: map[string]string{}}

// Build builds a main package of this module (a path relative to the module
// root, such as ./cmd/sweeper) once per process, without cgo and without the
// race detector, as the Dockerfile does, and returns the binary's path.
// CleanupBuilds removes it.
func Build(pkg string) (string, error) {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if p, ok := builds.paths[pkg]; ok {
		return p, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "cairn-build-")
	if err != nil {
		return "", err
	}
	buildDirs.mu.Lock()
	buildDirs.dirs = append(buildDirs.dirs, dir)
	buildDirs.mu.Unlock()
	out := filepath.Join(dir, filepath.Base(pkg))
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	builds.paths[pkg] = out
	return out, nil
}

// ModuleRoot returns the directory of the go.mod above the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("harness: no go.mod above the working directory")
		}
		dir = parent
	}
}

// VersityGWBinary finds the versitygw binary: $CAIRN_VERSITYGW, then
// ./bin/versitygw at the module root (`make tools` builds it there), then
// $PATH, then the user cache; when there is none, it installs the pinned
// version there with go install, so that `go test ./...` needs no set-up
// (see versitygw.FindOrBuild).
func VersityGWBinary() (string, error) { return versitygw.FindOrBuild() }

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
