package bucket_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"testing"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
)

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestContentKeys(t *testing.T) {
	tests := []struct {
		name   string
		data   string
		digest string
	}{
		{"hello", "hello", "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"},
		{"empty", "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"NULs", "\x00\x00\x00\x00\x00", "8855508aade16ec573d21e6a485dfd0a7624085c1a14b5ecdd6485de0c6839a4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := bucket.FileKey([]byte(tc.data)), "sandbox-files/sha256/"+tc.digest; got != want {
				t.Errorf("FileKey = %q; want %q", got, want)
			}
			if got, want := bucket.ArtifactKey([]byte(tc.data)), "sandbox-artifacts/sha256/"+tc.digest; got != want {
				t.Errorf("ArtifactKey = %q; want %q", got, want)
			}
			if !cairn.IsFileBlobKey(bucket.FileKey([]byte(tc.data))) || !cairn.IsArtifactBlobKey(bucket.ArtifactKey([]byte(tc.data))) {
				t.Error("the keys are not valid blob keys for the store")
			}
			if b := bucket.FileBlob([]byte(tc.data)); b.Key != bucket.FileKey([]byte(tc.data)) || string(b.Data) != tc.data {
				t.Errorf("FileBlob = %+v", b)
			}
		})
	}
}

// countingPutter records every PutIfAbsent on top of a memory bucket, and can
// fail the put of one key.
type countingPutter struct {
	*bucket.Memory
	calls   []string
	failKey string
}

var errInjected = errors.New("injected put failure")

func (c *countingPutter) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	c.calls = append(c.calls, key)
	if key == c.failKey {
		return false, errInjected
	}
	return c.Memory.PutIfAbsent(ctx, key, data)
}

func TestPutBlobs(t *testing.T) {
	a, b, c := bucket.FileBlob([]byte("a")), bucket.ArtifactBlob([]byte("b")), bucket.FileBlob([]byte("c"))
	tests := []struct {
		name         string
		existing     []bucket.Blob
		blobs        []bucket.Blob
		failKey      string
		wantCalls    []string
		wantUploaded []string
		wantPresent  []string
		wantErr      error
	}{
		{name: "PutsEachDistinctKeyOnce", blobs: []bucket.Blob{a, b, a, c, b},
			wantCalls: []string{a.Key, b.Key, c.Key}, wantUploaded: []string{a.Key, b.Key, c.Key}},
		{name: "LeavesExistingKeys", existing: []bucket.Blob{b}, blobs: []bucket.Blob{a, b},
			wantCalls: []string{a.Key, b.Key}, wantUploaded: []string{a.Key}, wantPresent: []string{b.Key}},
		{name: "SameBytesAsFileAndArtifact", blobs: []bucket.Blob{bucket.FileBlob([]byte("x")), bucket.ArtifactBlob([]byte("x"))},
			wantCalls:    []string{bucket.FileKey([]byte("x")), bucket.ArtifactKey([]byte("x"))},
			wantUploaded: []string{bucket.FileKey([]byte("x")), bucket.ArtifactKey([]byte("x"))}},
		{name: "Nothing"},
		{name: "HashMismatchBeforeAnyPut", blobs: []bucket.Blob{a, {Key: b.Key, Data: []byte("not b")}},
			wantErr: bucket.ErrInvalidBlob},
		{name: "NotAContentKeyBeforeAnyPut", blobs: []bucket.Blob{a, {Key: "other/key", Data: []byte("x")}},
			wantErr: bucket.ErrInvalidKey},
		{name: "UpperCaseDigestRejected", blobs: []bucket.Blob{{Key: "sandbox-files/sha256/2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824", Data: []byte("hello")}},
			wantErr: bucket.ErrInvalidBlob},
		{name: "PutFailureStops", blobs: []bucket.Blob{a, b, c}, failKey: b.Key,
			wantCalls: []string{a.Key, b.Key}, wantUploaded: []string{a.Key}, wantErr: errInjected},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &countingPutter{Memory: bucket.NewMemory(nil), failKey: tc.failKey}
			for _, e := range tc.existing {
				if _, err := p.Memory.PutIfAbsent(t.Context(), e.Key, e.Data); err != nil {
					t.Fatal(err)
				}
			}
			res, err := bucket.PutBlobs(t.Context(), p, tc.blobs)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("PutBlobs error = %v; want %v", err, tc.wantErr)
			}
			if !slices.Equal(p.calls, tc.wantCalls) {
				t.Errorf("PutIfAbsent calls = %v; want %v", p.calls, tc.wantCalls)
			}
			if !slices.Equal(res.Uploaded, tc.wantUploaded) || !slices.Equal(res.Present, tc.wantPresent) {
				t.Errorf("result = %+v; want uploaded %v, present %v", res, tc.wantUploaded, tc.wantPresent)
			}
		})
	}
}

func TestReadBlob(t *testing.T) {
	mem := bucket.NewMemory(nil)
	good := []byte("good bytes")
	if _, err := bucket.PutBlobs(t.Context(), mem, []bucket.Blob{bucket.FileBlob(good), bucket.ArtifactBlob(good)}); err != nil {
		t.Fatal(err)
	}
	corrupt := bucket.ArtifactKey([]byte("original"))
	if err := mem.Put(t.Context(), corrupt, []byte("corrupted")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		key        string
		want       []byte
		wantErr    error
		wantDigest string
	}{
		{"File", bucket.FileKey(good), good, nil, ""},
		{"Artifact", bucket.ArtifactKey(good), good, nil, ""},
		{"Missing", bucket.FileKey([]byte("absent")), nil, bucket.ErrMissingBlob, ""},
		{"Corrupted", corrupt, nil, bucket.ErrInvalidBlob, digestOf("corrupted")},
		{"NotAContentKey", "sandbox-files/sha256/short", nil, bucket.ErrInvalidBlob, ""},
		{"OtherPrefix", "elsewhere/" + digestOf("x"), nil, bucket.ErrInvalidKey, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bucket.ReadBlob(t.Context(), mem, tc.key)
			if tc.wantErr == nil {
				if err != nil || string(got) != string(tc.want) {
					t.Fatalf("ReadBlob = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			var be *bucket.BlobError
			if !errors.Is(err, tc.wantErr) || !errors.As(err, &be) || be.Key != tc.key || be.Digest != tc.wantDigest || got != nil {
				t.Fatalf("ReadBlob = %q, %v; want a *BlobError for %q matching %v with digest %q", got, err, tc.key, tc.wantErr, tc.wantDigest)
			}
		})
	}
}

// uploadLog records, in order, the claims, waits and puts of an upload, with
// the keys by short name.
type uploadLog struct {
	names  map[string]string
	events []string
}

func (l *uploadLog) add(op string, keys ...string) {
	e := op
	for _, k := range keys {
		e += " " + l.names[k]
	}
	l.events = append(l.events, e)
}

// claimAnswer is a scripted answer of fakeClaimer.ClaimBlobs.
type claimAnswer struct {
	busy []string
	err  error
}

// fakeClaimer answers ClaimBlobs from a script (past its end: every key
// claimed), answers WaitBlobs with waitErr, and records both.
type fakeClaimer struct {
	log     *uploadLog
	answers []claimAnswer
	waitErr error
	writers []cairn.Writer
}

func (c *fakeClaimer) ClaimBlobs(_ context.Context, w cairn.Writer, keys []string) ([]string, error) {
	c.log.add("claim", keys...)
	c.writers = append(c.writers, w)
	if i := len(c.writers) - 1; i < len(c.answers) {
		return c.answers[i].busy, c.answers[i].err
	}
	return nil, nil
}

func (c *fakeClaimer) WaitBlobs(_ context.Context, keys []string) error {
	c.log.add("wait", keys...)
	return c.waitErr
}

// loggingPutter records every PutIfAbsent on top of a memory bucket, and can
// fail the put of one key.
type loggingPutter struct {
	*bucket.Memory
	log     *uploadLog
	failKey string
}

func (p *loggingPutter) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	p.log.add("put", key)
	if key == p.failKey {
		return false, errInjected
	}
	return p.Memory.PutIfAbsent(ctx, key, data)
}

// TestUploadBlobs checks the order of UploadBlobs' requests with a fake
// claimer: every distinct key is claimed before any put, busy keys are waited
// for and claimed again, and a failed check, claim or wait stops it before any
// put.
func TestUploadBlobs(t *testing.T) {
	a, b, c := bucket.FileBlob([]byte("a")), bucket.ArtifactBlob([]byte("b")), bucket.FileBlob([]byte("c"))
	names := map[string]string{a.Key: "a", b.Key: "b", c.Key: "c", "other/key": "other"}
	lost := cairn.NewError(cairn.CodeWriterLost, "the lease was taken over")
	w := cairn.Writer{ThreadID: "thread", OwnerToken: "token", Fence: 7}
	tests := []struct {
		name         string
		existing     []bucket.Blob
		blobs        []bucket.Blob
		answers      []claimAnswer
		waitErr      error
		failKey      string
		wantLog      []string
		wantUploaded []string
		wantPresent  []string
		wantErr      []error
	}{
		{name: "ClaimsEveryDistinctKeyBeforeAnyPut", existing: []bucket.Blob{b}, blobs: []bucket.Blob{a, b, a, c, b},
			wantLog:      []string{"claim a b c", "put a", "put b", "put c"},
			wantUploaded: []string{a.Key, c.Key}, wantPresent: []string{b.Key}},
		{name: "BusyKeysWaitedForAndClaimedAgain", blobs: []bucket.Blob{a, b, c},
			answers:      []claimAnswer{{busy: []string{b.Key, c.Key}}, {busy: []string{c.Key}}},
			wantLog:      []string{"claim a b c", "wait b c", "claim b c", "wait c", "claim c", "put a", "put b", "put c"},
			wantUploaded: []string{a.Key, b.Key, c.Key}},
		{name: "BusyKeyStillInTheBucketReused", existing: []bucket.Blob{b}, blobs: []bucket.Blob{a, b},
			answers:      []claimAnswer{{busy: []string{b.Key}}},
			wantLog:      []string{"claim a b", "wait b", "claim b", "put a", "put b"},
			wantUploaded: []string{a.Key}, wantPresent: []string{b.Key}},
		{name: "WriterLostStopsBeforeAnyPut", blobs: []bucket.Blob{a, b},
			answers: []claimAnswer{{err: lost}},
			wantLog: []string{"claim a b"}, wantErr: []error{cairn.ErrWriterLost}},
		{name: "WriterLostAfterAWaitStopsBeforeAnyPut", blobs: []bucket.Blob{a, b},
			answers: []claimAnswer{{busy: []string{b.Key}}, {err: lost}},
			wantLog: []string{"claim a b", "wait b", "claim b"}, wantErr: []error{cairn.ErrWriterLost}},
		{name: "WaitErrorStopsBeforeAnyPut", blobs: []bucket.Blob{a, b},
			answers: []claimAnswer{{busy: []string{a.Key}}}, waitErr: context.DeadlineExceeded,
			wantLog: []string{"claim a b", "wait a"}, wantErr: []error{context.DeadlineExceeded}},
		{name: "HashMismatchBeforeAnyRequest", blobs: []bucket.Blob{a, {Key: b.Key, Data: []byte("not b")}},
			wantErr: []error{bucket.ErrInvalidBlob}},
		{name: "NotAContentKeyBeforeAnyRequest", blobs: []bucket.Blob{a, {Key: "other/key", Data: []byte("x")}},
			wantErr: []error{bucket.ErrInvalidBlob, bucket.ErrInvalidKey}},
		{name: "NothingNoRequest"},
		{name: "PutFailureStops", blobs: []bucket.Blob{a, b, c}, failKey: b.Key,
			wantLog:      []string{"claim a b c", "put a", "put b"},
			wantUploaded: []string{a.Key}, wantErr: []error{errInjected}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := &uploadLog{names: names}
			claimer := &fakeClaimer{log: log, answers: tc.answers, waitErr: tc.waitErr}
			p := &loggingPutter{Memory: bucket.NewMemory(nil), log: log, failKey: tc.failKey}
			for _, e := range tc.existing {
				if _, err := p.Memory.PutIfAbsent(t.Context(), e.Key, e.Data); err != nil {
					t.Fatal(err)
				}
			}
			res, err := bucket.UploadBlobs(t.Context(), claimer, w, p, tc.blobs)
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("UploadBlobs error = %v; want one matching %v", err, want)
				}
			}
			if len(tc.wantErr) == 0 && err != nil {
				t.Errorf("UploadBlobs error = %v; want none", err)
			}
			if !slices.Equal(log.events, tc.wantLog) {
				t.Errorf("requests = %q; want %q", log.events, tc.wantLog)
			}
			for _, got := range claimer.writers {
				if got != w {
					t.Errorf("ClaimBlobs got writer %+v; want %+v", got, w)
				}
			}
			if !slices.Equal(res.Uploaded, tc.wantUploaded) || !slices.Equal(res.Present, tc.wantPresent) {
				t.Errorf("result = %+v; want uploaded %v, present %v", res, tc.wantUploaded, tc.wantPresent)
			}
		})
	}
}

// waitSignal passes claims to a store and sends the keys of each WaitBlobs
// call to waiting before it waits.
type waitSignal struct {
	cairn.BlobClaimer
	waiting chan []string
}

func (s waitSignal) WaitBlobs(ctx context.Context, keys []string) error {
	s.waiting <- slices.Clone(keys)
	return s.BlobClaimer.WaitBlobs(ctx, keys)
}

// TestUploadBlobsOnAMemoryStore checks UploadBlobs against the memory store's
// side of the online sweep protocol.
func TestUploadBlobsOnAMemoryStore(t *testing.T) {
	a, b := bucket.FileBlob([]byte("a")), bucket.ArtifactBlob([]byte("b"))
	setup := func(t *testing.T) (*cairn.MemoryStore, *cairn.Lease, *bucket.Memory) {
		t.Helper()
		store, err := cairn.NewMemoryStore(cairn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		lease, err := store.AcquireWriter(t.Context(), "thread")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lease.Release(context.Background()) })
		return store, lease, bucket.NewMemory(nil)
	}
	claimed := func(t *testing.T, store *cairn.MemoryStore) []string {
		t.Helper()
		view, err := store.ReadBlobGC(t.Context(), func(cairn.BlobReference) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return view.Claimed
	}
	t.Run("ClaimsUnderTheLease", func(t *testing.T) {
		store, lease, mem := setup(t)
		if _, err := bucket.UploadBlobs(t.Context(), store, lease.Writer, mem, []bucket.Blob{a, b, a}); err != nil {
			t.Fatal(err)
		}
		want := []string{a.Key, b.Key}
		slices.Sort(want)
		if got := claimed(t, store); !slices.Equal(got, want) {
			t.Errorf("claimed = %v; want %v", got, want)
		}
		lease.Release(t.Context())
		if got := claimed(t, store); len(got) != 0 {
			t.Errorf("claimed after the release = %v; want none", got)
		}
	})
	t.Run("LostLeaseUploadsNothing", func(t *testing.T) {
		store, lease, mem := setup(t)
		lease.Release(t.Context())
		_, err := bucket.UploadBlobs(t.Context(), store, lease.Writer, mem, []bucket.Blob{a, b})
		if !errors.Is(err, cairn.ErrWriterLost) || mem.Len() != 0 {
			t.Fatalf("UploadBlobs with a released lease = %v, %d objects stored; want ErrWriterLost and none", err, mem.Len())
		}
	})
	t.Run("WaitsWhileASweepDeletes", func(t *testing.T) {
		store, lease, mem := setup(t)
		ctx := t.Context()
		if _, err := mem.PutIfAbsent(ctx, a.Key, a.Data); err != nil {
			t.Fatal(err)
		}
		marked, err := store.MarkBlobs(ctx, []string{a.Key}, 0)
		if err != nil {
			t.Fatal(err)
		}
		moved, err := store.BeginBlobDeletes(ctx, marked)
		if err != nil || len(moved) != 1 {
			t.Fatalf("BeginBlobDeletes = %v, %v", moved, err)
		}
		claimer := waitSignal{BlobClaimer: store, waiting: make(chan []string, 1)}
		type result struct {
			res bucket.UploadResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := bucket.UploadBlobs(ctx, claimer, lease.Writer, mem, []bucket.Blob{a, b})
			done <- result{res, err}
		}()
		select {
		case keys := <-claimer.waiting:
			if !slices.Equal(keys, []string{a.Key}) {
				t.Errorf("waited for %v; want %s", keys, a.Key)
			}
		case r := <-done:
			t.Fatalf("UploadBlobs returned %+v, %v without waiting for the key in deleting", r.res, r.err)
		}
		// The sweep deletes the bytes and settles the record.
		if _, err := mem.Delete(ctx, []string{a.Key}); err != nil {
			t.Fatal(err)
		}
		if err := store.EndBlobDeletes(ctx, moved, true); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || !slices.Equal(r.res.Uploaded, []string{a.Key, b.Key}) {
			t.Fatalf("UploadBlobs = %+v, %v; want both keys uploaded", r.res, r.err)
		}
		if _, err := bucket.ReadBlob(ctx, mem, a.Key); err != nil {
			t.Errorf("the blob uploaded after the delete: %v", err)
		}
		if got := claimed(t, store); len(got) != 2 {
			t.Errorf("claimed = %v; want both keys", got)
		}
	})
}
