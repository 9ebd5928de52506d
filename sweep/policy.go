package sweep

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairnstore/cairn"
)

// Policy says which checkpoints a prune removes from a thread. The live
// checkpoints of a thread are the chain from its head down to a floor (the
// contract's chain rule), so every rule below chooses how far down the chain
// the floor may move; nothing above the floor is ever removed, and
// checkpoints that are not on the head's chain are left alone (except by
// DeleteIdle, which removes the whole thread).
//
// The rules combine as a union of what each keeps:
//
//   - the head is always kept;
//   - Keep keeps the newest Keep checkpoints on the chain;
//   - MaxAge keeps every chain checkpoint created MaxAge or less ago, and so,
//     by the chain rule, every checkpoint between it and the head;
//   - a protected checkpoint (Protect, ProtectLabelPrefix) stops the floor
//     from moving past it: it and everything between it and the head stay;
//   - DeleteIdle removes a thread whose head was created more than DeleteIdle
//     ago entirely, unless one of its checkpoints is protected; such a
//     thread is pruned by the other rules instead.
//
// So with both Keep and MaxAge, a checkpoint goes only when it is older than
// MaxAge and more than Keep-1 checkpoints below the head. A zero field turns
// its rule off; a policy with no rule on is invalid.
type Policy struct {
	// Keep is how many checkpoints of each chain, the head first, always
	// stay. Zero with MaxAge set keeps the head only; zero without MaxAge
	// prunes nothing. It must not be negative.
	Keep int `json:"keep,omitempty"`
	// MaxAge prunes chain checkpoints created more than MaxAge before now.
	// It must not be negative.
	MaxAge time.Duration `json:"maxAge,omitempty"`
	// DeleteIdle removes whole threads whose head was created more than
	// DeleteIdle before now (cairn.DeleteThread, under the thread's writer
	// lease). It must not be negative.
	DeleteIdle time.Duration `json:"deleteIdle,omitempty"`
	// Protect are the reasons (for example cairn.ReasonNamed) whose
	// checkpoints no rule removes.
	Protect []string `json:"protect,omitempty"`
	// ProtectLabelPrefix, when not empty, protects every checkpoint whose
	// label starts with it: an explicit pin (for example "pin:").
	ProtectLabelPrefix string `json:"protectLabelPrefix,omitempty"`
}

// Validate returns an error matching ErrInvalidArgument when a field is out
// of range or no rule is on.
func (p Policy) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
	}
	switch {
	case p.Keep < 0:
		return bad("Keep must not be negative, got %d", p.Keep)
	case p.MaxAge < 0:
		return bad("MaxAge must not be negative, got %v", p.MaxAge)
	case p.DeleteIdle < 0:
		return bad("DeleteIdle must not be negative, got %v", p.DeleteIdle)
	case p.Keep == 0 && p.MaxAge == 0 && p.DeleteIdle == 0:
		return bad("no rule: set Keep (at least 1), MaxAge or DeleteIdle")
	}
	for _, r := range p.Protect {
		if r == "" {
			return bad("Protect holds an empty reason")
		}
	}
	return nil
}

// Protects reports whether the policy protects c.
func (p Policy) Protects(c cairn.Checkpoint) bool {
	if p.ProtectLabelPrefix != "" && strings.HasPrefix(c.Label, p.ProtectLabelPrefix) {
		return true
	}
	return slices.Contains(p.Protect, c.Reason)
}

// ThreadPlan is what a policy does to one thread, decided from one read of
// its head and checkpoints.
type ThreadPlan struct {
	ThreadID string `json:"threadId"`
	// Head is the head the plan was made against.
	Head string `json:"head"`
	// DeleteThread says the whole thread goes (DeleteIdle).
	DeleteThread bool `json:"deleteThread,omitempty"`
	// Keep is the length of the chain that stays when the thread is pruned;
	// it is cairn.DeleteCheckpointsInput.Keep.
	Keep int `json:"keep,omitempty"`
	// Removed are the ids that go: oldest first when pruned, in the order of
	// List when the thread is deleted.
	Removed []string `json:"removed"`
	// Protected is the number of protected checkpoints that the policy
	// would have removed without their protection.
	Protected int `json:"protected,omitempty"`
	// Released counts, by blob key, the references the removal drops.
	Released map[string]int `json:"-"`
}

// Plan decides, at time now, what the policy does to the thread whose head
// and checkpoints (as List returns them) are given. It reads nothing; a dry
// run and a real run call it on the same read and so agree.
func (p Policy) Plan(now time.Time, thread, head string, list []cairn.Checkpoint) ThreadPlan {
	tp := ThreadPlan{ThreadID: thread, Head: head, Removed: []string{}}
	byID := make(map[string]*cairn.Checkpoint, len(list))
	for i := range list {
		byID[list[i].ID] = &list[i]
	}
	var chain []*cairn.Checkpoint // head first
	for id := head; id != ""; {
		c, ok := byID[id]
		if !ok {
			break
		}
		chain = append(chain, c)
		id = c.ParentCheckpointID
	}
	if len(chain) == 0 {
		return tp
	}
	nowMs := float64(now.UnixMilli())
	older := func(c *cairn.Checkpoint, d time.Duration) bool {
		return nowMs-c.CreatedAt > float64(d.Milliseconds())
	}
	protected := 0
	for i := range list {
		if p.Protects(list[i]) {
			protected++
		}
	}
	if p.DeleteIdle > 0 && older(chain[0], p.DeleteIdle) {
		if protected == 0 {
			tp.DeleteThread = true
			for i := range list {
				tp.Removed = append(tp.Removed, list[i].ID)
			}
			tp.Released = released(list)
			return tp
		}
		tp.Protected = protected
	}
	keep := len(chain) // no pruning rule: keep everything
	if p.Keep > 0 || p.MaxAge > 0 {
		keep = max(p.Keep, 1)
		if p.MaxAge > 0 {
			for i, c := range chain {
				if !older(c, p.MaxAge) {
					keep = max(keep, i+1)
				}
			}
		}
	}
	keep = min(keep, len(chain))
	unprotected := keep
	for i := len(chain) - 1; i >= keep; i-- {
		if p.Protects(*chain[i]) {
			keep = i + 1
			break
		}
	}
	if tp.Protected == 0 {
		for _, c := range chain[unprotected:keep] {
			if p.Protects(*c) {
				tp.Protected++
			}
		}
	}
	tp.Keep = keep
	var gone []cairn.Checkpoint
	for i := len(chain) - 1; i >= keep; i-- {
		tp.Removed = append(tp.Removed, chain[i].ID)
		gone = append(gone, *chain[i])
	}
	tp.Released = released(gone)
	return tp
}

// released counts one reference per distinct blob key of each checkpoint.
func released(cs []cairn.Checkpoint) map[string]int {
	out := map[string]int{}
	for _, c := range cs {
		for _, k := range c.BlobKeys() {
			out[k]++
		}
	}
	return out
}
