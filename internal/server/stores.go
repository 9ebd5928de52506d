package server

import (
	"context"
	"crypto/rand"
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/wire"
)

// The headers of a test session (see TestClockService in the schema).
const (
	HeaderTestSession = "Cairn-Test-Session"
	HeaderTestNow     = "Cairn-Test-Now"
)

// Limits of test sessions.
const (
	// maxSessions bounds the open test sessions of a server.
	maxSessions = 4096
	// sessionIdle closes a test session that no request used for this long.
	sessionIdle = 10 * time.Minute
	// sessionDir is the key prefix, under the tenant's, of test sessions.
	sessionDir = "cairnd-test/"
)

// store is one etcdstore.Store with the leases it handed out or resumed, so
// that RenewWriter and ReleaseWriter find the lease a writer names. A writer
// it does not know, handed out by another replica or before a restart, is
// resumed from its record in etcd (etcdstore.Store.ResumeWriter).
type store struct {
	*etcdstore.Store
	now    func() float64
	mu     sync.Mutex
	leases map[cairn.Writer]*cairn.Lease
}

func newStore(s *etcdstore.Store, now func() float64) *store {
	return &store{Store: s, now: now, leases: map[cairn.Writer]*cairn.Lease{}}
}

// remember keeps l for RenewWriter and ReleaseWriter, and forgets the leases
// of the store that expired, which can neither be renewed nor need a release
// (their records end at their expiry).
func (s *store) remember(l *cairn.Lease, now float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w, old := range s.leases {
		if old.ExpiresAt() <= now {
			delete(s.leases, w)
		}
	}
	s.leases[l.Writer] = l
}

// lease returns the lease w names: the one this store handed out or resumed,
// else one resumed from etcd. Errors are ResumeWriter's: cairn.ErrWriterLost
// when w is not the thread's writer record.
func (s *store) lease(ctx context.Context, w cairn.Writer) (*cairn.Lease, error) {
	s.mu.Lock()
	l := s.leases[w]
	s.mu.Unlock()
	if l != nil {
		return l, nil
	}
	l, err := s.ResumeWriter(ctx, w)
	if err != nil {
		return nil, err
	}
	s.remember(l, s.now())
	return l, nil
}

func (s *store) forget(w cairn.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.leases, w)
}

// session is a test session: a store of its own whose clock the client sets.
type session struct {
	id     string
	tenant int
	prefix string
	store  *store
	// now is the session's clock and used the time of its last request.
	mu   sync.Mutex
	now  float64
	used time.Time
}

func (s *session) clock() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *session) touch(now float64, set bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if set {
		s.now = now
	}
	s.used = time.Now()
}

// sessions are the open test sessions of a server.
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

// open creates a session of tenant under prefix.
func (srv *Server) openSession(ctx context.Context, tenant int, now float64, lease, renew time.Duration) (*session, error) {
	id := rand.Text()
	sess := &session{id: id, tenant: tenant, now: now, used: time.Now()}
	sess.prefix = srv.tenants[tenant].Prefix + sessionDir + id + "/"
	opts := srv.storeOptions
	opts.Options = cairn.Options{Now: sess.clock, LeaseDuration: lease, RenewAfter: renew}
	st, err := etcdstore.New(srv.client, sess.prefix, opts)
	if err != nil {
		return nil, wire.NewError(connect.CodeInvalidArgument, "test session: "+err.Error())
	}
	sess.store = newStore(st, sess.clock)
	srv.sessions.mu.Lock()
	defer srv.sessions.mu.Unlock()
	srv.expireSessions(ctx)
	if len(srv.sessions.m) >= maxSessions {
		_ = st.Close()
		return nil, wire.NewError(connect.CodeResourceExhausted, "too many open test sessions; close some with CloseTestSession")
	}
	srv.sessions.m[id] = sess
	return sess, nil
}

// expireSessions closes sessions idle for sessionIdle. The caller holds
// srv.sessions.mu.
func (srv *Server) expireSessions(ctx context.Context) {
	for id, s := range srv.sessions.m {
		s.mu.Lock()
		idle := time.Since(s.used) > sessionIdle
		s.mu.Unlock()
		if idle {
			delete(srv.sessions.m, id)
			srv.dropSession(ctx, s)
		}
	}
}

// dropSession ends the session's leases and deletes its keys.
func (srv *Server) dropSession(ctx context.Context, s *session) {
	_ = s.store.Close()
	if _, err := srv.client.Delete(ctx, s.prefix, clientv3.WithPrefix()); err != nil {
		srv.log.Warn("cannot delete the keys of a closed test session", "session", s.id, "error", err)
	}
}

func (srv *Server) closeSession(ctx context.Context, tenant int, id string) error {
	srv.sessions.mu.Lock()
	s, ok := srv.sessions.m[id]
	if ok && s.tenant == tenant {
		delete(srv.sessions.m, id)
	}
	srv.sessions.mu.Unlock()
	if !ok || s.tenant != tenant {
		return wire.NewError(connect.CodeNotFound, "no open test session "+strconv.Quote(id))
	}
	srv.dropSession(ctx, s)
	return nil
}

// storeOf returns the store a request runs on: the tenant's, or the test
// session its headers name (which must be the tenant's own), with the
// session's clock set from Cairn-Test-Now.
func (srv *Server) storeOf(ctx context.Context, h headers) (*store, error) {
	t, ok := tenantOf(ctx)
	if !ok {
		return nil, wire.NewError(connect.CodeUnauthenticated, "no tenant")
	}
	id := h.Get(HeaderTestSession)
	if id == "" {
		if h.Get(HeaderTestNow) != "" {
			return nil, wire.NewError(connect.CodeInvalidArgument, HeaderTestNow+" needs "+HeaderTestSession)
		}
		return srv.stores[t], nil
	}
	if !srv.testClock {
		return nil, errNoTestClock
	}
	srv.sessions.mu.Lock()
	s, ok := srv.sessions.m[id]
	srv.sessions.mu.Unlock()
	if !ok || s.tenant != t {
		return nil, wire.NewError(connect.CodeNotFound, "no open test session "+strconv.Quote(id)+" (closed, expired after 10 idle minutes, or of another server)")
	}
	now, set := 0.0, false
	if v := h.Get(HeaderTestNow); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, wire.NewError(connect.CodeInvalidArgument, HeaderTestNow+" must be a finite number of milliseconds, got "+strconv.Quote(v))
		}
		now, set = f, true
	}
	s.touch(now, set)
	return s.store, nil
}

var errNoTestClock = wire.NewError(connect.CodeFailedPrecondition,
	"test sessions are disabled: this server was not started with --test-clock (never use it in production)")

// headers is what storeOf reads of a request.
type headers interface{ Get(string) string }

// closeAll closes every store and session.
func (srv *Server) closeAll(ctx context.Context) error {
	var errs []error
	srv.sessions.mu.Lock()
	for id, s := range srv.sessions.m {
		delete(srv.sessions.m, id)
		srv.dropSession(ctx, s)
	}
	srv.sessions.mu.Unlock()
	for _, s := range srv.stores {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
