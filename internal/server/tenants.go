package server

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Tenant is one holder of bearer tokens: its store lives under Prefix, which
// no other tenant's store reaches.
type Tenant struct {
	// Name identifies the tenant in logs and metrics.
	Name string
	// Prefix is the etcd key prefix of the tenant's store.
	Prefix string
	// hash is the SHA-256 of the tenant's token; the token itself is never
	// kept.
	hash [sha256.Size]byte
}

// ErrTokens is matched by every error of ParseTokens.
var ErrTokens = errors.New("invalid token list")

// HashToken returns the form in which a token is kept: "sha256:" and the
// hex SHA-256 of the token.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(h[:])
}

// ParseTokens reads a token list: one tenant a line, "<name> <prefix>
// <token>", where <token> is either "sha256:" and the 64 hex digits of the
// token's SHA-256 (as HashToken prints it; the recommended form, so the list
// holds no secret) or the token itself, which is hashed at once. An empty
// prefix is written as two double quotes, "". Blank lines and lines starting with # are
// skipped. Names must be distinct, and no prefix may be a prefix of
// another's, so that no tenant's keys fall under another's prefix.
func ParseTokens(r io.Reader) ([]Tenant, error) {
	var out []Tenant
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 3 {
			return nil, fmt.Errorf("%w: line %d: want \"<name> <prefix> <token>\", got %d fields", ErrTokens, line, len(f))
		}
		t := Tenant{Name: f[0], Prefix: f[1]}
		if t.Prefix == `""` {
			t.Prefix = ""
		}
		if hexHash, ok := strings.CutPrefix(f[2], "sha256:"); ok {
			b, err := hex.DecodeString(hexHash)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("%w: line %d: sha256: needs 64 hex digits", ErrTokens, line)
			}
			copy(t.hash[:], b)
		} else {
			t.hash = sha256.Sum256([]byte(f[2]))
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokens, err)
	}
	return out, checkTenants(out)
}

// NewTenant returns a tenant whose token is token (hashed at once).
func NewTenant(name, prefix, token string) Tenant {
	return Tenant{Name: name, Prefix: prefix, hash: sha256.Sum256([]byte(token))}
}

func checkTenants(ts []Tenant) error {
	if len(ts) == 0 {
		return fmt.Errorf("%w: no tenant", ErrTokens)
	}
	for i, a := range ts {
		for _, b := range ts[i+1:] {
			switch {
			case a.Name == b.Name:
				return fmt.Errorf("%w: tenant %q is listed twice", ErrTokens, a.Name)
			case a.hash == b.hash:
				return fmt.Errorf("%w: tenants %q and %q have the same token", ErrTokens, a.Name, b.Name)
			case strings.HasPrefix(a.Prefix, b.Prefix) || strings.HasPrefix(b.Prefix, a.Prefix):
				return fmt.Errorf("%w: the prefixes of tenants %q (%q) and %q (%q) overlap", ErrTokens, a.Name, a.Prefix, b.Name, b.Prefix)
			}
		}
	}
	return nil
}

// Authenticate returns the index of the tenant of ts whose token is token,
// or -1 when there is none, in time that does not depend on which matched.
func Authenticate(ts []Tenant, token string) int { return authenticate(ts, token) }

// authenticate returns the index of the tenant whose token is token, or -1.
// It hashes token once and compares the hash with every tenant's in
// constant time, without stopping at a match, so the time taken says
// nothing about which tenant (if any) matched.
func authenticate(tenants []Tenant, token string) int {
	h := sha256.Sum256([]byte(token))
	found := -1
	for i := range tenants {
		if subtle.ConstantTimeCompare(h[:], tenants[i].hash[:]) == 1 {
			found = i
		}
	}
	return found
}
