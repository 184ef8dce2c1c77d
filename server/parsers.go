package server

import (
	"encoding/json"
	"fmt"
	"strings"
)

// reasoningFormat is a reasoning parser (--reasoning-parser, SGLang's
// names): the markers of its think block, a tool-call marker that ends the
// block when it comes first, and whether the output starts inside the
// block.
type reasoningFormat struct {
	open, close string
	// toolStart, when the output reaches it inside the block, ends the
	// reasoning there; the marker and what follows are answer (Qwen3.5 and
	// Kimi-K2 may start their tool calls without closing the block).
	toolStart string
	forced    bool // the output starts inside the block
}

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// reasoningFormatFor resolves the server's reasoning parser for one
// request: parser is the --reasoning-parser value, prompt the rendered
// prompt and thinking the request's chat_template_kwargs "thinking" (nil
// when absent or not a boolean). Nil when the parser is none.
//
//   - qwen3: <think>...</think>; inside from the start when the prompt
//     ends with <think> (Qwen3.5 and Qwen3-Next thinking templates);
//   - deepseek-r1: always inside from the start (DeepSeek-R1 opens the
//     block in its prompt or as its first token);
//   - deepseek-v3: DeepSeek-V3.1, inside from the start only when the
//     request enables thinking (chat_template_kwargs thinking: true) or
//     the prompt opens the block;
//   - kimi: ◁think▷...◁/think▷ (Kimi thinking models), when the output
//     opens the block;
//   - kimi_k2: Kimi-K2-Thinking's <think>...</think>, inside from the start
//     unless the request disables thinking (thinking: false); the tool-call
//     section ends the block.
//
// Whatever the parser, an output that opens with the block's marker is
// inside it.
func reasoningFormatFor(parser, prompt string, thinking *bool) *reasoningFormat {
	f := &reasoningFormat{open: thinkOpen, close: thinkClose}
	switch parser {
	case "qwen3":
		f.toolStart = toolOpen
	case "deepseek-r1":
		f.forced = true
	case "deepseek-v3":
		f.toolStart = toolOpen
		f.forced = thinking != nil && *thinking
	case "kimi":
		f.open, f.close = "◁think▷", "◁/think▷"
	case "kimi_k2":
		f.toolStart = kimiSectionBegin
		f.forced = thinking == nil || *thinking
	default:
		return nil
	}
	if strings.HasSuffix(strings.TrimRight(prompt, " \n"), f.open) {
		f.forced = true
	}
	return f
}

// reasoningSplitter separates a think block from the answer in a stream
// of text. It starts inside the block when its format says so; otherwise
// it enters it when the output starts with the opening marker. Text that
// could be the start of a marker is held back until the next feed decides
// it.
type reasoningSplitter struct {
	f         *reasoningFormat
	in        bool // inside the think block
	started   bool // some output has been seen
	done      bool // the think block closed
	trim      bool // strip whitespace at the start of the answer
	trimThink bool // strip newlines at the start of the reasoning
	held      string
}

func newReasoningSplitter(f *reasoningFormat) *reasoningSplitter {
	return &reasoningSplitter{f: f, in: f.forced}
}

// feed returns the reasoning and answer text that text completes.
func (r *reasoningSplitter) feed(text string, final bool) (reasoning, content string) {
	buf := r.held + text
	r.held = ""
	if r.done {
		return "", r.trimAnswer(buf)
	}
	open := r.f.open
	if !r.started {
		t := strings.TrimLeft(buf, " \n")
		if t == "" && !final {
			r.held = buf
			return "", ""
		}
		if strings.HasPrefix(open, t) && !final && len(t) < len(open) {
			r.held = buf
			return "", ""
		}
		r.started = true
		if strings.HasPrefix(t, open) {
			r.in, r.trimThink = true, true
			buf = t[len(open):]
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
	i := strings.Index(buf, r.f.close)
	if t := r.f.toolStart; t != "" {
		if j := strings.Index(buf, t); j >= 0 && (i < 0 || j < i) {
			r.done, r.in = true, false
			return buf[:j], buf[j:]
		}
	}
	if i >= 0 {
		r.done, r.in, r.trim = true, false, true
		return buf[:i], r.trimAnswer(buf[i+len(r.f.close):])
	}
	if !final {
		k := partialSuffix(buf, r.f.close)
		if r.f.toolStart != "" {
			k = max(k, partialSuffix(buf, r.f.toolStart))
		}
		if k > 0 {
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

// toolExtractor finds tool calls in a stream of answer text. Without a
// section format it reads Qwen's formats:
// <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen2.5,
// Qwen3) and <tool_call><function=NAME><parameter=P>V</parameter></function>
// </tool_call> (Qwen3-Coder, Qwen3.5); text before the first tool call
// streams as content; from the first "<tool_call>" on, text is kept and
// parsed when the call closes. With one (DeepSeek's and Kimi-K2's formats,
// toolformats.go) it reads that format's section (feedSection).
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

	section *sectionFormat  // nil: Qwen's formats
	full    strings.Builder // the whole answer text (section formats)
	parsed  bool            // a section was read (its answer is trimmed when the format says so)
	history int             // tool calls in the conversation so far (Kimi-K2's ids)
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
	if t.section != nil {
		return t.feedSection(text, final)
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
