package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnstore/cairn/keys"
)

// Etcd holds the settings of the connection to etcd.
type Etcd struct {
	Endpoints      []string
	DialTimeout    time.Duration
	RequestTimeout time.Duration
	CACert         string
	Cert           string
	Key            string
	User           string
	Password       string
	PasswordFile   string
}

// DefaultEtcd returns the settings before flags and environment: etcd's own
// client port on this machine.
func DefaultEtcd() Etcd {
	return Etcd{
		Endpoints:      []string{"127.0.0.1:2379"},
		DialTimeout:    5 * time.Second,
		RequestTimeout: 10 * time.Second,
	}
}

// Register adds the --etcd-* flags, bound to e, which holds the defaults.
// They fall back to CAIRN_ETCD_* and then to the variables etcdctl reads.
func (e *Etcd) Register(s *Set) {
	s.Var(List{&e.Endpoints}, "etcd-endpoints", "comma-separated etcd endpoints (host:port or URL)")
	s.Var(Duration{&e.DialTimeout}, "etcd-dial-timeout", "deadline for connecting to etcd")
	s.Var(Duration{&e.RequestTimeout}, "etcd-request-timeout", "deadline of each request to etcd")
	s.StringVar(&e.CACert, "etcd-cacert", e.CACert, "PEM file of the CA that signed the etcd server certificates (enables TLS)")
	s.StringVar(&e.Cert, "etcd-cert", e.Cert, "PEM file of the client certificate for etcd (with --etcd-key)")
	s.StringVar(&e.Key, "etcd-key", e.Key, "PEM file of the client key for etcd (with --etcd-cert)")
	s.StringVar(&e.User, "etcd-user", e.User, "etcd user name, or user:password")
	s.StringVar(&e.Password, "etcd-password", e.Password, "etcd password (prefer --etcd-password-file or the environment)")
	s.StringVar(&e.PasswordFile, "etcd-password-file", e.PasswordFile, "file holding the etcd password")
	for flagName, env := range map[string]string{
		"etcd-endpoints":    "ETCDCTL_ENDPOINTS",
		"etcd-dial-timeout": "ETCDCTL_DIAL_TIMEOUT",
		"etcd-cacert":       "ETCDCTL_CACERT",
		"etcd-cert":         "ETCDCTL_CERT",
		"etcd-key":          "ETCDCTL_KEY",
		"etcd-user":         "ETCDCTL_USER",
		"etcd-password":     "ETCDCTL_PASSWORD",
	} {
		s.Alias(flagName, env)
	}
	s.Secret("etcd-password")
	s.redact("etcd-user", redactUser)
	s.redact("etcd-endpoints", RedactURLs)
}

// Resolve splits a user:password --etcd-user, as etcdctl does, and reads
// --etcd-password-file. Its errors match ErrUsage.
func (e *Etcd) Resolve() error {
	if user, pass, ok := strings.Cut(e.User, ":"); ok {
		if e.Password != "" || e.PasswordFile != "" {
			return Usagef("--etcd-user holds a password, and --etcd-password or --etcd-password-file gives another")
		}
		e.User, e.Password = user, pass
	}
	if e.PasswordFile == "" {
		return nil
	}
	if e.Password != "" {
		return Usagef("give --etcd-password or --etcd-password-file, not both")
	}
	data, err := os.ReadFile(e.PasswordFile)
	if err != nil {
		return fmt.Errorf("%w: --etcd-password-file: %w", ErrUsage, err)
	}
	e.Password = strings.TrimRight(string(data), "\r\n")
	if e.Password == "" {
		return Usagef("--etcd-password-file %s is empty", e.PasswordFile)
	}
	return nil
}

// Validate checks the settings without I/O. Its errors match ErrUsage and
// never contain a secret.
func (e Etcd) Validate() error {
	switch {
	case len(e.Endpoints) == 0:
		return Usagef("--etcd-endpoints is empty")
	case badEndpoint(e.Endpoints) != "":
		return Usagef("--etcd-endpoints: %q has no host; write host:port or http(s)://host:port", RedactURLs(badEndpoint(e.Endpoints)))
	case e.DialTimeout <= 0:
		return Usagef("--etcd-dial-timeout must be positive, got %v", e.DialTimeout)
	case e.RequestTimeout <= 0:
		return Usagef("--etcd-request-timeout must be positive, got %v", e.RequestTimeout)
	case (e.Cert == "") != (e.Key == ""):
		return Usagef("--etcd-cert and --etcd-key go together: give both or neither")
	case e.Password != "" && e.User == "":
		return Usagef("an etcd password needs --etcd-user")
	}
	return nil
}

// badEndpoint returns the first endpoint without a host, or "".
func badEndpoint(endpoints []string) string {
	for _, ep := range endpoints {
		host := ep
		if strings.Contains(ep, "://") {
			u, err := url.Parse(ep)
			if err != nil {
				return ep
			}
			host = u.Host
		}
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if host == "" {
			return ep
		}
	}
	return ""
}

// EtcdAuthWarning returns a warning when e gives an etcd user but the etcd
// that client reaches has authentication off (the client then ignores the
// user and the password), and "" otherwise, also when the check fails.
func EtcdAuthWarning(ctx context.Context, client *clientv3.Client, e Etcd) string {
	if e.User == "" {
		return ""
	}
	resp, err := client.AuthStatus(ctx)
	if err != nil || resp.Enabled {
		return ""
	}
	return fmt.Sprintf("--etcd-user %q is set but etcd at %s has authentication off: the user and password are ignored; drop them, or enable authentication in etcd",
		e.User, RedactURLs(strings.Join(e.Endpoints, ",")))
}

// TLSConfig returns the TLS configuration of e's client settings, or nil
// when e uses none.
func (e Etcd) TLSConfig() (*tls.Config, error) {
	if e.CACert == "" && e.Cert == "" {
		return nil, nil
	}
	tlsInfo := transport.TLSInfo{CertFile: e.Cert, KeyFile: e.Key, TrustedCAFile: e.CACert}
	tc, err := tlsInfo.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd TLS settings (--etcd-cacert, --etcd-cert, --etcd-key): %w", err)
	}
	return tc, nil
}

// ConnectEtcd returns a client of the etcd that e describes, after checking
// within probe that etcd answers a read under the keys of prefix (an
// etcdstore prefix). Its errors say whether etcd is unreachable, rejected the
// credentials, or refused the read; when ctx ends first it returns ctx's
// error.
func ConnectEtcd(ctx context.Context, e Etcd, prefix string, probe time.Duration) (*clientv3.Client, error) {
	cc := clientv3.Config{
		Endpoints:   e.Endpoints,
		DialTimeout: e.DialTimeout,
		Username:    e.User,
		Password:    e.Password,
		Logger:      zap.NewNop(),
	}
	tc, err := e.TLSConfig()
	if err != nil {
		return nil, err
	}
	cc.TLS = tc
	client, err := clientv3.New(cc)
	if err != nil {
		return nil, e.describe(err, prefix, probe)
	}
	pctx, cancel := context.WithTimeout(ctx, probe)
	defer cancel()
	root := keys.NewLayout(prefix).Root()
	_, err = client.Get(pctx, string(root), clientv3.WithRange(string(keys.PrefixEnd(root))), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil {
		client.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, e.describe(err, prefix, probe)
	}
	return client, nil
}

// describe says what a failed connection or probe means.
func (e Etcd) describe(err error, prefix string, probe time.Duration) error {
	where := RedactURLs(strings.Join(e.Endpoints, ","))
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrInvalidAuthToken), errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("etcd at %s rejected the user name or password (--etcd-user %q): %w", where, e.User, err)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("etcd user %q may not read the keys of --prefix %q at %s: %w", e.User, prefix, where, err)
	case errors.Is(err, rpctypes.ErrAuthNotEnabled):
		return fmt.Errorf("etcd at %s has authentication off: drop --etcd-user: %w", where, err)
	case errors.Is(err, context.DeadlineExceeded), status.Code(err) == codes.DeadlineExceeded, status.Code(err) == codes.Unavailable:
		return fmt.Errorf("cannot reach etcd at %s within %v (is it running, and are --etcd-endpoints and the TLS settings right?): %w",
			where, probe, err)
	}
	return fmt.Errorf("etcd at %s: %w", where, err)
}
