package bucket_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/internal/s3test"
)

func putInput(bucketName, key string, data []byte) *s3.PutObjectInput {
	return &s3.PutObjectInput{Bucket: aws.String(bucketName), Key: aws.String(key), Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data)))}
}

// TestBuckets runs the Bucket contract against every implementation: the
// in-memory bucket, S3 on gofakes3 and S3 on a real versitygw process, each
// S3 one in both put modes.
func TestBuckets(t *testing.T) {
	for _, tg := range allTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			// Targets share servers, so every subtest works under a prefix
			// of its own.
			p := func(t *testing.T) string { return "t/" + tg.name + "/" + t.Name() + "/" }
			t.Run("PutIfAbsent", func(t *testing.T) {
				if err := checkPutIfAbsent(t.Context(), tg.b, p(t)+"k"); err != nil {
					t.Fatal(err)
				}
			})
			t.Run("PutIfAbsentEmptyObject", func(t *testing.T) {
				key := p(t) + "empty"
				if created, err := tg.b.PutIfAbsent(t.Context(), key, nil); err != nil || !created {
					t.Fatalf("PutIfAbsent(empty) = %t, %v; want true, nil", created, err)
				}
				got, err := tg.b.Get(t.Context(), key)
				if err != nil || len(got) != 0 {
					t.Fatalf("Get = %q, %v; want empty, nil", got, err)
				}
			})
			t.Run("NotFound", func(t *testing.T) { testNotFound(t, tg.b, p(t)+"missing") })
			t.Run("GetRange", func(t *testing.T) { testGetRange(t, tg.b, p(t)) })
			t.Run("InvalidKey", func(t *testing.T) { testInvalidKey(t, tg.b) })
			t.Run("ListPaging", func(t *testing.T) { testListPaging(t, tg.b, p(t)) })
			t.Run("Delete", func(t *testing.T) { testDelete(t, tg.b, p(t)) })
			t.Run("ReadBlobDetectsCorruption", func(t *testing.T) {
				data := []byte("blob of " + tg.name)
				key := bucket.FileKey(data)
				if _, err := bucket.PutBlobs(t.Context(), tg.b, []bucket.Blob{bucket.FileBlob(data)}); err != nil {
					t.Fatal(err)
				}
				if got, err := bucket.ReadBlob(t.Context(), tg.b, key); err != nil || !bytes.Equal(got, data) {
					t.Fatalf("ReadBlob = %q, %v; want %q, nil", got, err, data)
				}
				tg.overwrite(t, key, []byte("tampered"))
				_, err := bucket.ReadBlob(t.Context(), tg.b, key)
				var be *bucket.BlobError
				if !errors.Is(err, bucket.ErrInvalidBlob) || !errors.As(err, &be) || be.Digest != digestOf("tampered") {
					t.Fatalf("ReadBlob of a corrupted blob = %v; want a *BlobError matching ErrInvalidBlob with the digest of the bytes read", err)
				}
			})
		})
	}
}

func testNotFound(t *testing.T, b bucket.Bucket, key string) {
	t.Helper()
	_, err := b.Get(t.Context(), key)
	var e *bucket.Error
	if !errors.Is(err, bucket.ErrNotFound) || !errors.As(err, &e) || e.Op != "GetObject" || e.Key != key {
		t.Errorf("Get(missing) error = %v; want an *Error for GetObject %q matching ErrNotFound", err, key)
	}
	_, err = b.Head(t.Context(), key)
	if !errors.Is(err, bucket.ErrNotFound) || !errors.As(err, &e) || e.Op != "HeadObject" {
		t.Errorf("Head(missing) error = %v; want an *Error for HeadObject matching ErrNotFound", err)
	}
	_, err = bucket.ReadBlob(t.Context(), b, bucket.FileKey([]byte("never stored "+key)))
	if !errors.Is(err, bucket.ErrMissingBlob) || !errors.Is(err, bucket.ErrNotFound) {
		t.Errorf("ReadBlob(missing) error = %v; want ErrMissingBlob and ErrNotFound", err)
	}
}

func testInvalidKey(t *testing.T, b bucket.Bucket) {
	t.Helper()
	for _, key := range []string{"", strings.Repeat("k", 1025), "bad\xffutf8"} {
		if _, err := b.PutIfAbsent(t.Context(), key, []byte("x")); !errors.Is(err, bucket.ErrInvalidKey) {
			t.Errorf("PutIfAbsent(%.20q) error = %v; want ErrInvalidKey", key, err)
		}
		if _, err := b.Get(t.Context(), key); !errors.Is(err, bucket.ErrInvalidKey) {
			t.Errorf("Get(%.20q) error = %v; want ErrInvalidKey", key, err)
		}
	}
	res, err := b.Delete(t.Context(), []string{""})
	if !errors.Is(err, bucket.ErrPartialDelete) || len(res.Failed) != 1 || !errors.Is(res.Failed[0].Err, bucket.ErrInvalidKey) {
		t.Errorf("Delete([\"\"]) = %+v, %v; want the key failed with ErrInvalidKey", res, err)
	}
}

func testListPaging(t *testing.T, b bucket.Bucket, prefix string) {
	t.Helper()
	want := putMany(t, b, prefix+"in/", 23)
	putMany(t, b, prefix+"out/", 3)
	putMany(t, b, prefix+"in", 1) // prefix+"in00000": matches the prefix string, outside the "folder"
	for _, size := range []int{1, 7, 23, 1000} {
		t.Run(fmt.Sprintf("PageSize%d", size), func(t *testing.T) {
			objs, pages := listAll(t, b, prefix+"in/", size)
			if got := keysOf(objs); !slices.Equal(got, want) {
				t.Fatalf("listed keys = %v; want %v", got, want)
			}
			if minPages := (len(want) + size - 1) / size; pages < minPages {
				t.Errorf("listed in %d pages; want at least %d", pages, minPages)
			}
			for _, o := range objs {
				if o.Size != int64(len(o.Key)) || o.UploadedAt.IsZero() {
					t.Errorf("object %+v: want size %d and an upload time", o, len(o.Key))
				}
			}
		})
	}
	t.Run("Iterator", func(t *testing.T) {
		var got []string
		for o, err := range bucket.Objects(t.Context(), b, prefix+"in/", 5) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, o.Key)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Objects = %v; want %v", got, want)
		}
	})
	t.Run("EmptyPrefix", func(t *testing.T) {
		page, err := b.List(t.Context(), prefix+"nothing/", "", 10)
		if err != nil || len(page.Objects) != 0 || page.NextToken != "" {
			t.Fatalf("List(empty prefix) = %+v, %v; want an empty last page", page, err)
		}
	})
}

func testDelete(t *testing.T, b bucket.Bucket, prefix string) {
	t.Helper()
	keys := putMany(t, b, prefix, 5)
	keep := prefix + "keep"
	if _, err := b.PutIfAbsent(t.Context(), keep, []byte("k")); err != nil {
		t.Fatal(err)
	}
	del := append(slices.Clone(keys), keys[0], prefix+"never-existed")
	res, err := b.Delete(t.Context(), del)
	if err != nil {
		t.Fatalf("Delete: %v (result %+v)", err, res)
	}
	want := append(slices.Clone(keys), prefix+"never-existed")
	if !slices.Equal(res.Deleted, want) || len(res.Failed) != 0 {
		t.Fatalf("Delete result = %+v; want deleted %v (repeats once, a missing key counts as deleted)", res, want)
	}
	objs, _ := listAll(t, b, prefix, 1000)
	if got := keysOf(objs); !slices.Equal(got, []string{keep}) {
		t.Fatalf("after Delete the prefix holds %v; want only %q", got, keep)
	}
	res, err = b.Delete(t.Context(), nil)
	if err != nil || len(res.Deleted)+len(res.Failed) != 0 {
		t.Fatalf("Delete(nil) = %+v, %v; want an empty result", res, err)
	}
}

// TestDeleteBatchesOfAtMost1000 checks on gofakes3 that a long delete is sent
// as requests of at most 1000 keys, and that an empty delete sends nothing.
func TestDeleteBatchesOfAtMost1000(t *testing.T) {
	fake := s3test.StartFake(t, s3test.FakeOptions{})
	b := newS3(t, configFor(&fake.Server))
	keys := putMany(t, b, "batch/", 2500)
	if _, err := b.Delete(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if got := fake.DeleteBatches(); len(got) != 0 {
		t.Fatalf("Delete(nil) sent requests of %v keys; want none", got)
	}
	res, err := b.Delete(t.Context(), keys)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fake.DeleteBatches(), []int{1000, 1000, 500}; !slices.Equal(got, want) {
		t.Errorf("DeleteObjects requests carried %v keys; want %v", got, want)
	}
	if !slices.Equal(res.Deleted, keys) || len(res.Failed) != 0 {
		t.Errorf("Delete reported %d deleted, %d failed; want all %d deleted", len(res.Deleted), len(res.Failed), len(keys))
	}
	if left := fake.Keys(t); len(left) != 0 {
		t.Errorf("%d keys left after Delete", len(left))
	}
}

// TestDeletePerKeyErrors checks that per-key errors in a DeleteObjects
// response are read and reported key by key, and the other keys go.
func TestDeletePerKeyErrors(t *testing.T) {
	fake := s3test.StartFake(t, s3test.FakeOptions{})
	b := newS3(t, configFor(&fake.Server))
	keys := putMany(t, b, "perkey/", 1200)
	fake.FailDelete(keys[3], "AccessDenied")
	fake.FailDelete(keys[1100], "InternalError")
	res, err := b.Delete(t.Context(), keys)
	if !errors.Is(err, bucket.ErrPartialDelete) {
		t.Fatalf("Delete error = %v; want ErrPartialDelete", err)
	}
	if got := fake.DeleteBatches(); !slices.Equal(got, []int{1000, 200}) {
		t.Errorf("requests carried %v keys; want [1000 200]: a per-key failure must not stop later requests", got)
	}
	if len(res.Failed) != 2 || res.Failed[0].Key != keys[3] || res.Failed[1].Key != keys[1100] {
		t.Fatalf("Failed = %v; want %q and %q", res.Failed, keys[3], keys[1100])
	}
	if !errors.Is(res.Failed[0].Err, bucket.ErrAccessDenied) {
		t.Errorf("failure of %q = %v; want ErrAccessDenied", keys[3], res.Failed[0].Err)
	}
	var e *bucket.Error
	if !errors.As(res.Failed[1].Err, &e) || e.Code != "InternalError" {
		t.Errorf("failure of %q = %v; want an *Error with code InternalError", keys[1100], res.Failed[1].Err)
	}
	if len(res.Deleted) != len(keys)-2 || slices.Contains(res.Deleted, keys[3]) {
		t.Errorf("Deleted has %d keys; want %d, without the failed ones", len(res.Deleted), len(keys)-2)
	}
	if left := fake.Keys(t); !slices.Equal(left, []string{keys[3], keys[1100]}) {
		t.Errorf("bucket holds %v; want exactly the failed keys", left)
	}
}

// TestDeleteRequestFailure checks that a request failing as a whole stops
// Delete, fails its keys with the request's error and the later keys with
// ErrNotAttempted.
func TestDeleteRequestFailure(t *testing.T) {
	fake := s3test.StartFake(t, s3test.FakeOptions{})
	cfg := configFor(&fake.Server)
	cfg.MaxAttempts = 1
	b := newS3(t, cfg)
	keys := putMany(t, b, "reqfail/", 1500)
	fake.FailDeleteRequests(true)
	res, err := b.Delete(t.Context(), keys)
	if err == nil || errors.Is(err, bucket.ErrPartialDelete) {
		t.Fatalf("Delete error = %v; want the request's error", err)
	}
	if len(res.Deleted) != 0 || len(res.Failed) != len(keys) {
		t.Fatalf("result: %d deleted, %d failed; want 0 and %d", len(res.Deleted), len(res.Failed), len(keys))
	}
	for i, f := range res.Failed {
		notAttempted := errors.Is(f.Err, bucket.ErrNotAttempted)
		if f.Key != keys[i] || notAttempted != (i >= 1000) {
			t.Fatalf("Failed[%d] = %v; want key %q, not attempted: %t", i, f, keys[i], i >= 1000)
		}
	}
	if got := fake.DeleteBatches(); !slices.Equal(got, []int{1000}) {
		t.Errorf("requests carried %v keys; want [1000]", got)
	}
	if left := fake.Keys(t); len(left) != len(keys) {
		t.Errorf("%d keys left; want all %d", len(left), len(keys))
	}
}

// TestVersityGWAtScale lists and deletes a few thousand objects on a real
// server, with small pages and several delete requests.
func TestVersityGWAtScale(t *testing.T) {
	srv := s3test.StartVersityGW(t)
	b := newS3(t, configFor(srv))
	const n = 2500
	keys := putMany(t, b, "scale/", n)
	objs, pages := listAll(t, b, "scale/", 400)
	if got := keysOf(objs); !slices.Equal(got, keys) {
		t.Fatalf("listed %d keys; want %d in order", len(got), n)
	}
	if pages < 7 {
		t.Errorf("listed in %d pages of at most 400; want at least 7", pages)
	}
	res, err := b.Delete(t.Context(), keys)
	if err != nil || len(res.Deleted) != n {
		t.Fatalf("Delete: %d deleted, %d failed, %v; want all %d deleted", len(res.Deleted), len(res.Failed), err, n)
	}
	if objs, _ := listAll(t, b, "scale/", 1000); len(objs) != 0 {
		t.Fatalf("%d objects left after Delete", len(objs))
	}
}

// testGetRange checks range reads: the bytes asked for, one byte, the last
// byte; a range past the end and an empty range fail with ErrInvalidRange;
// a missing key with ErrNotFound.
func testGetRange(t *testing.T, b bucket.Bucket, prefix string) {
	t.Helper()
	rr, ok := b.(bucket.RangeReader)
	if !ok {
		t.Fatalf("%T has no range reads", b)
	}
	key := prefix + "ranged"
	data := []byte("0123456789abcdef")
	if _, err := b.PutIfAbsent(t.Context(), key, data); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		off, n  int64
		want    string
		invalid bool
	}{
		{"Middle", 3, 5, "34567", false},
		{"First", 0, 1, "0", false},
		{"Last", 15, 1, "f", false},
		{"Whole", 0, 16, string(data), false},
		{"PastTheEnd", 10, 7, "", true},
		{"Empty", 2, 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rr.GetRange(t.Context(), key, tc.off, tc.n)
			if tc.invalid {
				if !errors.Is(err, bucket.ErrInvalidRange) {
					t.Fatalf("GetRange(%d, %d) = %q, %v; want ErrInvalidRange", tc.off, tc.n, got, err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("GetRange(%d, %d) = %q, %v; want %q", tc.off, tc.n, got, err, tc.want)
			}
		})
	}
	if _, err := rr.GetRange(t.Context(), prefix+"missing", 0, 1); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("GetRange(missing) = %v; want ErrNotFound", err)
	}
}
