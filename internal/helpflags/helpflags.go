// Package helpflags reads the flags of cairn's binaries from their own
// --help, in the format of internal/cli's Set.PrintFlags: the manual's flag
// tables (internal/flagdoc), the README's command check (docs) and the
// Kubernetes manifest test (deploy) all take the flags from there, so none of
// them can drift from the binaries.
package helpflags

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Build builds the commands (names under cmd/, such as "sweeper") of the
// module that holds the working directory into dir.
func Build(dir string, commands ...string) error {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, c := range commands {
		args = append(args, "./cmd/"+c)
	}
	build := exec.Command("go", args...)
	build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Help runs the binary with args in an environment without CAIRN_
// variables, with defaults under the user's cache directory left empty, so
// that the help is the same on every machine; it returns what the binary
// printed, and an error when it did not exit 0.
func Help(binary string, args ...string) (string, error) {
	c := exec.Command(binary, args...)
	c.Env = []string{"HOME=/nonexistent", "XDG_CACHE_HOME=~/.cache", "PATH=" + os.Getenv("PATH")}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", filepath.Base(binary), strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
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
