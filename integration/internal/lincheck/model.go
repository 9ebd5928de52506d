// Package lincheck checks recorded client histories of a checkpoint store for
// linearizability with porcupine, against a sequential model of the
// checkpoint contract.
//
// # The model
//
// The state of one thread is its chain of checkpoints (oldest first, each with
// its parent), whether a transcript exists (forks write one), the writer lease
// (owner token, fence and expiry) and the highest fence issued. Operations
// are the contract's: AcquireWriter, Renew, Release, Append, DeleteHead,
// DeleteCheckpoints (prune), ForkFromCheckpoint (the destination side),
// GetHead, List and Get, each checked in the contract's order of errors.
//
// Lease expiry compares a lease's expiry with the store's clock, read at a
// moment the history does not record exactly. Each operation therefore
// carries the clock's value when it was called and when it returned; the
// model accepts every outcome that some clock value in between allows. A
// lease's expiry is known exactly after a successful acquire or renew (the
// store returns it) and only within bounds after one whose outcome is
// unknown, so the state keeps an interval.
//
// Outcomes that are unknown (a transport or context error, an
// etcdstore.UnknownOutcomeError) make the model nondeterministic: the
// operation may or may not have taken effect. The history gives such an
// operation an infinite return time, as etcd's robustness tests do.
//
// # Partitioning
//
// The history is checked one thread at a time. That is sound because threads
// are independent objects of the contract, apart from three couplings the
// workload removes: checkpoint ids are unique across all threads (each thread
// draws its ids from an id space of its own, so no DUPLICATE_ID and no Get
// crosses threads), a fork reads its source thread (forks copy from a source
// thread that nothing writes after its setup, so the read always sees the same
// checkpoint) and blob reference counts span threads (they are not modelled;
// etcdstore's Verify checks them after the run). Linearizability is local:
// the whole history is linearizable exactly when each independent object's
// subhistory is.
package lincheck

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Kind is an operation of the model.
type Kind uint8

// The operations.
const (
	Acquire Kind = iota
	Renew
	Release
	Append
	DeleteHead
	Prune
	Fork
	GetHead
	List
	Get
)

var kindNames = [...]string{"acquire", "renew", "release", "append", "deleteHead", "prune", "fork", "getHead", "list", "get"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// IsWrite reports whether the operation may change the state.
func (k Kind) IsWrite() bool { return k <= Fork }

// Contract error codes the model knows.
const (
	CodeWriterLost     = "SANDBOX_SNAPSHOT_WRITER_LOST"
	CodeWriterConflict = "SANDBOX_SNAPSHOT_WRITER_CONFLICT"
	CodeDuplicateID    = "SANDBOX_SNAPSHOT_DUPLICATE_ID"
	CodeStaleHead      = "SANDBOX_SNAPSHOT_STALE_HEAD"
	CodeParentMismatch = "SANDBOX_SNAPSHOT_PARENT_MISMATCH"
	CodeNotHead        = "SANDBOX_SNAPSHOT_NOT_HEAD"
	CodeNotEmpty       = "SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY"
	// CodeStoreFull is etcd's NOSPACE refusal: the write did not happen
	// (a store reads back a write that etcd applied before it refused, and
	// reports it as done).
	CodeStoreFull = "SANDBOX_SNAPSHOT_STORE_FULL"
)

// Input is an operation's call.
type Input struct {
	Kind   Kind
	Thread string
	// Now0 and Now1 are the store clock's values (milliseconds) just before
	// the call and just after the return.
	Now0, Now1 float64
	// Token and Fence name the writer lease a write or renew uses.
	Token string
	Fence int64
	// Append: the checkpoint id, its parent and the expected head. Fork: ID
	// is the destination checkpoint id. Get: the id read.
	ID, Parent, Expected string
	// Keep is the prune's keep.
	Keep int
}

// Output is an operation's response.
type Output struct {
	// Unknown: the operation may or may not have taken effect.
	Unknown bool
	// Err is the contract error code, "" for success.
	Err string
	// Acquire and renew: the lease (Token, Fence from acquire) and its
	// expiry.
	Token string
	Fence int64
	Exp   float64
	// GetHead: the head, "" for none.
	Head string
	// List: the checkpoints as Items(ids, parents).
	Items string
	// Get: whether the checkpoint exists, and its parent.
	Found  bool
	Parent string
	// Prune: the removed ids, oldest first, joined by Sep.
	Removed string
}

// Separators of the encodings in states and outputs.
const (
	Sep    = "\x1f" // between entries
	parSep = "\x1e" // between an id and its parent
)

// State is the model's state of one thread. Its fields are comparable, so
// states compare with ==.
type State struct {
	// Chain holds the thread's checkpoints oldest first, as id parSep parent
	// entries joined by Sep.
	Chain      string
	Transcript bool
	// Token is the current writer's owner token: "" when there is none, "?"
	// when an acquire of unknown outcome may hold the record.
	Token        string
	Fence        int64
	ExpLo, ExpHi float64
	MaxFence     int64
}

type entry struct{ id, parent string }

func (s State) entries() []entry {
	if s.Chain == "" {
		return nil
	}
	var out []entry
	for _, e := range strings.Split(s.Chain, Sep) {
		id, parent, _ := strings.Cut(e, parSep)
		out = append(out, entry{id, parent})
	}
	return out
}

func encode(es []entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.id + parSep + e.parent
	}
	return strings.Join(parts, Sep)
}

func (s State) head() string {
	es := s.entries()
	if len(es) == 0 {
		return ""
	}
	return es[len(es)-1].id
}

func (s State) find(id string) (entry, bool) {
	for _, e := range s.entries() {
		if e.id == id {
			return e, true
		}
	}
	return entry{}, false
}

// Items encodes the checkpoints of a List result for Output.Items: the order
// does not matter (List's own order is checked when it is recorded).
func Items(ids, parents []string) string {
	es := make([]string, len(ids))
	for i := range ids {
		es[i] = ids[i] + parSep + parents[i]
	}
	slices.Sort(es)
	return strings.Join(es, Sep)
}

func (s State) items() string {
	var ids, parents []string
	for _, e := range s.entries() {
		ids, parents = append(ids, e.id), append(parents, e.parent)
	}
	return Items(ids, parents)
}

// holds reports whether the writer (token, fence) is the thread's recorded
// writer.
func (s State) holds(in Input) bool {
	return s.Token != "" && s.Token != "?" && s.Token == in.Token && s.Fence == in.Fence
}

// canLive reports whether the writer of in may be current at some clock
// value of the operation: it holds the record and its expiry may be after
// that value.
func (s State) canLive(in Input) bool { return s.holds(in) && s.ExpHi > in.Now0 }

// canLose reports whether the writer of in may not be current: it does not
// hold the record, or its expiry may have passed.
func (s State) canLose(in Input) bool { return !s.holds(in) || s.ExpLo <= in.Now1 }

// eps absorbs the rounding of expiry = now + duration in float64.
const eps = 1e-6

// within reports whether the clock value now lies in the operation's bounds.
func within(now float64, in Input) bool { return now >= in.Now0-eps && now <= in.Now1+eps }

func (s State) cleared() State {
	s.Token, s.Fence, s.ExpLo, s.ExpHi = "", 0, 0, 0
	return s
}

// Model returns the porcupine model of the contract for stores whose lease
// duration is leaseMillis.
func Model(leaseMillis float64) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partition,
		Init:      func() []any { return []any{State{}} },
		Step: func(state, input, output any) []any {
			return step(state.(State), input.(Input), output.(Output), leaseMillis)
		},
		Equal: func(a, b any) bool { return a.(State) == b.(State) },
		Hash: func(st any) uint64 {
			s := st.(State)
			h := fnv.New64a()
			fmt.Fprintf(h, "%s|%v|%s|%d|%v|%v|%d", s.Chain, s.Transcript, s.Token, s.Fence, s.ExpLo, s.ExpHi, s.MaxFence)
			return h.Sum64()
		},
		DescribeOperation: describeOperation,
		DescribeState:     func(st any) string { return describeState(st.(State)) },
	}
	return nm.ToModel()
}

func partition(history []porcupine.Operation) [][]porcupine.Operation {
	byThread := map[string][]porcupine.Operation{}
	var order []string
	for _, op := range history {
		t := op.Input.(Input).Thread
		if _, ok := byThread[t]; !ok {
			order = append(order, t)
		}
		byThread[t] = append(byThread[t], op)
	}
	out := make([][]porcupine.Operation, 0, len(order))
	for _, t := range order {
		out = append(out, byThread[t])
	}
	return out
}

// outcome returns the next states for a write whose effect is apply, possible
// when ok, and whose contract errors are allowed as errOK says.
func outcome(s State, out Output, ok bool, apply func(State) State, errOK func(code string) bool) []any {
	switch {
	case out.Unknown:
		if ok {
			return []any{s, apply(s)}
		}
		return []any{s}
	case out.Err == "":
		if ok {
			return []any{apply(s)}
		}
		return nil
	case out.Err == CodeStoreFull || errOK(out.Err):
		return []any{s}
	}
	return nil
}

func step(s State, in Input, out Output, d float64) []any {
	switch in.Kind {
	case Acquire:
		switch {
		case out.Unknown:
			res := []any{s}
			if s.Token == "" || s.ExpLo <= in.Now1 {
				p := s
				p.Token, p.Fence, p.ExpLo, p.ExpHi = "?", 0, in.Now0+d, in.Now1+d
				res = append(res, p)
			}
			return res
		case out.Err == "":
			now := out.Exp - d
			if (s.Token == "" || s.ExpLo <= now) && out.Fence > s.MaxFence && within(now, in) {
				n := s
				n.Token, n.Fence, n.ExpLo, n.ExpHi, n.MaxFence = out.Token, out.Fence, out.Exp, out.Exp, out.Fence
				return []any{n}
			}
			return nil
		case out.Err == CodeWriterConflict:
			if s.Token != "" && s.ExpHi > in.Now0 {
				return []any{s}
			}
			return nil
		case out.Err == CodeStoreFull:
			return []any{s}
		}
		return nil

	case Renew:
		switch {
		case out.Unknown:
			res := []any{s}
			if s.canLive(in) {
				n := s
				n.ExpLo, n.ExpHi = in.Now0+d, in.Now1+d
				res = append(res, n)
			}
			return res
		case out.Err == "":
			now := out.Exp - d
			if s.holds(in) && s.ExpHi > now && within(now, in) {
				n := s
				n.ExpLo, n.ExpHi = out.Exp, out.Exp
				return []any{n}
			}
			return nil
		case out.Err == CodeWriterLost:
			if s.canLose(in) {
				return []any{s}
			}
		case out.Err == CodeStoreFull:
			return []any{s}
		}
		return nil

	case Release:
		// A release deletes the record when it still belongs to the lease,
		// whatever its expiry, and does nothing otherwise.
		if !s.holds(in) {
			return []any{s}
		}
		if out.Unknown {
			return []any{s, s.cleared()}
		}
		return []any{s.cleared()}

	case Append:
		_, dup := s.find(in.ID)
		head := s.head()
		ok := s.canLive(in) && !dup && head == in.Expected && in.Parent == in.Expected
		return outcome(s, out, ok, func(s State) State {
			s.Chain = encode(append(s.entries(), entry{in.ID, in.Parent}))
			return s
		}, func(code string) bool {
			switch code {
			case CodeWriterLost:
				return s.canLose(in)
			case CodeDuplicateID:
				return s.canLive(in) && dup
			case CodeStaleHead:
				return s.canLive(in) && !dup && head != in.Expected
			case CodeParentMismatch:
				return s.canLive(in) && !dup && head == in.Expected && in.Parent != in.Expected
			}
			return false
		})

	case DeleteHead:
		head := s.head()
		ok := s.canLive(in) && head != "" && head == in.ID
		return outcome(s, out, ok, func(s State) State {
			es := s.entries()
			s.Chain = encode(es[:len(es)-1])
			return s
		}, func(code string) bool {
			switch code {
			case CodeWriterLost:
				return s.canLose(in)
			case CodeNotHead:
				return s.canLive(in) && head != in.ID
			}
			return false
		})

	case Prune:
		es := s.entries()
		cut := max(0, len(es)-in.Keep)
		var removed []string
		for _, e := range es[:cut] {
			removed = append(removed, e.id)
		}
		ok := s.canLive(in) && (out.Unknown || out.Removed == strings.Join(removed, Sep))
		return outcome(s, out, ok, func(s State) State {
			s.Chain = encode(es[cut:])
			return s
		}, func(code string) bool { return code == CodeWriterLost && s.canLose(in) })

	case Fork:
		empty := s.Chain == "" && !s.Transcript
		ok := s.canLive(in) && empty
		return outcome(s, out, ok, func(s State) State {
			s.Chain, s.Transcript = encode([]entry{{in.ID, ""}}), true
			return s
		}, func(code string) bool {
			switch code {
			case CodeWriterLost:
				return s.canLose(in)
			case CodeNotEmpty:
				return s.canLive(in) && !empty
			}
			return false
		})

	case GetHead:
		if out.Head == s.head() {
			return []any{s}
		}
		return nil

	case List:
		if out.Items == s.items() {
			return []any{s}
		}
		return nil

	case Get:
		e, found := s.find(in.ID)
		if out.Found == found && (!found || out.Parent == e.parent) {
			return []any{s}
		}
		return nil
	}
	return nil
}

func short(tok string) string {
	if len(tok) > 6 {
		return tok[:6]
	}
	return tok
}

func describeOperation(input, output any) string {
	in, out := input.(Input), output.(Output)
	var call string
	switch in.Kind {
	case Acquire:
		call = "acquire()"
	case Renew, Release:
		call = fmt.Sprintf("%s(fence=%d tok=%s)", in.Kind, in.Fence, short(in.Token))
	case Append:
		call = fmt.Sprintf("append(%s parent=%q expected=%q fence=%d)", in.ID, in.Parent, in.Expected, in.Fence)
	case DeleteHead:
		call = fmt.Sprintf("deleteHead(%s fence=%d)", in.ID, in.Fence)
	case Prune:
		call = fmt.Sprintf("prune(keep=%d fence=%d)", in.Keep, in.Fence)
	case Fork:
		call = fmt.Sprintf("fork(-> %s fence=%d)", in.ID, in.Fence)
	case GetHead:
		call = "getHead()"
	case List:
		call = "list()"
	case Get:
		call = fmt.Sprintf("get(%s)", in.ID)
	}
	call += fmt.Sprintf(" @clock[%.0f,%.0f]", in.Now0, in.Now1)
	var res string
	switch {
	case out.Unknown:
		res = "unknown"
	case out.Err != "":
		res = strings.TrimPrefix(out.Err, "SANDBOX_SNAPSHOT_")
	case in.Kind == Acquire:
		res = fmt.Sprintf("fence=%d tok=%s exp=%.0f", out.Fence, short(out.Token), out.Exp)
	case in.Kind == Renew:
		res = fmt.Sprintf("exp=%.0f", out.Exp)
	case in.Kind == GetHead:
		res = fmt.Sprintf("%q", out.Head)
	case in.Kind == List:
		res = "[" + strings.NewReplacer(Sep, " ", parSep, "<").Replace(out.Items) + "]"
	case in.Kind == Get:
		if out.Found {
			res = fmt.Sprintf("found parent=%q", out.Parent)
		} else {
			res = "null"
		}
	case in.Kind == Prune:
		res = "removed [" + strings.ReplaceAll(out.Removed, Sep, " ") + "]"
	default:
		res = "ok"
	}
	return fmt.Sprintf("%s %s -> %s", in.Thread, call, res)
}

func describeState(s State) string {
	var ids []string
	for _, e := range s.entries() {
		ids = append(ids, e.id)
	}
	w := "none"
	switch {
	case s.Token == "?":
		w = fmt.Sprintf("unknown exp[%.0f,%.0f]", s.ExpLo, s.ExpHi)
	case s.Token != "":
		w = fmt.Sprintf("fence=%d tok=%s exp[%.0f,%.0f]", s.Fence, short(s.Token), s.ExpLo, s.ExpHi)
	}
	return fmt.Sprintf("chain=[%s] transcript=%v writer=%s maxFence=%d", strings.Join(ids, " "), s.Transcript, w, s.MaxFence)
}
