package demo

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/cairnstore/cairn/internal/childproc"
	"github.com/cairnstore/cairn/internal/versitygw"
)

func TestMain(m *testing.M) {
	// The goroutine that starts helper servers lives as long as the process.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(childproc.Spawner))
}

// TestRun runs the whole demo on each local S3 server and checks its numbers,
// which the committed workspace and the scripted edits fix.
func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server string
	}{
		{"VersityGWProcess", S3VersityGW},
		{"InProcessGoFakeS3", S3GoFakeS3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.server == S3VersityGW {
				if _, err := versitygw.Find(); err != nil {
					t.Fatalf("no versitygw binary: %v (make tools builds ./bin/versitygw)", err)
				}
			}
			res, err := Run(t.Context(), Options{S3: tc.server})
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, got, want any) {
				t.Helper()
				if got != want {
					t.Errorf("%s = %v; want %v", what, got, want)
				}
			}
			check("workspace files", res.Workspace.Files, 11)
			check("captures", res.Captures, 15)
			check("blobs uploaded", res.Uploaded, 44)
			check("blobs found present", res.Reused, 121)
			check("orphans", len(res.Orphans), 2)
			for thread, want := range map[string][2]int{"alpha": {4, 2}, "beta": {4, 2}, "gamma": {4, 2}, "gamma-fork": {3, 2}} {
				check(thread+" checkpoints before", res.Before.Checkpoints[thread], want[0])
				check(thread+" checkpoints after", res.After.Checkpoints[thread], want[1])
			}
			check("checkpoints before", res.Before.Total, 15)
			check("checkpoints after", res.After.Total, 8)
			check("referenced before", res.Before.Referenced, 44)
			check("referenced after", res.After.Referenced, 37)
			check("objects before", res.Before.Objects, 46)
			check("objects after", res.After.Objects, 37)
			check("bytes before", res.Before.Bytes, int64(47181))
			check("bytes after", res.After.Bytes, int64(43261))
			check("pruned", res.Run.Prune.Removed, 7)
			check("deleted", len(res.Run.Sweep.Deleted), 9)
			check("deleted orphans", res.DeletedOrphans, 2)
			check("deleted after pruning", res.DeletedPruned, 7)
			check("bytes freed", res.Run.Sweep.BytesFreed, res.Before.Bytes-res.After.Bytes)
			check("referenced blobs missing", res.Missing, 0)
			check("heads restored", res.Restored, 4)
			if res.Run.Verify == nil || !res.Run.Verify.OK() {
				t.Errorf("verify = %+v; want no problems", res.Run.Verify)
			}
			// Every blob left is referenced, and every referenced blob is left.
			check("objects after = referenced after", res.After.Objects, res.After.Referenced)

			var out bytes.Buffer
			Print(&out, res)
			for _, want := range []string{
				"Captured 15 checkpoints on 4 threads",
				"  gamma-fork                        3            2",
				"deleted  9 blobs",
				"Deleted 9 blobs",
				"4 of 4 thread heads restored",
			} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the report does not say %q:\n%s", want, out.String())
				}
			}
			if _, err := json.Marshal(res); err != nil {
				t.Errorf("the result does not encode: %v", err)
			}
		})
	}
}
