package harness

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"
)

// ClusterConfig configures StartCluster.
type ClusterConfig struct {
	// Dir holds the members' data directories and log files. Required.
	Dir string
	// Size is the number of members; zero selects 3.
	Size int
	// Binary is the etcd server to run; "" selects MemberBinary().
	Binary string
	// PeerProxies puts a TCP proxy (go.etcd.io/etcd/pkg/v3/proxy) in front
	// of each member's peer URL: the members advertise the proxy, so
	// Blackhole can cut a member off from the others.
	PeerProxies bool
	// TLS, when set, serves clients and peers over TLS.
	TLS *ServerTLS
	// Regions, when set, places one member in each region of a simulated
	// WAN (Size is then len(Regions)): each member gets a peer proxy that
	// delays what it carries, a client proxy through which the region's
	// clients reach it, and etcd's timers tuned for the largest round trip
	// (RegionTimers).
	Regions []Region
	// Args are extra flags for every member.
	Args []string
	// Logf, when set, receives progress messages.
	Logf func(format string, args ...any)
}

// ServerTLS is the TLS setup of a cluster.
type ServerTLS struct {
	CA *CA
	// Server is the members' certificate, for clients and peers.
	Server KeyPair
	// ClientCertAuth makes the members require client certificates signed
	// by the CA (--client-cert-auth, --peer-client-cert-auth).
	ClientCertAuth bool
	// Admin is the client certificate the harness uses for its own health
	// checks. With authentication enabled its common name must be a user
	// (root).
	Admin KeyPair
}

// Region is one region of a simulated WAN on loopback.
type Region struct {
	Name string
	// PeerDelay is the one-way delay of the region's links to the other
	// regions: the round trip between members in regions X and Y is
	// PeerDelay(X) + PeerDelay(Y).
	PeerDelay time.Duration
	// ClientDelay is the one-way delay between the region's clients and its
	// member; zero selects 500µs (a round trip of about 1 ms).
	ClientDelay time.Duration
}

// RTT returns the configured round trip between members in regions a and b.
func RTT(a, b Region) time.Duration { return a.PeerDelay + b.PeerDelay }

// RegionTimers returns the heartbeat and election timeout that etcd's tuning
// guide gives for regions: a heartbeat of about the largest round trip, an
// election timeout of ten of them (at least etcd's defaults, 100 ms and
// 1000 ms).
func RegionTimers(regions []Region) (heartbeat, election time.Duration) {
	var maxRTT time.Duration
	for i, a := range regions {
		for _, b := range regions[i+1:] {
			maxRTT = max(maxRTT, RTT(a, b))
		}
	}
	heartbeat = max(100*time.Millisecond, maxRTT.Round(10*time.Millisecond))
	return heartbeat, max(time.Second, 10*heartbeat)
}

// MinLeaseTTL returns the shortest lease TTL etcd grants with the given
// election timeout: 1.5 times it, rounded up to whole seconds.
func MinLeaseTTL(election time.Duration) time.Duration {
	return (election*3/2 + time.Second - 1).Truncate(time.Second)
}

// Member is one member of a Cluster.
type Member struct {
	Name string
	// Region is the member's region, when the cluster has regions.
	Region Region
	// RegionURL is where the clients of the member's region reach it:
	// its client proxy (ClientURL without regions).
	RegionURL string
	DataDir   string
	LogPath   string
	ClientURL string // where clients reach the member
	// PeerURL is where the member listens for its peers; AdvertisePeerURL
	// is what it tells them: the proxy when there is one.
	PeerURL          string
	AdvertisePeerURL string

	bin         string
	args        []string
	proxy       proxy.Server
	clientProxy proxy.Server // with regions

	mu      sync.Mutex
	proc    *Process
	stopped bool // the harness stopped or killed the process on purpose
}

// Cluster is a set of etcd member processes on loopback.
type Cluster struct {
	Members []*Member
	cfg     ClusterConfig
	tls     *tls.Config
}

// startTries bounds the attempts to start a cluster on fresh ports.
const startTries = 3

// StartCluster starts a new cluster and waits until every member serves and
// the members agree on a leader, or ctx ends. On error nothing is left
// running.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("harness: ClusterConfig.Dir is required")
	}
	if cfg.Size == 0 {
		cfg.Size = 3
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Binary == "" {
		bin, err := MemberBinary()
		if err != nil {
			return nil, err
		}
		cfg.Binary = bin
	}
	var lastErr error
	for try := 0; try < startTries; try++ {
		dir := filepath.Join(cfg.Dir, fmt.Sprintf("try%d", try))
		c, err := startCluster(ctx, cfg, dir)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if ctx.Err() != nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		cfg.Logf("harness: a port was taken; starting the cluster again on other ports: %v", err)
	}
	return nil, lastErr
}

func startCluster(ctx context.Context, cfg ClusterConfig, dir string) (*Cluster, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if len(cfg.Regions) > 0 {
		cfg.Size, cfg.PeerProxies = len(cfg.Regions), true
		hb, el := RegionTimers(cfg.Regions)
		cfg.Args = append([]string{
			"--heartbeat-interval", fmt.Sprint(hb.Milliseconds()),
			"--election-timeout", fmt.Sprint(el.Milliseconds()),
		}, cfg.Args...)
	}
	n := cfg.Size
	ps, err := FreePorts(4 * n)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	c := &Cluster{cfg: cfg}
	if cfg.TLS != nil {
		scheme = "https"
		if c.tls, err = cfg.TLS.CA.ClientConfig(cfg.TLS.Admin); err != nil {
			return nil, err
		}
	}
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	var initial []string
	for i := 0; i < n; i++ {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i+1),
			bin:       cfg.Binary,
			ClientURL: LoopbackURL(scheme, ps[4*i]),
			PeerURL:   LoopbackURL(scheme, ps[4*i+1]),
		}
		m.RegionURL = m.ClientURL
		if len(cfg.Regions) > 0 {
			m.Region = cfg.Regions[i]
			m.RegionURL = LoopbackURL(scheme, ps[4*i+3])
		}
		m.DataDir = filepath.Join(dir, m.Name+".etcd")
		m.LogPath = filepath.Join(dir, m.Name+".log")
		m.AdvertisePeerURL = m.PeerURL
		if cfg.PeerProxies {
			m.AdvertisePeerURL = LoopbackURL(scheme, ps[4*i+2])
		}
		initial = append(initial, m.Name+"="+m.AdvertisePeerURL)
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		m.args = []string{
			"--name", m.Name,
			"--data-dir", m.DataDir,
			"--listen-client-urls", m.ClientURL,
			"--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL,
			"--initial-advertise-peer-urls", m.AdvertisePeerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", "cairn-" + hex.EncodeToString(token),
			"--logger", "zap",
		}
		if t := cfg.TLS; t != nil {
			m.args = append(m.args,
				"--cert-file", t.Server.CertFile, "--key-file", t.Server.KeyFile, "--trusted-ca-file", t.CA.CertFile,
				"--peer-cert-file", t.Server.CertFile, "--peer-key-file", t.Server.KeyFile, "--peer-trusted-ca-file", t.CA.CertFile)
			if t.ClientCertAuth {
				m.args = append(m.args, "--client-cert-auth", "--peer-client-cert-auth")
			}
		}
		m.args = append(m.args, cfg.Args...)
		if cfg.PeerProxies {
			if m.proxy, err = startProxy(m.AdvertisePeerURL, m.PeerURL); err != nil {
				c.Close()
				return nil, fmt.Errorf("harness: peer proxy of %s: %w", m.Name, err)
			}
			// A member's raft messages to a peer travel on the streams
			// that the peer dialed to it, that is through its own proxy,
			// from the member back to the dialer (the proxy's Rx side).
			// Delaying that side by the region's PeerDelay makes every
			// message leaving region X take d_X, and a round trip between
			// X and Y take d_X + d_Y. PeerRTTs measures it.
			if d := m.Region.PeerDelay; d > 0 {
				m.proxy.DelayRx(d, 0)
			}
		}
		if len(cfg.Regions) > 0 {
			if m.clientProxy, err = startProxy(m.RegionURL, m.ClientURL); err != nil {
				c.Close()
				return nil, fmt.Errorf("harness: client proxy of %s: %w", m.Name, err)
			}
			d := m.Region.ClientDelay
			if d == 0 {
				d = 500 * time.Microsecond
			}
			m.clientProxy.DelayTx(d, 0)
			m.clientProxy.DelayRx(d, 0)
		}
	}
	for _, m := range c.Members {
		if err := m.start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		var logs []string
		for _, m := range c.Members {
			logs = append(logs, fmt.Sprintf("--- %s (%s):\n%s", m.Name, m.LogPath, Tail(m.LogPath, 15)))
		}
		c.Close()
		return nil, fmt.Errorf("harness: cluster did not become healthy: %w\n%s", err, strings.Join(logs, "\n"))
	}
	cfg.Logf("harness: cluster up: %s", strings.Join(c.Endpoints(), ","))
	return c, nil
}

func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		if exited, _ := m.proc.Exited(); !exited {
			return fmt.Errorf("harness: %s is already running", m.Name)
		}
	}
	p, err := StartProcess(m.Name, m.bin, m.args, m.LogPath, nil)
	if err != nil {
		return err
	}
	m.proc, m.stopped = p, false
	return nil
}

// startProxy starts a TCP proxy (go.etcd.io/etcd/pkg/v3/proxy) from one URL
// to another.
func startProxy(fromURL, toURL string) (proxy.Server, error) {
	to, _ := url.Parse(toURL)
	from, _ := url.Parse(fromURL)
	p := proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(), From: *from, To: *to})
	select {
	case <-p.Ready():
	case err := <-p.Error():
		return nil, err
	}
	// The proxy reports every failed dial (while its target is down) on a
	// small channel and stops accepting once the channel is full: drain it
	// for the proxy's whole life.
	go func() {
		for {
			select {
			case <-p.Error():
			case <-p.Done():
				return
			}
		}
	}()
	return p, nil
}

// Running reports whether the member's process is running.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return false
	}
	exited, _ := m.proc.Exited()
	return !exited
}

// Kill sends SIGKILL to the member and waits for it to exit.
func (m *Member) Kill() {
	m.mu.Lock()
	p := m.proc
	m.stopped = true
	m.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// Stop stops the member politely.
func (m *Member) Stop() {
	m.mu.Lock()
	p := m.proc
	m.stopped = true
	m.mu.Unlock()
	if p != nil {
		p.Stop()
	}
}

// Pause stops the member's process with SIGSTOP, as a long stall (a GC
// pause, a stuck disk) would; Resume continues it.
func (m *Member) Pause() { m.signal(syscall.SIGSTOP) }

// Resume continues a paused member with SIGCONT.
func (m *Member) Resume() { m.signal(syscall.SIGCONT) }

func (m *Member) signal(sig syscall.Signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		_ = syscall.Kill(m.proc.Pid(), sig)
	}
}

// Restart starts a stopped or killed member again on its data directory.
func (m *Member) Restart() error { return m.start() }

// Blackhole drops all traffic through the member's peer proxy, in both
// directions. Its peers stop hearing it: its raft messages travel on the
// connections they opened to it, which now carry nothing, so a leader loses
// its leadership and a follower's proposals and acknowledgements are lost;
// writes through the member cannot commit. As in etcd's own proxy-based
// network faults, the connections the member opened itself to its peers'
// proxies are left alone, so it still hears them: the cut is one-way. It
// needs ClusterConfig.PeerProxies.
func (m *Member) Blackhole() {
	m.proxy.BlackholeTx()
	m.proxy.BlackholeRx()
}

// Unblackhole lets traffic through the member's peer proxy again.
func (m *Member) Unblackhole() {
	m.proxy.UnblackholeTx()
	m.proxy.UnblackholeRx()
}

// Endpoints returns the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.ClientURL)
	}
	return out
}

// ClientTLS returns the TLS configuration of the harness's own client (nil
// without TLS).
func (c *Cluster) ClientTLS() *tls.Config { return c.tls }

// Client returns a client of the given endpoints with the harness's TLS
// settings and no logging. The caller closes it.
func (c *Cluster) Client(endpoints ...string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		TLS:         c.tls,
		Logger:      zap.NewNop(),
	})
}

// Close kills every member and stops the proxies: the quick end of a test
// whose data directories are thrown away.
func (c *Cluster) Close() { c.stop((*Member).Kill) }

// Shutdown stops every member politely, then the proxies.
func (c *Cluster) Shutdown() { c.stop((*Member).Stop) }

func (c *Cluster) stop(how func(*Member)) {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			how(m)
		}()
	}
	wg.Wait()
	for _, m := range c.Members {
		if m.proxy != nil {
			m.proxy.Close()
		}
		if m.clientProxy != nil {
			m.clientProxy.Close()
		}
	}
}

// Status is what one member says about the cluster.
type Status struct {
	Member   *Member
	ID       uint64
	Leader   uint64
	Term     uint64
	Revision int64
	Err      error
}

// Statuses asks every running member for its status.
func (c *Cluster) Statuses(ctx context.Context) []Status {
	out := make([]Status, len(c.Members))
	var wg sync.WaitGroup
	for i, m := range c.Members {
		out[i].Member = m
		if !m.Running() {
			out[i].Err = fmt.Errorf("%s is not running", m.Name)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = c.status(ctx, m)
		}()
	}
	wg.Wait()
	return out
}

func (c *Cluster) status(ctx context.Context, m *Member) Status {
	st := Status{Member: m}
	cli, err := c.Client(m.ClientURL)
	if err != nil {
		st.Err = err
		return st
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cli.Status(ctx, m.ClientURL)
	if err != nil {
		st.Err = err
		return st
	}
	st.ID, st.Leader, st.Term, st.Revision = resp.Header.MemberId, resp.Leader, resp.RaftTerm, resp.Header.Revision
	if len(resp.Errors) > 0 {
		st.Err = errors.New(strings.Join(resp.Errors, "; "))
	}
	return st
}

// Leader returns the member every running member names as leader, or an
// error when they do not agree or have none.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	sts := c.Statuses(ctx)
	var leader uint64
	for _, st := range sts {
		if st.Err != nil {
			continue
		}
		if st.Leader == 0 {
			return nil, fmt.Errorf("%s has no leader", st.Member.Name)
		}
		if leader != 0 && st.Leader != leader {
			return nil, fmt.Errorf("members disagree on the leader (%x, %x)", leader, st.Leader)
		}
		leader = st.Leader
	}
	for _, st := range sts {
		if st.Err == nil && st.ID == leader {
			return st.Member, nil
		}
	}
	return nil, errors.New("no running member is the leader")
}

// WaitHealthy waits until every running member answers, all agree on one
// leader that is among them, and a linearizable read through each member
// succeeds.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	var last error
	for {
		last = c.healthy(ctx)
		if last == nil {
			return nil
		}
		for _, m := range c.Members {
			if exited, err := m.exited(); exited {
				return fmt.Errorf("%s exited: %v; log %s:\n%s", m.Name, err, m.LogPath, Tail(m.LogPath, 20))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// exited reports a member whose process exited although nobody stopped it.
func (m *Member) exited() (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil || m.stopped {
		return false, nil
	}
	return m.proc.Exited()
}

func (c *Cluster) healthy(ctx context.Context) error {
	sts := c.Statuses(ctx)
	var leader uint64
	for _, st := range sts {
		if !st.Member.Running() {
			continue
		}
		if st.Err != nil {
			return fmt.Errorf("%s: %w", st.Member.Name, st.Err)
		}
		if st.Leader == 0 || leader != 0 && st.Leader != leader {
			return fmt.Errorf("%s: leader %x", st.Member.Name, st.Leader)
		}
		leader = st.Leader
	}
	found := false
	for _, st := range sts {
		found = found || st.Err == nil && st.ID == leader
	}
	if !found {
		return errors.New("the leader is not among the running members")
	}
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		if err := c.read(ctx, m); err != nil {
			return fmt.Errorf("%s: read: %w", m.Name, err)
		}
	}
	return nil
}

func (c *Cluster) read(ctx context.Context, m *Member) error {
	cli, err := c.Client(m.ClientURL)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "cairn-harness-health")
	return err
}

// RaiseNoSpace raises etcd's NOSPACE alarm on member m, as etcd does when a
// member's database reaches its quota: from then on the cluster refuses
// every request that puts a key, until DisarmNoSpace.
func (c *Cluster) RaiseNoSpace(ctx context.Context, m *Member) error {
	var id uint64
	for _, st := range c.Statuses(ctx) {
		if st.Member == m && st.Err == nil {
			id = st.ID
		}
	}
	if id == 0 {
		return fmt.Errorf("harness: no status of %s to raise its alarm", m.Name)
	}
	cli, err := c.Client(m.ClientURL)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = etcdserverpb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, &etcdserverpb.AlarmRequest{
		Action: etcdserverpb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: etcdserverpb.AlarmType_NOSPACE})
	if err != nil {
		return fmt.Errorf("harness: raise NOSPACE on %s: %w", m.Name, err)
	}
	return nil
}

// DisarmNoSpace disarms every NOSPACE alarm of the cluster.
func (c *Cluster) DisarmNoSpace(ctx context.Context) error {
	cli, err := c.Client(c.Endpoints()...)
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		alarms, err := cli.AlarmList(ctx)
		if err != nil {
			return fmt.Errorf("harness: list alarms: %w", err)
		}
		var raised []*etcdserverpb.AlarmMember
		for _, a := range alarms.Alarms {
			if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
				raised = append(raised, a)
			}
		}
		if len(raised) == 0 {
			return nil
		}
		for _, a := range raised {
			if _, err := cli.AlarmDisarm(ctx, (*clientv3.AlarmMember)(a)); err != nil {
				return fmt.Errorf("harness: disarm NOSPACE of %x: %w", a.MemberID, err)
			}
		}
	}
}
