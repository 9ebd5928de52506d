package server_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cairnstore/cairn/internal/server"
)

// FuzzParseTokens: any input parses into tenants or fails with ErrTokens,
// and never panics.
func FuzzParseTokens(f *testing.F) {
	f.Add("a p/ token\n# comment\n\nb q/ sha256:" + strings.Repeat("ab", 32))
	f.Add(`a "" t`)
	f.Add("a p/ sha256:zz")
	f.Fuzz(func(t *testing.T, in string) {
		ts, err := server.ParseTokens(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, server.ErrTokens) {
				t.Fatalf("error %v does not match ErrTokens", err)
			}
			return
		}
		if len(ts) == 0 {
			t.Fatal("no tenant and no error")
		}
	})
}
