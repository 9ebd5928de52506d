package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cairnstore/cairn/internal/helpflags"
)

// root is the module root, relative to this package.
const root = ".."

// manual lists the Markdown files whose links must resolve: the README, the
// release files beside it, and every file of docs/ and deploy/.
func manual(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md", "SECURITY.md"}
	for _, pattern := range []string{"docs/*.md", "deploy/*.md", "deploy/*/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			files = append(files, rel)
		}
	}
	return files
}

func TestLinksResolve(t *testing.T) {
	files := manual(t)
	if len(files) < 10 {
		t.Fatalf("only %d Markdown files found: %v", len(files), files)
	}
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(root, name))
		return string(b), err
	}
	links := 0
	for _, f := range files {
		text, err := read(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, problem := range checkLinks(f, text, read) {
			t.Errorf("%s: %s", f, problem)
		}
		links += len(markdownLinks(text))
	}
	if links < 50 {
		t.Errorf("only %d links found: is the link pattern still right?", links)
	}
}

// TestCheckLinksFindsBrokenOnes shows that the checker fails on what it is
// there to catch: a missing file, a missing anchor in another file and in
// the same one.
func TestCheckLinksFindsBrokenOnes(t *testing.T) {
	files := map[string]string{
		"README.md":     "# cairn\n\n## Try it\n\nSee [the guide](docs/guide.md#flags), [gone](docs/gone.md), [x](docs/guide.md#nope), [self](#try-it), [bad](#try-that), [web](https://example.com/#x).\n\n```sh\n[not a link](nowhere.md)\n```\n",
		"docs/guide.md": "# Guide\n\n## Flags\n\n## Flags\n\nBack to [the top](../README.md#cairn) and [the second](#flags-1).\n",
	}
	read := func(name string) (string, error) {
		s, ok := files[filepath.ToSlash(filepath.Clean(name))]
		if !ok {
			return "", os.ErrNotExist
		}
		return s, nil
	}
	got := checkLinks("README.md", files["README.md"], read)
	want := []string{
		`link "docs/gone.md": file docs/gone.md does not exist`,
		`link "docs/guide.md#nope": docs/guide.md has no heading with anchor "nope"`,
		`link "#try-that": README.md has no heading with anchor "try-that"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkLinks found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := checkLinks("docs/guide.md", files["docs/guide.md"], read); len(got) != 0 {
		t.Errorf("the good links of docs/guide.md: %q", got)
	}
}

func TestAnchors(t *testing.T) {
	got := anchors("# cairn\n\n## Use it from Go\n\n### An exact preview: --dry-run, --plan and --apply\n\n## `cairn dev`: a local store\n\n## Use it from Go\n\n```sh\n# a comment\n```\n")
	want := []string{"cairn", "use-it-from-go", "an-exact-preview---dry-run---plan-and---apply", "cairn-dev-a-local-store", "use-it-from-go-1"}
	if !slices.Equal(got, want) {
		t.Errorf("anchors = %q, want %q", got, want)
	}
}

// linkPattern matches an inline Markdown link's target.
var linkPattern = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// markdownLinks returns the link targets of text outside code blocks and
// code spans.
func markdownLinks(text string) []string {
	var out []string
	for _, line := range prose(text) {
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range linkPattern.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

var codeSpan = regexp.MustCompile("`[^`]*`")

// prose returns the lines of text outside fenced code blocks.
func prose(text string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// anchors returns the anchors GitHub gives the headings of a Markdown text:
// lower case, punctuation but hyphens and underscores dropped, spaces turned
// into hyphens, and "-1", "-2" after repeats.
func anchors(text string) []string {
	var out []string
	seen := map[string]int{}
	for _, line := range prose(text) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out = append(out, a)
	}
	return out
}

// checkLinks returns a problem for every relative link of the file named
// name (relative to the module root) whose file does not exist or whose
// anchor is not a heading of the Markdown file it names.
func checkLinks(name, text string, read func(string) (string, error)) []string {
	var problems []string
	for _, link := range markdownLinks(text) {
		if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
			continue
		}
		target, anchor, _ := strings.Cut(link, "#")
		file := name
		if target != "" {
			file = filepath.ToSlash(filepath.Join(filepath.Dir(name), target))
		}
		if strings.HasPrefix(file, "../") {
			problems = append(problems, fmt.Sprintf("link %q leaves the repository", link))
			continue
		}
		if _, err := os.Stat(filepath.Join(root, file)); err != nil {
			if _, rerr := read(file); rerr != nil {
				problems = append(problems, fmt.Sprintf("link %q: file %s does not exist", link, file))
				continue
			}
		}
		if anchor == "" {
			continue
		}
		if !strings.HasSuffix(file, ".md") {
			problems = append(problems, fmt.Sprintf("link %q: an anchor into a file that is not Markdown", link))
			continue
		}
		body, err := read(file)
		if err != nil {
			problems = append(problems, fmt.Sprintf("link %q: %v", link, err))
			continue
		}
		if !slices.Contains(anchors(body), anchor) {
			problems = append(problems, fmt.Sprintf("link %q: %s has no heading with anchor %q", link, file, anchor))
		}
	}
	return problems
}

// TestReadmeGoExampleIsExamplesSave keeps the README's Go program the one
// that examples/save's test runs against the dev stack.
func TestReadmeGoExampleIsExamplesSave(t *testing.T) {
	readme := readFile(t, "README.md")
	src := readFile(t, "examples/save/main.go")
	want := src[strings.Index(src, "package main"):]
	blocks := codeBlocks(readme, "go")
	if len(blocks) != 1 {
		t.Fatalf("README.md has %d Go blocks, want the one of examples/save", len(blocks))
	}
	if blocks[0] != want {
		t.Errorf("README.md's Go example differs from examples/save/main.go (from \"package main\"): copy the file into the README")
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// codeBlocks returns the bodies of the fenced blocks of the given language.
func codeBlocks(text, lang string) []string {
	var out []string
	var cur *strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```"+lang:
			cur = new(strings.Builder)
		case cur != nil && trimmed == "```":
			out = append(out, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line)
		}
	}
	return out
}

// The README's commands: every shell line of its sh blocks names a make
// target, a package of this module, a binary and flags that exist.

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries are the commands the README may run, built once per test run.
var binaries = []string{"cairn", "cairnd", "sweeper", "cairn-demo"}

func built(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "cairn-docs")
		if buildErr != nil {
			return
		}
		buildErr = helpflags.Build(binDir, binaries...)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// helpOf runs a built binary with args and returns what it printed; the
// exit status must be 0.
func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helpflags.Help(filepath.Join(built(t), args[0]), args[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEveryBinaryAnswersVersion(t *testing.T) {
	for _, b := range binaries {
		out := helpOf(t, b, "--version")
		if !strings.HasPrefix(out, b+" ") || !strings.Contains(out, "revision ") || strings.Count(out, "\n") != 1 {
			t.Errorf("%s --version printed %q, want one line \"%s <version>, revision <rev>, ...\"", b, out, b)
		}
	}
}

func TestReadmeCommandsExist(t *testing.T) {
	readme := readFile(t, "README.md")
	targets := makeTargets(t)
	var lines []string
	for _, b := range codeBlocks(readme, "sh") {
		for _, l := range strings.Split(b, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
		}
	}
	if len(lines) < 5 {
		t.Fatalf("the README's sh blocks hold %d commands", len(lines))
	}
	// The first block is the two set-up commands; .ci/run runs the second.
	first := codeBlocks(readme, "sh")[0]
	if !strings.HasPrefix(first, "make demo ") || !strings.Contains(first, "\nmake test ") {
		t.Errorf("the README's first sh block is not the two set-up commands (make demo, make test):\n%s", first)
	}
	if ci := readFile(t, ".ci/run"); !regexp.MustCompile(`(?m)^make test$`).MatchString(ci) {
		t.Error(".ci/run does not run the README's test command, make test")
	}
	if i := strings.Index(readme, "make demo "); i < 0 || strings.Count(readme[:i], "\n") > 40 {
		t.Error("the set-up commands are not on the README's first screen (its first 40 lines)")
	}
	for _, l := range lines {
		for _, problem := range checkCommandLine(t, l, targets) {
			t.Errorf("README command %q: %s", l, problem)
		}
	}
}

// makeTargets returns the targets the Makefile defines.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(readFile(t, "Makefile"), -1) {
		out[m[1]] = true
	}
	if !out["test"] || !out["demo"] {
		t.Fatalf("the Makefile's targets %v lack test or demo: is the pattern still right?", out)
	}
	return out
}

// checkCommandLine checks one shell line: a comment is dropped, the line is
// split into commands at &&, ; and |, and each command must be one this
// repository provides or a known outside tool.
func checkCommandLine(t *testing.T, line string, targets map[string]bool) []string {
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	line = strings.TrimSuffix(strings.TrimSpace(line), "&")
	var problems []string
	dir := ""
	for _, part := range regexp.MustCompile(`&&|;|\|`).Split(line, -1) {
		words := strings.Fields(strings.Trim(strings.TrimSpace(part), `"`))
		if len(words) >= 2 && words[0] == "eval" {
			words = strings.Fields(strings.Trim(strings.TrimPrefix(strings.Join(words[1:], " "), `"$(`), `)"`))
		}
		if len(words) == 0 {
			continue
		}
		switch w := words[0]; w {
		case "make":
			for _, a := range words[1:] {
				if !strings.Contains(a, "=") && !targets[a] {
					problems = append(problems, fmt.Sprintf("make has no target %q", a))
				}
			}
		case "cd":
			dir = words[1]
			if st, err := os.Stat(filepath.Join(root, dir)); err != nil || !st.IsDir() {
				problems = append(problems, fmt.Sprintf("no directory %s", dir))
			}
		case "npm":
			if len(words) >= 3 && words[1] == "run" {
				if !strings.Contains(readFile(t, filepath.Join(dir, "package.json")), `"`+words[2]+`":`) {
					problems = append(problems, fmt.Sprintf("%s/package.json has no script %q", dir, words[2]))
				}
			}
		case "go":
			problems = append(problems, checkGo(t, words)...)
		case "./sweeper", "./cairn", "./cairnd", "sweeper", "cairn", "cairnd":
			problems = append(problems, checkFlags(t, strings.TrimPrefix(w, "./"), words[1:])...)
		case "curl", "kubectl", "docker":
		default:
			problems = append(problems, fmt.Sprintf("unknown command %q", w))
		}
	}
	return problems
}

// checkGo checks go run and go build of this module's packages.
func checkGo(t *testing.T, words []string) []string {
	if len(words) < 3 || words[1] != "run" && words[1] != "build" {
		return []string{"only go run and go build are expected"}
	}
	args := words[2:]
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		if args[0] == "-o" {
			args = args[1:]
		}
		args = args[1:]
	}
	if len(args) == 0 || !strings.HasPrefix(args[0], "./") {
		return []string{"no package of this module"}
	}
	pkg := args[0]
	if matches, _ := filepath.Glob(filepath.Join(root, pkg, "*.go")); len(matches) == 0 {
		return []string{fmt.Sprintf("no Go package %s", pkg)}
	}
	if b, ok := strings.CutPrefix(pkg, "./cmd/"); ok && words[1] == "run" {
		return checkFlags(t, b, args[1:])
	}
	return nil
}

// checkFlags checks that the binary (and its subcommand, for cairn) has
// every --flag the arguments give, by its --help.
func checkFlags(t *testing.T, binary string, args []string) []string {
	if !slices.Contains(binaries, binary) {
		return []string{fmt.Sprintf("no binary %s", binary)}
	}
	helpArgs := []string{binary}
	if binary == "cairn" && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		helpArgs = append(helpArgs, args[0])
	}
	if slices.Equal(args, []string{"--version"}) {
		return nil // TestEveryBinaryAnswersVersion
	}
	help := helpOf(t, append(helpArgs, "--help")...)
	var problems []string
	for _, a := range args {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if !regexp.MustCompile(`(?m)^  --` + regexp.QuoteMeta(name) + `$`).MatchString(help) {
			problems = append(problems, fmt.Sprintf("%s has no flag --%s", strings.Join(helpArgs, " "), name))
		}
	}
	return problems
}
