// Package skewclock gives a process a clock of its own that is offset from,
// and runs at a rate against, another clock, so that tests can run every
// process of a system with clocks that disagree, as the clocks of processes
// in several regions do.
//
// A Clock reads base = B and returns origin + offset + rate × (B − origin),
// where origin is base's value when the Clock was made: at that moment it is
// offset ahead of base, and from then on it gains (rate − 1) of every
// millisecond base moves.
package skewclock

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"
)

// Env is the environment variable that FromEnv reads, in the form Parse
// takes. A binary that honours it says so at start-up; it is for tests.
const Env = "CAIRN_FAULT_CLOCK"

// Clock is a skewed view of a base clock, in milliseconds since the Unix
// epoch. It is safe for concurrent use when base is.
type Clock struct {
	base   func() float64
	origin float64
	offset float64 // ms
	rate   float64
}

// New returns a clock offset ahead of base (behind for a negative offset)
// that runs at rate times base's speed. It panics on a rate that is not
// finite and positive.
func New(base func() float64, offset time.Duration, rate float64) *Clock {
	if !(rate > 0) || math.IsInf(rate, 0) {
		panic(fmt.Sprintf("skewclock: rate %v is not finite and positive", rate))
	}
	return &Clock{base: base, origin: base(), offset: float64(offset) / float64(time.Millisecond), rate: rate}
}

// Now returns the clock's time in milliseconds since the Unix epoch.
func (c *Clock) Now() float64 { return c.origin + c.offset + c.rate*(c.base()-c.origin) }

// Time returns Now as a time.Time.
func (c *Clock) Time() time.Time { return time.UnixMicro(int64(c.Now() * 1000)) }

// String describes the skew.
func (c *Clock) String() string {
	return fmt.Sprintf("offset=%v,rate=%v", time.Duration(c.offset*float64(time.Millisecond)), c.rate)
}

// Random draws an offset uniformly within ±maxOffset and a rate within
// 1 ± maxRateError.
func Random(r *rand.Rand, maxOffset time.Duration, maxRateError float64) (time.Duration, float64) {
	offset := time.Duration((2*r.Float64() - 1) * float64(maxOffset))
	rate := 1 + (2*r.Float64()-1)*maxRateError
	return offset, rate
}

// Parse reads "offset=D,rate=R" (either part may be left out; D as
// time.ParseDuration takes it, R a positive number).
func Parse(s string) (offset time.Duration, rate float64, err error) {
	rate = 1
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
			return 0, 0, fmt.Errorf("skewclock: %q is not key=value", part)
		case k == "offset":
			if offset, err = time.ParseDuration(v); err != nil {
				return 0, 0, fmt.Errorf("skewclock: offset: %w", err)
			}
		case k == "rate":
			if rate, err = strconv.ParseFloat(v, 64); err != nil {
				return 0, 0, fmt.Errorf("skewclock: rate: %w", err)
			}
			if !(rate > 0) || math.IsInf(rate, 0) {
				return 0, 0, errors.New("skewclock: rate must be finite and positive")
			}
		default:
			return 0, 0, fmt.Errorf("skewclock: unknown key %q", k)
		}
	}
	return offset, rate, nil
}

// FromEnv returns a clock skewed from base as the environment variable Env
// says, or nil when it is unset or empty.
func FromEnv(base func() float64) (*Clock, error) {
	v := os.Getenv(Env)
	if v == "" {
		return nil, nil
	}
	offset, rate, err := Parse(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Env, err)
	}
	return New(base, offset, rate), nil
}
