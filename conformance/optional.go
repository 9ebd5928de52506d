package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/cairnstore/cairn"
)

func (e *env) listThreads(after string, limit int) []string {
	e.t.Helper()
	got, err := e.s.(cairn.ThreadLister).ListThreads(e.ctx, after, limit)
	if err != nil {
		e.t.Fatalf("ListThreads(%q, %d): %v", after, limit, err)
	}
	return got
}

// allThreads pages through ListThreads with the given page size.
func (e *env) allThreads(limit int) []string {
	e.t.Helper()
	var all []string
	after := ""
	for range 1000 {
		page := e.listThreads(after, limit)
		if len(page) == 0 {
			return all
		}
		if limit > 0 && len(page) > limit {
			e.t.Errorf("ListThreads(%q, %d) returned %d threads, more than the limit", after, limit, len(page))
		}
		all = append(all, page...)
		after = page[len(page)-1]
	}
	e.t.Fatal("ListThreads never returned an empty page")
	return nil
}

// threadListerCases check ListThreads: only threads with a checkpoint,
// sorted by bytes, paged with after and limit.
func threadListerCases() []storeCase {
	return []storeCase{
		{"Empty", func(e *env) {
			for _, limit := range []int{0, 1, 10, -1} {
				if got := e.listThreads("", limit); len(got) != 0 {
					e.t.Errorf("ListThreads(\"\", %d) on an empty store = %q, want none", limit, got)
				}
			}
		}},
		{"OnlyThreadsWithCheckpoints", func(e *env) {
			e.chain(threadA, "1")
			e.lease("lease-only")
			e.chain("deleted", "2")
			e.mustDeleteHead("deleted", "2")
			e.chain(threadB, "3")
			if got := e.allThreads(10); !slices.Equal(got, []string{threadA, threadB}) {
				e.t.Errorf("ListThreads = %q, want [thread-a thread-b]", got)
			}
		}},
		{"SortedByBytes", func(e *env) {
			threads := []string{"b", "a/b", "a", "a\x00", "\U00010000", "\uE000", "é", "A", " "}
			for i, th := range threads {
				c := cp(fmt.Sprintf("c%d", i), "", th)
				c.Files = nil
				e.mustAppend(c, "")
			}
			want := slices.Clone(threads)
			slices.Sort(want)
			if got := e.allThreads(100); !slices.Equal(got, want) {
				e.t.Errorf("ListThreads = %q, want %q", got, want)
			}
		}},
		{"Paging", func(e *env) {
			var want []string
			for _, th := range []string{"t7", "t1", "t5", "t3", "t2", "t6", "t4"} {
				e.chain(th, "c-"+th)
				want = append(want, th)
			}
			slices.Sort(want)
			for _, limit := range []int{1, 2, 3, 7, 8} {
				if got := e.allThreads(limit); !slices.Equal(got, want) {
					e.t.Errorf("paging with limit %d gave %q, want %q", limit, got, want)
				}
			}
			if got := e.listThreads("t3", 2); !slices.Equal(got, []string{"t4", "t5"}) {
				e.t.Errorf("ListThreads(t3, 2) = %q, want [t4 t5]", got)
			}
			if got := e.listThreads("t35", 10); !slices.Equal(got, []string{"t4", "t5", "t6", "t7"}) {
				e.t.Errorf("ListThreads(t35, 10) = %q, want [t4 t5 t6 t7]", got)
			}
			if got := e.listThreads("t7", 10); len(got) != 0 {
				e.t.Errorf("ListThreads(t7, 10) = %q, want none", got)
			}
			if got := e.listThreads("u", 10); len(got) != 0 {
				e.t.Errorf("ListThreads(u, 10) = %q, want none", got)
			}
		}},
		{"Context/Canceled", func(e *env) {
			e.chain(threadA, "1")
			ctx, cancel := context.WithCancel(e.ctx)
			cancel()
			_, err := e.s.(cairn.ThreadLister).ListThreads(ctx, "", 10)
			expectErr(e.t, "ListThreads with a cancelled context", err, context.Canceled)
		}},
		{"DefaultLimit", func(e *env) {
			for _, th := range []string{"x", "y", "z"} {
				e.chain(th, "c-"+th)
			}
			for _, limit := range []int{0, -1} {
				got := e.listThreads("", limit)
				if len(got) == 0 || !slices.IsSorted(got) || !slices.Equal(got, []string{"x", "y", "z"}[:len(got)]) {
					e.t.Errorf("ListThreads(\"\", %d) = %q, want a non-empty prefix of [x y z]", limit, got)
				}
				if got := e.allThreads(limit); !slices.Equal(got, []string{"x", "y", "z"}) {
					e.t.Errorf("paging with limit %d gave %q", limit, got)
				}
			}
		}},
	}
}

// walkerCases check WalkBlobReferences against ListBlobReferences.
func walkerCases() []storeCase {
	walk := func(e *env) []cairn.BlobReference {
		e.t.Helper()
		var got []cairn.BlobReference
		err := e.s.(cairn.BlobReferenceWalker).WalkBlobReferences(e.ctx, func(r cairn.BlobReference) error {
			got = append(got, r)
			return nil
		})
		noErr(e.t, "WalkBlobReferences", err)
		return got
	}
	same := func(e *env) {
		e.t.Helper()
		got, want := walk(e), e.refs()
		if len(got) == 0 && len(want) == 0 {
			return
		}
		if !reflect.DeepEqual(got, want) {
			e.t.Errorf("WalkBlobReferences gave %s, ListBlobReferences %s", showRefs(got), showRefs(want))
		}
	}
	return []storeCase{
		{"Empty", func(e *env) {
			if got := walk(e); len(got) != 0 {
				e.t.Errorf("WalkBlobReferences on an empty store gave %s", showRefs(got))
			}
		}},
		{"MatchesList", func(e *env) {
			c := withFiles(cp("1", "", threadA), file("a", fileKey(1)), file("b", fileKey(2)), file("c", fileKey(1)))
			c.Artifacts = []cairn.Artifact{artifact("x", artifactKey(1))}
			e.mustAppend(c, "")
			same(e)
			e.chain(threadA, "2", "3")
			e.chain(threadB, "b4")
			same(e)
			e.mustDeleteHead(threadA, "3")
			same(e)
		}},
		{"Context/Canceled", func(e *env) {
			e.chain(threadA, "1")
			ctx, cancel := context.WithCancel(e.ctx)
			cancel()
			err := e.s.(cairn.BlobReferenceWalker).WalkBlobReferences(ctx, func(cairn.BlobReference) error { return nil })
			expectErr(e.t, "WalkBlobReferences with a cancelled context", err, context.Canceled)
		}},
		{"StopsAtFirstError", func(e *env) {
			e.chain(threadA, "1", "2", "3")
			stop := errors.New("stop here")
			calls := 0
			err := e.s.(cairn.BlobReferenceWalker).WalkBlobReferences(e.ctx, func(cairn.BlobReference) error {
				calls++
				if calls == 2 {
					return stop
				}
				return nil
			})
			if !errors.Is(err, stop) {
				e.t.Errorf("WalkBlobReferences returned %v, want the callback's error", err)
			}
			if calls != 2 {
				e.t.Errorf("the callback ran %d times, want 2", calls)
			}
		}},
	}
}
