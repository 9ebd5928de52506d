// Command flagdoc writes the flag tables of the manual from the binaries'
// own --help, so that docs/ and --help cannot drift apart. It builds cairn,
// cairnd and sweeper into a temporary directory, and in every Markdown file
// of docs/ replaces what stands between
//
//	<!-- flags: sweeper --help -->
//	<!-- end flags -->
//
// with a table of the flags that command line prints (each flag with its
// environment variables, its default and its meaning). The help text is the
// format of internal/cli's Set.PrintFlags; the flags of the first "Flags:"
// section are taken, or of the section the marker names after a "|", as in
// <!-- flags: cairn capture --help | Store flags -->.
//
// Run it as go generate ./docs, or go run ./internal/flagdoc from the module
// root. With -check it changes nothing and exits 1 when a
// table is stale, which make lint runs.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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
	args := []string{"build", "-o", bin + string(os.PathSeparator)}
	for _, b := range binaries {
		args = append(args, "./cmd/"+b)
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	build := exec.Command("go", args...)
	build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	help := func(cmdline []string) (string, error) {
		if !slices.Contains(binaries, cmdline[0]) {
			return "", fmt.Errorf("%q is not one of %v", cmdline[0], binaries)
		}
		c := exec.Command(filepath.Join(bin, cmdline[0]), cmdline[1:]...)
		// Defaults under the user's cache directory print as ~/.cache, the
		// same on every machine; no CAIRN_ variable changes a default.
		c.Env = []string{"HOME=/nonexistent", "XDG_CACHE_HOME=~/.cache", "PATH=" + os.Getenv("PATH")}
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			return "", fmt.Errorf("%s: %w\n%s", strings.Join(cmdline, " "), err, out.String())
		}
		return out.String(), nil
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
			var flags []Flag
			flags, err = Parse(text, m[2])
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

// Flag is one flag of a help text.
type Flag struct {
	Name, Usage, Default string
	Env                  []string
}

// Parse reads the flags of the named section of a help text in the format of
// cli.Set.PrintFlags ("  --name" then "    \tusage (default D) [VARS]");
// an empty section means the first section headed "Flags:", or the whole text
// when it has no heading.
func Parse(text, section string) ([]Flag, error) {
	lines := strings.Split(text, "\n")
	start := 0
	want := section
	if want == "" {
		want = "Flags"
	}
	found := false
	for i, l := range lines {
		if strings.HasPrefix(l, want) && strings.HasSuffix(l, ":") {
			start, found = i+1, true
			break
		}
	}
	if !found && section != "" {
		return nil, fmt.Errorf("no section %q in the help", section)
	}
	var flags []Flag
	for i := start; i < len(lines); i++ {
		l := lines[i]
		if l == "" || !strings.HasPrefix(l, " ") {
			if len(flags) > 0 {
				break
			}
			continue
		}
		name, ok := strings.CutPrefix(l, "  --")
		if !ok || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("line %d %q: want \"  --name\"", i+1, l)
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "    \t") {
			return nil, fmt.Errorf("flag --%s has no usage line", name)
		}
		i++
		f := Flag{Name: name, Usage: strings.TrimPrefix(lines[i], "    \t")}
		if strings.HasSuffix(f.Usage, "]") {
			if j := strings.LastIndex(f.Usage, " ["); j >= 0 {
				f.Env = strings.Split(f.Usage[j+2:len(f.Usage)-1], ", ")
				f.Usage = f.Usage[:j]
			}
		}
		if strings.HasSuffix(f.Usage, ")") {
			if j := strings.LastIndex(f.Usage, " (default "); j >= 0 {
				f.Default = f.Usage[j+len(" (default ") : len(f.Usage)-1]
				f.Usage = f.Usage[:j]
			}
		}
		flags = append(flags, f)
	}
	if len(flags) == 0 {
		return nil, fmt.Errorf("the help lists no flags")
	}
	return flags, nil
}

// Table renders flags as a Markdown table.
func Table(flags []Flag) string {
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
