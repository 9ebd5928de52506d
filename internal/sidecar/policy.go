package sidecar

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/sweep"
)

// Target is one store the sweeper serves: an etcdstore prefix, the bucket of
// its blobs, and its retention policy.
type Target struct {
	// Name labels the target in logs and metrics; it defaults to the prefix,
	// and is "default" for the target of the flags.
	Name   string
	Prefix string
	// Bucket is the S3 bucket of the target's blobs.
	Bucket string
	Policy sweep.Policy
}

// policyFile is the form of --policy-file: one entry per prefix.
//
//	prefixes:
//	  - prefix: tenant-a/
//	    s3-bucket: blobs-a
//	    keep: 5
//	    max-age: 30d
//	    delete-idle-threads: 90d
//	    protect: [named]
//	    protect-label-prefix: "pin:"
type policyFile struct {
	Prefixes []struct {
		Name               string   `json:"name"`
		Prefix             *string  `json:"prefix"`
		Bucket             string   `json:"s3-bucket"`
		Keep               int      `json:"keep"`
		MaxAge             string   `json:"max-age"`
		DeleteIdleThreads  string   `json:"delete-idle-threads"`
		Protect            []string `json:"protect"`
		ProtectLabelPrefix string   `json:"protect-label-prefix"`
	} `json:"prefixes"`
}

// readPolicyFile reads the targets of a policy file. An entry without
// s3-bucket uses defaultBucket; no two entries may share a prefix. Entries
// may share a bucket: the sweeper then sweeps that bucket once for all of
// them (GroupByBucket). Its errors match ErrUsage and name the file and the
// entry.
func readPolicyFile(path, defaultBucket string) ([]Target, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --policy-file: %w", ErrUsage, err)
	}
	return parsePolicyFile(data, path, defaultBucket)
}

// parsePolicyFile is readPolicyFile on the file's contents.
func parsePolicyFile(data []byte, path, defaultBucket string) ([]Target, error) {
	var f policyFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, cli.Usagef("--policy-file %s: %v", path, err)
	}
	if len(f.Prefixes) == 0 {
		return nil, cli.Usagef("--policy-file %s: no entry under prefixes", path)
	}
	var out []Target
	prefixes := map[string]bool{}
	for i, e := range f.Prefixes {
		where := fmt.Sprintf("--policy-file %s, entry %d", path, i+1)
		if e.Prefix == nil {
			return nil, cli.Usagef("%s: prefix is required (an empty prefix must be written as prefix: \"\")", where)
		}
		t := Target{Name: e.Name, Prefix: *e.Prefix, Bucket: e.Bucket,
			Policy: sweep.Policy{Keep: e.Keep, Protect: e.Protect, ProtectLabelPrefix: e.ProtectLabelPrefix}}
		if t.Name == "" {
			t.Name = t.Prefix
		}
		if t.Bucket == "" {
			t.Bucket = defaultBucket
		}
		for _, d := range []struct {
			key string
			s   string
			d   *time.Duration
		}{{"max-age", e.MaxAge, &t.Policy.MaxAge}, {"delete-idle-threads", e.DeleteIdleThreads, &t.Policy.DeleteIdle}} {
			if d.s == "" {
				continue
			}
			v, err := cli.ParseDuration(d.s)
			if err != nil {
				return nil, cli.Usagef("%s: %s: %v", where, d.key, err)
			}
			*d.d = v
		}
		switch {
		case t.Bucket == "":
			return nil, cli.Usagef("%s: no s3-bucket, and no --s3-bucket to fall back to", where)
		case prefixes[t.Prefix]:
			return nil, cli.Usagef("%s: prefix %q appears twice", where, t.Prefix)
		}
		if err := checkPolicy(t.Policy, true); err != nil {
			return nil, cli.Usagef("%s: %v", where, err)
		}
		prefixes[t.Prefix] = true
		out = append(out, t)
	}
	return out, nil
}

// checkPolicy checks a policy's values, which may turn every rule off (the
// sweeper then only sweeps) unless required.
func checkPolicy(p sweep.Policy, required bool) error {
	switch {
	case p.Keep < 0:
		return fmt.Errorf("keep must be 0 (no count rule) or more, got %d", p.Keep)
	case p.MaxAge < 0:
		return fmt.Errorf("max-age must not be negative, got %v", p.MaxAge)
	case p.DeleteIdle < 0:
		return fmt.Errorf("delete-idle-threads must not be negative, got %v", p.DeleteIdle)
	case required && !hasRule(p):
		return fmt.Errorf("no rule: give keep, max-age or delete-idle-threads")
	}
	return nil
}

// hasRule reports whether the policy prunes at all.
func hasRule(p sweep.Policy) bool { return p.Keep > 0 || p.MaxAge > 0 || p.DeleteIdle > 0 }

// PlanFile is what --plan writes and --apply reads: the preview of one dry
// run, per target.
type PlanFile struct {
	Version   int          `json:"version"`
	CreatedAt time.Time    `json:"createdAt"`
	Targets   []TargetPlan `json:"targets"`
}

// planVersion is the version of PlanFile this sweeper writes and reads.
const planVersion = 1

// TargetPlan is the preview of one target: what the real run would remove
// and delete on the same state, and the plan of each thread it prunes.
type TargetPlan struct {
	Name   string     `json:"name"`
	Prefix string     `json:"prefix"`
	Bucket string     `json:"bucket"`
	Policy policyJSON `json:"policy"`
	// Checkpoints and ThreadsDeleted count what the prune removes,
	// Protected the protected checkpoints it keeps, Busy the threads it
	// could not see as busy (a dry run takes no lease: none).
	Checkpoints    int `json:"checkpoints"`
	ThreadsDeleted int `json:"threadsDeleted"`
	Protected      int `json:"protected"`
	// BlobsDeleted, BytesFreed and BlobsMarked are what the sweep deletes
	// and marks, the blobs only the pruned checkpoints used included.
	BlobsDeleted int   `json:"blobsDeleted"`
	BytesFreed   int64 `json:"bytesFreed"`
	BlobsMarked  int   `json:"blobsMarked"`
	// Threads are the plans --apply carries out.
	Threads []sweep.ThreadPlan `json:"threads"`
	// Uncovered and Unregistered say the sweep refused
	// (sweep.ErrUncovered): the bucket is bound to these prefixes, which
	// the sweeper does not serve, or has no binding registry.
	Uncovered    []cairn.Binding `json:"uncovered,omitempty"`
	Unregistered bool            `json:"unregistered,omitempty"`
}

// policyJSON shows a policy with durations as text, as everywhere else.
type policyJSON struct {
	Keep               int      `json:"keep,omitempty"`
	MaxAge             string   `json:"maxAge,omitempty"`
	DeleteIdleThreads  string   `json:"deleteIdleThreads,omitempty"`
	Protect            []string `json:"protect,omitempty"`
	ProtectLabelPrefix string   `json:"protectLabelPrefix,omitempty"`
}

func showPolicy(p sweep.Policy) policyJSON {
	d := func(d time.Duration) string {
		if d == 0 {
			return ""
		}
		return d.String()
	}
	return policyJSON{Keep: p.Keep, MaxAge: d(p.MaxAge), DeleteIdleThreads: d(p.DeleteIdle), Protect: p.Protect, ProtectLabelPrefix: p.ProtectLabelPrefix}
}

// GroupByBucket groups targets by bucket, in the order of each bucket's
// first target, each group sorted by prefix (byte order): the first target
// of a group owns its sweeper and lock.
func GroupByBucket(targets []Target) [][]Target {
	var out [][]Target
	at := map[string]int{}
	for _, t := range targets {
		i, ok := at[t.Bucket]
		if !ok {
			i = len(out)
			at[t.Bucket] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], t)
	}
	for _, g := range out {
		slices.SortFunc(g, func(a, b Target) int { return strings.Compare(a.Prefix, b.Prefix) })
	}
	return out
}

// planOf is the preview of one target's dry run.
func planOf(t Target, rep RunReport) TargetPlan {
	threads := rep.Prune.Plans
	if threads == nil {
		threads = []sweep.ThreadPlan{}
	}
	return TargetPlan{Name: t.Name, Prefix: t.Prefix, Bucket: t.Bucket, Policy: showPolicy(t.Policy),
		Checkpoints: rep.Prune.Removed, ThreadsDeleted: rep.Prune.ThreadsDeleted, Protected: rep.Prune.Protected,
		BlobsDeleted: len(rep.Sweep.Deleted), BytesFreed: rep.Sweep.BytesFreed, BlobsMarked: rep.Sweep.Marked,
		Threads: threads, Uncovered: rep.Sweep.Uncovered, Unregistered: rep.Sweep.Unregistered}
}

// writePlan writes the plan file, replacing it whole.
func writePlan(path string, p PlanFile) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the plan: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write the plan: %w", err)
	}
	return nil
}

// readPlan reads a plan file and returns, per prefix, the plans of its
// threads. Every target must have a plan and every plan a target. Its errors
// match ErrUsage.
func readPlan(path string, targets []Target) (map[string][]sweep.ThreadPlan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --apply: %w", ErrUsage, err)
	}
	return parsePlan(data, path, targets)
}

// parsePlan is readPlan on the file's contents.
func parsePlan(data []byte, path string, targets []Target) (map[string][]sweep.ThreadPlan, error) {
	var p PlanFile
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, cli.Usagef("--apply %s: not a plan file: %v", path, err)
	}
	if p.Version != planVersion {
		return nil, cli.Usagef("--apply %s: plan version %d; this sweeper reads version %d", path, p.Version, planVersion)
	}
	out := map[string][]sweep.ThreadPlan{}
	for _, tp := range p.Targets {
		threads := tp.Threads
		if threads == nil {
			threads = []sweep.ThreadPlan{}
		}
		out[tp.Prefix] = threads
	}
	for _, t := range targets {
		if _, ok := out[t.Prefix]; !ok {
			return nil, cli.Usagef("--apply %s: the plan has nothing for prefix %q", path, t.Prefix)
		}
	}
	if len(out) != len(targets) {
		return nil, cli.Usagef("--apply %s: the plan covers %d prefixes, this sweeper serves %d", path, len(out), len(targets))
	}
	return out, nil
}
