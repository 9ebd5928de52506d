package console

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"

	"github.com/cairnstore/cairn"
	"github.com/cairnstore/cairn/internal/cli"
)

// pages are the templates that render a whole page, each with base.html.
var pages = []string{"login", "threads", "thread", "checkpoint", "storage", "sweeper", "error"}

var funcs = template.FuncMap{
	"bytes":   cli.FormatBytes,
	"time":    cli.FormatTime,
	"short":   shortID,
	"pathq":   url.QueryEscape,
	"pathseg": url.PathEscape,
	"add":     func(a, b int) int { return a + b },
}

func parseTemplates() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, p := range pages {
		t, err := template.New("base.html").Funcs(funcs).ParseFS(templateFS, "templates/base.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", p, err)
		}
		out[p] = t
	}
	return out, nil
}

// frame is what base.html reads: the page's title, the tenant and the page.
type frame struct {
	Title  string
	Tenant string
	Nav    string
	Page   any
}

// render executes a page into a buffer first, so that a template error
// answers a clean 500 page and never half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, tenant int, title string, data any) {
	var buf bytes.Buffer
	f := frame{Title: title, Nav: name, Page: data}
	if tenant >= 0 {
		f.Tenant = c.cfg.Tenants[tenant].Name
	}
	if err := c.tmpl[name].Execute(&buf, f); err != nil {
		c.log.Error("console template", "page", name, "error", err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintln(w, "The page could not be rendered; the server's log says why.")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

type errorData struct {
	Status  int
	Heading string
	Message string
}

// fail answers an error page: a heading, what went wrong in words, links
// back. No stack trace or internal error reaches the page unless it is a
// message meant for people.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, tenant, status int, msg string) {
	c.render(w, r, status, "error", tenant, http.StatusText(status),
		errorData{Status: status, Heading: http.StatusText(status), Message: msg})
}

// failErr answers the page of an error of the store: a 404 for an invalid
// id, a 504 for a deadline, else a 502 whose details go to the log.
func (c *Console) failErr(w http.ResponseWriter, r *http.Request, what string, err error) {
	t := tenantOf(r)
	switch {
	case errors.Is(err, cairn.ErrInvalidID):
		c.fail(w, r, t, http.StatusNotFound, what+": not a valid id, so there is nothing by that name.")
	case errors.Is(err, errNotFound):
		c.fail(w, r, t, http.StatusNotFound, err.Error())
	case r.Context().Err() != nil:
		c.fail(w, r, t, http.StatusGatewayTimeout, what+": the request was cancelled or took too long.")
	default:
		c.log.Error("console read failed", "what", what, "error", err)
		c.fail(w, r, t, http.StatusBadGateway, what+": the store could not be read; the server's log says why.")
	}
}

var errNotFound = errors.New("not found")

type notFound string

func (n notFound) Error() string        { return string(n) }
func (n notFound) Is(target error) bool { return target == errNotFound }

// shortID shortens a long id for a graph label.
func shortID(s string) string {
	r := []rune(s)
	if len(r) <= 14 {
		return s
	}
	return string(r[:6]) + "…" + string(r[len(r)-6:])
}
