package etcdstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/embedetcd"
)

const crashEnv = "CAIRN_CRASH_WRITER_ENDPOINTS"

// TestCrashMidAppend kills a writer process with SIGKILL while it is staging
// a large append, then checks that nothing it wrote is visible to any read,
// and that etcd reclaims what it staged and its writer record by itself, so
// another process can take the thread over.
func TestCrashMidAppend(t *testing.T) {
	srv, cli := embedetcd.ForTest(t)
	ctx := testContext(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+strings.Join(srv.Endpoints(), ","))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	staged := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "STAGED") {
				close(staged)
				break
			}
		}
		for sc.Scan() { // drain until the process dies
		}
	}()
	select {
	case <-staged:
	case <-time.After(60 * time.Second):
		t.Fatal("the writer process never reported staging")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	s := newStore(t, cli, "crash/", etcdstore.Options{})
	if st := readState(t, s, "t"); st.Heads["t"] != "" || len(st.Lists["t"]) != 0 || len(st.Refs) != 0 {
		t.Fatalf("a killed writer's half-written append is visible: %+v", st)
	}
	if got, err := s.Get(ctx, "big"); err != nil || got != nil {
		t.Fatalf("Get of the half-written checkpoint = %v, %v", got, err)
	}
	if n := len(visibleKeys(t, cli, s)); n != 0 {
		t.Fatalf("%d unleased keys exist after the crash", n)
	}
	if n := leasedKeys(t, cli, s); n == 0 {
		t.Fatal("the killed writer staged nothing; the test proves nothing")
	}
	deadline := time.Now().Add(30 * time.Second)
	for leasedKeys(t, cli, s) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d staged or writer keys were not reclaimed", leasedKeys(t, cli, s))
		}
		time.Sleep(200 * time.Millisecond)
	}
	lease, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatalf("taking over the dead writer's thread: %v", err)
	}
	c := largeCheckpoint("big", "t", "", 2000, 1<<20)
	if _, err := s.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: lease.Writer}); err != nil {
		t.Fatalf("append after takeover: %v", err)
	}
}

// crashWriterProcess is the writer that TestCrashMidAppend kills: TestMain
// runs it instead of the tests in the child process.
func crashWriterProcess(eps string) {
	fail := func(err error) {
		os.Stderr.WriteString("crash writer: " + err.Error() + "\n")
		os.Exit(2)
	}
	puts := 0
	block := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "KV/Txn") {
			puts++
			if puts == 4 { // a few chunks are staged: stop here and wait to be killed
				os.Stdout.WriteString("STAGED\n")
				select {}
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ","), Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(block)}})
	if err != nil {
		fail(err)
	}
	// Short TTLs so the parent does not wait long for etcd to reclaim.
	s, err := etcdstore.New(cli, "crash/", etcdstore.Options{StagingTTL: 2 * time.Second,
		Options: cairn.Options{LeaseDuration: 3 * time.Second, RenewAfter: time.Second}})
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	lease, err := s.AcquireWriter(ctx, "t")
	if err != nil {
		fail(err)
	}
	c := largeCheckpoint("big", "t", "", largeEntries, largeConv)
	_, err = s.Append(ctx, cairn.AppendInput{Checkpoint: c, Writer: lease.Writer})
	fail(fmt.Errorf("append returned %v; it should have been killed first", err))
}
