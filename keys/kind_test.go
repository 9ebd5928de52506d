package keys_test

import (
	"slices"
	"testing"

	"github.com/cairnstore/cairn/keys"
)

var kinds = []string{"", "thread", "checkpoint", "chunk", "transcript", "writer", "index", "ref", "instance", "lock", "gc", "claim", "thread-other"}

func TestKind(t *testing.T) {
	l := keys.NewLayout("p/")
	var n keys.Nonce
	for _, c := range []struct {
		name string
		key  []byte
		want string
	}{
		{"Thread", l.Thread("t"), "thread"},
		{"Checkpoint", l.Checkpoint("t", 1, "c"), "checkpoint"},
		{"Chunk", l.Chunk("t", 1, n, 0), "chunk"},
		{"Transcript", l.Transcript("t"), "transcript"},
		{"TranscriptChunk", l.TranscriptChunk("t", n, 0), "transcript"},
		{"WriterOwner", l.WriterOwner("t"), "writer"},
		{"WriterExpiry", l.WriterExpiry("t"), "writer"},
		{"Index", l.Index("c"), "index"},
		{"Ref", l.Ref(0, "t", 1, n, 0), "ref"},
		{"Instance", l.Instance("k"), "instance"},
		{"Lock", l.Locks(), "lock"},
		{"OtherPrefix", keys.NewLayout("q/").Thread("t"), ""},
		{"Root", l.Root(), ""},
		{"ThreadDataOnly", l.ThreadData("t"), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := l.Kind(c.key); got != c.want {
				t.Fatalf("Kind(%q) = %q, want %q", c.key, got, c.want)
			}
		})
	}
}

func FuzzKind(f *testing.F) {
	l := keys.NewLayout("p/")
	f.Add(l.Checkpoint("t", 1, "c"))
	f.Add(l.Thread("t"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, key []byte) {
		if k := l.Kind(key); !slices.Contains(kinds, k) {
			t.Fatalf("Kind(%q) = %q", key, k)
		}
	})
}
