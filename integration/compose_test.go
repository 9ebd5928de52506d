package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"sigs.k8s.io/yaml"

	"github.com/cairnstore/cairn/integration/internal/harness"
	"github.com/cairnstore/cairn/internal/cairnd"
	"github.com/cairnstore/cairn/internal/sidecar"
)

// There is no Docker engine where the tests run, so the compose file and the
// Dockerfile are checked in two ways: structurally (pinned images, exec-form
// health checks, advertise URLs by service name, a volume per member,
// auto-compaction, dependencies on healthy services, a non-root sweeper whose
// command parses with the sweeper's own flag parsing) and by running the
// services' own commands as local processes, with service names and ports
// mapped onto loopback.

type composeFile struct {
	Name     string                    `json:"name"`
	Services map[string]composeService `json:"services"`
	Volumes  map[string]any            `json:"volumes"`
}

type composeService struct {
	Image string `json:"image"`
	Build *struct {
		Context    string `json:"context"`
		Dockerfile string `json:"dockerfile"`
	} `json:"build"`
	// Command and Entrypoint must be lists (exec form): a string would not
	// decode.
	Command     []string          `json:"command"`
	Entrypoint  []string          `json:"entrypoint"`
	Environment map[string]string `json:"environment"`
	Volumes     []string          `json:"volumes"`
	Ports       []string          `json:"ports"`
	User        string            `json:"user"`
	DependsOn   map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
	Healthcheck *struct {
		Test []string `json:"test"`
	} `json:"healthcheck"`
}

// interpolation is compose's ${NAME:-default}; the tests use the defaults.
var interpolation = regexp.MustCompile(`\$\{([A-Z0-9_]+):-([^}]*)\}`)

func interpolate(t *testing.T, s string) string {
	t.Helper()
	out := interpolation.ReplaceAllString(s, "$2")
	if strings.Contains(out, "$") {
		t.Errorf("%q: only ${NAME:-default} is used in the compose file", s)
	}
	return out
}

func loadCompose(t *testing.T) (composeFile, string) {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("docker-compose.yml is not YAML: %v", err)
	}
	var f composeFile
	dec := json.NewDecoder(strings.NewReader(string(js)))
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("docker-compose.yml: %v (commands, entrypoints and health checks must be lists)", err)
	}
	for name, s := range f.Services {
		for i := range s.Command {
			s.Command[i] = interpolate(t, s.Command[i])
		}
		for k, v := range s.Environment {
			s.Environment[k] = interpolate(t, v)
		}
		f.Services[name] = s
	}
	return f, root
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

var etcdMembers = []string{"etcd1", "etcd2", "etcd3"}

func TestComposeFile(t *testing.T) {
	f, root := loadCompose(t)
	for _, name := range append(slices.Clone(etcdMembers), "s3-init", "s3", "sweeper") {
		if _, ok := f.Services[name]; !ok {
			t.Fatalf("service %s is missing", name)
		}
	}

	t.Run("etcd", func(t *testing.T) {
		var cluster []string
		for _, m := range etcdMembers {
			cluster = append(cluster, fmt.Sprintf("%s=http://%s:2380", m, m))
		}
		volumes := map[string]string{}
		for _, m := range etcdMembers {
			s := f.Services[m]
			if s.Image != "gcr.io/etcd-development/etcd:v3.7.3" && s.Image != "quay.io/coreos/etcd:v3.7.3" {
				t.Errorf("%s: image %q, want the official etcd v3.7.3 image", m, s.Image)
			}
			if len(s.Command) == 0 || s.Command[0] != "/usr/local/bin/etcd" {
				t.Errorf("%s: command %q must run /usr/local/bin/etcd (the image has no shell)", m, s.Command)
			}
			want := map[string]string{
				"name":                        m,
				"advertise-client-urls":       "http://" + m + ":2379",
				"initial-advertise-peer-urls": "http://" + m + ":2380",
				"listen-client-urls":          "http://0.0.0.0:2379",
				"listen-peer-urls":            "http://0.0.0.0:2380",
				"initial-cluster":             strings.Join(cluster, ","),
				"initial-cluster-state":       "new",
				"auto-compaction-mode":        "periodic",
			}
			for flag, v := range want {
				if got, _ := flagValue(s.Command, flag); got != v {
					t.Errorf("%s: --%s=%q, want %q", m, flag, got, v)
				}
			}
			if r, _ := flagValue(s.Command, "auto-compaction-retention"); r == "" || r == "0" {
				t.Errorf("%s: auto-compaction is off (--auto-compaction-retention=%q)", m, r)
			}
			dataDir, _ := flagValue(s.Command, "data-dir")
			var vol string
			for _, v := range s.Volumes {
				if src, dst, ok := strings.Cut(v, ":"); ok && dst == dataDir {
					vol = src
				}
			}
			if vol == "" {
				t.Errorf("%s: the data directory %q is not on a volume", m, dataDir)
			} else if other, dup := volumes[vol]; dup {
				t.Errorf("%s and %s share the volume %s", other, m, vol)
			} else if _, declared := f.Volumes[vol]; !declared {
				t.Errorf("%s: volume %s is not declared", m, vol)
			}
			volumes[vol] = m
			hc := s.Healthcheck
			if hc == nil || !slices.Equal(hc.Test, []string{"CMD", "/usr/local/bin/etcdctl", "--endpoints=http://127.0.0.1:2379", "endpoint", "health"}) {
				t.Errorf("%s: health check %v, want the exec form of etcdctl endpoint health", m, hc)
			}
		}
	})

	t.Run("s3", func(t *testing.T) {
		s3, init := f.Services["s3"], f.Services["s3-init"]
		for name, s := range map[string]composeService{"s3": s3, "s3-init": init} {
			if s.Image != "versity/versitygw:v1.8.0" {
				t.Errorf("%s: image %q, want versity/versitygw:v1.8.0 (the version the tests run)", name, s.Image)
			}
		}
		if strings.Contains(strings.ToLower(s3.Image+init.Image), "minio") {
			t.Error("the S3 server must not be MinIO")
		}
		if s3.DependsOn["s3-init"].Condition != "service_completed_successfully" {
			t.Errorf("s3 must start after s3-init completed: %v", s3.DependsOn)
		}
		if hc := s3.Healthcheck; hc == nil || len(hc.Test) == 0 || hc.Test[0] != "CMD" {
			t.Errorf("s3: health check %v, want the exec form", hc)
		}
		if !slices.Contains(init.Entrypoint, "/data/root/cairn") {
			t.Errorf("s3-init does not create the bucket directory: %q", init.Entrypoint)
		}
	})

	t.Run("cairnd", func(t *testing.T) {
		s := f.Services["cairnd"]
		if s.Image != f.Services["sweeper"].Image || !slices.Equal(s.Entrypoint, []string{"/usr/local/bin/cairnd"}) {
			t.Errorf("cairnd: image %q entrypoint %v, want the sweeper's image with /usr/local/bin/cairnd", s.Image, s.Entrypoint)
		}
		if s.User == "" || strings.HasPrefix(s.User, "0") || s.User == "root" {
			t.Errorf("cairnd: user %q, want a non-root user", s.User)
		}
		cfg, err := cairnd.Parse(s.Command, func(k string) string { return s.Environment[k] }, io.Discard)
		if err != nil {
			t.Fatalf("cairnd rejects the compose command: %v", err)
		}
		sweeper, _ := sidecar.Parse(f.Services["sweeper"].Command, func(k string) string { return f.Services["sweeper"].Environment[k] }, io.Discard)
		if !slices.Equal(cfg.Etcd.Endpoints, sweeper.Etcd.Endpoints) || cfg.S3.Endpoint != sweeper.S3.Endpoint || cfg.S3.Bucket != sweeper.S3.Bucket ||
			cfg.S3.AccessKeyID != sweeper.S3.AccessKeyID || cfg.S3.SecretAccessKey != sweeper.S3.SecretAccessKey {
			t.Errorf("cairnd: etcd %v and bucket %q at %q differ from the sweeper's", cfg.Etcd.Endpoints, cfg.S3.Bucket, cfg.S3.Endpoint)
		}
		tenants, err := cfg.Tenants()
		if err != nil || len(tenants) != 1 || tenants[0].Prefix != sweeper.Prefix {
			t.Errorf("cairnd: tenants %+v (%v), want one under the sweeper's prefix %q", tenants, err, sweeper.Prefix)
		}
		_, port, _ := strings.Cut(cfg.Listen, ":")
		if hc := s.Healthcheck; hc == nil || !slices.Equal(hc.Test, []string{"CMD", "/usr/local/bin/httpprobe", "http://127.0.0.1:" + port + "/readyz"}) {
			t.Errorf("cairnd: health check %v, want httpprobe of /readyz on the --listen port %s", hc, port)
		}
		if !slices.Contains(s.Ports, "127.0.0.1:"+port+":"+port) {
			t.Errorf("cairnd: ports %v do not publish --listen %s", s.Ports, cfg.Listen)
		}
	})

	t.Run("sweeper", func(t *testing.T) {
		s := f.Services["sweeper"]
		if s.Build == nil || s.Build.Context != "." || s.Build.Dockerfile != "Dockerfile" {
			t.Errorf("sweeper: build %+v, want the Dockerfile at the root", s.Build)
		}
		if s.User == "" || strings.HasPrefix(s.User, "0") || s.User == "root" {
			t.Errorf("sweeper: user %q, want a non-root user", s.User)
		}
		for _, dep := range append(slices.Clone(etcdMembers), "s3") {
			if s.DependsOn[dep].Condition != "service_healthy" {
				t.Errorf("sweeper must wait for %s to be healthy: %v", dep, s.DependsOn[dep])
			}
		}
		// The sweeper's own parsing accepts the command and environment.
		cfg, err := sidecar.Parse(s.Command, func(k string) string { return s.Environment[k] }, io.Discard)
		if err != nil {
			t.Fatalf("the sweeper rejects the compose command: %v", err)
		}
		if cfg.Interval <= 0 || cfg.Once {
			t.Errorf("sweeper: interval %v once %v, want --interval mode", cfg.Interval, cfg.Once)
		}
		var want []string
		for _, m := range etcdMembers {
			want = append(want, "http://"+m+":2379")
		}
		if !slices.Equal(cfg.Etcd.Endpoints, want) {
			t.Errorf("sweeper: etcd endpoints %v, want %v", cfg.Etcd.Endpoints, want)
		}
		if port, _ := flagValue(f.Services["s3"].Command, "port"); cfg.S3.Endpoint != "http://s3"+port {
			t.Errorf("sweeper: S3 endpoint %q, but the server listens on %q", cfg.S3.Endpoint, port)
		}
		if cfg.S3.AccessKeyID != f.Services["s3"].Environment["ROOT_ACCESS_KEY"] || cfg.S3.SecretAccessKey != f.Services["s3"].Environment["ROOT_SECRET_KEY"] {
			t.Error("sweeper: the S3 credentials differ from the server's")
		}
		_, port, _ := strings.Cut(cfg.Listen, ":")
		if hc := s.Healthcheck; hc == nil || !slices.Equal(hc.Test, []string{"CMD", "/usr/local/bin/httpprobe", "http://127.0.0.1:" + port + "/healthz"}) {
			t.Errorf("sweeper: health check %v, want httpprobe on the --listen port %s", hc, port)
		}
		if !slices.Contains(s.Ports, "127.0.0.1:"+port+":"+port) {
			t.Errorf("sweeper: ports %v do not publish --listen %s", s.Ports, cfg.Listen)
		}
		// And the binary's --help lists every flag the command uses.
		help, err := exec.Command(buildSweeper(t), "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("sweeper --help: %v\n%s", err, help)
		}
		for _, a := range s.Command {
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !strings.Contains(string(help), "--"+name+"\n") {
				t.Errorf("sweeper --help does not list --%s", name)
			}
		}
	})

	t.Run("Dockerfile", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		df := string(data)
		froms := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllStringSubmatch(df, -1)
		if len(froms) < 2 {
			t.Fatalf("the Dockerfile has %d stages, want a multi-stage build", len(froms))
		}
		gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		goVersion := regexp.MustCompile(`(?m)^go (\S+)`).FindSubmatch(gomod)
		if goVersion == nil || !strings.HasPrefix(froms[0][1], "golang:"+string(goVersion[1])) {
			t.Errorf("build stage %s does not use the Go version of go.mod (%s)", froms[0][1], goVersion[1])
		}
		if last := froms[len(froms)-1][1]; !strings.HasPrefix(last, "gcr.io/distroless/") {
			t.Errorf("final stage %s, want distroless", last)
		}
		users := regexp.MustCompile(`(?m)^USER (\S+)`).FindAllStringSubmatch(df, -1)
		if len(users) == 0 || strings.HasPrefix(users[len(users)-1][1], "0") || users[len(users)-1][1] == "root" {
			t.Errorf("the image does not run as a non-root user: %v", users)
		}
		for _, want := range []string{"./cmd/sweeper", "./internal/httpprobe", "CGO_ENABLED=0", `ENTRYPOINT ["/usr/local/bin/sweeper"]`} {
			if !strings.Contains(df, want) {
				t.Errorf("the Dockerfile lacks %q", want)
			}
		}
	})

	t.Run("RunLocally", func(t *testing.T) { runComposeLocally(t, f, root) })
}

// buildSweeper builds the sweeper as the Dockerfile does and returns its
// path.
func buildSweeper(t *testing.T) string { return buildPackage(t, "./cmd/sweeper") }

func buildPackage(t *testing.T, pkg string) string {
	t.Helper()
	p, err := harness.Build(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runComposeLocally runs the services' own commands on loopback: each
// service name and container port maps to 127.0.0.1 and a free port, each
// container path to a temporary directory. The health checks the file
// declares then pass.
func runComposeLocally(t *testing.T, f composeFile, root string) {
	dir := t.TempDir()
	ps, err := harness.FreePorts(4*len(etcdMembers) + 2)
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]string{} // "service:port" -> 127.0.0.1:port
	next := 0
	port := func() string { next++; return "127.0.0.1:" + strconv.Itoa(ps[next-1]) }
	for _, m := range etcdMembers {
		addr[m+":2379"], addr[m+":2380"], addr[m+":2381"] = port(), port(), port()
	}
	addr["s3:7070"], addr["sweeper:9090"] = port(), port()

	// rewrite maps one argument of a service onto loopback.
	rewrite := func(service, arg string, paths map[string]string) string {
		for sp, a := range addr {
			svc, p, _ := strings.Cut(sp, ":")
			arg = strings.ReplaceAll(arg, "://"+sp, "://"+a)
			if svc == service {
				arg = strings.ReplaceAll(arg, "0.0.0.0:"+p, a)
				arg = strings.ReplaceAll(arg, "127.0.0.1:"+p, a)
				if strings.HasSuffix(arg, "=:"+p) {
					arg = strings.TrimSuffix(arg, ":"+p) + a
				}
			}
		}
		for from, to := range paths {
			arg = strings.ReplaceAll(arg, from, to)
		}
		if strings.Contains(arg, "0.0.0.0") || regexp.MustCompile(`://(etcd\d|s3|sweeper)[:/]`).MatchString(arg) {
			t.Fatalf("%s: argument %q still names a container address", service, arg)
		}
		return arg
	}

	// The first test of the package builds the member binary; the services'
	// two minutes start once it is there, not before.
	member, err := harness.MemberBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var procs []*harness.Process
	t.Cleanup(func() {
		for _, p := range procs {
			p.Kill()
		}
	})
	start := func(name, bin string, args []string, env []string) *harness.Process {
		p, err := harness.StartProcess(name, bin, args, filepath.Join(dir, name+".log"), env)
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
		return p
	}
	for _, m := range etcdMembers {
		var args []string
		for _, a := range f.Services[m].Command[1:] {
			args = append(args, rewrite(m, a, map[string]string{"/etcd-data": filepath.Join(dir, m)}))
		}
		start(m, member, args, nil)
	}
	var eps []string
	for _, m := range etcdMembers {
		eps = append(eps, "http://"+addr[m+":2379"])
	}
	if err := waitEtcdHealthy(ctx, eps); err != nil {
		t.Fatalf("the etcd services did not form a healthy cluster: %v", err)
	}

	data := filepath.Join(dir, "s3-data")
	paths := map[string]string{"/data": data}
	init := f.Services["s3-init"].Entrypoint
	var initArgs []string
	for _, a := range init[1:] {
		initArgs = append(initArgs, rewrite("s3-init", a, paths))
	}
	if out, err := exec.Command(filepath.Base(init[0]), initArgs...).CombinedOutput(); err != nil {
		t.Fatalf("s3-init: %v\n%s", err, out)
	}
	vgw, err := harness.VersityGWBinary()
	if err != nil {
		t.Fatal(err)
	}
	s3 := f.Services["s3"]
	var s3Args []string
	for _, a := range s3.Command {
		s3Args = append(s3Args, rewrite("s3", a, paths))
	}
	env := os.Environ()
	for k, v := range s3.Environment {
		env = append(env, k+"="+v)
	}
	s3Proc := start("s3", vgw, s3Args, env)
	health := rewrite("s3", s3.Healthcheck.Test[len(s3.Healthcheck.Test)-1], nil)
	if err := waitHTTP(ctx, health, s3Proc); err != nil {
		t.Fatalf("s3 health check %s: %v\n%s", health, err, harness.Tail(filepath.Join(dir, "s3.log"), 20))
	}

	sw := f.Services["sweeper"]
	var swArgs []string
	for _, a := range sw.Command {
		swArgs = append(swArgs, rewrite("sweeper", a, nil))
	}
	env = os.Environ()
	for k, v := range sw.Environment {
		env = append(env, k+"="+v)
	}
	swProc := start("sweeper", buildSweeper(t), swArgs, env)
	probe := buildPackage(t, "./internal/httpprobe")
	hc := sw.Healthcheck.Test
	probeURL := rewrite("sweeper", hc[len(hc)-1], nil)
	var probeErr error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, err := exec.Command(probe, probeURL).CombinedOutput()
		if probeErr = err; err == nil {
			break
		}
		probeErr = fmt.Errorf("%v: %s", err, out)
		if exited, werr := swProc.Exited(); exited {
			t.Fatalf("the sweeper exited (%v):\n%s", werr, harness.Tail(filepath.Join(dir, "sweeper.log"), 30))
		}
	}
	if probeErr != nil {
		t.Fatalf("the sweeper's health check %s: %v\n%s", probeURL, probeErr, harness.Tail(filepath.Join(dir, "sweeper.log"), 30))
	}
	_ = syscall.Kill(swProc.Pid(), syscall.SIGTERM)
	select {
	case <-swProc.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the sweeper did not stop on SIGTERM")
	}
	t.Logf("the compose services ran locally; sweeper log:\n%s", harness.Tail(filepath.Join(dir, "sweeper.log"), 30))
}

// waitEtcdHealthy waits until every endpoint answers a status with a leader
// and a read succeeds.
func waitEtcdHealthy(ctx context.Context, eps []string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	var last error
	for ctx.Err() == nil {
		last = nil
		for _, ep := range eps {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := cli.Status(sctx, ep)
			cancel()
			if err == nil && st.Leader == 0 {
				err = fmt.Errorf("%s has no leader", ep)
			}
			if err != nil {
				last = err
				break
			}
		}
		if last == nil {
			_, last = cli.Get(ctx, "compose-health")
			if last == nil {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
}

// waitHTTP waits until url answers 200.
func waitHTTP(ctx context.Context, url string, p *harness.Process) error {
	client := &http.Client{Timeout: 2 * time.Second}
	var last error
	for ctx.Err() == nil {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("the process exited: %v", err)
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s", resp.Status)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
}
