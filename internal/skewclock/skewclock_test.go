package skewclock

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestNowFollowsBaseWithOffsetAndRate(t *testing.T) {
	base := 1_000.0
	c := New(func() float64 { return base }, 2*time.Second, 1.5)
	if got := c.Now(); got != 3_000 {
		t.Fatalf("Now at the origin = %v, want 3000", got)
	}
	base += 1_000
	if got := c.Now(); got != 4_500 {
		t.Fatalf("Now after base moved 1000 = %v, want 4500", got)
	}
	if got := c.Time().UnixMilli(); got != 4_500 {
		t.Fatalf("Time = %v ms, want 4500", got)
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in     string
		offset time.Duration
		rate   float64
		ok     bool
	}{
		{"offset=600s,rate=1.01", 600 * time.Second, 1.01, true},
		{"offset=-10m", -10 * time.Minute, 1, true},
		{"rate=0.5", 0, 0.5, true},
		{"rate=0", 0, 0, false},
		{"rate=-1", 0, 0, false},
		{"rate=+Inf", 0, 0, false},
		{"offset=ten", 0, 0, false},
		{"skew=1s", 0, 0, false},
		{"offset", 0, 0, false},
	} {
		offset, rate, err := Parse(c.in)
		if (err == nil) != c.ok || (c.ok && (offset != c.offset || rate != c.rate)) {
			t.Errorf("Parse(%q) = %v, %v, %v", c.in, offset, rate, err)
		}
	}
}

func TestRandomStaysWithinBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		o, rate := Random(r, 600*time.Second, 0.01)
		if o < -600*time.Second || o > 600*time.Second || rate < 0.99 || rate > 1.01 {
			t.Fatalf("Random gave offset %v rate %v", o, rate)
		}
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(Env, "")
	if c, err := FromEnv(func() float64 { return 0 }); c != nil || err != nil {
		t.Fatalf("unset: %v, %v", c, err)
	}
	t.Setenv(Env, "offset=1s")
	c, err := FromEnv(func() float64 { return 0 })
	if err != nil || c.Now() != 1000 {
		t.Fatalf("offset=1s: %v, %v", c, err)
	}
	t.Setenv(Env, "bad")
	if _, err := FromEnv(func() float64 { return 0 }); err == nil {
		t.Fatal("a bad value was accepted")
	}
}
