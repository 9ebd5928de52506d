package sidecar

import (
	"errors"
	"testing"
)

// FuzzParsePolicyFile: any bytes give targets that pass the checks, or an
// error matching ErrUsage; never a panic.
func FuzzParsePolicyFile(f *testing.F) {
	f.Add([]byte("prefixes:\n  - prefix: a/\n    keep: 1\n    max-age: 7d\n    protect: [named]\n"))
	f.Add([]byte("prefixes:\n  - prefix: \"\"\n    s3-bucket: x\n    delete-idle-threads: 90d\n"))
	f.Add([]byte("{prefixes: [{prefix: a/, keep: -1}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		targets, err := parsePolicyFile(data, "p.yaml", "default")
		if err != nil {
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("error %v does not match ErrUsage", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, tg := range targets {
			if err := checkPolicy(tg.Policy, true); err != nil || tg.Bucket == "" || seen[tg.Bucket] {
				t.Fatalf("accepted %+v: %v", tg, err)
			}
			seen[tg.Bucket] = true
		}
	})
}

// FuzzParsePlan: any bytes give plans for exactly the targets, or an error
// matching ErrUsage.
func FuzzParsePlan(f *testing.F) {
	f.Add([]byte(`{"version":1,"targets":[{"prefix":"a/","threads":[{"threadId":"t","head":"h","keep":1,"removed":["x"]}]}]}`))
	f.Add([]byte(`{"version":1,"targets":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		plans, err := parsePlan(data, "plan.json", []Target{{Prefix: "a/"}})
		if err != nil {
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("error %v does not match ErrUsage", err)
			}
			return
		}
		if len(plans) != 1 || plans["a/"] == nil {
			t.Fatalf("plans %v for one target", plans)
		}
	})
}
