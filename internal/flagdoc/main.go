// Command flagdoc writes the flag tables of the manual from the binaries'
// own --help, so that docs/ and --help cannot drift apart. It builds cairn,
// cairnd and sweeper into a temporary directory, and in every Markdown file
// of docs/ replaces what stands between
//
//	<!-- flags: sweeper --help -->
//	<!-- end flags -->
//
// with a table of the flags that command line prints (each flag with its
// environment variables, its default and its meaning), read by package
// helpflags: the flags of the first "Flags:" section, or of the section the
// marker names after a "|", as in
// <!-- flags: cairn capture --help | Store flags -->.
//
// Run it as go generate ./docs, or go run ./internal/flagdoc from the module
// root. With -check it changes nothing and exits 1 when a table is stale,
// which make lint runs.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/cairnstore/cairn/internal/helpflags"
)

// binaries are the commands a marker may run.
var binaries = []string{"cairn", "cairnd", "sweeper"}

func main() {
	check := flag.Bool("check", false, "change nothing; exit 1 when a table is stale")
	dir := flag.String("docs", "docs", "directory of the Markdown files")
	flag.Parse()
	if err := run(*dir, *check); err != nil {
		fmt.Fprintln(os.Stderr, "flagdoc:", err)
		os.Exit(1)
	}
}

func run(dir string, check bool) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return err
	}
	bin, err := os.MkdirTemp("", "flagdoc")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	if err := helpflags.Build(bin, binaries...); err != nil {
		return err
	}
	help := func(cmdline []string) (string, error) {
		if !slices.Contains(binaries, cmdline[0]) {
			return "", fmt.Errorf("%q is not one of %v", cmdline[0], binaries)
		}
		return helpflags.Help(filepath.Join(bin, cmdline[0]), cmdline[1:]...)
	}
	var stale []string
	for _, f := range files {
		old, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		updated, err := Rewrite(string(old), help)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if updated == string(old) {
			continue
		}
		if check {
			stale = append(stale, f)
			continue
		}
		if err := os.WriteFile(f, []byte(updated), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "flagdoc: wrote", f)
	}
	if len(stale) > 0 {
		return fmt.Errorf("stale flag tables in %s: run go generate ./docs", strings.Join(stale, ", "))
	}
	return nil
}

// marker matches a generated block: its opening comment (the command line,
// optionally "| section"), the table, and the closing comment.
var marker = regexp.MustCompile(`(?s)<!-- flags: ([^|>]+?)(?: \| ([^>]+?))? -->\n.*?<!-- end flags -->`)

// Rewrite replaces every generated block of doc with the table of the help
// that help returns for its command line.
func Rewrite(doc string, help func(cmdline []string) (string, error)) (string, error) {
	var firstErr error
	out := marker.ReplaceAllStringFunc(doc, func(block string) string {
		m := marker.FindStringSubmatch(block)
		text, err := help(strings.Fields(m[1]))
		if err == nil {
			var flags []helpflags.Flag
			flags, err = helpflags.Parse(text, m[2])
			if err == nil {
				return m[0][:strings.Index(m[0], "-->")+3] + "\n" + Table(flags) + "<!-- end flags -->"
			}
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", m[1], err)
		}
		return block
	})
	return out, firstErr
}

// Table renders flags as a Markdown table.
func Table(flags []helpflags.Flag) string {
	var b strings.Builder
	b.WriteString("| Flag | Environment | Default | Meaning |\n| --- | --- | --- | --- |\n")
	code := func(s string) string {
		if s == "" {
			return ""
		}
		return "`" + s + "`"
	}
	for _, f := range flags {
		var env []string
		for _, e := range f.Env {
			env = append(env, code(e))
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.Name, strings.Join(env, ", "), code(f.Default),
			strings.ReplaceAll(f.Usage, "|", `\|`))
	}
	return b.String()
}
