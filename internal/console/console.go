// Package console is cairnd's read-only web console, served at /console:
// server-rendered html/template pages (threads, a thread's timeline and
// graph, a checkpoint's files, diff and conversation, storage, the sweeper's
// dry run) over the same tenants and stores as the Connect API. A person
// logs in with the tenant's bearer token and gets a session cookie; every
// page reads only that tenant's store, and nothing in the console writes to
// etcd or the bucket (its bucket is wrapped so that a delete cannot be sent).
package console

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairnstore/cairn/bucket"
	"github.com/cairnstore/cairn/etcdstore"
	"github.com/cairnstore/cairn/internal/server"
)

// Prefix is the path the console is served under.
const Prefix = "/console/"

// DefaultRequestTimeout bounds a page's reads when Config.RequestTimeout
// is 0: the sweeper's dry run lists the whole bucket.
const DefaultRequestTimeout = 2 * time.Minute

// DefaultSessionTTL is how long a login lasts when Config.SessionTTL is 0.
const DefaultSessionTTL = 8 * time.Hour

// cookieName is the session cookie's name.
const cookieName = "cairn_console"

// maxSessions bounds the sessions a console keeps; the oldest go first.
const maxSessions = 10000

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Bucket is what the console reads of the bucket: objects and listings.
type Bucket interface {
	bucket.Reader
	bucket.Lister
}

// Config configures a Console.
type Config struct {
	// Client reaches etcd (read only).
	Client *clientv3.Client
	// Tenants are the token holders, and Stores[i] is the store of
	// Tenants[i].
	Tenants []server.Tenant
	Stores  []*etcdstore.Store
	// Blobs is the bucket; nil hides file contents, downloads, bucket sizes
	// and the sweeper's dry run.
	Blobs Bucket
	// SweepOlderThan is the grace of the sweeper's dry run (the sweeper's
	// --older-than); zero selects 24h, the sweeper's default.
	SweepOlderThan time.Duration
	// SweepKeep, when above zero, makes the dry run prune every thread to
	// this many checkpoints first (the sweeper's --keep).
	SweepKeep int
	// SessionTTL bounds a session's life; zero selects DefaultSessionTTL.
	SessionTTL time.Duration
	// RequestTimeout bounds each page's reads; zero selects
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Now is the clock of the sessions; nil selects time.Now.
	Now func() time.Time
	// Logger receives the console's logs; nil discards them.
	Logger *slog.Logger
}

// Console serves the pages. Create it with New and mount Handler at Prefix.
type Console struct {
	cfg   Config
	tmpl  map[string]*template.Template
	log   *slog.Logger
	blobs Bucket

	mu       sync.Mutex
	sessions map[string]session
	// roots caches the fork scan's reads of first checkpoints.
	roots rootCache

	// act is each tenant's activity index, built on first use and kept
	// by a watch that runs on watchCtx until Close.
	actMu       sync.Mutex
	act         map[int]*activity
	watchCtx    context.Context
	watchCancel context.CancelFunc
	watches     sync.WaitGroup
}

type session struct {
	tenant  int
	expires time.Time
}

// New returns a console. It does no I/O; it returns an error when the
// tenants and stores do not match or a template does not parse.
func New(cfg Config) (*Console, error) {
	if cfg.Client == nil {
		return nil, errors.New("console: an etcd client is required")
	}
	if len(cfg.Tenants) == 0 || len(cfg.Tenants) != len(cfg.Stores) {
		return nil, fmt.Errorf("console: %d tenants and %d stores; want one store per tenant", len(cfg.Tenants), len(cfg.Stores))
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.SweepOlderThan <= 0 {
		cfg.SweepOlderThan = 24 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Console{cfg: cfg, log: cfg.Logger, blobs: cfg.Blobs, sessions: map[string]session{}, act: map[int]*activity{}}
	c.watchCtx, c.watchCancel = context.WithCancel(context.Background())
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	t, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	c.tmpl = t
	return c, nil
}

// Close stops the watches of the thread lists and waits for them. Call it
// after the HTTP server has stopped.
func (c *Console) Close() {
	c.watchCancel()
	c.watches.Wait()
}

// Handler returns the console's handler; it expects paths under Prefix.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /console/static/", http.StripPrefix("/console/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /console/login", c.loginPage)
	mux.HandleFunc("POST /console/login", c.login)
	mux.HandleFunc("POST /console/logout", c.logout)
	mux.Handle("GET /console/{$}", c.auth(c.threadsPage))
	mux.Handle("GET /console/threads/{thread}", c.auth(c.threadPage))
	mux.Handle("GET /console/checkpoints/{id}", c.auth(c.checkpointPage))
	mux.Handle("GET /console/checkpoints/{id}/file", c.auth(c.download))
	mux.Handle("GET /console/checkpoints/{id}/artifact", c.auth(c.downloadArtifact))
	mux.Handle("GET /console/checkpoints/{id}/tar", c.auth(c.tarball))
	mux.Handle("GET /console/storage", c.auth(c.storagePage))
	mux.Handle("GET /console/sweeper", c.auth(c.sweeperPage))
	mux.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			c.fail(w, r, -1, http.StatusMethodNotAllowed, "The console is read-only: it answers GET only (and POST to log in and out).")
			return
		}
		c.fail(w, r, -1, http.StatusNotFound, "There is no console page at "+r.URL.Path+".")
	})
	return secureHeaders(mux)
}

// secureHeaders sets the headers every answer carries: no framing, no
// sniffing, scripts and styles from the console only.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// tenantCtx is the request's tenant, set by auth.
type tenantCtx struct{}

func tenantOf(r *http.Request) int { return r.Context().Value(tenantCtx{}).(int) }

// auth runs next for a request with a live session and sends others to the
// login page, saying why.
func (c *Console) auth(next func(http.ResponseWriter, *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, why := c.sessionOf(r)
		if t < 0 {
			http.Redirect(w, r, "/console/login?why="+why, http.StatusSeeOther)
			return
		}
		ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), tenantCtx{}, t), c.cfg.RequestTimeout)
		defer cancel()
		next(w, r.WithContext(ctx))
	})
}

// sessionOf returns the tenant of the request's session, or -1 and why not
// ("none" or "expired").
func (c *Console) sessionOf(r *http.Request) (int, string) {
	ck, err := r.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return -1, "none"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sessions[ck.Value]
	if !ok {
		return -1, "none"
	}
	if !c.cfg.Now().Before(s.expires) {
		delete(c.sessions, ck.Value)
		return -1, "expired"
	}
	return s.tenant, ""
}

type loginData struct {
	Message string
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	var msg string
	switch r.URL.Query().Get("why") {
	case "expired":
		msg = "Your session expired. Log in again."
	case "none":
		msg = "Log in with your tenant's token to see its threads."
	case "wrong":
		msg = "That token is not valid."
	case "out":
		msg = "You are logged out."
	}
	c.render(w, r, http.StatusOK, "login", -1, "Log in", loginData{Message: msg})
}

// login checks the token and opens a session.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	token := strings.TrimSpace(r.PostFormValue("token"))
	t := -1
	if token != "" {
		t = server.Authenticate(c.cfg.Tenants, token)
	}
	if t < 0 {
		c.render(w, r, http.StatusUnauthorized, "login", -1, "Log in", loginData{Message: "That token is not valid."})
		return
	}
	id := rand.Text()
	now := c.cfg.Now()
	c.mu.Lock()
	for k, s := range c.sessions {
		if !now.Before(s.expires) {
			delete(c.sessions, k)
		}
	}
	if len(c.sessions) >= maxSessions {
		c.dropOldest()
	}
	c.sessions[id] = session{tenant: t, expires: now.Add(c.cfg.SessionTTL)}
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: id, Path: "/console/", MaxAge: int(c.cfg.SessionTTL.Seconds()),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	c.log.Info("console login", "tenant", c.cfg.Tenants[t].Name)
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

// dropOldest forgets the session that expires first. The caller holds c.mu.
func (c *Console) dropOldest() {
	var oldest string
	var at time.Time
	for k, s := range c.sessions {
		if oldest == "" || s.expires.Before(at) {
			oldest, at = k, s.expires
		}
	}
	delete(c.sessions, oldest)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(cookieName); err == nil {
		c.mu.Lock()
		delete(c.sessions, ck.Value)
		c.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/console/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/console/login?why=out", http.StatusSeeOther)
}
