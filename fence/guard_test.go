package fence_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairnstore/cairn/fence"
)

// GuardCompares builds the very comparisons Guard does.
func TestGuardComparesAreGuard(t *testing.T) {
	k := fence.Keys{Owner: "/p/owner", Expiry: "/p/expiry"}
	for _, now := range []float64{0, -1, 1.5, 1.7e12} {
		cs, raw := fence.Guard(k, "token\x00é", 42, now), fence.GuardCompares(k, "token\x00é", 42, now)
		if len(cs) != len(raw) {
			t.Fatalf("%d comparisons, want %d", len(raw), len(cs))
		}
		for i := range cs {
			if want := cs[i].GetCompare(); !proto.Equal(want, raw[i]) {
				t.Errorf("comparison %d at %v: %v, want %v", i, now, raw[i], want)
			}
		}
	}
}
