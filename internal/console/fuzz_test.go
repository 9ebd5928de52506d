package console

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cairnstore/cairn"
)

// FuzzConversation: any conversation parses without a panic, keeps every
// message's text (a string content) and renders through the checkpoint
// template with no markup of its own.
func FuzzConversation(f *testing.F) {
	for _, s := range []string{
		`[]`, `null`, `{"a":1}`, `[{"role":"user","content":"hi"}]`,
		`[{"role":"assistant","content":[{"type":"text","text":"x"},{"type":"tool-call","toolName":"bash","input":{}}],"toolCalls":[{"function":{"name":"f"}}]}]`,
		`[{"role":"<script>","content":"<img src=x onerror=alert(1)>"}]`, `[1,"a",null]`, `[{"content":{"x":1}}]`,
	} {
		f.Add([]byte(s))
	}
	tmpl, err := parseTemplates()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, conv []byte) {
		msgs, raw := parseConversation(conv)
		if raw != "" && len(msgs) > 0 {
			t.Fatal("both messages and raw JSON")
		}
		var arr []map[string]json.RawMessage
		if json.Unmarshal(conv, &arr) == nil && len(arr) <= maxConversationMessages {
			if len(msgs) != len(arr) {
				t.Fatalf("%d messages from %d", len(msgs), len(arr))
			}
			for i, m := range arr {
				var s string
				if json.Unmarshal(m["content"], &s) == nil && (len(msgs[i].Parts) == 0 || msgs[i].Parts[0].Text != s) {
					t.Fatalf("message %d lost its text %q", i, s)
				}
			}
		}
		if !utf8.Valid(conv) {
			return
		}
		var buf bytes.Buffer
		d := checkpointData{CP: &cairn.Checkpoint{ID: "c"}, Messages: msgs, RawConv: raw}
		if err := tmpl["checkpoint"].ExecuteTemplate(&buf, "content", d); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(buf.String(), "<script") || strings.Contains(buf.String(), "<img") {
			t.Fatalf("markup from the conversation reached the page: %s", buf.String())
		}
	})
}

// FuzzSideBySide: every line of both sides shows once, in order, on its
// side of the diff, with its line number.
func FuzzSideBySide(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), []byte("a\nx\nc\n"))
	f.Add([]byte(""), []byte("new\n"))
	f.Add([]byte("1\n2\n3\n4\n"), []byte("0\n2\n4\n5\n"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		rows := sideBySide(a, b)
		var old, nw []string
		for _, r := range rows {
			if r.OldNo > 0 {
				if r.OldNo != len(old)+1 {
					t.Fatalf("old line %d numbered %d", len(old)+1, r.OldNo)
				}
				old = append(old, r.Old)
			}
			if r.NewNo > 0 {
				if r.NewNo != len(nw)+1 {
					t.Fatalf("new line %d numbered %d", len(nw)+1, r.NewNo)
				}
				nw = append(nw, r.New)
			}
		}
		if strings.Join(old, "\n") != strings.Join(splitLines(a), "\n") || strings.Join(nw, "\n") != strings.Join(splitLines(b), "\n") {
			t.Fatalf("the sides do not give back the files:\n%q\n%q", old, nw)
		}
	})
}
