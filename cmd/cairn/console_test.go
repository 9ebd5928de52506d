package main

import (
	"net/http"
	"net/url"
	"regexp"
	"testing"
)

// TestDevConsole: `cairn dev` serves the console and prints its URL and a
// token that logs in.
func TestDevConsole(t *testing.T) {
	d := startDev(t, t.TempDir())
	m := regexp.MustCompile(`console on (http://\S+/console/) \(log in with the token (\S+);`).FindStringSubmatch(d.log())
	if m == nil {
		t.Fatalf("cairn dev did not print the console's URL and token:\n%s", d.log())
	}
	base, token := m[1], m[2]
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(base + "login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %slogin: %d", base, resp.StatusCode)
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{"wrong", http.StatusUnauthorized}, {token, http.StatusSeeOther}} {
		resp, err := c.PostForm(base+"login", url.Values{"token": {tc.token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("login with %q: %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}
}
