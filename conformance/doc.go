// Package conformance checks that an implementation keeps the cairn
// checkpoint contract. It is to cairn.Store what testing/fstest is to fs.FS:
// a store calls the suites from its own tests, and each suite runs one
// subtest per rule against a fresh store.
//
// Typical usage inside a test is:
//
//	func TestConformance(t *testing.T) {
//		newStore := func(t *testing.T, opts cairn.Options) cairn.Store {
//			s, err := mystore.New(db(t), opts)
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		}
//		conformance.RunStoreTests(t, newStore)
//		conformance.RunPruneTests(t, newStore)
//		conformance.RunThreadListerTests(t, newStore)
//		conformance.RunBlobReferenceWalkerTests(t, newStore)
//		conformance.RunBlobGCTests(t, newStore)
//	}
//
// A store with the fork capability also runs RunForkTests with a factory that
// returns a ForkStore, and an instance store runs RunInstanceStoreTests.
//
// # Suites
//
// RunStoreTests checks the required methods of cairn.Store. RunPruneTests,
// RunForkTests, RunThreadListerTests, RunBlobReferenceWalkerTests and
// RunBlobGCTests check the optional capabilities; the suites of Pruner,
// ThreadLister and BlobReferenceWalker skip, saying why, when the store lacks
// the capability, and the suite of the online sweep protocol skips unless the
// store implements both of its sides, cairn.BlobClaimer and
// cairn.BlobCollector. Each suite is one subtest ("Store", "Prune", "Fork",
// "ThreadLister", "BlobReferenceWalker", "BlobGC", "InstanceStore") whose
// subtests have stable names: the numbers of the upstream catalogue where a
// case has one ("Store/CC-04/...", "Fork/FC-09/...", "InstanceStore/IC-03/..."),
// and the rule they check otherwise
// ("Store/Append/Order/ExpiredWriterBeforeDuplicate",
// "Store/Entries/PathRejected", "Prune/ParentChainNotCreatedAt",
// "BlobGC/Claim/DeletingIsBusy", "BlobGC/ClaimsEnd/Takeover"). Run one with go
// test -run, as usual.
//
// RunBlobGCTests reads claims and GC records only through
// cairn.BlobCollector.ReadBlobGC, and drives claims through the store's own
// leases and Appends. One case calls the store from inside the callback of
// ReadBlobGC, to check that the references, claims and records it reports are
// of one point in time; a store must not hold a lock across that callback.
//
// Every case that expects an error checks it with errors.Is against the
// sentinels of package cairn, and checks that the failed call changed nothing:
// the head and List of every thread the case touched, Get of every
// checkpoint it named, ListBlobReferences and, for a fork-capable store, the
// transcripts are deep-equal before and after; in the BlobGC suite, so are
// the live claims and the GC records. The check-order cases combine
// two faults in one call, so that only the error of the first check in the
// contract's order passes.
//
// # Clock and leases
//
// The factory receives cairn.Options whose Now is a clock that the suite moves
// by hand, with a lease duration of 30s and a renew-after of 10s. A store must
// compare lease expiry with Now (a lease is expired when expiresAt <= Now())
// and must not consult any other clock for it; the lease cases move the clock
// to the exact instant of expiry. A claim of the online sweep protocol is live
// exactly while its lease is current by that clock.
//
// Nothing in the suites sleeps. The only waits are of WaitBlobs: the cases
// show that it waits by giving it a context deadline 50ms away, and that it
// returns once a delete is settled by waiting for it in a goroutine, for at
// most 10 seconds.
//
// # Watchdog
//
// Each case runs under a watchdog. After a minute the case fails and the
// context it passes to the store is cancelled; a store that still does not
// return 15 seconds later makes the test binary panic with the case's name,
// so that a hung store fails instead of blocking until the go test timeout.
//
// # Cost
//
// A case makes at most a few hundred calls, and the concurrency cases start
// about a dozen goroutines, so the suites are fit to run against a real
// database. Run them under the race detector.
package conformance
