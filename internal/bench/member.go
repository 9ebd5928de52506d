package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cairnstore/cairn/internal/childproc"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

// envMember, when set in a process's environment, makes MemberMain run an
// etcd member in the directory it names instead of the benchmarks.
const envMember = "CAIRN_BENCH_ETCD_MEMBER"

// endpointLine starts the line a member process prints once it serves.
const endpointLine = "endpoint "

// MemberMain runs an embedded etcd member and returns true when the process
// was started as one by the benchmarks; it returns false at once otherwise.
// The bench command and the package's test binary call it first thing.
//
// The member runs in a process of its own so that the benchmark process
// holds nothing but the client side: its heap and its CPU profile are
// cairn's, not etcd's. The member has etcd's default limits and fsyncs its
// log and backend, as a production member does. It prints its client
// endpoint on standard output and stops when its standard input closes,
// which also happens when the benchmark process dies.
func MemberMain() bool {
	dir := os.Getenv(envMember)
	if dir == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	srv, err := embedetcd.Start(ctx, embedetcd.Config{Dir: dir, NoFsync: false})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench member:", err)
		os.Exit(1)
	}
	fmt.Printf("%s%s\n", endpointLine, strings.Join(srv.Endpoints(), ","))
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Close()
	os.Exit(0)
	return true
}

// member is a running etcd member process.
type member struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	done      chan struct{}
	endpoints []string
}

// startMember starts an etcd member process with its data in dir and waits
// until it serves.
func startMember(ctx context.Context, dir string) (*member, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envMember+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := childproc.Start(cmd); err != nil {
		return nil, fmt.Errorf("start etcd member: %w", err)
	}
	m := &member{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), endpointLine) {
				lines <- strings.TrimPrefix(sc.Text(), endpointLine)
			}
		}
		close(lines)
		_ = cmd.Wait()
		close(m.done)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			<-m.done
			return nil, errors.New("etcd member exited before it served")
		}
		m.endpoints = strings.Split(l, ",")
	case <-ctx.Done():
		m.stop()
		return nil, ctx.Err()
	case <-time.After(time.Minute):
		m.stop()
		return nil, errors.New("etcd member did not serve within a minute")
	}
	return m, nil
}

// stop closes the member's standard input, which makes it close cleanly, and
// kills it if it has not exited after a while.
func (m *member) stop() {
	_ = m.stdin.Close()
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// client returns a client of the member whose unary calls go through the
// request meter.
func (m *member) client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   m.endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(meterUnary),
			grpc.WithChainStreamInterceptor(meterStream),
		},
	})
}
