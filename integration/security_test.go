package integration

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/conformance"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/integration/internal/harness"
	"github.com/cairnstore/cairn/internal/s3test"
	"github.com/cairnstore/cairn/internal/server/servertest"
)

// Secrets of the secured cluster. The log checks look for them.
const (
	rootPassword     = "root-pw-Zq8vT3kW"
	appUser          = "cairn-app"
	appPassword      = "app-pw-Hx5nR2mJ"
	intruderUser     = "intruder"
	intruderPassword = "intruder-pw-Lc7pY4sD"
	// securePrefix is the only key prefix the app's role may touch.
	securePrefix = "cairn-sec/"
)

// securedCluster is a three-member cluster that serves clients and peers
// over TLS, requires client certificates signed by its CA, and has
// authentication enabled: root, an application user whose role may read
// and write the keys under securePrefix only, and a user with no role.
type securedCluster struct {
	*harness.Cluster
	ca  *harness.CA
	app harness.KeyPair // client certificate of the application
}

func startSecuredCluster(t *testing.T) *securedCluster {
	t.Helper()
	dir := t.TempDir()
	ca, err := harness.NewCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue("server", "cairn-etcd-member")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := ca.Issue("root", "root") // etcd takes the common name as the user
	if err != nil {
		t.Fatal(err)
	}
	app, err := ca.Issue("app", "cairn-app-host")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := harness.StartCluster(ctx, harness.ClusterConfig{
		Dir: dir, Logf: t.Logf,
		TLS: &harness.ServerTLS{CA: ca, Server: server, ClientCertAuth: true, Admin: admin},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	cli, err := c.Client(c.Endpoints()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", rootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "cairn"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "cairn", securePrefix, clientv3.GetPrefixRangeEnd(securePrefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, appUser, appPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, appUser, "cairn"); return err },
		func() error { _, err := cli.UserAdd(ctx, intruderUser, intruderPassword); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}
	return &securedCluster{Cluster: c, ca: ca, app: app}
}

// client returns a client that presents the application's certificate and
// logs in as user (no login when user is empty).
func (s *securedCluster) client(t *testing.T, user, password string, log *zap.Logger) *clientv3.Client {
	t.Helper()
	tc, err := s.ca.ClientConfig(s.app)
	if err != nil {
		t.Fatal(err)
	}
	return s.clientTLS(t, tc, user, password, log)
}

func (s *securedCluster) clientTLS(t *testing.T, tc *tls.Config, user, password string, log *zap.Logger) *clientv3.Client {
	t.Helper()
	if log == nil {
		log = zap.NewNop()
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second, TLS: tc,
		Username: user, Password: password, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// requireNoSecrets fails when any secret appears in the logs.
func requireNoSecrets(t *testing.T, what, logs string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			for _, line := range strings.Split(logs, "\n") {
				if strings.Contains(line, s) {
					t.Errorf("%s logged a secret: %s", what, line)
				}
			}
		}
	}
}

// TestTLSAndAuth runs the store on a cluster with TLS client certificates and
// authentication: as the application user, whose role covers only the
// store's prefix, every conformance suite passes and Verify finds every store
// consistent; a user without rights gets a prompt, readable "permission
// denied" from every operation; a wrong password and a missing client
// certificate fail cleanly; and no log line of the store or of the etcd client
// holds a password.
func TestTLSAndAuth(t *testing.T) {
	sc := startSecuredCluster(t)
	var logs servertest.LogBuffer
	zl := zap.New(zapcoreFor(&logs))
	app := sc.client(t, appUser, appPassword, zl)
	storeLog := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	var n atomic.Int64
	newStore := func(t *testing.T, opts cairn.Options) *etcdstore.Store {
		s, err := etcdstore.New(app, fmt.Sprintf("%scase-%d/", securePrefix, n.Add(1)), etcdstore.Options{Options: opts, Logger: storeLog})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	storeFactory := func(t *testing.T, opts cairn.Options) cairn.Store { return newStore(t, opts) }
	t.Run("Conformance", func(t *testing.T) {
		conformance.RunStoreTests(t, storeFactory)
		conformance.RunPruneTests(t, storeFactory)
		conformance.RunForkTests(t, func(t *testing.T, opts cairn.Options) conformance.ForkStore { return newStore(t, opts) })
		conformance.RunThreadListerTests(t, storeFactory)
		conformance.RunBlobReferenceWalkerTests(t, storeFactory)
		conformance.RunInstanceStoreTests(t, func(t *testing.T) cairn.InstanceStore { return newStore(t, cairn.Options{}).Instances() })
	})
	t.Run("Verify", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		checkpoints := 0
		for i := int64(1); i <= n.Load(); i++ {
			s, err := etcdstore.New(app, fmt.Sprintf("%scase-%d/", securePrefix, i), etcdstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := s.Verify(ctx, etcdstore.VerifyOptions{Repair: true})
			s.Close()
			if err != nil {
				t.Fatalf("Verify of store %d as %s: %v", i, appUser, err)
			}
			checkpoints += rep.Checkpoints
			for _, p := range rep.Problems {
				t.Errorf("Verify of store %d: %s", i, p)
			}
		}
		t.Logf("Verify as %s: %d stores, %d checkpoints", appUser, n.Load(), checkpoints)
	})
	t.Run("OutsideThePrefix", func(t *testing.T) {
		// The application's own user cannot reach another prefix.
		s, err := etcdstore.New(app, "elsewhere/", etcdstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		requireDenied(t, s)
	})
	t.Run("UserWithoutRights", func(t *testing.T) {
		cli := sc.client(t, intruderUser, intruderPassword, zl)
		s, err := etcdstore.New(cli, securePrefix+"case-1/", etcdstore.Options{Logger: storeLog})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		requireDenied(t, s)
	})
	t.Run("WrongPassword", func(t *testing.T) {
		tc, err := sc.ca.ClientConfig(sc.app)
		if err != nil {
			t.Fatal(err)
		}
		_, err = clientv3.New(clientv3.Config{
			Endpoints: sc.Endpoints(), DialTimeout: 5 * time.Second, TLS: tc,
			Username: appUser, Password: "not-" + appPassword, Logger: zl,
		})
		if !errors.Is(err, rpctypes.ErrAuthFailed) {
			t.Fatalf("login with a wrong password: %v, want %v", err, rpctypes.ErrAuthFailed)
		}
		t.Logf("wrong password: %v", err)
	})
	t.Run("NoClientCertificate", func(t *testing.T) {
		tc, err := sc.ca.ClientConfig(harness.KeyPair{})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		cli, err := clientv3.New(clientv3.Config{Endpoints: sc.Endpoints(), DialTimeout: 3 * time.Second, TLS: tc, Logger: zl})
		if err == nil {
			defer cli.Close()
			s, serr := etcdstore.New(cli, securePrefix+"case-1/", etcdstore.Options{})
			if serr != nil {
				t.Fatal(serr)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = s.GetHead(ctx, "thread")
			cancel()
		}
		if err == nil {
			t.Fatal("a client without a certificate read the store")
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("the refusal took %v", d)
		}
		t.Logf("no client certificate: %v", err)
	})
	t.Run("Sweeper", func(t *testing.T) { sweeperWithTLSAndAuth(t, sc) })
	requireNoSecrets(t, "the store or the etcd client", logs.String(), rootPassword, appPassword, intruderPassword)
}

// sweeperWithTLSAndAuth runs the sweeper binary against the secured cluster
// with its TLS and authentication flags, the password from a file or from
// the environment, and checks that no password, S3 secret or private key
// appears in anything it logs.
func sweeperWithTLSAndAuth(t *testing.T, sc *securedCluster) {
	srv := s3test.StartVersityGW(t)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "etcd-password")
	if err := os.WriteFile(pwFile, []byte(appPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(sc.app.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	// Every line of the key's base64 body is a secret too.
	secrets := []string{rootPassword, appPassword, intruderPassword, srv.SecretAccessKey}
	for _, l := range strings.Split(string(keyPEM), "\n") {
		if l != "" && !strings.HasPrefix(l, "-----") {
			secrets = append(secrets, l)
		}
	}
	// A store with three checkpoints on referenced blobs, and a blob no
	// checkpoint references.
	prefix := securePrefix + "sweeper/"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bkt, err := bucket.NewS3(ctx, bucket.Config{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.Bucket, PathStyle: true, AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	defer bkt.Close()
	blobs := []bucket.Blob{bucket.FileBlob([]byte("kept")), bucket.FileBlob([]byte("pruned")), bucket.FileBlob([]byte("orphan"))}
	store, err := etcdstore.New(sc.client(t, appUser, appPassword, nil), prefix, etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The writer binds before its first upload (bucket.UploadBlobs does).
	if err := bucket.BindStore(ctx, store, bkt); err != nil {
		t.Fatal(err)
	}
	if _, err := bucket.PutBlobs(ctx, bkt, blobs); err != nil {
		t.Fatal(err)
	}
	lease, err := store.AcquireWriter(ctx, "thread")
	if err != nil {
		t.Fatal(err)
	}
	parent := ""
	for i, b := range []bucket.Blob{blobs[1], blobs[0], blobs[0]} {
		id := fmt.Sprintf("c%d", i+1)
		cp := cairn.Checkpoint{ID: id, ThreadID: "thread", ParentCheckpointID: parent, CreatedAt: float64(i), Reason: cairn.ReasonNamed,
			Files: []cairn.Entry{{Path: "f", Kind: cairn.KindFile, BlobKey: b.Key, Size: int64(len(b.Data))}}}
		if _, err := store.Append(ctx, cairn.AppendInput{Checkpoint: cp, ExpectedHeadID: parent, Writer: lease.Writer}); err != nil {
			t.Fatal(err)
		}
		parent = id
	}
	lease.Release(ctx)
	store.Close()

	base := []string{
		"--once", "--verify", "--keep=2", "--older-than=0s", "--log-level=debug", "--log-format=text",
		"--prefix=" + prefix, "--etcd-endpoints=" + strings.Join(sc.Endpoints(), ","),
		"--etcd-cacert=" + sc.ca.CertFile, "--etcd-cert=" + sc.app.CertFile, "--etcd-key=" + sc.app.KeyFile,
		"--s3-endpoint=" + srv.Endpoint, "--s3-bucket=" + srv.Bucket, "--s3-region=" + srv.Region, "--s3-path-style",
	}
	s3env := map[string]string{"CAIRN_S3_ACCESS_KEY_ID": srv.AccessKeyID, "CAIRN_S3_SECRET_ACCESS_KEY": srv.SecretAccessKey}
	withEnv := func(extra map[string]string) map[string]string {
		out := maps.Clone(s3env)
		maps.Copy(out, extra)
		return out
	}
	runs := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		wantLog  string
	}{
		{"password file", []string{"--etcd-user=" + appUser, "--etcd-password-file=" + pwFile}, s3env, 0, "store verified"},
		{"password from the environment", []string{"--etcd-user=" + appUser}, withEnv(map[string]string{"CAIRN_ETCD_PASSWORD": appPassword}), 0, "store verified"},
		{"user:password", []string{"--etcd-user=" + appUser + ":" + appPassword}, s3env, 0, "store verified"},
		{"user without rights", []string{"--etcd-user=" + intruderUser}, withEnv(map[string]string{"ETCDCTL_PASSWORD": intruderPassword}), 1, "permission denied"},
		{"wrong password", []string{"--etcd-user=" + appUser}, withEnv(map[string]string{"CAIRN_ETCD_PASSWORD": "not-" + appPassword}), 1, "authentication failed"},
	}
	for _, r := range runs {
		t.Run(strings.ReplaceAll(r.name, " ", "_"), func(t *testing.T) {
			code, logs := runSweeper(t, append(slices.Clone(base), r.args...), r.env)
			if code != r.wantCode || !strings.Contains(logs, r.wantLog) {
				t.Errorf("exit code %d (want %d), log without %q:\n%s", code, r.wantCode, r.wantLog, logs)
			}
			requireNoSecrets(t, "the sweeper", logs, secrets...)
			if lines := logLines(logs, r.wantLog); len(lines) > 0 {
				t.Logf("exit %d: %s", code, lines[0])
			}
		})
	}
	// The first run kept two checkpoints and swept the two blobs only the
	// pruned checkpoint and nobody used.
	for i, b := range blobs {
		_, err := bkt.Head(ctx, b.Key)
		if kept := i == 0; kept != (err == nil) {
			t.Errorf("blob %q: kept=%v, head: %v", b.Data, kept, err)
		}
	}
}

// requireDenied checks that every operation of s fails promptly with a
// readable permission-denied error.
func requireDenied(t *testing.T, s *etcdstore.Store) {
	t.Helper()
	w := cairn.Writer{ThreadID: "thread", OwnerToken: "token", Fence: 1}
	ops := map[string]func(ctx context.Context) error{
		"AcquireWriter": func(ctx context.Context) error { _, err := s.AcquireWriter(ctx, "thread"); return err },
		"GetHead":       func(ctx context.Context) error { _, err := s.GetHead(ctx, "thread"); return err },
		"List":          func(ctx context.Context) error { _, err := s.List(ctx, "thread"); return err },
		"Get":           func(ctx context.Context) error { _, err := s.Get(ctx, "c1"); return err },
		"Append": func(ctx context.Context) error {
			_, err := s.Append(ctx, cairn.AppendInput{Checkpoint: cairn.Checkpoint{ID: "c1", ThreadID: "thread", Reason: cairn.ReasonNamed}, Writer: w})
			return err
		},
		"DeleteHead": func(ctx context.Context) error {
			return s.DeleteHead(ctx, cairn.DeleteHeadInput{ThreadID: "thread", CheckpointID: "c1", Writer: w})
		},
		"ListBlobReferences": func(ctx context.Context) error { _, err := s.ListBlobReferences(ctx); return err },
		"ListThreads":        func(ctx context.Context) error { _, err := s.ListThreads(ctx, "", 10); return err },
		"Verify":             func(ctx context.Context) error { _, err := s.Verify(ctx, etcdstore.VerifyOptions{}); return err },
		"InstanceGet":        func(ctx context.Context) error { _, err := s.Instances().Get(ctx, "k"); return err },
	}
	for name, op := range ops {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		start := time.Now()
		err := op(ctx)
		cancel()
		d := time.Since(start)
		switch {
		case err == nil:
			t.Errorf("%s succeeded without rights", name)
		case !errors.Is(err, rpctypes.ErrPermissionDenied) || !strings.Contains(err.Error(), "permission denied"):
			t.Errorf("%s: %v, want a permission-denied error", name, err)
		case d > 5*time.Second:
			t.Errorf("%s took %v to be refused", name, d)
		default:
			t.Logf("%s: %v (%v)", name, err, d.Round(time.Millisecond))
		}
	}
}

// zapcoreFor returns a zap core that writes every level as JSON to w.
func zapcoreFor(w io.Writer) zapcore.Core {
	return zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(w), zapcore.DebugLevel)
}
