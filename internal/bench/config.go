package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Workloads lists the workload names in the order Run runs them.
var Workloads = []string{"B1", "B2", "B3", "BC", "B4", "B5", "B6", "B7", "B8", "B9", "B10", "B11", "B16", "B20"}

// Config sizes a run. Full and Quick return the two standard ones.
type Config struct {
	// Name labels the run in the table's header ("full", "QUICK").
	Name string
	// Rounds is how many times each workload and its baseline run, in
	// alternation, for B3, B4 and B6.
	Rounds int
	// AppendRounds is Rounds for B1 and B2. Their targets bound a ratio
	// within 25-30% of 1, and a round's ratio moves by that much with the
	// machine (B2's client CPU per operation, from one round to the next,
	// by up to ±25%), so the quick run keeps the full run's rounds and round
	// sizes for them: their verdicts mean the same in both runs.
	AppendRounds int

	// B1Appends is the number of timed appends (and of bare transactions)
	// per side and round; B1Entries the entries per checkpoint.
	B1Appends, B1Entries int
	// B2Writers writers (each on a thread of its own, in a goroutine of its
	// own) make B2Appends appends each per round; B2Shared is the fraction of
	// each checkpoint's B1Entries blob keys that every checkpoint shares.
	B2Writers, B2Appends int
	B2Shared             float64
	// B3Entries is the size of the large checkpoint; B3Iterations the
	// append+get pairs per side and round.
	B3Entries, B3Iterations int
	// B4Checkpoints checkpoints of B4Keys keys each hold the references B4
	// walks.
	B4Checkpoints, B4Keys int
	// B5Objects objects, half of them unreferenced, are swept B5Rounds
	// times per side.
	B5Objects, B5Rounds int
	// B10Appends appends and gets of a B1Entries-entry checkpoint per side
	// and round compare cairnd and the Go client with the store in process.
	B10Appends int
	// B10Command, when set, is run during B10 against the running cairnd
	// (see b10External) to add the figure of another client, e.g. the
	// TypeScript one.
	B10Command []string
	// B11Threads threads of the capacity workload (20 turns each, every
	// checkpoint kept) measure what etcd keeps per checkpoint.
	B11Threads int
	// B16Kept kept checkpoints of the capacity workload measure the
	// incremental sweep's mirror (rows B16, B17 and B18); B16Fit are the
	// smaller sizes run before it, over which (with B16Kept) the figures are
	// fitted and extrapolated to 10^6; B16Latency is added to each request
	// of the harness's bucket.
	B16Kept    int
	B16Fit     []int
	B16Latency time.Duration
	// B7Files files of about B7Bytes bytes in all make the workspace that
	// B7, B8 and B9 capture and restore.
	B7Files int
	B7Bytes int64

	// Only, when not empty, selects workloads by name (B1 ... B6).
	Only []string
	// ProfileDir, when set, receives a CPU profile of each timed round of
	// each side: the cairn side, the baseline, and further references (one
	// file per workload, side and round, <workload>-<side>-round<NN>.pprof;
	// go tool pprof merges several).
	ProfileDir string
	// VersityGW is the versitygw binary; "" finds it as the tests do.
	VersityGW string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Full is the configuration of `make bench`.
func Full() Config {
	return Config{
		Name: "full", Rounds: 7, AppendRounds: 7,
		B1Appends: 300, B1Entries: 200,
		B2Writers: 32, B2Appends: 60, B2Shared: 0.8,
		B3Entries: 20_000, B3Iterations: 5,
		B4Checkpoints: 2_000, B4Keys: 500,
		B5Objects: 100_000, B5Rounds: 5,
		B10Appends: 200,
		B11Threads: 20,
		B16Kept:    100_000,
		B16Fit:     []int{10_000, 30_000},
		B7Files:    10_000, B7Bytes: 256 << 20,
	}
}

// Quick is the configuration of `make bench QUICK=1`: the same workloads
// with fewer rounds and smaller sizes (but B1 and B2 as in the full run),
// in under three minutes.
func Quick() Config {
	return Config{
		Name: "QUICK", Rounds: 5, AppendRounds: 7,
		B1Appends: 300, B1Entries: 200,
		B2Writers: 32, B2Appends: 60, B2Shared: 0.8,
		B3Entries: 20_000, B3Iterations: 2,
		B4Checkpoints: 400, B4Keys: 500,
		B5Objects: 20_000, B5Rounds: 3,
		B10Appends: 50,
		B11Threads: 4,
		B16Kept:    1_000,
		B7Files:    2_000, B7Bytes: 64 << 20,
	}
}

func (c Config) validate() error {
	for _, w := range c.Only {
		if !slices.Contains(Workloads, w) {
			return fmt.Errorf("unknown workload %q (have %s)", w, strings.Join(Workloads, ", "))
		}
	}
	switch {
	case c.Rounds < 1 || c.AppendRounds < 1 || c.B5Rounds < 1:
		return fmt.Errorf("rounds must be at least 1")
	case c.B1Appends < 1 || c.B1Entries < 1 || c.B2Writers < 1 || c.B2Appends < 1 || c.B3Entries < 1 || c.B3Iterations < 1:
		return fmt.Errorf("sizes must be at least 1")
	case c.B2Shared < 0 || c.B2Shared >= 1:
		return fmt.Errorf("the shared fraction must be in [0, 1)")
	case c.B4Checkpoints < 10 || c.B4Keys < 100:
		return fmt.Errorf("B4 needs at least 10 checkpoints of 100 keys")
	case c.B5Objects < 2:
		return fmt.Errorf("B5 needs at least 2 objects")
	case c.B10Appends < 1 && c.selected("B10"):
		return fmt.Errorf("B10 needs at least 1 append")
	case c.B7Files < 1 || c.B7Bytes < int64(c.B7Files):
		return fmt.Errorf("B7 needs at least 1 file and a byte a file")
	case c.B11Threads < 1 && (c.selected("B11") || c.selected("B20")):
		return fmt.Errorf("B11 and B20 need at least 1 thread")
	case (c.B16Kept < 100 || slices.Min(append([]int{c.B16Kept}, c.B16Fit...)) < 100) && c.selected("B16"):
		return fmt.Errorf("B16 needs at least 100 kept checkpoints a run")
	case c.B16Latency < 0:
		return fmt.Errorf("B16's latency must not be negative")
	}
	return nil
}

func (c Config) selected(w string) bool { return len(c.Only) == 0 || slices.Contains(c.Only, w) }
