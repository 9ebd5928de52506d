package snapshot

import (
	"testing"

	"github.com/cairnstore/cairn/bucket"
)

// headBucket is a bucket whose kind PutsFindExisting does not know.
type headBucket struct{ *bucket.Memory }

func TestLookup(t *testing.T) {
	type step struct {
		size      int64
		headFirst bool // what the lookup must decide
		absent    bool // what the lookup then finds
	}
	small, large := int64(100), int64(DefaultPutFirstMax+1)
	cases := []struct {
		name   string
		bucket Blobs
		max    int64
		steps  []step
	}{
		{"the first lookup heads", bucket.NewMemory(nil), 0, []step{{small, true, true}}},
		{"new content turns to puts", bucket.NewMemory(nil), 0, []step{
			{small, true, true}, {small, false, true}, {small, false, true}, {large, true, true}, {small, false, true}}},
		{"present content stays on heads", bucket.NewMemory(nil), 0, []step{
			{small, true, false}, {small, true, false}, {small, true, false}, {small, true, false}}},
		{"half absent heads", bucket.NewMemory(nil), 0, []step{
			{small, true, true}, {small, false, false}, {small, true, true}, {small, false, false}, {small, true, true}}},
		{"a run of present keys turns back to heads", bucket.NewMemory(nil), 0, append(append(
			[]step{{small, true, true}}, repeat(step{small, false, false}, 1)...), step{small, true, false})},
		{"files above max always head", bucket.NewMemory(nil), 10, []step{
			{small, true, true}, {small, true, true}, {10, false, true}, {11, true, true}}},
		{"a negative max always heads", bucket.NewMemory(nil), -1, []step{
			{small, true, true}, {small, true, true}, {1, true, true}}},
		{"a bucket that heads in its put always heads", headBucket{bucket.NewMemory(nil)}, 0, []step{
			{small, true, true}, {small, true, true}, {1, true, true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newLookup(tc.bucket, tc.max)
			for i, s := range tc.steps {
				if got := l.headFirst(s.size); got != s.headFirst {
					t.Fatalf("step %d (%d bytes): headFirst %v, want %v", i, s.size, got, s.headFirst)
				}
				l.found(s.absent)
			}
		})
	}
}

// TestLookupWindow: only the last lookups count, so a capture that moves
// from new content to present content turns back to heads.
func TestLookupWindow(t *testing.T) {
	l := newLookup(bucket.NewMemory(nil), 0)
	for range 1000 {
		l.found(true)
	}
	if l.headFirst(1) {
		t.Fatal("after absent keys only, the lookup heads")
	}
	for range len(l.recent) / 2 {
		l.found(false)
	}
	if !l.headFirst(1) {
		t.Fatal("after half a window of present keys, the lookup still puts first")
	}
	if l.n != len(l.recent) || l.absent != len(l.recent)/2 {
		t.Fatalf("window holds %d lookups, %d absent; want %d, %d", l.n, l.absent, len(l.recent), len(l.recent)/2)
	}
}

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestPutsFindExisting(t *testing.T) {
	cases := []struct {
		name string
		b    any
		want bool
	}{
		{"memory", bucket.NewMemory(nil), true},
		{"wrapped memory", headBucket{bucket.NewMemory(nil)}, false},
		{"nil", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := bucket.PutsFindExisting(tc.b); got != tc.want {
				t.Fatalf("PutsFindExisting = %v, want %v", got, tc.want)
			}
		})
	}
}
