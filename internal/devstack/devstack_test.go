package devstack

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/cairnstore/cairn/bucket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a stack on dir and closes it in t.Cleanup unless the test
// closes it first.
func start(t *testing.T, dir string) *Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Options{Dir: dir, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// clients returns an etcd client and the bucket of s, closed in t.Cleanup.
func clients(t *testing.T, s *Stack) (*clientv3.Client, *bucket.S3) {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: s.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	b, err := bucket.NewS3(context.Background(), s.S3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return c, b
}

func TestRestartKeepsData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	blob := bucket.FileBlob([]byte("kept across restarts\n"))

	first := start(t, dir)
	c, b := clients(t, first)
	if _, err := c.Put(ctx, first.Prefix+"probe", "v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutIfAbsent(ctx, blob.Key, blob.Data); err != nil {
		t.Fatal(err)
	}
	c.Close()
	b.Close()
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	second := start(t, dir)
	c2, b2 := clients(t, second)
	got, err := c2.Get(ctx, second.Prefix+"probe")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v1" {
		t.Fatalf("etcd after restart: %v, want the key written before", got.Kvs)
	}
	data, err := bucket.ReadBlob(ctx, b2, blob.Key)
	if err != nil {
		t.Fatalf("blob after restart: %v", err)
	}
	if !bytes.Equal(data, blob.Data) {
		t.Fatalf("blob after restart: %q, want %q", data, blob.Data)
	}
}

func TestEnv(t *testing.T) {
	s := start(t, t.TempDir())
	env := map[string]string{}
	for _, line := range s.Env() {
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("Env line %q has no =", line)
		}
		env[name] = value
	}
	want := map[string]string{
		"CAIRN_ETCD_ENDPOINTS":       strings.Join(s.EtcdEndpoints, ","),
		"CAIRN_PREFIX":               Prefix,
		"CAIRN_S3_ENDPOINT":          s.S3.Endpoint,
		"CAIRN_S3_BUCKET":            Bucket,
		"CAIRN_S3_REGION":            Region,
		"CAIRN_S3_PATH_STYLE":        "true",
		"CAIRN_S3_ACCESS_KEY_ID":     AccessKeyID,
		"CAIRN_S3_SECRET_ACCESS_KEY": SecretAccessKey,
	}
	for name, v := range want {
		if env[name] != v {
			t.Errorf("%s = %q, want %q", name, env[name], v)
		}
	}
	if len(env) != len(want) {
		t.Errorf("Env has %d variables, want %d: %v", len(env), len(want), s.Env())
	}
	if !strings.HasPrefix(s.S3.Endpoint, "http://127.0.0.1:") {
		t.Errorf("S3 endpoint %q is not on 127.0.0.1", s.S3.Endpoint)
	}
}

func TestStartErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	locked := t.TempDir()
	start(t, locked)

	tests := []struct {
		name    string
		opts    Options
		options bool   // the error matches ErrOptions
		want    string // in the message
	}{
		{name: "no-dir", opts: Options{}, options: true, want: "data directory is required"},
		{name: "etcd-not-loopback", opts: Options{Dir: t.TempDir(), EtcdAddr: "0.0.0.0:2379"}, options: true, want: "etcd address"},
		{name: "s3-not-loopback", opts: Options{Dir: t.TempDir(), S3Addr: "192.0.2.1:9000"}, options: true, want: "loopback"},
		{name: "s3-bad-port", opts: Options{Dir: t.TempDir(), S3Addr: "127.0.0.1:x"}, options: true, want: "port"},
		{name: "s3-port-busy", opts: Options{Dir: t.TempDir(), S3Addr: busy.Addr().String()}, want: "S3 server"},
		{name: "etcd-port-busy", opts: Options{Dir: t.TempDir(), EtcdAddr: busy.Addr().String()}, want: "etcd on " + busy.Addr().String()},
		{name: "dir-in-use", opts: Options{Dir: locked}, want: "another cairn dev"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tt.opts.NoFsync = true
			s, err := Start(ctx, tt.opts)
			if err == nil {
				s.Close()
				t.Fatal("Start succeeded")
			}
			if errors.Is(err, ErrOptions) != tt.options {
				t.Errorf("errors.Is(%v, ErrOptions) = %v, want %v", err, !tt.options, tt.options)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

// BenchmarkStart measures how long a stack takes to start and stop on a
// directory that already holds data, as a `cairn dev` restart does.
func BenchmarkStart(b *testing.B) {
	dir := b.TempDir()
	ctx := context.Background()
	s, err := Start(ctx, Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	s.Close()
	var took time.Duration
	for b.Loop() {
		s, err := Start(ctx, Options{Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		took += s.Took
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "ms/start")
}

func TestEnvFor(t *testing.T) {
	s := start(t, t.TempDir())
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(s.S3.Endpoint, "http://"))
	got, err := EnvFor(s.EtcdEndpoints[0], net.JoinHostPort(host, port))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "\n") != strings.Join(s.Env(), "\n") {
		t.Errorf("EnvFor = %q, want the running stack's %q", got, s.Env())
	}
	for _, bad := range [][2]string{{"127.0.0.1:0", "127.0.0.1:9000"}, {"127.0.0.1:2379", "10.0.0.1:9000"}, {"127.0.0.1:2379", "127.0.0.1"}} {
		if _, err := EnvFor(bad[0], bad[1]); !errors.Is(err, ErrOptions) {
			t.Errorf("EnvFor(%q, %q) = %v, want ErrOptions", bad[0], bad[1], err)
		}
	}
}
