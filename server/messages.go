package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens)
// on the chat path, as SGLang's adapter: system and messages (text,
// tool_use, tool_result and thinking blocks) become chat messages, tools
// chat tools, thinking the template's enable_thinking; the turn's
// reasoning, answer and tool calls become thinking, text and tool_use
// blocks. Errors are in Anthropic's shape.

// messagesRequest is a POST /v1/messages body.
type messagesRequest struct {
	Model         string            `json:"model"`
	Messages      []json.RawMessage `json:"messages"`
	MaxTokens     *int              `json:"max_tokens"`
	System        json.RawMessage   `json:"system"`
	StopSequences []string          `json:"stop_sequences"`
	Stream        bool              `json:"stream"`
	Temperature   *float64          `json:"temperature"`
	TopP          *float64          `json:"top_p"`
	TopK          *int              `json:"top_k"`
	Tools         []json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage   `json:"tool_choice"`
	Thinking      json.RawMessage   `json:"thinking"`
	Metadata      json.RawMessage   `json:"metadata"`
	MCPServers    json.RawMessage   `json:"mcp_servers"`
	Container     json.RawMessage   `json:"container"`
}

// messagesCall is a checked Messages request and its turn.
type messagesCall struct {
	req      messagesRequest
	turn     *chatTurn
	id       string
	maxCalls int // tool calls kept (disable_parallel_tool_use); 0: all
}

// anthropicErrorTypes maps an HTTP status to Anthropic's error type.
var anthropicErrorTypes = map[int]string{
	http.StatusBadRequest: "invalid_request_error", http.StatusUnauthorized: "authentication_error",
	http.StatusForbidden: "permission_error", http.StatusNotFound: "not_found_error",
	http.StatusRequestEntityTooLarge: "request_too_large", http.StatusTooManyRequests: "rate_limit_error",
	http.StatusServiceUnavailable: "overloaded_error",
}

// anthropicError is err in Anthropic's shape:
// {"type": "error", "error": {"type", "message"}}.
func anthropicError(err error) (int, any) {
	ae := asAPIError(err)
	typ, ok := anthropicErrorTypes[ae.Status]
	if !ok {
		typ = "api_error"
	}
	msg := ae.Message
	if ae.Param != "" && !strings.Contains(msg, ae.Param) {
		msg = ae.Param + ": " + msg
	}
	return ae.Status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
}

// writeAnthropicError writes err in Anthropic's error shape.
func writeAnthropicError(w http.ResponseWriter, err error) {
	status, body := anthropicError(err)
	writeJSON(w, status, body)
}

// handleMessages answers POST /v1/messages.
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	call, err := s.planMessages(w, r, false)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	if call.req.Stream {
		s.streamMessages(w, r, call)
		return
	}
	tr := &messagesTurn{call: call}
	o, u, err := s.runTurn(r.Context(), call.turn, tr.chunk)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, tr.message(o, u))
}

// handleCountTokens answers POST /v1/messages/count_tokens: the prompt's
// tokens after the chat template.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	call, err := s.planMessages(w, r, true)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": len(call.turn.plan.prompt)})
}

// planMessages reads, checks and plans a Messages request (counting: a
// count_tokens request, which has no max_tokens).
func (s *Server) planMessages(w http.ResponseWriter, r *http.Request, counting bool) (*messagesCall, error) {
	start := time.Now()
	call := &messagesCall{id: "msg_" + newID()}
	req := &call.req
	if err := decodeJSON(w, r, req); err != nil {
		return nil, err
	}
	switch {
	case req.Model == "":
		return nil, badRequest("model", "model: required")
	case !counting && req.MaxTokens == nil:
		return nil, badRequest("max_tokens", "max_tokens: required")
	case !counting && *req.MaxTokens < 1:
		return nil, badRequest("max_tokens", "max_tokens must be at least 1, got %d", *req.MaxTokens)
	case !isNull(req.MCPServers):
		return nil, badRequest("mcp_servers", "mcp_servers: kt runs no MCP servers; give the tools in tools and run them in the client")
	case !isNull(req.Container):
		return nil, badRequest("container", "container: kt runs no code execution containers")
	}
	msgs, err := messagesChat(req)
	if err != nil {
		return nil, err
	}
	creq := &chatRequest{Model: req.Model, Messages: msgs}
	// A final assistant message is a prefill: the answer continues it.
	if last := req.Messages[len(req.Messages)-1]; strings.Contains(string(last), `"assistant"`) {
		var m struct {
			Role string `json:"role"`
		}
		creq.ContinueFinalMsg = json.Unmarshal(last, &m) == nil && m.Role == "assistant"
	}
	creq.MaxTokens = req.MaxTokens
	creq.Temperature, creq.TopP, creq.TopK = req.Temperature, req.TopP, req.TopK
	if req.StopSequences != nil {
		creq.Stop, _ = json.Marshal(req.StopSequences)
	}
	for i, raw := range req.Tools {
		t, err := messagesTool(i, raw)
		if err != nil {
			return nil, err
		}
		creq.Tools = append(creq.Tools, t)
	}
	if creq.ToolChoice, call.maxCalls, err = messagesToolChoice(req.ToolChoice); err != nil {
		return nil, err
	}
	if creq.ChatTemplateKwargs, err = messagesThinking(req.Thinking); err != nil {
		return nil, err
	}
	call.turn, err = s.planTurn(r.Context(), creq, start)
	if err != nil {
		return nil, renamed(err, "max_tokens", "max_tokens", "stop", "stop_sequences")
	}
	return call, nil
}

// messagesChat turns system and messages into chat messages.
func messagesChat(req *messagesRequest) ([]json.RawMessage, error) {
	var msgs []*chatMessage
	if !isNull(req.System) {
		var text string
		if json.Unmarshal(req.System, &text) != nil {
			parts, err := textParts(req.System, "system", "text")
			if err != nil {
				return nil, err
			}
			text = strings.Join(parts, "\n")
		}
		msgs = append(msgs, newChatMessage("system", jsonString(text)))
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages: at least one message is required")
	}
	for i, raw := range req.Messages {
		field := fmt.Sprintf("messages[%d]", i)
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(raw, &m) != nil {
			return nil, badRequest(field, "%s: expected an object with role and content", field)
		}
		if m.Role != "user" && m.Role != "assistant" {
			return nil, badRequest(field+".role", "%s.role: %q is not one of user, assistant", field, m.Role)
		}
		if isNull(m.Content) {
			return nil, badRequest(field+".content", "%s.content: required", field)
		}
		var text string
		if json.Unmarshal(m.Content, &text) == nil {
			msgs = append(msgs, newChatMessage(m.Role, m.Content))
			continue
		}
		var blocks []json.RawMessage
		if json.Unmarshal(m.Content, &blocks) != nil {
			return nil, badRequest(field+".content", "%s.content: expected a string or an array of content blocks", field)
		}
		out, err := messagesBlocks(field, m.Role, blocks)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, out...)
	}
	return chatMessages(msgs), nil
}

// messagesBlocks turns one message's content blocks into chat messages:
// a user's tool_result blocks become tool messages (first, as Anthropic
// puts them first), its text a user message; an assistant's text,
// tool_use and thinking blocks one assistant message with tool calls and
// reasoning_content. redacted_thinking blocks (encrypted by another
// server) are left out.
func messagesBlocks(field, role string, blocks []json.RawMessage) ([]*chatMessage, error) {
	var out []*chatMessage
	var texts []json.RawMessage
	var calls []json.RawMessage
	var thinking strings.Builder
	for j, raw := range blocks {
		bf := fmt.Sprintf("%s.content[%d]", field, j)
		var b struct {
			Type      string          `json:"type"`
			Text      *string         `json:"text"`
			ID        string          `json:"id"`
			Name      string          `json:"name"`
			Input     json.RawMessage `json:"input"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			Thinking  string          `json:"thinking"`
		}
		if json.Unmarshal(raw, &b) != nil {
			return nil, badRequest(bf, "%s: expected a content block object", bf)
		}
		switch {
		case b.Type == "text" && b.Text != nil:
			p := jsonObject{}
			p.setString("type", "text")
			p.setString("text", *b.Text)
			texts = append(texts, mustMarshal(p))
		case b.Type == "tool_use" && role == "assistant":
			if b.ID == "" || b.Name == "" {
				return nil, badRequest(bf, "%s: a tool_use block needs id and name", bf)
			}
			input := b.Input
			if isNull(input) {
				input = json.RawMessage("{}")
			}
			if _, err := parseObject(input); err != nil {
				return nil, badRequest(bf+".input", "%s.input: expected an object", bf)
			}
			calls = append(calls, chatToolCall(b.ID, b.Name, input))
		case b.Type == "tool_result" && role == "user":
			if b.ToolUseID == "" {
				return nil, badRequest(bf+".tool_use_id", "%s: a tool_result block needs tool_use_id", bf)
			}
			content := b.Content
			var s string
			if isNull(content) {
				content = jsonString("")
			} else if json.Unmarshal(content, &s) != nil {
				parts, err := textParts(content, bf+".content", "text")
				if err != nil {
					return nil, err
				}
				content = jsonString(strings.Join(parts, "\n"))
			}
			t := newChatMessage("tool", content)
			t.obj.setString("tool_call_id", b.ToolUseID)
			out = append(out, t)
		case b.Type == "thinking" && role == "assistant":
			thinking.WriteString(b.Thinking)
		case b.Type == "redacted_thinking" && role == "assistant":
		default:
			return nil, badRequest(bf+".type", "%s: %q blocks are not supported in %s messages (kt serves text-only models: text, tool_use, tool_result and thinking blocks)", bf, b.Type, role)
		}
	}
	if len(texts) == 0 && len(calls) == 0 && thinking.Len() == 0 {
		return out, nil
	}
	content := jsonString("")
	switch {
	case len(texts) == 1:
		v, _ := parseObject(texts[0])
		content, _ = v.get("text")
	case len(texts) > 1:
		content = jsonArray(texts)
	}
	m := newChatMessage(role, content)
	if thinking.Len() > 0 {
		m.obj.setString("reasoning_content", thinking.String())
	}
	m.calls = calls
	return append(out, m), nil
}

// messagesTool turns an Anthropic client tool into a chat tool.
func messagesTool(i int, raw json.RawMessage) (json.RawMessage, error) {
	field := fmt.Sprintf("tools[%d]", i)
	var t struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description json.RawMessage `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	if json.Unmarshal(raw, &t) != nil {
		return nil, badRequest(field, "%s: expected a tool object", field)
	}
	if t.Type != "" && t.Type != "custom" {
		return nil, badRequest(field+".type", "%s.type: %q tools are not supported; kt returns tool_use blocks for client tools (name, description, input_schema)", field, t.Type)
	}
	if t.Name == "" {
		return nil, badRequest(field+".name", "%s: a tool needs a name", field)
	}
	if _, err := parseObject(t.InputSchema); err != nil {
		return nil, badRequest(field+".input_schema", "%s.input_schema: expected a JSON Schema object", field)
	}
	return chatTool(t.Name, t.Description, t.InputSchema, nil), nil
}

// messagesToolChoice turns an Anthropic tool_choice into the chat API's,
// with the number of tool calls to keep (disable_parallel_tool_use: 1).
func messagesToolChoice(raw json.RawMessage) (json.RawMessage, int, error) {
	if isNull(raw) {
		return nil, 0, nil
	}
	var tc struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	}
	if json.Unmarshal(raw, &tc) != nil {
		return nil, 0, badRequest("tool_choice", "tool_choice: expected an object with a type")
	}
	keep := 0
	if tc.DisableParallelToolUse {
		keep = 1
	}
	switch tc.Type {
	case "auto":
		return jsonString("auto"), keep, nil
	case "any":
		return jsonString("required"), keep, nil
	case "none":
		return jsonString("none"), keep, nil
	case "tool":
		if tc.Name == "" {
			return nil, 0, badRequest("tool_choice.name", "tool_choice: type \"tool\" needs a name")
		}
		fn := jsonObject{}
		fn.setString("name", tc.Name)
		c := jsonObject{}
		c.setString("type", "function")
		c.set("function", mustMarshal(fn))
		return mustMarshal(c), keep, nil
	}
	return nil, 0, badRequest("tool_choice.type", "tool_choice.type: %q is not one of auto, any, tool, none", tc.Type)
}

// messagesThinking turns thinking into the chat template's
// enable_thinking: enabled is true, disabled false, adaptive (or absent)
// the template's default. A thinking budget cannot be enforced by a
// template; budget_tokens is checked against Anthropic's rules only.
func messagesThinking(raw json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	var th struct {
		Type         string `json:"type"`
		BudgetTokens *int   `json:"budget_tokens"`
	}
	if json.Unmarshal(raw, &th) != nil {
		return nil, badRequest("thinking", "thinking: expected an object with a type")
	}
	switch th.Type {
	case "enabled":
		if th.BudgetTokens != nil && *th.BudgetTokens < 1 {
			return nil, badRequest("thinking.budget_tokens", "thinking.budget_tokens must be positive, got %d", *th.BudgetTokens)
		}
		return json.RawMessage(`{"enable_thinking":true}`), nil
	case "disabled":
		return json.RawMessage(`{"enable_thinking":false}`), nil
	case "adaptive":
		return nil, nil
	}
	return nil, badRequest("thinking.type", "thinking.type: %q is not one of enabled, disabled, adaptive", th.Type)
}

// messagesBlock is a content block being built.
type messagesBlock struct {
	kind  string // thinking, text, tool_use
	text  strings.Builder
	call  toolCall
	index int
}

// json is the block as a content block.
func (b *messagesBlock) json() map[string]any {
	switch b.kind {
	case "thinking":
		return map[string]any{"type": "thinking", "thinking": b.text.String(), "signature": ""}
	case "text":
		return map[string]any{"type": "text", "text": b.text.String()}
	}
	input := json.RawMessage(b.call.Function.Arguments)
	if _, err := parseObject(input); err != nil {
		input = json.RawMessage("{}")
	}
	return map[string]any{"type": "tool_use", "id": toolUseID(b.call.ID), "name": b.call.Function.Name, "input": input}
}

// toolUseID is a chat tool call id in Anthropic's toolu_ form.
func toolUseID(id string) string { return "toolu_" + strings.TrimPrefix(id, "call_") }

// messagesTurn turns a chat turn's chunks into content blocks and, when
// emit is set, into the Messages stream's events.
type messagesTurn struct {
	call   *messagesCall
	emit   func(name string, v map[string]any) error // nil: not streaming
	blocks []*messagesBlock
	open   *messagesBlock
	space  spaceHold
	finish chatChunkChoice
}

func (t *messagesTurn) event(name string, fields map[string]any) error {
	if t.emit == nil {
		return nil
	}
	fields["type"] = name
	return t.emit(name, fields)
}

// begin opens a block of kind, closing the open one.
func (t *messagesTurn) begin(kind string) error {
	if err := t.end(); err != nil {
		return err
	}
	b := &messagesBlock{kind: kind, index: len(t.blocks)}
	t.blocks = append(t.blocks, b)
	t.open = b
	return t.event("content_block_start", map[string]any{"index": b.index, "content_block": b.json()})
}

// end closes the open block.
func (t *messagesTurn) end() error {
	if t.open == nil {
		return nil
	}
	i := t.open.index
	t.open = nil
	return t.event("content_block_stop", map[string]any{"index": i})
}

// add appends text to a block of kind, opening it if needed.
func (t *messagesTurn) add(kind, text string) error {
	if text == "" {
		return nil
	}
	if t.open == nil || t.open.kind != kind {
		if err := t.begin(kind); err != nil {
			return err
		}
	}
	t.open.text.WriteString(text)
	delta := map[string]any{"type": "text_delta", "text": text}
	if kind == "thinking" {
		delta = map[string]any{"type": "thinking_delta", "thinking": text}
	}
	return t.event("content_block_delta", map[string]any{"index": t.open.index, "delta": delta})
}

// chunk takes one chat chunk.
func (t *messagesTurn) chunk(c chatChunkChoice) error {
	if r := c.Delta.ReasoningContent; r != nil {
		if err := t.add("thinking", *r); err != nil {
			return err
		}
	}
	if c.Delta.Content != nil {
		if err := t.add("text", t.space.feed(*c.Delta.Content)); err != nil {
			return err
		}
	}
	if c.FinishReason == nil {
		return nil
	}
	t.finish = c
	calls := c.Delta.ToolCalls
	if t.call.maxCalls > 0 && len(calls) > t.call.maxCalls {
		calls = calls[:t.call.maxCalls]
	}
	if len(calls) == 0 {
		if err := t.add("text", t.space.held); err != nil {
			return err
		}
	}
	if err := t.end(); err != nil {
		return err
	}
	for _, tc := range calls {
		b := &messagesBlock{kind: "tool_use", call: tc, index: len(t.blocks)}
		t.blocks = append(t.blocks, b)
		start := b.json()
		start["input"] = map[string]any{}
		if err := t.event("content_block_start", map[string]any{"index": b.index, "content_block": start}); err != nil {
			return err
		}
		if err := t.event("content_block_delta", map[string]any{"index": b.index,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": string(b.json()["input"].(json.RawMessage))}}); err != nil {
			return err
		}
		if err := t.event("content_block_stop", map[string]any{"index": b.index}); err != nil {
			return err
		}
	}
	return nil
}

// stop is the turn's stop_reason and stop_sequence.
func (t *messagesTurn) stop() (string, *string) {
	fr := ""
	if t.finish.FinishReason != nil {
		fr = *t.finish.FinishReason
	}
	switch {
	case len(t.finish.Delta.ToolCalls) > 0:
		return "tool_use", nil
	case fr == "length":
		return "max_tokens", nil
	}
	var matched string
	if json.Unmarshal(t.finish.MatchedStop, &matched) == nil {
		for _, s := range t.call.req.StopSequences {
			if s == matched {
				return "stop_sequence", &matched
			}
		}
	}
	return "end_turn", nil
}

// usage is the turn's usage in Anthropic's terms: input_tokens are the
// prompt tokens the prefix cache did not supply (cache_read_input_tokens).
func messagesUsage(u *usage) map[string]any {
	return map[string]any{"input_tokens": u.PromptTokens - u.cached, "output_tokens": u.CompletionTokens,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": u.cached}
}

// message is the final message object.
func (t *messagesTurn) message(o chatOutcome, u *usage) map[string]any {
	content := make([]any, len(t.blocks))
	for i, b := range t.blocks {
		content[i] = b.json()
	}
	reason, seq := t.stop()
	return map[string]any{"id": t.call.id, "type": "message", "role": "assistant", "model": t.call.turn.model,
		"content": content, "stop_reason": reason, "stop_sequence": seq, "usage": messagesUsage(u)}
}

// streamMessages runs the turn and sends the Messages stream:
// message_start, each block's content_block_start, deltas and
// content_block_stop, then message_delta (stop_reason, usage) and
// message_stop. A failure after the headers is an error event.
func (s *Server) streamMessages(w http.ResponseWriter, r *http.Request, call *messagesCall) {
	if err := s.precheck(call.turn.plan.prompt, call.turn.plan.params); err != nil {
		writeAnthropicError(w, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ev := newSSE(w)
	tr := &messagesTurn{call: call, emit: func(name string, v map[string]any) error { return ev.sendEvent(name, v) }}
	start := map[string]any{"id": call.id, "type": "message", "role": "assistant", "model": call.turn.model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": len(call.turn.plan.prompt), "output_tokens": 0}}
	if tr.event("message_start", map[string]any{"message": start}) != nil {
		return
	}
	_, u, err := s.runTurn(ctx, call.turn, tr.chunk)
	if ev.err != nil {
		return
	}
	if err != nil {
		_, body := anthropicError(err)
		_ = ev.sendEvent("error", body)
		return
	}
	reason, seq := tr.stop()
	if tr.event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
		"usage": messagesUsage(u)}) != nil {
		return
	}
	_ = tr.event("message_stop", map[string]any{})
}
