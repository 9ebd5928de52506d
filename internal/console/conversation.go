package console

import (
	"bytes"
	"encoding/json"
	"strings"
)

// maxConversationMessages is the most messages the page renders.
const maxConversationMessages = 2000

// message is one message of a conversation, as the page shows it: a role,
// its text parts, and its other parts (tool calls, tool results, images)
// as pretty JSON folded under a summary.
type message struct {
	Role  string
	Parts []part
}

type part struct {
	Text string
	// Folded, when set, is shown in a <details> under Summary.
	Folded  string
	Summary string
}

// parseConversation reads the conversation the way agents write it: an
// array of message objects with a role and content that is a string, an
// array of parts ({type: "text", text} or anything else) or absent, and
// optional tool calls (toolCalls, tool_calls). A conversation of another
// shape is returned as pretty JSON in raw instead.
func parseConversation(conv json.RawMessage) (msgs []message, raw string) {
	if len(bytes.TrimSpace(conv)) == 0 || string(bytes.TrimSpace(conv)) == "null" {
		return nil, ""
	}
	var arr []map[string]json.RawMessage
	if err := json.Unmarshal(conv, &arr); err != nil {
		return nil, pretty(conv)
	}
	for i, m := range arr {
		if i == maxConversationMessages {
			msgs = append(msgs, message{Role: "…", Parts: []part{{Text: "(more messages not shown)"}}})
			break
		}
		var msg message
		_ = json.Unmarshal(m["role"], &msg.Role)
		if msg.Role == "" {
			msg.Role = "(no role)"
		}
		msg.Parts = contentParts(m["content"])
		if p, ok := m["parts"]; ok && len(msg.Parts) == 0 {
			msg.Parts = contentParts(p)
		}
		for _, k := range []string{"toolCalls", "tool_calls", "toolCallId", "tool_call_id", "toolInvocations"} {
			if v, ok := m[k]; ok {
				msg.Parts = append(msg.Parts, part{Summary: k + toolNames(v), Folded: pretty(v)})
			}
		}
		msgs = append(msgs, msg)
	}
	return msgs, ""
}

func contentParts(c json.RawMessage) []part {
	if len(c) == 0 || string(c) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(c, &s) == nil {
		return []part{{Text: s}}
	}
	var arr []map[string]json.RawMessage
	if json.Unmarshal(c, &arr) != nil {
		return []part{{Summary: "content", Folded: pretty(c)}}
	}
	var out []part
	for _, p := range arr {
		var typ, text string
		_ = json.Unmarshal(p["type"], &typ)
		if typ == "text" && json.Unmarshal(p["text"], &text) == nil {
			out = append(out, part{Text: text})
			continue
		}
		raw, _ := json.Marshal(p)
		if typ == "" {
			typ = "part"
		}
		out = append(out, part{Summary: typ + toolNames(raw), Folded: pretty(raw)})
	}
	return out
}

// toolNames returns " (name, name)" for the tool names it finds in v: a
// tool call object or an array of them.
func toolNames(v json.RawMessage) string {
	var arr []map[string]json.RawMessage
	if json.Unmarshal(v, &arr) != nil {
		var one map[string]json.RawMessage
		if json.Unmarshal(v, &one) != nil {
			return ""
		}
		arr = append(arr, one)
	}
	var names []string
	for _, o := range arr {
		for _, k := range []string{"toolName", "name"} {
			var n string
			if json.Unmarshal(o[k], &n) == nil && n != "" {
				names = append(names, n)
				break
			}
		}
		if fn, ok := o["function"]; ok {
			var f struct{ Name string }
			if json.Unmarshal(fn, &f) == nil && f.Name != "" {
				names = append(names, f.Name)
			}
		}
	}
	if len(names) == 0 {
		return ""
	}
	return " (" + strings.Join(names, ", ") + ")"
}

func pretty(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Indent(&b, v, "", "  ") != nil {
		return string(v)
	}
	return b.String()
}
