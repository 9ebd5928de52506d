package main

import (
	"bytes"
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/cairnstore/cairn/snapshot"
)

func TestPermute(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("thread", "", "")
	fs.Bool("objects", false, "")
	tests := []struct {
		name             string
		args             []string
		flags, arguments []string
		err              string
	}{
		{name: "flags-first", args: []string{"--thread", "t1", "dir"}, flags: []string{"--thread", "t1"}, arguments: []string{"dir"}},
		{name: "flags-last", args: []string{"dir", "--thread", "t1"}, flags: []string{"--thread", "t1"}, arguments: []string{"dir"}},
		{name: "equals", args: []string{"a", "-thread=t1", "b"}, flags: []string{"-thread=t1"}, arguments: []string{"a", "b"}},
		{name: "bool-takes-no-value", args: []string{"--objects", "a"}, flags: []string{"--objects"}, arguments: []string{"a"}},
		{name: "double-dash", args: []string{"--objects", "--", "--thread"}, flags: []string{"--objects"}, arguments: []string{"--thread"}},
		{name: "dash-alone-is-an-argument", args: []string{"-"}, arguments: []string{"-"}},
		{name: "unknown-left-to-parse", args: []string{"--bogus", "a"}, flags: []string{"--bogus"}, arguments: []string{"a"}},
		{name: "missing-value", args: []string{"a", "--thread"}, err: "flag needs an argument: --thread"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flags, arguments, err := permute(fs, tt.args)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(flags, tt.flags) || !slices.Equal(arguments, tt.arguments) {
				t.Errorf("permute(%q) = %q, %q; want %q, %q", tt.args, flags, arguments, tt.flags, tt.arguments)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"127.0.0.1:2379", "127.0.0.1:2379"},
		{"http://127.0.0.1:9000", "http://127.0.0.1:9000"},
		{"", "''"},
		{"dev/", "dev/"},
		{"a b", "'a b'"},
		{"it's", `'it'\''s'`},
		{"$HOME", "'$HOME'"},
	}
	for _, tt := range tests {
		if got := shellQuote(tt.in); got != tt.want {
			t.Errorf("shellQuote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestFormat(t *testing.T) {
	bytesTests := []struct {
		n    int64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"}, {5 << 20, "5.0 MiB"}, {3 << 30, "3.0 GiB"}}
	for _, tt := range bytesTests {
		if got := formatBytes(tt.n); got != tt.want {
			t.Errorf("formatBytes(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
	timeTests := []struct {
		ms   float64
		want string
	}{{0, "1970-01-01T00:00:00.000Z"}, {1767323045123, "2026-01-02T03:04:05.123Z"}, {1e300, "1e+300"}}
	for _, tt := range timeTests {
		if got := formatTime(tt.ms); got != tt.want {
			t.Errorf("formatTime(%v) = %q, want %q", tt.ms, got, tt.want)
		}
	}
	for _, tt := range []struct{ in, want string }{{"a/b.go", "a/b.go"}, {"tab\there", `"tab\there"`}, {"\xff", `"\xff"`}, {"ünï", "ünï"}} {
		if got := quotePath(tt.in); got != tt.want {
			t.Errorf("quotePath(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestPlural(t *testing.T) {
	for _, tt := range []struct {
		n          int
		what, want string
	}{{0, "file", "no files"}, {1, "file", "1 file"}, {2, "file", "2 files"}, {3, "empty directory", "3 empty directories"}, {1, "stale entry", "1 stale entry"}} {
		if got := plural(tt.n, tt.what); got != tt.want {
			t.Errorf("plural(%d, %q) = %q, want %q", tt.n, tt.what, got, tt.want)
		}
	}
}

func TestBar(t *testing.T) {
	t.Run("not-a-terminal", func(t *testing.T) {
		var out bytes.Buffer
		b := newBar(&out, false)
		b.event(snapshot.Progress{Phase: snapshot.PhaseHash, FilesDone: 1, FilesTotal: 2, BytesDone: 10, BytesTotal: 20})
		b.finish()
		if out.Len() != 0 {
			t.Errorf("a bar off a terminal wrote %q", out.String())
		}
	})
	t.Run("terminal", func(t *testing.T) {
		var out bytes.Buffer
		b := newBar(&out, true)
		b.event(snapshot.Progress{Phase: snapshot.PhaseHash, FilesTotal: 2, BytesTotal: 2048})
		b.event(snapshot.Progress{Phase: snapshot.PhaseHash, FilesDone: 1, FilesTotal: 2, BytesDone: 1, BytesTotal: 2048}) // within the tick: not drawn
		b.event(snapshot.Progress{Phase: snapshot.PhaseHash, FilesDone: 2, FilesTotal: 2, BytesDone: 2048, BytesTotal: 2048})
		b.event(snapshot.Progress{Phase: snapshot.PhaseUpload, FilesDone: 1, FilesTotal: 1, BytesDone: 1024, BytesTotal: 1024})
		b.finish()
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("bar wrote %q, want one line per phase", out.String())
		}
		if strings.Contains(lines[0], "1/2 files") {
			t.Errorf("a draw within the tick was not skipped: %q", lines[0])
		}
		hash := lines[0][strings.LastIndex(lines[0], "\r"):]
		if !strings.HasPrefix(hash, "\rhashing") || !strings.Contains(hash, "[==============================] 2/2 files, 2.0 KiB/2.0 KiB") {
			t.Errorf("hash line ends %q", hash)
		}
		if !strings.HasPrefix(lines[1], "\ruploading") || !strings.Contains(lines[1], "1/1 files, 1.0 KiB/1.0 KiB") {
			t.Errorf("upload line %q", lines[1])
		}
	})
}
