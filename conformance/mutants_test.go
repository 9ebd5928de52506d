package conformance_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/conformance"
	"github.com/cairnstore/cairn/conformance/internal/faulty"
)

// A mutant is a store with one deliberate mistake. TestMutants runs the suites
// against each one in a subprocess and requires that at least one of the cases
// named in caughtBy fails.
type mutant struct {
	name     string
	run      func(t *testing.T) // runs the suites against the mutant
	caughtBy []string           // subtest names under TestMutantSubject, any of which must fail
	timeout  time.Duration      // the watchdog of each case and its grace, when not the defaults
}

// faultyStores runs every checkpoint-store suite against the faulty store
// with faults f.
func faultyStores(f faulty.Faults) func(t *testing.T) {
	return func(t *testing.T) {
		newStore := func(t *testing.T, opts cairn.Options) conformance.ForkStore {
			s, err := faulty.New(opts, f)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		asStore := func(t *testing.T, opts cairn.Options) cairn.Store { return newStore(t, opts) }
		conformance.RunStoreTests(t, asStore)
		conformance.RunPruneTests(t, asStore)
		conformance.RunDeleteThreadTests(t, asStore)
		conformance.RunThreadListerTests(t, asStore)
		conformance.RunBlobReferenceWalkerTests(t, asStore)
		conformance.RunBlobGCTests(t, asStore)
		conformance.RunForkTests(t, newStore)
		conformance.RunClockSkewTests(t, func(t *testing.T, a, b cairn.Options) (cairn.Store, cairn.Store) {
			s, err := faulty.New(a, f)
			if err != nil {
				t.Fatal(err)
			}
			return s, s.WithClock(b.Now)
		})
	}
}

func faultyInstances(f faulty.InstanceFaults) func(t *testing.T) {
	return func(t *testing.T) {
		conformance.RunInstanceStoreTests(t, func(*testing.T) cairn.InstanceStore { return faulty.NewInstanceStore(f) })
	}
}

// memoryWrapper runs the store suites against a MemoryStore behind wrap.
func memoryWrapper(wrap func(*cairn.MemoryStore) cairn.Store) func(t *testing.T) {
	return func(t *testing.T) {
		newStore := func(t *testing.T, opts cairn.Options) cairn.Store {
			s, err := cairn.NewMemoryStore(opts)
			if err != nil {
				t.Fatal(err)
			}
			return wrap(s)
		}
		conformance.RunStoreTests(t, newStore)
		conformance.RunPruneTests(t, newStore)
		conformance.RunBlobGCTests(t, newStore)
		conformance.RunBindingTests(t, newStore)
	}
}

var mutants = []mutant{
	// Append.
	{"SkipDuplicateCheck", faultyStores(faulty.Faults{SkipDuplicateCheck: true}), []string{"Store/CC-04/DuplicateIDBeforeParentCheck"}, 0},
	{"HeadBeforeWriter", faultyStores(faulty.Faults{HeadBeforeWriter: true}), []string{"Store/Append/Order/TakenOverWriterBeforeStaleHead"}, 0},
	{"ParentBeforeDuplicate", faultyStores(faulty.Faults{ParentBeforeDuplicate: true}), []string{"Store/CC-04/DuplicateIDBeforeParentCheck"}, 0},
	{"ContentBeforeWriterThread", faultyStores(faulty.Faults{ContentBeforeWriterThread: true}), []string{"Store/Append/Order/WriterMismatchBeforeCreatedAt"}, 0},
	{"LeaseBeforeContent", faultyStores(faulty.Faults{LeaseBeforeContent: true}), []string{"Store/Append/Order/EntriesBeforeExpiredWriter"}, 0},
	{"AppendCheckThenAct", faultyStores(faulty.Faults{AppendCheckThenAct: true}), []string{"Store/Concurrency/AppendSameExpectedHead"}, 0},
	// Validation.
	{"RejectDriveRelative", faultyStores(faulty.Faults{RejectDriveRelative: true}), []string{"Store/Entries/PathAccepted"}, 0},
	{"FileAncestorOneWay", faultyStores(faulty.Faults{FileAncestorOneWay: true}), []string{"Store/Entries/Tree/FileBeneathThenFile"}, 0},
	{"AcceptUpperHex", faultyStores(faulty.Faults{AcceptUpperHex: true}), []string{"Store/Entries/FileBlobKey", "Store/Artifacts/Rejected/UpperCaseHex"}, 0},
	{"AcceptUnsafeSize", faultyStores(faulty.Faults{AcceptUnsafeSize: true}), []string{"Store/Entries/Size"}, 0},
	{"SkipConversation", faultyStores(faulty.Faults{SkipConversation: true}), []string{"Store/Content/ConversationInvalid"}, 0},
	{"AcceptLongIDs", faultyStores(faulty.Faults{AcceptLongIDs: true}), []string{"Store/Bounds/IDOneBytePast"}, 0},
	{"IDBoundAfterWriterThread", faultyStores(faulty.Faults{IDBoundAfterWriterThread: true}), []string{"Store/Bounds/Order/IDPastBoundBeforeWriterThread"}, 0},
	{"AcceptLongNames", faultyStores(faulty.Faults{AcceptLongNames: true}), []string{"Store/Bounds/NameOneBytePast"}, 0},
	// Copies.
	{"ShareFiles", faultyStores(faulty.Faults{ShareFiles: true}), []string{"Store/CC-10/ImmutableAndDistinctKeys", "Store/Copies/GetResult"}, 0},
	{"KeepInputConversation", faultyStores(faulty.Faults{KeepInputConversation: true}), []string{"Store/Copies/AppendInputConversationBytes"}, 0},
	{"CompactConversation", faultyStores(faulty.Faults{CompactConversation: true}), []string{"Store/Content/ConversationByteForByte"}, 0},
	// Reads and reference counts.
	{"ListUTF16Order", faultyStores(faulty.Faults{ListUTF16Order: true}), []string{"Store/List/UTF8NotUTF16"}, 0},
	{"CountEveryOccurrence", faultyStores(faulty.Faults{CountEveryOccurrence: true}), []string{"Store/CC-10/ImmutableAndDistinctKeys"}, 0},
	{"DeleteHeadKeepsRefs", faultyStores(faulty.Faults{DeleteHeadKeepsRefs: true}), []string{"Store/CC-11/SharedKeyCountsPerCheckpoint"}, 0},
	{"KeepZeroRefs", faultyStores(faulty.Faults{KeepZeroRefs: true}), []string{"Store/CC-16/DeleteHeadMovesToParent"}, 0},
	// Leases.
	{"LiveAtExpiry", faultyStores(faulty.Faults{LiveAtExpiry: true}), []string{"Store/Lease/ExpiryBoundary"}, 0},
	{"FenceResetOnRelease", faultyStores(faulty.Faults{FenceResetOnRelease: true}), []string{"Store/Lease/FenceGrowsAcrossRelease"}, 0},
	{"StaleReleaseDeletes", faultyStores(faulty.Faults{StaleReleaseDeletes: true}), []string{"Store/CC-14/StaleLeaseCannotReleaseReplacement"}, 0},
	{"RenewRevivesExpired", faultyStores(faulty.Faults{RenewRevivesExpired: true}), []string{"Store/Lease/ExpiredLeaseCannotBeRevived"}, 0},
	{"ConflictBumpsFence", faultyStores(faulty.Faults{ConflictBumpsFence: true}), []string{"Store/Lease/ConflictLeavesHolder"}, 0},
	{"AcquireWaits", faultyStores(faulty.Faults{AcquireWaits: true}), []string{"Store/CC-12/OneWriterPerThread"}, time.Second},
	{"AcquireHangs", faultyStores(faulty.Faults{AcquireHangs: true}), []string{"Store/CC-12/OneWriterPerThread"}, time.Second},
	{"RenewByThread", faultyStores(faulty.Faults{RenewByThread: true}), []string{"Store/Lease/RenewOfReplacedLeaseLeavesReplacement"}, 0},
	// DeleteHead and pruning.
	{"DanglingHeadAfterPrune", faultyStores(faulty.Faults{DanglingHeadAfterPrune: true}), []string{"Prune/DeleteHeadAfterPruneLeavesNoHead"}, 0},
	{"PruneByCreatedAt", faultyStores(faulty.Faults{PruneByCreatedAt: true}), []string{"Prune/ParentChainNotCreatedAt"}, 0},
	{"PruneNewestFirst", faultyStores(faulty.Faults{PruneNewestFirst: true}), []string{"Prune/RemovedOldestFirst"}, 0},
	{"PruneAcceptsZero", faultyStores(faulty.Faults{PruneAcceptsZero: true}), []string{"Prune/KeepValidation"}, 0},
	{"PruneWithoutLease", faultyStores(faulty.Faults{PruneWithoutLease: true}), []string{"Prune/Order/ExpiredWriter"}, 0},
	// DeleteThread.
	{"DeleteThreadKeepsRefs", faultyStores(faulty.Faults{DeleteThreadKeepsRefs: true}), []string{"DeleteThread/ReferenceCountsGoDown"}, 0},
	{"DeleteThreadWithoutLease", faultyStores(faulty.Faults{DeleteThreadWithoutLease: true}), []string{"DeleteThread/Order/ExpiredWriter"}, 0},
	{"DeleteThreadKeepsHead", faultyStores(faulty.Faults{DeleteThreadKeepsHead: true}), []string{"DeleteThread/RemovesEveryCheckpoint"}, 0},
	{"DeleteThreadNewestFirst", faultyStores(faulty.Faults{DeleteThreadNewestFirst: true}), []string{"DeleteThread/RemovedInListOrder"}, 0},
	// Fork.
	{"ForkCopiesLabel", faultyStores(faulty.Faults{ForkCopiesLabel: true}), []string{"Fork/FC-01/CopiesHistoricalCheckpoint"}, 0},
	{"ForkDuplicateIDCode", faultyStores(faulty.Faults{ForkDuplicateIDCode: true}), []string{"Fork/FC-10/OrphanedCheckpointID"}, 0},
	{"ForkIgnoresEmptyTranscript", faultyStores(faulty.Faults{ForkIgnoresEmptyTranscript: true}), []string{"Fork/DestinationNotEmpty/EmptyTranscript"}, 0},
	{"ForkSourceBeforeSameThread", faultyStores(faulty.Faults{ForkSourceBeforeSameThread: true}), []string{"Fork/Order/SameThreadBeforeMissingSource"}, 0},
	{"ForkReturnsStored", faultyStores(faulty.Faults{ForkReturnsStored: true}), []string{"Fork/Copies"}, 0},
	{"ForkCheckThenAct", faultyStores(faulty.Faults{ForkCheckThenAct: true}), []string{"Fork/Concurrent"}, 0},
	// Optional capabilities.
	{"ListThreadsWithLeases", faultyStores(faulty.Faults{ListThreadsWithLeases: true}), []string{"ThreadLister/OnlyThreadsWithCheckpoints"}, 0},
	{"WalkSkipsLast", faultyStores(faulty.Faults{WalkSkipsLast: true}), []string{"BlobReferenceWalker/MatchesList"}, 0},
	// Online sweep.
	{"ClaimIgnoredByDelete", faultyStores(faulty.Faults{ClaimIgnoredByDelete: true}), []string{"BlobGC/Claim/EndsCandidacy"}, 0},
	{"ClaimWithoutLease", faultyStores(faulty.Faults{ClaimWithoutLease: true}), []string{"BlobGC/Claim/Order/ExpiredWriter", "BlobGC/Claim/Order/ReleasedWriter"}, 0},
	{"ClaimsOutliveLease", faultyStores(faulty.Faults{ClaimsOutliveLease: true}), []string{"BlobGC/ClaimsEnd/Release", "BlobGC/ClaimsEnd/Takeover"}, 0},
	{"ClaimsJudgedByClock", faultyStores(faulty.Faults{ClaimsJudgedByClock: true}), []string{
		"BlobGC/ClaimsKept/PastExpiry",
		"ClockSkew/SweeperAhead500ms/SweepBetweenClaimAndAppend",
		"ClockSkew/SweeperAhead10m/SweepBetweenClaimAndAppend",
		"ClockSkew/WriterHalfRate/SweepBetweenClaimAndAppend",
	}, 0},
	{"ClaimDeleting", faultyStores(faulty.Faults{ClaimDeleting: true}), []string{"BlobGC/Claim/DeletingIsBusy"}, 0},
	{"ClaimLeaseBeforeKeys", faultyStores(faulty.Faults{ClaimLeaseBeforeKeys: true}), []string{"BlobGC/Claim/Order/InvalidKeyBeforeExpiredWriter"}, 0},
	{"ClaimBeforeKeyCheck", faultyStores(faulty.Faults{ClaimBeforeKeyCheck: true}), []string{"BlobGC/InvalidKeys"}, 0},
	{"AppendKeepsClaims", faultyStores(faulty.Faults{AppendKeepsClaims: true}), []string{"BlobGC/ClaimsEnd/Append"}, 0},
	{"ReleaseEndsThreadClaims", faultyStores(faulty.Faults{ReleaseEndsThreadClaims: true}), []string{"BlobGC/ClaimsEnd/Takeover"}, 0},
	{"MarkClaimed", faultyStores(faulty.Faults{MarkClaimed: true}), []string{"BlobGC/Claim/Live"}, 0},
	{"MarkReplaces", faultyStores(faulty.Faults{MarkReplaces: true}), []string{"BlobGC/Mark/KeepsExistingRecord"}, 0},
	{"BeginIgnoresVersion", faultyStores(faulty.Faults{BeginIgnoresVersion: true}), []string{"BlobGC/Begin/StaleVersion"}, 0},
	{"EndLosesSince", faultyStores(faulty.Faults{EndLosesSince: true}), []string{"BlobGC/End/NotDeleted"}, 0},
	{"DropDeleting", faultyStores(faulty.Faults{DropDeleting: true}), []string{"BlobGC/Drop/StaleOrDeleting"}, 0},
	{"VersionReused", faultyStores(faulty.Faults{VersionReused: true}), []string{"BlobGC/Version/NotReusedAfterRemoval"}, 0},
	{"WaitReturnsAtOnce", faultyStores(faulty.Faults{WaitReturnsAtOnce: true}), []string{"BlobGC/Wait/BlocksUntilDeleted"}, 0},
	{"ReadGCAfterWalk", faultyStores(faulty.Faults{ReadGCAfterWalk: true}), []string{"BlobGC/Read/OnePointInTime"}, 0},
	// Instance stores.
	{"InstanceMergeUpsert", faultyInstances(faulty.InstanceFaults{MergeUpsert: true}), []string{"InstanceStore/IC-04/UpsertReplacesWholeRecord"}, 0},
	{"InstanceShareRecords", faultyInstances(faulty.InstanceFaults{ShareRecords: true}), []string{"InstanceStore/Copies"}, 0},
	{"InstanceDeletePrefix", faultyInstances(faulty.InstanceFaults{DeletePrefix: true}), []string{"InstanceStore/DeleteIsolation"}, 0},
	{"InstanceUnbounded", faultyInstances(faulty.InstanceFaults{Unbounded: true}), []string{"InstanceStore/Bounds/KeyOneBytePast", "InstanceStore/Bounds/FieldOneBytePast"}, 0},
	{"InstanceMissingAsEmpty", faultyInstances(faulty.InstanceFaults{MissingAsEmpty: true}), []string{"InstanceStore/IC-01/MissingKeyIsNil"}, 0},
	// One fault layered on a reference store of package cairn.
	{"MemoryStoreUTF16List", memoryWrapper(func(s *cairn.MemoryStore) cairn.Store { return faulty.UTF16List{MemoryStore: s} }), []string{"Store/List/UTF8NotUTF16"}, 0},
	{"MemoryStoreHeadFirst", memoryWrapper(func(s *cairn.MemoryStore) cairn.Store { return faulty.HeadFirst{MemoryStore: s} }), []string{"Store/Append/Order/TakenOverWriterBeforeStaleHead"}, 0},
	{"MemoryStoreNoBinding", memoryWrapper(func(s *cairn.MemoryStore) cairn.Store { return faulty.NoBinding{MemoryStore: s} }), []string{"Binding/Reported", "Binding/UploadRecordsIt", "Binding/SweepOfAnotherStoreRefuses"}, 0},
	{"MemoryStoreSameBinding", memoryWrapper(func(s *cairn.MemoryStore) cairn.Store { return faulty.SameBinding{MemoryStore: s} }), []string{"Binding/DistinctStores", "Binding/SweepOfAnotherStoreRefuses"}, 0},
	{"MemoryStoreImpatientWait", memoryWrapper(func(s *cairn.MemoryStore) cairn.Store { return faulty.ImpatientWait{MemoryStore: s} }), []string{"BlobGC/Wait/BlocksUntilDeleted"}, 0},
	{"MemoryForkStoreForkLabel", func(t *testing.T) {
		conformance.RunForkTests(t, func(t *testing.T, opts cairn.Options) conformance.ForkStore {
			s, err := cairn.NewMemoryForkStore(opts)
			if err != nil {
				t.Fatal(err)
			}
			return faulty.ForkLabel{MemoryForkStore: s}
		})
	}, []string{"Fork/FC-01/CopiesHistoricalCheckpoint"}, 0},
	{"MemoryInstanceStoreMerging", faultyInstancesOf(func() cairn.InstanceStore {
		return faulty.MergingInstances{MemoryInstanceStore: cairn.NewMemoryInstanceStore()}
	}), []string{"InstanceStore/IC-04/UpsertReplacesWholeRecord"}, 0},
}

func faultyInstancesOf(newStore func() cairn.InstanceStore) func(t *testing.T) {
	return func(t *testing.T) {
		conformance.RunInstanceStoreTests(t, func(*testing.T) cairn.InstanceStore { return newStore() })
	}
}

const mutantEnv = "CAIRN_CONFORMANCE_MUTANT"

// TestMutantSubject runs the suites against the mutant named by
// $CAIRN_CONFORMANCE_MUTANT. It is the subprocess of TestMutants and skips
// otherwise.
func TestMutantSubject(t *testing.T) {
	name := os.Getenv(mutantEnv)
	if name == "" {
		t.Skip("runs only as a subprocess of TestMutants")
	}
	i := slices.IndexFunc(mutants, func(m mutant) bool { return m.name == name })
	if i < 0 {
		t.Fatalf("no mutant named %q", name)
	}
	if d := mutants[i].timeout; d > 0 {
		defer conformance.SetCaseTimeout(d)()
		defer conformance.SetHangGrace(d)()
	}
	mutants[i].run(t)
}

// A case fails with a FAIL line, or, when it hangs, with the watchdog's panic.
var failLine = regexp.MustCompile(`--- FAIL: TestMutantSubject/(\S+)|conformance: TestMutantSubject/(\S+) hung for`)

// failedCases returns the failed subtests of a -test.v output that have no
// failed subtest of their own.
func failedCases(out []byte) []string {
	var all []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := failLine.FindStringSubmatch(sc.Text()); m != nil {
			all = append(all, m[1]+m[2])
		}
	}
	var leaves []string
	for _, name := range all {
		if !slices.ContainsFunc(all, func(o string) bool { return strings.HasPrefix(o, name+"/") }) {
			leaves = append(leaves, name)
		}
	}
	slices.Sort(leaves)
	return slices.Compact(leaves)
}

// TestMutants shows that the suites have teeth: every mutant must fail, and
// among its failures must be a case that checks the rule it breaks.
func TestMutants(t *testing.T) {
	if os.Getenv(mutantEnv) != "" {
		t.Skip("already a mutant subprocess")
	}
	if testing.Short() {
		t.Skip("starts one subprocess per mutant")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), exe, "-test.run=^TestMutantSubject$", "-test.v", "-test.count=1", "-test.timeout=5m")
			cmd.Env = append(os.Environ(), mutantEnv+"="+m.name)
			out, err := cmd.CombinedOutput()
			failed := failedCases(out)
			if err == nil {
				t.Fatalf("mutant %s passed every suite: no case catches it", m.name)
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("running the mutant: %v", err)
			}
			if len(failed) == 0 {
				t.Fatalf("the subprocess failed without a failed case:\n%s", tail(out, 40))
			}
			var caught []string
			for _, f := range failed {
				for _, want := range m.caughtBy {
					if f == want || strings.HasPrefix(f, want+"/") {
						caught = append(caught, f)
					}
				}
			}
			if len(caught) == 0 {
				t.Errorf("mutant %s failed only %q; want a failure of %q", m.name, failed, m.caughtBy)
			}
			t.Logf("caught by %d case(s): %s", len(failed), strings.Join(failed, ", "))
		})
	}
}

func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestFaultyBaseline checks that the faulty stores without a fault keep the
// contract, so that each mutant's failures come from its one fault.
func TestFaultyBaseline(t *testing.T) {
	faultyStores(faulty.Faults{})(t)
	faultyInstances(faulty.InstanceFaults{})(t)
}
