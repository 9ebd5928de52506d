package integration

import (
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn/keys"
)

// TestFenceCheckerRules feeds the fence check's history walk made-up
// transactions, one rule at a time, so that each rule is seen to hold and to
// fail without a cluster: claims are checked by the fence their key names,
// records need a checked write at their revision, GC records need a claim,
// staged chunks need their lease, and deletes are cleanup.
func TestFenceCheckerRules(t *testing.T) {
	l := keys.NewLayout("cairn-rules/")
	blob := keys.Blob{NS: keys.NSObject, Digest: [32]byte{7}}
	put := func(key []byte, value string, lease int64) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: key, Value: []byte(value), Lease: lease}}
	}
	del := func(key []byte) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: key}}
	}
	acquire := []*clientv3.Event{put(l.WriterOwner("t"), "token", 0), put(l.WriterExpiry("t"), "x", 0)} // revision 10
	thread := func(nonce string) *clientv3.Event { return put(l.Thread("t"), fmt.Sprintf(`{"op":%q}`, nonce), 0) }
	cases := []struct {
		name string
		// txns are the transactions after the acquire at revision 10, at
		// revisions 11, 12, ...
		txns                                      [][]*clientv3.Event
		violations, unknown, unattributed, claims int
	}{
		{name: "ClaimUnderTheCurrentLease", txns: [][]*clientv3.Event{
			{put(l.Claim(blob, "t", 10), "token", 5), del(l.GCRecord(blob))},
		}, claims: 1},
		{name: "ClaimUnderAnOlderLease", txns: [][]*clientv3.Event{
			{put(l.Claim(blob, "t", 9), "token", 5)},
		}, violations: 1, claims: 1},
		{name: "ClaimAfterTheRelease", txns: [][]*clientv3.Event{
			{del(l.WriterOwner("t")), del(l.WriterExpiry("t"))},
			{put(l.Claim(blob, "t", 10), "token", 5)},
		}, violations: 1, claims: 1},
		{name: "AppendWithItsRecords", txns: [][]*clientv3.Event{
			{thread("fenced"), put(l.Checkpoint("t", 1, "c1"), "{}", 0), put(l.Index("c1"), "{}", 0),
				put(l.Ref(keys.RootShard, "t", 1, keys.Nonce{1}, 0), "root", 0), del(l.Claim(blob, "t", 10))},
		}},
		{name: "AppendUnderAnOlderLease", txns: [][]*clientv3.Event{
			{thread("stale"), put(l.Checkpoint("t", 1, "c1"), "{}", 0)},
		}, violations: 1},
		{name: "ThreadRecordNoOperationSent", txns: [][]*clientv3.Event{
			{thread("nobody")},
		}, unknown: 1},
		{name: "RecordsWithoutACheckedWrite", txns: [][]*clientv3.Event{
			{put(l.Checkpoint("t", 1, "c1"), "{}", 0)},
			{put(l.Ref(keys.RootShard, "t", 1, keys.Nonce{1}, 0), "root", 0)},
			{put(l.Transcript("t"), "r", 0)},
		}, unattributed: 3},
		{name: "GCRecordWithoutAClaim", txns: [][]*clientv3.Event{
			{del(l.GCRecord(blob))},
		}, unattributed: 1},
		{name: "StagedChunks", txns: [][]*clientv3.Event{
			{put(l.Chunk("t", 1, keys.Nonce{1}, 0), "bytes", 3)},
			{put(l.Chunk("t", 1, keys.Nonce{2}, 0), "bytes", 0)},
		}, unattributed: 1},
		{name: "Cleanup", txns: [][]*clientv3.Event{
			{del(l.Checkpoint("t", 1, "c1")), del(l.Index("c1"))},
			{del(l.Claim(blob, "t", 10))},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log := newNonceLog(l)
			log.byOp["fenced"] = opTag{client: 1, kind: "append", thread: "t", fence: 10}
			log.byOp["stale"] = opTag{client: 2, kind: "append", thread: "t", fence: 9}
			var rep fenceReport
			fc := fenceChecker{layout: l, checked: map[string]bool{"t": true}, log: log, rep: &rep,
				current: map[string]int64{}, lastFence: map[string]int64{}}
			for i, txn := range append([][]*clientv3.Event{acquire}, tc.txns...) {
				for _, ev := range txn {
					ev.Kv.ModRevision = int64(10 + i)
				}
				if err := fc.transaction(slices.Clone(txn)); err != nil {
					t.Fatal(err)
				}
			}
			if len(rep.Violations) != tc.violations || len(rep.Unknown) != tc.unknown || len(rep.Unattributed) != tc.unattributed || rep.Claims != tc.claims {
				t.Fatalf("violations %v, unknown %v, unattributed %v, claims %d; want %d, %d, %d, %d",
					rep.Violations, rep.Unknown, rep.Unattributed, rep.Claims, tc.violations, tc.unknown, tc.unattributed, tc.claims)
			}
			if rep.Acquires != 1 {
				t.Fatalf("%d acquires, want 1", rep.Acquires)
			}
		})
	}
}
