package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/cairnd"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/internal/console"
	"github.com/cairnstore/cairn/internal/devstack"
	"github.com/cairnstore/cairn/internal/server"
)

var devCmd = &command{
	name: "dev", args: "[flags]", nargs: 0, env: []string{"data", "etcd-listen", "s3-listen"},
	summary: "run a local etcd and S3 server, and print the variables that reach them",
	help: `Runs an embedded etcd and an S3 server (gofakes3) on 127.0.0.1 in this one
process, keeping their data in --data, so that a restart on the same
directory finds every checkpoint and blob again, and the read-only web
console (cairnd's /console) on --console-listen, whose URL and login token it
prints on standard error. Once both serve, it prints on
standard output the export lines that point every other cairn command, the
sweeper and an application at them, then runs until SIGINT (Ctrl-C) or
SIGTERM, when it stops both servers and exits 0.

The S3 server accepts any credentials: it is for one developer's machine.
--print-env prints the export lines for the given addresses without starting
anything, for a second shell.

Example:
  cairn dev --data ./dev-data
  eval "$(cairn dev --print-env)"    # in another shell
  cairn capture --thread t1 ./workspace`,
	setup: func(s *cli.Set) func(context.Context, *call) error {
		def, defErr := devstack.DefaultDir()
		data := s.String("data", def, "directory of the etcd and bucket data (created when missing; kept across restarts)")
		etcdAddr := s.String("etcd-listen", devstack.DefaultEtcdAddr, "loopback host:port of etcd's client port (port 0: a free one)")
		s3Addr := s.String("s3-listen", devstack.DefaultS3Addr, "loopback host:port of the S3 server (port 0: a free one)")
		consoleAddr := s.String("console-listen", defaultConsoleAddr, "loopback host:port of the web console (port 0: a free one)")
		printEnv := s.Bool("print-env", false, "print the export lines for --etcd-listen and --s3-listen, start nothing")
		return func(ctx context.Context, c *call) error {
			if *printEnv {
				env, err := devstack.EnvFor(*etcdAddr, *s3Addr)
				if err != nil {
					return fmt.Errorf("%w: %w", cli.ErrUsage, err)
				}
				printExports(c, env)
				return nil
			}
			if *data == "" {
				if defErr != nil {
					return fmt.Errorf("%w: give --data: %w", cli.ErrUsage, defErr)
				}
				return fmt.Errorf("%w: --data is empty", cli.ErrUsage)
			}
			startCtx, cancel := context.WithTimeout(ctx, time.Minute)
			stack, err := devstack.Start(startCtx, devstack.Options{Dir: *data, EtcdAddr: *etcdAddr, S3Addr: *s3Addr})
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return nil // interrupted while starting
				}
				if errors.Is(err, devstack.ErrOptions) {
					return fmt.Errorf("%w: %w", cli.ErrUsage, err)
				}
				return fmt.Errorf("%w (--etcd-listen and --s3-listen choose other addresses, --data another directory)", err)
			}
			fmt.Fprintf(c.p.stderr, "cairn dev: etcd on %s, S3 on %s (bucket %s), data in %s; ready in %v. Ctrl-C stops.\n",
				strings.Join(stack.EtcdEndpoints, ","), stack.S3.Endpoint, stack.S3.Bucket, stack.Dir, stack.Took.Round(time.Millisecond))
			stopConsole, err := startConsole(ctx, c, stack, *consoleAddr)
			if err != nil {
				_ = stack.Close()
				return err
			}
			printExports(c, stack.Env())
			<-ctx.Done()
			fmt.Fprintln(c.p.stderr, "cairn dev: stopping")
			stopConsole()
			if err := stack.Close(); err != nil {
				return err
			}
			fmt.Fprintln(c.p.stderr, "cairn dev: stopped; the data stays in "+stack.Dir)
			return nil
		}
	},
}

// defaultConsoleAddr is where `cairn dev` serves the console.
const defaultConsoleAddr = "127.0.0.1:7878"

// startConsole serves cairnd's API and console for one tenant, the stack's
// prefix, with a fresh token, on addr, and prints the console's URL and the
// token. The returned function stops it.
func startConsole(ctx context.Context, c *call, stack *devstack.Stack, addr string) (func(), error) {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("%w: --console-listen %q must be a loopback host:port", cli.ErrUsage, addr)
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: stack.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	blobs, err := cli.OpenBucket(ctx, stack.S3, 10*time.Second)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("console: %w", err)
	}
	token := rand.Text()
	srv, err := server.New(server.Config{Client: client, Tenants: []server.Tenant{server.NewTenant("dev", stack.Prefix, token)},
		Store: etcdstore.Options{Objects: blobs}})
	if err != nil {
		blobs.Close()
		client.Close()
		return nil, err
	}
	con, err := console.New(console.Config{Client: client, Tenants: srv.Tenants(), Stores: []*etcdstore.Store{srv.Store(0)}, Blobs: blobs})
	if err != nil {
		blobs.Close()
		client.Close()
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		blobs.Close()
		client.Close()
		return nil, fmt.Errorf("--console-listen %s: %w (--console-listen chooses another)", addr, err)
	}
	hs := &http.Server{Handler: cairnd.Handler(srv, con), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	fmt.Fprintf(c.p.stderr, "cairn dev: console on http://%s%s (log in with the token %s; it also serves the Connect API)\n", l.Addr(), console.Prefix, token)
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		con.Close()
		_ = srv.Close(sctx)
		blobs.Close()
		client.Close()
	}, nil
}

// printExports prints NAME=value lines as shell export lines.
func printExports(c *call, env []string) {
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		fmt.Fprintf(c.p.stdout, "export %s=%s\n", name, shellQuote(value))
	}
}
