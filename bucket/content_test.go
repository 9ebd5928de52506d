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
