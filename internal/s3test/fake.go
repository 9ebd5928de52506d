package s3test

import (
	"io"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Server is an S3 endpoint with one bucket, and what a client needs to use it.
// The endpoint needs path-style addressing.
type Server struct {
	Endpoint        string // http://127.0.0.1:<port>
	Region          string
	Bucket          string
	AccessKeyID     string
	SecretAccessKey string

	pid int // the server process, or 0 for an in-process server
}

// Credentials and names shared by the servers of this package.
const (
	BucketName      = "cairn-test"
	Region          = "us-east-1"
	AccessKeyID     = "cairntestkey"
	SecretAccessKey = "cairntestsecret0123456789"
)

// Start is the time a fake's clock starts at unless FakeOptions says otherwise.
var Start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// FakeOptions configure StartFake. The zero value is a well-behaved server
// whose clock starts at Start.
type FakeOptions struct {
	// Start is the clock's initial time; zero selects Start.
	Start time.Time
	// IgnoreIfNoneMatch makes the server drop If-None-Match from PutObject
	// silently and overwrite, as some S3-compatible servers do.
	IgnoreIfNoneMatch bool
}

// Fake is an in-process gofakes3 server. Its Clock stamps upload times (there
// is no clock-skew check, so the clock may be moved freely), and its methods
// inject faults and report the requests it saw.
type Fake struct {
	Server
	// Clock is the server's clock.
	Clock *Clock

	b *faultBackend
}

// StartFake starts a gofakes3 server on 127.0.0.1 with an empty bucket
// BucketName and closes it in t.Cleanup. It fails the test when the bucket
// cannot be created.
func StartFake(t testing.TB, opts FakeOptions) *Fake {
	t.Helper()
	start := opts.Start
	if start.IsZero() {
		start = Start
	}
	clock := NewClock(start)
	fb := &faultBackend{
		Backend:           s3mem.New(s3mem.WithTimeSource(clock)),
		ignoreIfNoneMatch: opts.IgnoreIfNoneMatch,
		deleteErrors:      map[string]string{},
	}
	faker := gofakes3.New(fb,
		gofakes3.WithTimeSource(clock),
		gofakes3.WithTimeSkewLimit(0),
		gofakes3.WithoutVersioning(),
	)
	srv := httptest.NewServer(faker.Server())
	t.Cleanup(srv.Close)
	if err := fb.CreateBucket(BucketName); err != nil {
		t.Fatalf("s3test: create bucket on the fake server: %v", err)
	}
	return &Fake{
		Server: Server{Endpoint: srv.URL, Region: Region, Bucket: BucketName, AccessKeyID: AccessKeyID, SecretAccessKey: SecretAccessKey},
		Clock:  clock,
		b:      fb,
	}
}

// FailDelete makes DeleteObjects report an error with the given S3 code (for
// example "AccessDenied") for key, and leave the key in place.
func (f *Fake) FailDelete(key, code string) {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	f.b.deleteErrors[key] = code
}

// FailDeleteRequests makes every DeleteObjects request fail as a whole with
// an internal error, deleting nothing, while on is true.
func (f *Fake) FailDeleteRequests(on bool) {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	f.b.failDeleteRequests = on
}

// FailList makes every listing fail with an internal error while on is true.
func (f *Fake) FailList(on bool) {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	f.b.failList = on
}

// DeleteBatches returns the number of keys of each DeleteObjects request the
// server received, in order.
func (f *Fake) DeleteBatches() []int {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	return slices.Clone(f.b.deleteBatches)
}

// ListCalls returns the number of listing requests the server received.
func (f *Fake) ListCalls() int {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	return f.b.listCalls
}

// Keys returns every key in the bucket, sorted, read from the backend without
// a request. It fails the test when the backend cannot list.
func (f *Fake) Keys(t testing.TB) []string {
	t.Helper()
	var keys []string
	page := gofakes3.ListBucketPage{}
	for {
		list, err := f.b.Backend.ListBucket(BucketName, &gofakes3.Prefix{}, page)
		if err != nil {
			t.Fatalf("s3test: list the fake bucket: %v", err)
		}
		for _, c := range list.Contents {
			keys = append(keys, c.Key)
		}
		if !list.IsTruncated {
			break
		}
		page = gofakes3.ListBucketPage{Marker: list.NextMarker, HasMarker: true}
	}
	slices.Sort(keys)
	return keys
}

// faultBackend wraps a gofakes3 backend with fault injection and request
// counting. Embedding only the Backend interface hides versioning, so the
// server uses the plain DeleteMulti path.
type faultBackend struct {
	gofakes3.Backend
	ignoreIfNoneMatch bool

	mu                 sync.Mutex
	deleteErrors       map[string]string
	failDeleteRequests bool
	failList           bool
	deleteBatches      []int
	listCalls          int
}

func (b *faultBackend) PutObject(bucket, key string, meta map[string]string, input io.Reader, size int64, cond *gofakes3.PutConditions) (gofakes3.PutObjectResult, error) {
	if b.ignoreIfNoneMatch && cond != nil {
		c := *cond
		c.IfNoneMatch = nil
		cond = &c
	}
	return b.Backend.PutObject(bucket, key, meta, input, size, cond)
}

func (b *faultBackend) ListBucket(name string, prefix *gofakes3.Prefix, page gofakes3.ListBucketPage) (*gofakes3.ObjectList, error) {
	b.mu.Lock()
	b.listCalls++
	fail := b.failList
	b.mu.Unlock()
	if fail {
		return nil, gofakes3.ErrInternal
	}
	return b.Backend.ListBucket(name, prefix, page)
}

func (b *faultBackend) DeleteMulti(bucket string, keys ...string) (gofakes3.MultiDeleteResult, error) {
	b.mu.Lock()
	b.deleteBatches = append(b.deleteBatches, len(keys))
	failAll := b.failDeleteRequests
	var ok []string
	var res gofakes3.MultiDeleteResult
	for _, k := range keys {
		if code, bad := b.deleteErrors[k]; bad {
			res.Error = append(res.Error, gofakes3.ErrorResult{Key: k, Code: gofakes3.ErrorCode(code), Message: "injected failure"})
			continue
		}
		ok = append(ok, k)
	}
	b.mu.Unlock()
	if failAll {
		return gofakes3.MultiDeleteResult{}, gofakes3.ErrInternal
	}
	if len(ok) > 0 {
		done, err := b.Backend.DeleteMulti(bucket, ok...)
		if err != nil {
			return done, err
		}
		res.Deleted = append(res.Deleted, done.Deleted...)
		res.Error = append(res.Error, done.Error...)
	}
	return res, nil
}
