package sweep_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/s3test"
	"github.com/cairnstore/cairn/sweep"
)

// s3Bucket opens an S3 bucket on srv. maxAttempts 1 makes injected server
// errors fail at once; 0 keeps the SDK's retries.
func s3Bucket(t *testing.T, srv *s3test.Server, maxAttempts int) *bucket.S3 {
	t.Helper()
	b, err := bucket.NewS3(t.Context(), bucket.Config{
		Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.Bucket, PathStyle: true,
		AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey, MaxAttempts: maxAttempts,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// putAll stores each key with its own name as bytes, with a few goroutines.
func putAll(t *testing.T, b bucket.Putter, keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				if _, err := b.PutIfAbsent(t.Context(), keys[i], []byte(keys[i])); err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("put %d keys: %v", len(keys), firstErr)
	}
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// sweepScenario is the shared S3 scenario: old and young keys under both
// prefixes, a referenced old key, a key outside the prefixes, and enough old
// unreferenced keys for several listing pages and delete batches.
type sweepScenario struct {
	old, young, referenced, outside []string
}

func newScenario(n int) sweepScenario {
	var s sweepScenario
	for i := range n {
		if i%3 == 0 {
			s.old = append(s.old, bucket.ArtifactKey(fmt.Appendf(nil, "old-%d", i)))
		} else {
			s.old = append(s.old, bucket.FileKey(fmt.Appendf(nil, "old-%d", i)))
		}
	}
	s.referenced = []string{bucket.FileKey([]byte("kept")), bucket.ArtifactKey([]byte("kept"))}
	s.outside = []string{"backups/" + bucket.FileKey([]byte("x")), "sandbox-filesx/y"}
	s.young = []string{bucket.FileKey([]byte("young")), bucket.ArtifactKey([]byte("young"))}
	return s
}

// TestSweepOnGofakes3 runs the sweep against S3 on gofakes3, whose clock sets
// the upload times.
func TestSweepOnGofakes3(t *testing.T) {
	t.Run("Rules", func(t *testing.T) {
		fake := s3test.StartFake(t, s3test.FakeOptions{Start: now.Add(-3 * time.Hour)})
		// The SDK may retry a request whose connection broke (on a loaded
		// machine, rarely, an answer of gofakes3's is cut): see the batch
		// check below.
		b := s3Bucket(t, &fake.Server, 3)
		sc := newScenario(2100)
		putAll(t, b, slices.Concat(sc.old, sc.referenced, sc.outside))
		fake.Clock.Set(now.Add(-time.Hour)) // exactly OlderThan: kept
		putAll(t, b, sc.young)

		rep, err := sweep.Sweep(t.Context(), &fakeRefs{ev: &events{}, keys: sc.referenced}, b,
			sweep.Options{OlderThan: time.Hour, Now: func() time.Time { return now }, PageSize: 500})
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		if want := sorted(sc.old...); !slices.Equal(rep.Deleted, want) {
			t.Fatalf("deleted %d keys; want the %d old unreferenced ones", len(rep.Deleted), len(want))
		}
		// Three requests of 1000, 1000 and 100 keys; a request the SDK sent
		// again after a broken connection shows as one more of its size.
		got := fake.DeleteBatches()
		if sum := sumInts(got); sum == 2100 && !slices.Equal(got, []int{1000, 1000, 100}) || sum != 2100 && !retriedBatches(got, []int{1000, 1000, 100}) {
			t.Errorf("DeleteObjects requests carried %v keys; want [1000 1000 100]", got)
		}
		if want := sorted(slices.Concat(sc.referenced, sc.outside, sc.young)...); !slices.Equal(fake.Keys(t), want) {
			t.Errorf("bucket holds %v; want %v", fake.Keys(t), want)
		}
		if rep.Listed != len(sc.old)+len(sc.referenced)+len(sc.young) || rep.Young != len(sc.young) || rep.Referenced != len(sc.referenced) {
			t.Errorf("report %v; want %d listed, %d young, %d referenced", rep.LogValue(), len(sc.old)+4, len(sc.young), len(sc.referenced))
		}
	})
	t.Run("PerKeyFailure", func(t *testing.T) {
		fake := s3test.StartFake(t, s3test.FakeOptions{Start: now.Add(-3 * time.Hour)})
		b := s3Bucket(t, &fake.Server, 1)
		sc := newScenario(10)
		putAll(t, b, sc.old)
		bad := sorted(sc.old...)[4]
		fake.FailDelete(bad, "AccessDenied")
		rep, err := sweep.Sweep(t.Context(), &fakeRefs{ev: &events{}}, b, sweep.Options{OlderThan: time.Hour, Now: func() time.Time { return now }})
		if !errors.Is(err, sweep.ErrIncomplete) {
			t.Fatalf("Sweep error = %v; want ErrIncomplete", err)
		}
		if len(rep.Failed) != 1 || rep.Failed[0].Key != bad || !errors.Is(rep.Failed[0].Err, bucket.ErrAccessDenied) {
			t.Fatalf("Failed = %v; want %q with ErrAccessDenied", rep.Failed, bad)
		}
		if len(rep.Deleted) != 9 || slices.Contains(rep.Deleted, bad) || !slices.Equal(fake.Keys(t), []string{bad}) {
			t.Fatalf("deleted %v, bucket holds %v; want the other 9 deleted and only %q left", rep.Deleted, fake.Keys(t), bad)
		}
	})
	t.Run("ListFailureDeletesNothing", func(t *testing.T) {
		fake := s3test.StartFake(t, s3test.FakeOptions{Start: now.Add(-3 * time.Hour)})
		b := s3Bucket(t, &fake.Server, 1)
		putAll(t, b, newScenario(10).old)
		fake.FailList(true)
		rep, err := sweep.Sweep(t.Context(), &fakeRefs{ev: &events{}}, b, sweep.Options{OlderThan: time.Hour, Now: func() time.Time { return now }})
		if err == nil || len(rep.Deleted) != 0 || len(fake.DeleteBatches()) != 0 || len(fake.Keys(t)) != 10 {
			t.Fatalf("Sweep with a failing listing = %v, %d deleted, requests %v; want an error and no delete", err, len(rep.Deleted), fake.DeleteBatches())
		}
	})
	t.Run("InvalidOlderThanListsNothing", func(t *testing.T) {
		fake := s3test.StartFake(t, s3test.FakeOptions{})
		b := s3Bucket(t, &fake.Server, 1)
		_, err := sweep.Sweep(t.Context(), &fakeRefs{ev: &events{}}, b, sweep.Options{OlderThan: -time.Millisecond})
		if !errors.Is(err, sweep.ErrInvalidArgument) || fake.ListCalls() != 0 {
			t.Fatalf("Sweep(OlderThan<0) = %v after %d list calls; want ErrInvalidArgument and none", err, fake.ListCalls())
		}
	})
}

// TestSweepOnVersityGW runs the sweep against a real S3 server, with its own
// clock for the upload times.
func TestSweepOnVersityGW(t *testing.T) {
	srv := s3test.StartVersityGW(t)
	b := s3Bucket(t, srv, 0)
	sc := newScenario(2100)
	putAll(t, b, slices.Concat(sc.old, sc.referenced, sc.outside))
	// versitygw stamps upload times to the second; make the young keys a
	// later second than every old one.
	time.Sleep(1100 * time.Millisecond)
	putAll(t, b, sc.young)
	var youngest time.Time
	for o, err := range bucket.Objects(t.Context(), b, "", 0) {
		if err != nil {
			t.Fatal(err)
		}
		if o.UploadedAt.After(youngest) {
			youngest = o.UploadedAt
		}
	}
	const olderThan = time.Hour
	sweepNow := youngest.Add(olderThan) // the young keys are exactly OlderThan old: kept

	for _, dry := range []bool{true, false} {
		t.Run(fmt.Sprintf("DryRun=%t", dry), func(t *testing.T) {
			batches := 0
			rep, err := sweep.Sweep(t.Context(), &walkerRefs{fakeRefs: fakeRefs{ev: &events{}, keys: sc.referenced}}, b, sweep.Options{
				OlderThan: olderThan, Now: func() time.Time { return sweepNow }, PageSize: 700, DryRun: dry,
				BeforeDelete: func(context.Context, []string) error { batches++; return nil },
			})
			if err != nil {
				t.Fatalf("Sweep: %v", err)
			}
			if want := sorted(sc.old...); !slices.Equal(rep.Deleted, want) {
				t.Fatalf("deleted %d keys; want the %d old unreferenced ones", len(rep.Deleted), len(want))
			}
			if batches != 3 || rep.Batches != 3 {
				t.Errorf("BeforeDelete saw %d batches, the report %d; want 3", batches, rep.Batches)
			}
			var left []string
			for o, err := range bucket.Objects(t.Context(), b, "", 0) {
				if err != nil {
					t.Fatal(err)
				}
				left = append(left, o.Key)
			}
			want := sorted(slices.Concat(sc.referenced, sc.outside, sc.young)...)
			if dry {
				want = sorted(slices.Concat(sc.old, sc.referenced, sc.outside, sc.young)...)
			}
			if !slices.Equal(left, want) {
				t.Errorf("bucket holds %d keys; want %d", len(left), len(want))
			}
		})
	}
}

// TestRunOnVersityGW runs the user's order end to end on a real S3 server:
// captures upload blobs and append checkpoints, then Run prunes and sweeps.
func TestRunOnVersityGW(t *testing.T) {
	b := s3Bucket(t, s3test.StartVersityGW(t), 0)
	store := newStore(t)
	c := &capturer{store: store, blobs: b}
	c.capture(t, "t1", []string{"v1", "common"}, []string{"report-1"})
	c.capture(t, "t1", []string{"v2", "common"}, []string{"report-1"})
	c.capture(t, "t2", []string{"other"}, nil)
	rep, err := sweep.Run(t.Context(), store, b, sweep.RunOptions{Keep: 1, Sweep: sweep.Options{
		OlderThan: 0,
		// Every blob is a little older than "now".
		Now: func() time.Time { return time.Now().Add(time.Minute) },
	}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if want := []sweep.ThreadPruned{{ThreadID: "t1", Removed: 1}}; !slices.Equal(rep.Prune.Pruned, want) {
		t.Errorf("pruned %v; want %v", rep.Prune.Pruned, want)
	}
	if want := []string{bucket.FileKey([]byte("v1"))}; !slices.Equal(rep.Sweep.Deleted, want) {
		t.Errorf("swept %v; want %v", rep.Sweep.Deleted, want)
	}
	for _, data := range []string{"v2", "common", "other"} {
		if _, err := bucket.ReadBlob(t.Context(), b, bucket.FileKey([]byte(data))); err != nil {
			t.Errorf("blob of %q: %v", data, err)
		}
	}
	if _, err := bucket.ReadBlob(t.Context(), b, bucket.ArtifactKey([]byte("report-1"))); err != nil {
		t.Errorf("artifact blob: %v", err)
	}
	if _, err := bucket.ReadBlob(t.Context(), b, bucket.FileKey([]byte("v1"))); !errors.Is(err, bucket.ErrMissingBlob) {
		t.Errorf("swept blob read = %v; want ErrMissingBlob", err)
	}
}

func sumInts(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// retriedBatches reports whether got is want with some requests repeated
// right after themselves (the SDK's retries).
func retriedBatches(got, want []int) bool {
	i := 0
	for j, g := range got {
		switch {
		case i < len(want) && g == want[i]:
			i++
		case j > 0 && g == got[j-1]:
		default:
			return false
		}
	}
	return i == len(want)
}
