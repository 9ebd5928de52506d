package sweep_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/childproc"
)

func TestMain(m *testing.M) {
	// The goroutine that starts helper servers lives as long as the process.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(childproc.Spawner))
}

// events records the order in which the sweep touches its collaborators.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, fmt.Sprintf(format, args...))
}

func (e *events) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.log)
}

// count returns how many events start with prefix.
func (e *events) count(prefix string) int {
	n := 0
	for _, s := range e.all() {
		if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

var errInjected = errors.New("injected failure")

// fakeBlobs is a memory bucket that records list and delete calls and can
// fail them.
type fakeBlobs struct {
	*bucket.Memory
	ev *events

	// listFailsOn fails the listing of this prefix.
	listFailsOn string
	// keyFailures maps keys to the error Delete reports for them.
	keyFailures map[string]error
	// requestFailsOn fails the n-th Delete call (1-based) as a whole.
	requestFailsOn int
	// deletes are the batch sizes of the Delete calls.
	deletes []int
}

func (f *fakeBlobs) List(ctx context.Context, prefix, token string, limit int) (bucket.Page, error) {
	f.ev.add("list %s", prefix)
	if prefix == f.listFailsOn {
		return bucket.Page{}, errInjected
	}
	return f.Memory.List(ctx, prefix, token, limit)
}

func (f *fakeBlobs) Delete(ctx context.Context, keys []string) (bucket.DeleteResult, error) {
	f.ev.add("delete %d", len(keys))
	f.deletes = append(f.deletes, len(keys))
	if len(f.deletes) == f.requestFailsOn {
		res := bucket.DeleteResult{}
		for _, k := range keys {
			res.Failed = append(res.Failed, bucket.KeyError{Key: k, Err: errInjected})
		}
		return res, errInjected
	}
	var ok []string
	var res bucket.DeleteResult
	for _, k := range keys {
		if err := f.keyFailures[k]; err != nil {
			res.Failed = append(res.Failed, bucket.KeyError{Key: k, Err: err})
			continue
		}
		ok = append(ok, k)
	}
	done, err := f.Memory.Delete(ctx, ok)
	if err != nil {
		return res, err
	}
	res.Deleted = done.Deleted
	if len(res.Failed) > 0 {
		return res, bucket.ErrPartialDelete
	}
	return res, nil
}

// fakeRefs reports a fixed list of references, and records when it is read.
// It is not a BlobReferenceWalker; walkerRefs is.
type fakeRefs struct {
	ev   *events
	keys []string
	err  error
}

func (r *fakeRefs) ListBlobReferences(context.Context) ([]cairn.BlobReference, error) {
	r.ev.add("refs list")
	if r.err != nil {
		return nil, r.err
	}
	out := make([]cairn.BlobReference, len(r.keys))
	for i, k := range r.keys {
		out[i] = cairn.BlobReference{Key: k, References: 1}
	}
	return out, nil
}

// walkerRefs streams the references and fails ListBlobReferences, so a test
// notices when the sweep does not stream. failAfter > 0 fails the walk after
// that many references.
type walkerRefs struct {
	fakeRefs
	failAfter int
}

func (r *walkerRefs) ListBlobReferences(context.Context) ([]cairn.BlobReference, error) {
	r.ev.add("refs list")
	return nil, errors.New("ListBlobReferences called on a store that walks")
}

func (r *walkerRefs) WalkBlobReferences(ctx context.Context, fn func(cairn.BlobReference) error) error {
	r.ev.add("refs walk")
	for i, k := range r.keys {
		if r.failAfter > 0 && i == r.failAfter {
			return r.err
		}
		if err := fn(cairn.BlobReference{Key: k, References: 1}); err != nil {
			return err
		}
	}
	if r.failAfter == 0 && r.err != nil {
		return r.err
	}
	return nil
}

var _ cairn.BlobReferenceWalker = (*walkerRefs)(nil)

// stagedObject is an object to stage in a bucket, uploaded age before now.
type stagedObject struct {
	key string
	age time.Duration
}

// now is the time the sweep tests judge ages by.
var now = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

// stage puts objects into a memory bucket with upload times now - age; a
// negative age stands for "no upload time".
func stage(t *testing.T, objs []stagedObject) *bucket.Memory {
	t.Helper()
	var at time.Time
	mem := bucket.NewMemory(func() time.Time { return at })
	for _, o := range objs {
		at = now.Add(-o.age)
		if o.age < 0 {
			at = time.Time{}
		}
		if err := mem.Put(t.Context(), o.key, []byte(o.key)); err != nil {
			t.Fatal(err)
		}
	}
	return mem
}

// memKeys returns every key of the bucket.
func memKeys(t *testing.T, b bucket.Lister) []string {
	t.Helper()
	var keys []string
	for o, err := range bucket.Objects(t.Context(), b, "", 0) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}
