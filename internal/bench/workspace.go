package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/snapshot"
)

// wsLarge files hold half the bytes of a generated workspace: the few
// binaries of a source tree (a model, a database, a build output).
const wsLarge = 4

// wsFile is one file of a generated workspace.
type wsFile struct {
	rel  string // slash-separated
	size int64
}

// genWorkspace writes a workspace of n files and about total bytes under
// dir, sized like a source tree: wsLarge binaries hold half the bytes, the
// other files share the rest with sizes spread over three orders of
// magnitude, in directories of at most 50 files, two levels deep. Contents
// are random, so no two files share a blob. seed makes it repeatable.
func genWorkspace(dir string, n int, total int64, seed uint64) ([]wsFile, error) {
	src := newRand(seed)
	rng := rand.New(src)
	large := min(wsLarge, n)
	small := n - large
	weights := make([]float64, small)
	var sum float64
	for i := range weights {
		// Log-uniform over [1, 1000): many small files, a few bigger ones.
		weights[i] = float64(int64(1) << (rng.IntN(10)))
		sum += weights[i]
	}
	files := make([]wsFile, 0, n)
	smallBytes := total / 2
	if small == 0 {
		smallBytes = 0
	}
	for i, w := range weights {
		files = append(files, wsFile{rel: fmt.Sprintf("src/pkg%03d/m%02d/file%05d.go", i/250, (i/50)%5, i), size: max(1, int64(w/sum*float64(smallBytes)))})
	}
	for i := range large {
		files = append(files, wsFile{rel: fmt.Sprintf("assets/blob%d.bin", i), size: max(1, (total-smallBytes)/int64(large))})
	}
	buf := make([]byte, 1<<20)
	for _, f := range files {
		if err := writeRandom(filepath.Join(dir, filepath.FromSlash(f.rel)), f.size, src, buf); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// writeRandom writes size random bytes to path, making its directory.
func writeRandom(path string, size int64, rng *rand.ChaCha8, buf []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		_, _ = rng.Read(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
		left -= n
	}
	return f.Close()
}

// newRand returns the random source of a seed.
func newRand(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return rand.NewChaCha8(s)
}

// snapEnv is what B7, B8 and B9 run on: versitygw, an etcd member for the
// store's claims, a generated workspace, the cairn bucket and the bare
// client, and a writer lease held for the whole workload.
type snapEnv struct {
	gw    *gateway
	etcd  *clientv3.Client
	store *etcdstore.Store
	blobs *bucket.S3
	bare  *s3.Client
	lease *cairn.Lease
	dir   string
	files []wsFile
	bytes int64
	stop  []func()
}

func (r *runner) snapEnv(ctx context.Context, name string) (*snapEnv, error) {
	e := &snapEnv{}
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()
	bin, err := findVersityGW(r.cfg.VersityGW)
	if err != nil {
		return nil, err
	}
	e.gw, err = startGateway(ctx, bin, filepath.Join(r.tmp, "versitygw-"+name))
	if err != nil {
		return nil, err
	}
	e.stop = append(e.stop, e.gw.stop)
	cli, stop, err := r.etcd(ctx, name)
	if err != nil {
		return nil, err
	}
	e.etcd = cli
	e.stop = append(e.stop, stop)
	if e.store, err = newEtcdStore(cli, "/cairn-bench/"+name+"/"); err != nil {
		return nil, err
	}
	e.stop = append(e.stop, func() { e.store.Close() })
	e.blobs, err = bucket.NewS3(ctx, bucket.Config{Endpoint: e.gw.Endpoint, Region: gwRegion, Bucket: gwBucket, PathStyle: true, AccessKeyID: gwAccess, SecretAccessKey: gwSecret})
	if err != nil {
		return nil, err
	}
	e.stop = append(e.stop, func() { e.blobs.Close() })
	if e.bare, err = e.gw.client(ctx); err != nil {
		return nil, err
	}
	if e.lease, err = e.store.AcquireWriter(ctx, name); err != nil {
		return nil, err
	}
	e.dir = filepath.Join(r.tmp, "ws-"+name)
	r.logf("%s: generating a workspace of %d files, %s", name, r.cfg.B7Files, fmtBytes(r.cfg.B7Bytes))
	if e.files, err = genWorkspace(e.dir, r.cfg.B7Files, r.cfg.B7Bytes, 7); err != nil {
		return nil, err
	}
	for _, f := range e.files {
		e.bytes += f.size
	}
	e.stop = append(e.stop, func() { os.RemoveAll(e.dir) })
	ok = true
	return e, nil
}

func (e *snapEnv) close() {
	for i := len(e.stop) - 1; i >= 0; i-- {
		e.stop[i]()
	}
}

func (e *snapEnv) uploader() snapshot.Uploader {
	return snapshot.Uploader{Bucket: e.blobs, Claimer: e.store, Writer: e.lease.Writer}
}

// capture captures the workspace on parent (nil for none), measuring the
// time and the peak heap.
func (e *snapEnv) capture(ctx context.Context, parent *cairn.Checkpoint, opts *snapshot.Options) (*snapshot.Manifest, time.Duration, uint64, error) {
	var m *snapshot.Manifest
	var err error
	up := e.uploader()
	up.Parent = parent
	d, peak := withPeakHeap(func() { m, err = snapshot.CaptureDir(ctx, e.dir, nil, up, opts) })
	return m, d, peak, err
}

// emptyBucket deletes every object under prefix: the file blobs, so that
// the next capture is cold, or the baseline's copies.
func (e *snapEnv) emptyBucket(ctx context.Context, prefix string) error {
	var keys []string
	for o, err := range bucket.Objects(ctx, e.blobs, prefix, 0) {
		if err != nil {
			return err
		}
		keys = append(keys, o.Key)
	}
	if len(keys) == 0 {
		return nil
	}
	_, err := e.blobs.Delete(ctx, keys)
	return err
}

// snapRounds bounds the rounds of B7, B8 and B9, whose rounds are long.
func (r *runner) snapRounds() int { return min(r.cfg.Rounds, 5) }

// barePut is the baseline of B7: PutObject of every file of the workspace
// under bare/<path>, snapshot.DefaultConcurrency at a time, with the bare
// SDK and the file as the body.
func (e *snapEnv) barePut(ctx context.Context) error {
	return parallel(ctx, e.files, func(ctx context.Context, f wsFile) error {
		fh, err := os.Open(filepath.Join(e.dir, filepath.FromSlash(f.rel)))
		if err != nil {
			return err
		}
		defer fh.Close()
		_, err = e.bare.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(gwBucket), Key: aws.String("bare/" + f.rel),
			Body: fh, ContentLength: aws.Int64(f.size), ContentType: aws.String("application/octet-stream")})
		return err
	})
}

// parallel runs fn on every file, snapshot.DefaultConcurrency at a time, and
// returns the first error.
func parallel(ctx context.Context, files []wsFile, fn func(context.Context, wsFile) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan wsFile)
	errs := make(chan error, snapshot.DefaultConcurrency)
	var wg sync.WaitGroup
	for range snapshot.DefaultConcurrency {
		wg.Go(func() {
			for f := range next {
				if err := fn(ctx, f); err != nil {
					errs <- err
					cancel()
					for range next {
					}
					return
				}
			}
		})
	}
feed:
	for _, f := range files {
		select {
		case next <- f:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	return ctx.Err()
}

// withPeakHeap runs fn and returns how long it took and the peak of the
// heap (live and not yet collected objects) above the heap before it,
// sampled every millisecond.
func withPeakHeap(fn func()) (time.Duration, uint64) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	base := s[0].Value.Uint64()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	start := time.Now()
	fn()
	d := time.Since(start)
	close(stop)
	wg.Wait()
	if peak < base {
		return d, 0
	}
	return d, peak - base
}
