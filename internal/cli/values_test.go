package cli

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want time.Duration
		ok   bool
	}{
		{"Zero", "0", 0, true},
		{"Seconds", "90s", 90 * time.Second, true},
		{"HoursAndMinutes", "1h30m", 90 * time.Minute, true},
		{"Days", "7d", 7 * 24 * time.Hour, true},
		{"DaysWithSpaces", " 2d ", 48 * time.Hour, true},
		{"Negative", "-1h", -time.Hour, true},
		{"BareD", "d", 0, false},
		{"FractionalDays", "1.5d", 0, false},
		{"Word", "yesterday", 0, false},
		{"Empty", "", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDuration(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("ParseDuration(%q) = %v, %v; want %v, ok=%t", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestEnvName(t *testing.T) {
	for flagName, want := range map[string]string{
		"etcd-endpoints": "CAIRN_ETCD_ENDPOINTS",
		"s3-path-style":  "CAIRN_S3_PATH_STYLE",
		"once":           "CAIRN_ONCE",
	} {
		if got := EnvName(flagName); got != want {
			t.Errorf("EnvName(%q) = %q; want %q", flagName, got, want)
		}
	}
}
