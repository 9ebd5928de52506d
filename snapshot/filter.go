package snapshot

import (
	"path"
	"strings"
)

// filter decides which paths a capture keeps and a restore leaves alone.
type filter struct {
	include, exclude []string
}

func newFilter(o *Options) (*filter, error) {
	f := &filter{include: o.Include, exclude: append([]string(nil), o.Exclude...)}
	if !o.NoDefaultExcludes {
		f.exclude = append(f.exclude, DefaultExcludes...)
	}
	for _, p := range append(append([]string(nil), f.include...), f.exclude...) {
		if _, err := path.Match(p, ""); err != nil {
			return nil, &Error{Code: CodeInvalidWorkspace, Message: "pattern " + quote(p), Err: err}
		}
	}
	return f, nil
}

// match reports whether the slash path p matches pattern: the whole path for
// a pattern with a slash, any one segment otherwise.
func match(pattern, p string) bool {
	if strings.Contains(pattern, "/") {
		ok, _ := path.Match(strings.TrimSuffix(pattern, "/"), p)
		return ok
	}
	for seg := range strings.SplitSeq(p, "/") {
		if ok, _ := path.Match(pattern, seg); ok {
			return true
		}
	}
	return false
}

// excluded reports whether p (a file or a directory) is left out.
func (f *filter) excluded(p string) bool {
	for _, pat := range f.exclude {
		if match(pat, p) {
			return true
		}
	}
	return false
}

// included reports whether the file p is kept by the include patterns.
func (f *filter) included(p string) bool {
	if len(f.include) == 0 {
		return true
	}
	for _, pat := range f.include {
		if match(pat, p) {
			return true
		}
	}
	return false
}
