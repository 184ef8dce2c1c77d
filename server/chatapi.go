package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The OpenAI Responses API and the Anthropic Messages API are translations
// of the chat completions path: each builds a chatRequest from its own
// request (messages, tools, sampling), plans it with planChat (template,
// tokenizing, checks), runs choice 0 with streamChatChoice and turns the
// chat chunks (reasoning, content and logprob deltas, then the finish with
// the tool calls) into its own output items or events. This file holds what
// both share.

// chatTurn is one assistant turn of a Responses or Messages request,
// planned on the chat path.
type chatTurn struct {
	plan  *chatPlan
	model string // the model the response names: the request's, else the served one
	start time.Time
}

// planTurn plans req (a chatRequest built by a translation) as one turn.
func (s *Server) planTurn(ctx context.Context, req *chatRequest, start time.Time) (*chatTurn, error) {
	plan, err := s.planChat(ctx, req)
	if err != nil {
		return nil, err
	}
	return &chatTurn{plan: plan, model: plan.model, start: start}, nil
}

// runTurn runs the turn's one choice, calling on with each chat chunk, and
// returns its outcome and usage (or the first failure).
func (s *Server) runTurn(ctx context.Context, t *chatTurn, on func(chatChunkChoice) error) (chatOutcome, *usage, error) {
	s.met.requests.Inc()
	s.met.promptTok.Add(float64(len(t.plan.prompt)))
	defer func() { s.met.e2e.Observe(time.Since(t.start).Seconds()) }()
	o := s.streamChatChoice(ctx, t.plan, 0, on)
	u, err := s.chatTally(t.plan, []chatOutcome{o})
	return o, u, err
}

// sendEvent writes one named server-sent event (event: NAME, data: JSON)
// and flushes it.
func (e *sse) sendEvent(name string, v any) error {
	if e.err != nil {
		return e.err
	}
	b, err := json.Marshal(v)
	if err != nil {
		e.err = fmt.Errorf("encoding an event: %w", err)
		return e.err
	}
	armWriteDeadline(e.w)
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		e.err = err
		return err
	}
	e.err = e.rc.Flush()
	return e.err
}

// spaceHold delays an answer's leading whitespace until text with
// something else follows: an answer that is only whitespace before a tool
// call (often a bare newline) is shown by neither API as a text block or
// message. Once the answer has shown text, everything passes.
type spaceHold struct {
	held    string
	started bool
}

// feed returns the text to show now ("" while the answer is all
// whitespace).
func (h *spaceHold) feed(text string) string {
	if h.started {
		return text
	}
	h.held += text
	if strings.TrimSpace(h.held) == "" {
		return ""
	}
	out := h.held
	h.held, h.started = "", true
	return out
}

// renamed rewrites a chat-path error's field names into a translated API's
// (pairs of chat name, API name), in its param and in its message, where
// the name stands as a word or starts a field path.
func renamed(err error, pairs ...string) error {
	ae, ok := err.(*apiError)
	if !ok {
		return err
	}
	c := *ae
	for i := 0; i+1 < len(pairs); i += 2 {
		c.Param = replaceName(c.Param, pairs[i], pairs[i+1])
		c.Message = replaceName(c.Message, pairs[i], pairs[i+1])
	}
	return &c
}

// replaceName replaces name by to in s where it is not part of a longer
// identifier.
func replaceName(s, name, to string) string {
	ident := func(b byte) bool {
		return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
	}
	var out strings.Builder
	for {
		i := strings.Index(s, name)
		if i < 0 {
			out.WriteString(s)
			return out.String()
		}
		j := i + len(name)
		if (i > 0 && ident(s[i-1])) || (j < len(s) && ident(s[j])) {
			out.WriteString(s[:j])
		} else {
			out.WriteString(s[:i])
			out.WriteString(to)
		}
		s = s[j:]
	}
}

// chatMessage is a chat message being built from another API's input: an
// object in the client's key order and the tool calls it will carry.
type chatMessage struct {
	obj   jsonObject
	calls []json.RawMessage
}

func newChatMessage(role string, content json.RawMessage) *chatMessage {
	m := &chatMessage{}
	m.obj.setString("role", role)
	m.obj.set("content", content)
	return m
}

func (m *chatMessage) role() string {
	var r string
	v, _ := m.obj.get("role")
	_ = json.Unmarshal(v, &r)
	return r
}

// chatMessages marshals the messages for chatRequest.Messages.
func chatMessages(ms []*chatMessage) []json.RawMessage {
	out := make([]json.RawMessage, len(ms))
	for i, m := range ms {
		if len(m.calls) > 0 {
			m.obj.set("tool_calls", jsonArray(m.calls))
		}
		out[i] = mustMarshal(m.obj)
	}
	return out
}

// chatToolCall is an assistant tool call in the chat API's shape; args is
// a JSON object or a string holding one.
func chatToolCall(id, name string, args json.RawMessage) json.RawMessage {
	fn := jsonObject{}
	fn.setString("name", name)
	fn.set("arguments", args)
	c := jsonObject{}
	c.setString("id", id)
	c.setString("type", "function")
	c.set("function", mustMarshal(fn))
	return mustMarshal(c)
}

// chatTool is a function tool in the chat API's shape, its parameters
// (a JSON Schema) kept as sent.
func chatTool(name string, description, parameters, strict json.RawMessage) json.RawMessage {
	fn := jsonObject{}
	fn.setString("name", name)
	if !isNull(description) {
		fn.set("description", description)
	}
	if !isNull(parameters) {
		fn.set("parameters", parameters)
	}
	if !isNull(strict) {
		fn.set("strict", strict)
	}
	t := jsonObject{}
	t.setString("type", "function")
	t.set("function", mustMarshal(fn))
	return mustMarshal(t)
}

// jsonString is s as a JSON string.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// textParts returns the text of a content array's parts of the given
// types, or a 400 naming field for a part of another type.
func textParts(raw json.RawMessage, field string, types ...string) ([]string, error) {
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return nil, badRequest(field, "%s: expected a string or an array of content parts", field)
	}
	out := make([]string, 0, len(parts))
	for j, p := range parts {
		var part struct {
			Type    string  `json:"type"`
			Text    *string `json:"text"`
			Refusal *string `json:"refusal"`
		}
		if json.Unmarshal(p, &part) != nil {
			return nil, badRequest(fmt.Sprintf("%s[%d]", field, j), "%s[%d]: expected an object", field, j)
		}
		ok := false
		for _, t := range types {
			ok = ok || part.Type == t
		}
		switch {
		case ok && part.Type == "refusal" && part.Refusal != nil:
			out = append(out, *part.Refusal)
		case ok && part.Text != nil:
			out = append(out, *part.Text)
		default:
			return nil, badRequest(fmt.Sprintf("%s[%d]", field, j), "%s[%d]: parts of type %q are not supported (kt serves text-only models; text parts are %s)",
				field, j, part.Type, strings.Join(types, ", "))
		}
	}
	return out, nil
}

// reasoningTokens counts the output tokens of o's reasoning: those up to
// the end of the think block's closing tag, or all of them when the block
// never closes; none when the output has no think block. It works on the
// tokens' bytes, so it does not depend on how the tokens were grouped into
// deltas.
func (s *Server) reasoningTokens(plan *chatPlan, o chatOutcome) int {
	if o.st == nil || o.st.rs == nil || s.tok == nil {
		return 0
	}
	var raw []byte
	starts := make([]int, len(o.res.Tokens))
	for i, t := range o.res.Tokens {
		starts[i] = len(raw)
		b, _ := s.tok.TokenBytes(t.ID) // special ones too: a marker may be one (Kimi-K2's tool section)
		raw = append(raw, b...)
	}
	f := plan.reasoning
	opened := f.forced || bytes.HasPrefix(bytes.TrimLeft(raw, " \n"), []byte(f.open))
	if !opened {
		return 0
	}
	end := bytes.Index(raw, []byte(f.close))
	if end >= 0 {
		end += len(f.close)
	}
	if f.toolStart != "" {
		if j := bytes.Index(raw, []byte(f.toolStart)); j >= 0 && (end < 0 || j < end) {
			end = j
		}
	}
	if end < 0 {
		return len(o.res.Tokens)
	}
	n := 0
	for n < len(starts) && starts[n] < end {
		n++
	}
	return n
}
