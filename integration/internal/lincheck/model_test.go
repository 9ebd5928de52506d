package lincheck

import (
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

const lease = 60_000.0

// op builds a history entry; ret < 0 means unknown outcome.
func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	if ret < 0 {
		out.Unknown = true
		ret = 1 << 62
	}
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func acq(now float64) Input { return Input{Kind: Acquire, Thread: "t", Now0: now, Now1: now} }

func w(kind Kind, fence int64, tok string, now float64) Input {
	return Input{Kind: kind, Thread: "t", Token: tok, Fence: fence, Now0: now, Now1: now}
}

func appendIn(fence int64, tok string, now float64, id, expected string) Input {
	in := w(Append, fence, tok, now)
	in.ID, in.Parent, in.Expected = id, expected, expected
	return in
}

func check(t *testing.T, ops []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	res, _ := porcupine.CheckOperationsVerbose(Model(lease), ops, 0)
	return res
}

func TestSequentialHistory(t *testing.T) {
	ops := []porcupine.Operation{
		op(0, 0, 1, acq(1000), Output{Token: "a", Fence: 5, Exp: 1000 + lease}),
		op(0, 2, 3, appendIn(5, "a", 1000, "t.c1", ""), Output{}),
		op(0, 4, 5, appendIn(5, "a", 1000, "t.c2", "t.c1"), Output{}),
		op(0, 6, 7, appendIn(5, "a", 1000, "t.c2", "t.c2"), Output{Err: CodeDuplicateID}),
		op(0, 8, 9, appendIn(5, "a", 1000, "t.c3", "t.c1"), Output{Err: CodeStaleHead}),
		op(1, 10, 11, Input{Kind: GetHead, Thread: "t"}, Output{Head: "t.c2"}),
		op(1, 12, 13, Input{Kind: List, Thread: "t"}, Output{Items: Items([]string{"t.c2", "t.c1"}, []string{"t.c1", ""})}),
		op(0, 14, 15, Input{Kind: Prune, Thread: "t", Token: "a", Fence: 5, Now0: 1000, Now1: 1000, Keep: 1}, Output{Removed: "t.c1"}),
		op(1, 16, 17, Input{Kind: Get, Thread: "t", ID: "t.c2"}, Output{Found: true, Parent: "t.c1"}),
		op(1, 18, 19, Input{Kind: Get, Thread: "t", ID: "t.c1"}, Output{}),
		op(2, 20, 21, acq(2000), Output{Err: CodeWriterConflict}),
		op(0, 22, 23, w(Renew, 5, "a", 30000), Output{Exp: 30000 + lease}),
		op(0, 24, 25, func() Input { in := w(DeleteHead, 5, "a", 30000); in.ID = "t.c2"; return in }(), Output{}),
		op(1, 26, 27, Input{Kind: GetHead, Thread: "t"}, Output{Head: ""}),
		// The lease expires at 90000; a takeover at 90000 succeeds and the
		// old writer is fenced out.
		op(2, 28, 29, acq(90000), Output{Token: "b", Fence: 9, Exp: 90000 + lease}),
		op(0, 30, 31, appendIn(5, "a", 90000, "t.c4", ""), Output{Err: CodeWriterLost}),
		op(0, 32, 33, w(Release, 5, "a", 90000), Output{}),
		op(2, 34, 35, appendIn(9, "b", 90000, "t.c4", ""), Output{}),
	}
	if res := check(t, ops); res != porcupine.Ok {
		t.Fatalf("legal history judged %v", res)
	}
}

func TestIllegalHistories(t *testing.T) {
	base := []porcupine.Operation{
		op(0, 0, 1, acq(1000), Output{Token: "a", Fence: 5, Exp: 1000 + lease}),
		op(0, 2, 3, appendIn(5, "a", 1000, "t.c1", ""), Output{}),
	}
	cases := map[string][]porcupine.Operation{
		"lost write": {
			op(1, 4, 5, Input{Kind: GetHead, Thread: "t"}, Output{Head: ""}),
		},
		"second lease while the first is live": {
			op(1, 4, 5, acq(2000), Output{Token: "b", Fence: 7, Exp: 2000 + lease}),
		},
		"stale writer's append succeeds after a takeover": {
			op(1, 4, 5, acq(61000), Output{Token: "b", Fence: 7, Exp: 61000 + lease}),
			op(0, 6, 7, appendIn(5, "a", 61000, "t.c2", "t.c1"), Output{}),
		},
		"expired writer's append succeeds": {
			op(0, 4, 5, appendIn(5, "a", 61000, "t.c2", "t.c1"), Output{}),
		},
		"fence goes backwards": {
			op(1, 4, 5, acq(61000), Output{Token: "b", Fence: 4, Exp: 61000 + lease}),
		},
		"renew revives an expired lease": {
			op(0, 4, 5, w(Renew, 5, "a", 61000), Output{Exp: 61000 + lease}),
		},
		"prune removes the wrong checkpoints": {
			op(0, 4, 5, appendIn(5, "a", 1000, "t.c2", "t.c1"), Output{}),
			op(0, 6, 7, Input{Kind: Prune, Thread: "t", Token: "a", Fence: 5, Now0: 1000, Now1: 1000, Keep: 1}, Output{Removed: "t.c2"}),
		},
		"an append refused for space took effect": {
			op(0, 4, 5, appendIn(5, "a", 1000, "t.c2", "t.c1"), Output{Err: CodeStoreFull}),
			op(1, 6, 7, Input{Kind: GetHead, Thread: "t"}, Output{Head: "t.c2"}),
		},
		"an acquire refused for space took the lease": {
			op(0, 4, 5, w(Release, 5, "a", 1000), Output{}),
			op(1, 6, 7, acq(2000), Output{Err: CodeStoreFull}),
			op(2, 8, 9, acq(2000), Output{Err: CodeWriterConflict}),
		},
		"conflict without a writer": {
			op(0, 4, 5, w(Release, 5, "a", 1000), Output{}),
			op(1, 6, 7, acq(1000), Output{Err: CodeWriterConflict}),
		},
	}
	for name, extra := range cases {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			ops := append(append([]porcupine.Operation{}, base...), extra...)
			if res := check(t, ops); res != porcupine.Illegal {
				t.Fatalf("illegal history judged %v", res)
			}
		})
	}
}

// TestStoreFull: a write refused for space changed nothing, whatever kind.
func TestStoreFull(t *testing.T) {
	ops := []porcupine.Operation{
		op(0, 0, 1, acq(1000), Output{Token: "a", Fence: 5, Exp: 1000 + lease}),
		op(0, 2, 3, appendIn(5, "a", 1000, "t.c1", ""), Output{}),
		op(0, 4, 5, appendIn(5, "a", 1000, "t.c2", "t.c1"), Output{Err: CodeStoreFull}),
		op(0, 6, 7, w(Renew, 5, "a", 1000), Output{Err: CodeStoreFull}),
		op(0, 8, 9, Input{Kind: DeleteHead, Thread: "t", Token: "a", Fence: 5, Now0: 1000, Now1: 1000, ID: "t.c1"}, Output{Err: CodeStoreFull}),
		op(1, 10, 11, acq(1000), Output{Err: CodeStoreFull}),
		op(1, 12, 13, Input{Kind: GetHead, Thread: "t"}, Output{Head: "t.c1"}),
	}
	if res := check(t, ops); res != porcupine.Ok {
		t.Fatalf("legal history judged %v", res)
	}
}

func TestUnknownOutcomes(t *testing.T) {
	ops := []porcupine.Operation{
		op(0, 0, 1, acq(1000), Output{Token: "a", Fence: 5, Exp: 1000 + lease}),
		// An append of unknown outcome may land at any time after its call.
		op(0, 2, -1, appendIn(5, "a", 1000, "t.c1", ""), Output{}),
		op(1, 3, 4, Input{Kind: GetHead, Thread: "t"}, Output{Head: ""}),
		op(1, 5, 6, Input{Kind: GetHead, Thread: "t"}, Output{Head: "t.c1"}),
		// An acquire of unknown outcome may hold the record: a conflict
		// after the first lease's release is then legal.
		op(2, 7, 8, w(Release, 5, "a", 1000), Output{}),
		op(3, 9, -1, acq(2000), Output{}),
		op(4, 10, 11, acq(2000), Output{Err: CodeWriterConflict}),
	}
	if res := check(t, ops); res != porcupine.Ok {
		t.Fatalf("legal history judged %v", res)
	}
	// But the read cannot go back once it saw the write.
	ops = append(ops, op(1, 12, 13, Input{Kind: GetHead, Thread: "t"}, Output{Head: ""}))
	if res := check(t, ops); res != porcupine.Illegal {
		t.Fatalf("illegal history judged %v", res)
	}
}

func TestPartitionByThread(t *testing.T) {
	ops := []porcupine.Operation{
		op(0, 0, 1, Input{Kind: GetHead, Thread: "x"}, Output{}),
		op(1, 0, 1, Input{Kind: GetHead, Thread: "y"}, Output{}),
		op(0, 2, 3, Input{Kind: GetHead, Thread: "x"}, Output{}),
	}
	parts := partition(ops)
	if len(parts) != 2 || len(parts[0]) != 2 || len(parts[1]) != 1 {
		t.Fatalf("partition = %v", parts)
	}
}
