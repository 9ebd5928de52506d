// Package buildinfo tells which build of cairn a binary is: the module
// version and the VCS revision that the Go toolchain records in every binary
// (runtime/debug.ReadBuildInfo), for --version and the cairn_build_info
// metric.
//
// A binary built from a git checkout carries the revision, and since Go 1.24
// a version derived from the nearest tag (or a pseudo-version); one built
// with -buildvcs=false or outside git says "(devel)" and "unknown". make
// release stamps both with -ldflags "-X
// github.com/cairnstore/cairn/internal/buildinfo.stamped=v1.2.3 -X
// github.com/cairnstore/cairn/internal/buildinfo.stampedRevision=<commit>",
// which win over the build info's (git worktrees, for one, leave the
// revision out of the build info).
package buildinfo

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// stamped and stampedRevision are set by the linker in release builds
// (make release).
var stamped, stampedRevision string

// Info is what a binary knows of its build.
type Info struct {
	// Version is the module version: the stamped one, else the build info's
	// main module version ("(devel)" for a build without VCS data).
	Version string
	// Revision is the VCS revision, "unknown" without VCS data; Modified
	// says the work tree had uncommitted changes.
	Revision string
	Modified bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Read returns the binary's build information.
func Read() Info {
	return from(debug.ReadBuildInfo())
}

func from(bi *debug.BuildInfo, ok bool) Info {
	in := Info{Version: "(devel)", Revision: "unknown", GoVersion: runtime.Version()}
	if ok {
		if bi.Main.Version != "" {
			in.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if stamped != "" {
		in.Version = stamped
	}
	if stampedRevision != "" {
		in.Revision, in.Modified = strings.TrimSuffix(stampedRevision, "-dirty"), strings.HasSuffix(stampedRevision, "-dirty")
	}
	return in
}

// String is the line --version prints after the program's name.
func (in Info) String() string {
	rev := in.Revision
	if in.Modified {
		rev += " (modified)"
	}
	return fmt.Sprintf("%s, revision %s, %s %s/%s", in.Version, rev, in.GoVersion, runtime.GOOS, runtime.GOARCH)
}

// IsVersionFlag reports whether args (without the program name) ask only for
// the version: "--version" or "-version".
func IsVersionFlag(args []string) bool {
	return len(args) == 1 && (args[0] == "--version" || args[0] == "-version")
}

// Print writes "<program> <version>, revision <rev>, <go> <os>/<arch>".
func Print(w io.Writer, program string) {
	fmt.Fprintln(w, program, Read())
}

// Collector returns the gauge cairn_build_info{program,version,revision,goversion},
// always 1, for the binary's metrics registry.
func Collector(program string) prometheus.Collector {
	in := Read()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cairn_build_info",
		Help: "Always 1; the labels say which build of cairn this binary is.",
	}, []string{"program", "version", "revision", "goversion"})
	g.WithLabelValues(program, in.Version, in.Revision, in.GoVersion).Set(1)
	return g
}
