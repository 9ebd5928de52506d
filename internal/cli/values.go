package cli

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Duration is a flag.Value for durations that also accepts whole days
// ("7d") and says what it expects when it cannot parse.
type Duration struct{ D *time.Duration }

func (v Duration) String() string {
	if v.D == nil {
		return ""
	}
	return v.D.String()
}

// Set parses s with ParseDuration.
func (v Duration) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*v.D = d
	return nil
}

// ParseDuration parses a Go duration ("90m", "24h", "1h30m", "0") or a whole
// number of days ("7d").
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" {
		n, err := strconv.ParseInt(days, 10, 32)
		if err == nil {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (write it like 90s, 30m, 24h or 7d)", s)
	}
	return d, nil
}

// Level is a flag.Value for slog levels by name.
type Level struct{ L *slog.Level }

func (v Level) String() string {
	if v.L == nil {
		return ""
	}
	return strings.ToLower(v.L.String())
}

// Set parses debug, info, warn (or warning) or error.
func (v Level) Set(s string) error {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		*v.L = slog.LevelDebug
	case "info":
		*v.L = slog.LevelInfo
	case "warn", "warning":
		*v.L = slog.LevelWarn
	case "error":
		*v.L = slog.LevelError
	default:
		return fmt.Errorf("%q is not one of debug, info, warn, error", s)
	}
	return nil
}

// List is a flag.Value for a comma-separated list; empty elements are
// dropped.
type List struct{ L *[]string }

func (v List) String() string {
	if v.L == nil {
		return ""
	}
	return strings.Join(*v.L, ",")
}

// Set replaces the list with the elements of s.
func (v List) Set(s string) error {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	*v.L = out
	return nil
}
