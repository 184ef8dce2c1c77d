package server

import (
	"encoding/json"
	"fmt"
	"strings"
)

// reasoningSplitter separates <think>...</think> from the answer in a
// stream of text. It starts inside the reasoning when the prompt opened a
// think block (Qwen3.5 and Qwen3-Next thinking templates end the prompt with
// "<think>\n"); otherwise it enters it when the output starts with
// "<think>". Text that could be the start of a tag is held back until the
// next feed decides it.
type reasoningSplitter struct {
	in        bool // inside the think block
	started   bool // some output has been seen
	done      bool // the think block closed
	trim      bool // strip whitespace at the start of the answer
	trimThink bool // strip newlines at the start of the reasoning
	held      string
}

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

func newReasoningSplitter(promptText string) *reasoningSplitter {
	p := strings.TrimRight(promptText, " \n")
	return &reasoningSplitter{in: strings.HasSuffix(p, thinkOpen)}
}

// feed returns the reasoning and answer text that text completes.
func (r *reasoningSplitter) feed(text string, final bool) (reasoning, content string) {
	buf := r.held + text
	r.held = ""
	if r.done {
		return "", r.trimAnswer(buf)
	}
	if !r.started {
		t := strings.TrimLeft(buf, " \n")
		if t == "" && !final {
			r.held = buf
			return "", ""
		}
		if strings.HasPrefix(thinkOpen, t) && !final && len(t) < len(thinkOpen) {
			r.held = buf
			return "", ""
		}
		r.started = true
		if strings.HasPrefix(t, thinkOpen) {
			r.in, r.trimThink = true, true
			buf = t[len(thinkOpen):]
		}
		if !r.in {
			r.done = true
			return "", buf
		}
	}
	if r.trimThink {
		buf = strings.TrimLeft(buf, "\n")
		if buf == "" && !final {
			return "", ""
		}
		r.trimThink = false
	}
	if i := strings.Index(buf, thinkClose); i >= 0 {
		r.done, r.in, r.trim = true, false, true
		return buf[:i], r.trimAnswer(buf[i+len(thinkClose):])
	}
	if !final {
		if k := partialSuffix(buf, thinkClose); k > 0 {
			r.held = buf[len(buf)-k:]
			buf = buf[:len(buf)-k]
		}
	}
	return buf, ""
}

// inReasoning reports whether the output is inside the think block.
func (r *reasoningSplitter) inReasoning() bool { return r.in && !r.done }

func (r *reasoningSplitter) trimAnswer(s string) string {
	if r.trim {
		s = strings.TrimLeft(s, "\n ")
		if s != "" {
			r.trim = false
		}
	}
	return s
}

// partialSuffix returns the length of the longest suffix of s that is a
// proper prefix of tag.
func partialSuffix(s, tag string) int {
	for k := min(len(s), len(tag)-1); k > 0; k-- {
		if strings.HasSuffix(s, tag[:k]) {
			return k
		}
	}
	return 0
}

// splitReasoning splits a whole output at once.
func splitReasoning(promptText, text string) (reasoning, content string) {
	r := newReasoningSplitter(promptText)
	return r.feed(text, true)
}

// toolExtractor finds tool calls in Qwen's formats in a stream of answer
// text: <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen2.5,
// Qwen3) and <tool_call><function=NAME><parameter=P>V</parameter></function>
// </tool_call> (Qwen3-Coder, Qwen3.5). Text before the first tool call
// streams as content; from the first "<tool_call>" on, text is kept and
// parsed when the call closes.
type toolExtractor struct {
	tools    []toolDef
	calls    []toolCall
	held     string
	inCall   bool
	closeTag string
	callBuf  strings.Builder
	nextID   int
	prefix   string // id prefix, unique per request
	errs     []string
	array    bool // forced calls as a JSON array (feedArray)
}

const (
	toolOpen  = "<tool_call>"
	toolClose = "</tool_call>"
)

// feed returns the answer text that is not part of a tool call.
func (t *toolExtractor) feed(text string, final bool) string {
	if t.array {
		return t.feedArray(text, final)
	}
	buf := t.held + text
	t.held = ""
	var out strings.Builder
	for {
		if t.inCall {
			t.callBuf.WriteString(buf)
			buf = ""
			s := t.callBuf.String()
			i := strings.Index(s, t.closeTag)
			if i < 0 {
				if final {
					t.closeCall() // unclosed at the end: parse what there is
				}
				return out.String()
			}
			rest := s[i+len(t.closeTag):]
			if t.closeTag == "</function>" {
				i += len(t.closeTag) // the XML parser wants it
			}
			t.callBuf.Reset()
			t.callBuf.WriteString(s[:i])
			t.closeCall()
			buf = rest
			continue
		}
		if buf == "" {
			return out.String()
		}
		i := strings.Index(buf, toolOpen)
		// Qwen3-Coder sometimes omits <tool_call> before <function=.
		if j := strings.Index(buf, "<function="); j >= 0 && (i < 0 || j < i) {
			out.WriteString(buf[:j])
			t.inCall, t.closeTag = true, "</function>"
			buf = buf[j:]
			continue
		}
		if i < 0 {
			k := 0
			if !final {
				k = max(partialSuffix(buf, toolOpen), partialSuffix(buf, "<function="))
			}
			out.WriteString(buf[:len(buf)-k])
			t.held = buf[len(buf)-k:]
			return out.String()
		}
		out.WriteString(buf[:i])
		t.inCall, t.closeTag = true, toolClose
		buf = buf[i+len(toolOpen):]
	}
}

func (t *toolExtractor) closeCall() {
	raw := strings.TrimSpace(t.callBuf.String())
	t.callBuf.Reset()
	t.inCall = false
	if raw == "" {
		return
	}
	var name, args string
	var err error
	if strings.HasPrefix(raw, "<function=") {
		name, args, err = parseXMLCall(raw, t.tools)
	} else {
		name, args, err = parseJSONCall(raw)
	}
	if err != nil {
		t.errs = append(t.errs, err.Error())
		return
	}
	var c toolCall
	idx := len(t.calls)
	c.Index = &idx
	c.ID = fmt.Sprintf("call_%s_%d", t.prefix, t.nextID)
	t.nextID++
	c.Type = "function"
	c.Function.Name = name
	c.Function.Arguments = args
	t.calls = append(t.calls, c)
}

// parseJSONCall parses {"name": ..., "arguments": {...}}.
func parseJSONCall(raw string) (name, args string, err error) {
	var v struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return "", "", fmt.Errorf("tool call is not valid JSON: %v", err)
	}
	if v.Name == "" {
		return "", "", fmt.Errorf("tool call has no name")
	}
	a := v.Arguments
	if len(a) == 0 {
		a = v.Parameters
	}
	if len(a) == 0 {
		a = json.RawMessage("{}")
	}
	// Arguments given as a JSON string stay as that string's content.
	var s string
	if json.Unmarshal(a, &s) == nil {
		return v.Name, s, nil
	}
	return v.Name, string(a), nil
}

// parseXMLCall parses <function=NAME><parameter=P>V</parameter>...</function>.
// Values are JSON-decoded when the tool's schema gives the parameter a
// non-string type (or the value is not a plain string and no schema is
// known), otherwise kept as strings.
func parseXMLCall(raw string, tools []toolDef) (name, args string, err error) {
	rest := strings.TrimPrefix(raw, "<function=")
	i := strings.Index(rest, ">")
	if i < 0 {
		return "", "", fmt.Errorf("tool call: unterminated <function= tag")
	}
	name = strings.TrimSpace(rest[:i])
	if name == "" {
		return "", "", fmt.Errorf("tool call has no name")
	}
	rest = rest[i+1:]
	if j := strings.LastIndex(rest, "</function>"); j >= 0 {
		rest = rest[:j]
	}
	types := paramTypes(tools, name)
	var keys []string
	vals := map[string]json.RawMessage{}
	for {
		k := strings.Index(rest, "<parameter=")
		if k < 0 {
			break
		}
		rest = rest[k+len("<parameter="):]
		e := strings.Index(rest, ">")
		if e < 0 {
			return "", "", fmt.Errorf("tool call %s: unterminated <parameter= tag", name)
		}
		pname := strings.TrimSpace(rest[:e])
		rest = rest[e+1:]
		end := strings.Index(rest, "</parameter>")
		var val string
		if end < 0 {
			// Missing close tag: the value runs to the next parameter.
			if n := strings.Index(rest, "<parameter="); n >= 0 {
				val, rest = rest[:n], rest[n:]
			} else {
				val, rest = rest, ""
			}
		} else {
			val, rest = rest[:end], rest[end+len("</parameter>"):]
		}
		val = strings.TrimPrefix(val, "\n")
		val = strings.TrimSuffix(val, "\n")
		if _, dup := vals[pname]; !dup {
			keys = append(keys, pname)
		}
		vals[pname] = convertParam(val, types[pname])
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		kj, _ := json.Marshal(k)
		b.Write(kj)
		b.WriteString(": ")
		b.Write(vals[k])
	}
	b.WriteByte('}')
	return name, b.String(), nil
}

func convertParam(val, typ string) json.RawMessage {
	if typ != "string" {
		trimmed := strings.TrimSpace(val)
		if typ != "" || trimmed != "" && strings.ContainsAny(trimmed[:1], "{[0123456789-tfn") {
			if json.Valid([]byte(trimmed)) {
				return json.RawMessage(trimmed)
			}
		}
	}
	s, _ := json.Marshal(val)
	return s
}

// paramTypes returns the JSON schema "type" of each parameter of tool name.
func paramTypes(tools []toolDef, name string) map[string]string {
	out := map[string]string{}
	for _, t := range tools {
		if t.Function.Name != name || len(t.Function.Parameters) == 0 {
			continue
		}
		var schema struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
		}
		if json.Unmarshal(t.Function.Parameters, &schema) != nil {
			continue
		}
		for k, p := range schema.Properties {
			if s, ok := p.Type.(string); ok {
				out[k] = s
			} else {
				out[k] = "any"
			}
		}
	}
	return out
}
