package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"
)

// EnvPrefix starts the environment variable of every flag: --etcd-endpoints
// falls back to CAIRN_ETCD_ENDPOINTS.
const EnvPrefix = "CAIRN_"

// ErrUsage is matched by every error of Parse and of the Validate methods: a
// bad flag, environment variable or combination.
var ErrUsage = errors.New("usage error")

// Usagef returns an error matching ErrUsage with the formatted message.
func Usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, args...)...)
}

// EnvName returns the environment variable that a flag falls back to.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// redacted stands in for a secret that is set.
const redacted = "[redacted]"

// Set is a flag set whose flags fall back to environment variables: first
// CAIRN_<FLAG> (EnvName), then the aliases given with Alias. It records where
// each effective value came from, for the start-up log line.
type Set struct {
	*flag.FlagSet
	aliases   map[string][]string
	noEnv     map[string]bool
	redactors map[string]func(string) string
	sources   map[string]string
	getenv    func(string) string
	s3Creds   bool
}

// NewSet returns an empty set named name (the command) that writes its
// messages to out.
func NewSet(name string, out io.Writer) *Set {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return &Set{FlagSet: fs, aliases: map[string][]string{}, noEnv: map[string]bool{}, redactors: map[string]func(string) string{}}
}

// NoEnv makes flag a command-line flag only, with no variable to fall back
// to: for flags such as an output format that the environment should not
// change behind a script's back.
func (s *Set) NoEnv(flagName string) { s.noEnv[flagName] = true }

// Alias makes flag fall back to the variable env after its CAIRN_ variable.
func (s *Set) Alias(flagName, env string) {
	s.aliases[flagName] = append(s.aliases[flagName], env)
}

// Secret keeps the flag's value out of LogValue.
func (s *Set) Secret(flagName string) {
	s.redactors[flagName] = func(v string) string {
		if v == "" {
			return ""
		}
		return redacted
	}
}

// redact makes LogValue show the flag's value through f.
func (s *Set) redact(flagName string, f func(string) string) { s.redactors[flagName] = f }

// Variables returns the environment variables flag falls back to, in order;
// none for a NoEnv flag.
func (s *Set) Variables(flagName string) []string {
	if s.noEnv[flagName] {
		return nil
	}
	return append([]string{EnvName(flagName)}, s.aliases[flagName]...)
}

// Parse parses the command-line arguments (without the program name), then
// sets every flag not given on the command line from the first of its
// variables that getenv reports set and not empty. It returns flag.ErrHelp
// when -h or --help was given, and otherwise errors matching ErrUsage that
// name the flag or the variable at fault. Positional arguments are left in
// Args.
func (s *Set) Parse(args []string, getenv func(string) string) error {
	s.getenv = getenv
	s.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(typed); !ok {
			f.Value = typed{f.Value}
		}
	})
	// The flag package prints an error and the whole help on a bad flag;
	// print the help only when asked for, and leave the error to the caller,
	// which prints it with a pointer to --help.
	out, help := s.Output(), s.Usage
	s.SetOutput(io.Discard)
	s.Usage = func() {}
	err := s.FlagSet.Parse(args)
	s.SetOutput(out)
	s.Usage = help
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			if help != nil {
				help()
			} else {
				s.PrintFlags(out)
			}
			return err
		}
		return fmt.Errorf("%w: %s", ErrUsage, strings.Replace(err.Error(), " -", " --", 1))
	}
	s.sources = map[string]string{}
	s.Visit(func(f *flag.Flag) { s.sources[f.Name] = "flag" })
	var envErr error
	s.VisitAll(func(f *flag.Flag) {
		if envErr != nil || s.sources[f.Name] != "" {
			return
		}
		for _, name := range s.Variables(f.Name) {
			v, ok := Lookup(getenv, name)
			if !ok {
				continue
			}
			if err := s.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%w: invalid value %q for %s (the variable of --%s): %w", ErrUsage, v, name, f.Name, err)
				return
			}
			s.sources[f.Name] = "env " + name
			return
		}
		s.sources[f.Name] = "default"
	})
	return envErr
}

// Name names the setting of a flag as the user gave it, for messages:
// "--keep" when it came from the command line or its default, and the
// variable ("CAIRN_KEEP") when it came from the environment.
func (s *Set) Name(flagName string) string {
	if src, ok := strings.CutPrefix(s.sources[flagName], "env "); ok {
		return src
	}
	return "--" + flagName
}

// typed wraps a flag's value so that a value it cannot parse is reported
// with the type it expects, instead of the flag package's "parse error".
type typed struct{ flag.Value }

func (t typed) Set(v string) error {
	err := t.Value.Set(v)
	if err == nil {
		return nil
	}
	if want := expects(t.Value); want != "" {
		return errors.New("expected " + want)
	}
	return err
}

// IsBoolFlag keeps boolean flags usable without a value.
func (t typed) IsBoolFlag() bool {
	b, ok := t.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Get passes the value through for flag.Getter.
func (t typed) Get() any {
	if g, ok := t.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

// expects names the type the flag package's own values parse, or "" for a
// value type of ours, whose errors say it themselves.
func expects(v flag.Value) string {
	g, ok := v.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case bool:
		return "true or false"
	case int, int64:
		return "a whole number"
	case uint, uint64:
		return "a whole number of 0 or more"
	case float64:
		return "a number"
	case time.Duration:
		return "a duration like 90s, 30m or 24h"
	}
	return ""
}

// Source says where the flag's effective value came from: "flag",
// "env NAME" or "default". It is "" before Parse.
func (s *Set) Source(flagName string) string { return s.sources[flagName] }

// Lookup returns a variable's value and whether it is set and not empty; a
// nil getenv reads nothing.
func Lookup(getenv func(string) string, name string) (string, bool) {
	if getenv == nil {
		return "", false
	}
	v := getenv(name)
	return v, v != ""
}

// LogValue logs the effective value of every flag, each with its source
// when it is not the default, secrets redacted; and, when RegisterS3 was
// called, which S3 credential variables are set.
func (s *Set) LogValue() slog.Value {
	var attrs []slog.Attr
	s.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		if r := s.redactors[f.Name]; r != nil {
			v = r(v)
		}
		key := strings.ReplaceAll(f.Name, "-", "_")
		src := s.sources[f.Name]
		if src == "" || src == "default" {
			attrs = append(attrs, slog.String(key, v))
			return
		}
		attrs = append(attrs, slog.Group(key, slog.String("value", v), slog.String("from", src)))
	})
	if s.s3Creds {
		for _, name := range []string{EnvS3AccessKeyID, EnvS3SecretAccessKey, EnvS3SessionToken} {
			if _, ok := Lookup(s.getenv, name); ok {
				key := strings.ToLower(strings.TrimPrefix(name, EnvPrefix))
				attrs = append(attrs, slog.Group(key, slog.String("value", redacted), slog.String("from", "env "+name)))
			}
		}
	}
	return slog.GroupValue(attrs...)
}

// PrintFlags writes every flag with its usage, its default and the variables
// it falls back to.
func (s *Set) PrintFlags(w io.Writer) {
	s.VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		env := ""
		if vars := s.Variables(f.Name); len(vars) > 0 {
			env = " [" + strings.Join(vars, ", ") + "]"
		}
		fmt.Fprintf(w, "  --%s\n    \t%s%s%s\n", f.Name, f.Usage, def, env)
	})
}

// redactUser hides the password of a user:password value.
func redactUser(v string) string {
	if user, _, ok := strings.Cut(v, ":"); ok {
		return user + ":" + redacted
	}
	return v
}

// RedactURLs hides the password of any URL in a comma-separated list.
func RedactURLs(v string) string {
	parts := strings.Split(v, ",")
	for i, p := range parts {
		if u, err := url.Parse(p); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
