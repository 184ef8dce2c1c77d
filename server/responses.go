package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// The OpenAI Responses API (POST /v1/responses) on the chat path: input
// (a string or a list of message, function_call, function_call_output and
// reasoning items) and instructions become chat messages, function tools
// chat tools, text.format a response_format; the turn's reasoning, answer
// and tool calls become reasoning, message and function_call output items.
// Nothing is stored: previous_response_id and background are refused.

// responsesRequest is a POST /v1/responses body. The embedded sampling
// fields take temperature, top_p, stream and user, and SGLang's sampling
// extensions (top_k, min_p, repetition_penalty, stop, seed, ...).
type responsesRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	MaxToolCalls       *int              `json:"max_tool_calls"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Store              *bool             `json:"store"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Background         bool              `json:"background"`
	Conversation       json.RawMessage   `json:"conversation"`
	Prompt             json.RawMessage   `json:"prompt"`
	Reasoning          *struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
	} `json:"reasoning"`
	Text *struct {
		Format    json.RawMessage `json:"format"`
		Verbosity *string         `json:"verbosity"`
	} `json:"text"`
	Include     []string        `json:"include"`
	TopLogprobs *int            `json:"top_logprobs"`
	Truncation  *string         `json:"truncation"`
	Metadata    json.RawMessage `json:"metadata"`
	samplingFields
}

// responsesIncludes are the include values kt accepts:
// message.output_text.logprobs turns logprobs on; the others name output
// kt never produces (hosted tools, encrypted reasoning), so there is
// nothing to add.
var responsesIncludes = []string{"message.output_text.logprobs", "reasoning.encrypted_content",
	"file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
	"message.input_image.image_url", "computer_call_output.output.image_url", "code_interpreter_call.outputs"}

// responsesNames maps chat field names in errors to the Responses API's.
var responsesNames = []string{"response_format.json_schema", "text.format", "response_format", "text.format",
	"max_tokens", "max_output_tokens", "messages", "input"}

// responsesCall is a checked Responses request and its turn.
type responsesCall struct {
	req       responsesRequest
	turn      *chatTurn
	id        string
	created   int64
	logprobs  bool
	maxCalls  int // tool calls kept (parallel_tool_calls, max_tool_calls); 0: all
	toolsEcho []json.RawMessage
}

// handleResponses answers POST /v1/responses.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	call, err := s.planResponses(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	if call.req.Stream {
		s.streamResponses(w, r, call)
		return
	}
	tr := newResponsesTurn(call, nil)
	o, u, err := s.runTurn(r.Context(), call.turn, tr.chunk)
	if err != nil {
		writeError(w, err)
		return
	}
	resp, _ := tr.finish(o, u)
	writeJSON(w, http.StatusOK, resp)
}

// planResponses reads, checks and plans a Responses request.
func (s *Server) planResponses(w http.ResponseWriter, r *http.Request) (*responsesCall, error) {
	start := time.Now()
	call := &responsesCall{id: "resp_" + newID(), created: start.Unix()}
	req := &call.req
	if err := decodeJSON(w, r, req); err != nil {
		return nil, err
	}
	creq, err := s.responsesChat(call)
	if err != nil {
		return nil, err
	}
	call.turn, err = s.planTurn(r.Context(), creq, start)
	if err != nil {
		return nil, renamed(err, responsesNames...)
	}
	return call, nil
}

// responsesChat checks the request and builds its chat request.
func (s *Server) responsesChat(call *responsesCall) (*chatRequest, error) {
	req := &call.req
	switch {
	case req.PreviousResponseID != nil:
		return nil, badRequest("previous_response_id", "previous_response_id is not supported: kt stores no responses; send the whole conversation in input")
	case req.Background:
		return nil, badRequest("background", "background responses are not supported: kt stores no responses; use stream to follow a long response")
	case !isNull(req.Conversation):
		return nil, badRequest("conversation", "conversation is not supported: kt stores no conversations; send the whole conversation in input")
	case !isNull(req.Prompt):
		return nil, badRequest("prompt", "prompt templates are not supported: send the text in input and instructions")
	case req.N != nil && *req.N != 1:
		return nil, badRequest("n", "the Responses API returns one response; n must be 1")
	case req.MaxTokens != nil || req.MaxCompletionTokens != nil:
		return nil, badRequest("max_tokens", "the Responses API bounds output with max_output_tokens")
	case req.Truncation != nil && *req.Truncation != "disabled" && *req.Truncation != "auto":
		return nil, badRequest("truncation", "truncation must be \"auto\" or \"disabled\", got %q", *req.Truncation)
	}
	for i, inc := range req.Include {
		if !slices.Contains(responsesIncludes, inc) {
			return nil, badRequest(fmt.Sprintf("include[%d]", i), "include[%d]: %q is not one of %s", i, inc, strings.Join(responsesIncludes, ", "))
		}
		call.logprobs = call.logprobs || inc == "message.output_text.logprobs"
	}
	if req.MaxOutputTokens != nil && *req.MaxOutputTokens < 1 {
		return nil, badRequest("max_output_tokens", "max_output_tokens must be at least 1, got %d", *req.MaxOutputTokens)
	}
	if req.MaxToolCalls != nil {
		if *req.MaxToolCalls < 1 {
			return nil, badRequest("max_tool_calls", "max_tool_calls must be at least 1, got %d", *req.MaxToolCalls)
		}
		call.maxCalls = *req.MaxToolCalls
	}
	if req.ParallelToolCalls != nil && !*req.ParallelToolCalls {
		call.maxCalls = 1
	}
	msgs, err := responsesMessages(req)
	if err != nil {
		return nil, err
	}
	creq := &chatRequest{Model: req.Model, Messages: msgs, samplingFields: req.samplingFields}
	creq.MaxTokens = req.MaxOutputTokens
	creq.StreamOptions = nil
	for i, raw := range req.Tools {
		t, err := responsesTool(i, raw)
		if err != nil {
			return nil, err
		}
		creq.Tools = append(creq.Tools, t)
	}
	call.toolsEcho = req.Tools
	if call.toolsEcho == nil {
		call.toolsEcho = []json.RawMessage{}
	}
	if creq.ToolChoice, err = responsesToolChoice(req.ToolChoice); err != nil {
		return nil, err
	}
	if req.Text != nil && !isNull(req.Text.Format) {
		if creq.ResponseFormat, err = responsesFormat(req.Text.Format); err != nil {
			return nil, err
		}
	}
	if req.Reasoning != nil && req.Reasoning.Effort != nil {
		creq.ReasoningEffort = *req.Reasoning.Effort
	}
	if req.TopLogprobs != nil {
		call.logprobs = call.logprobs || *req.TopLogprobs > 0
		creq.TopLogprobs = req.TopLogprobs
	}
	creq.Logprobs = call.logprobs
	if !call.logprobs {
		creq.TopLogprobs = nil
	}
	return creq, nil
}

// responsesMessages turns instructions and input into chat messages.
func responsesMessages(req *responsesRequest) ([]json.RawMessage, error) {
	var msgs []*chatMessage
	if req.Instructions != nil && *req.Instructions != "" {
		msgs = append(msgs, newChatMessage("system", jsonString(*req.Instructions)))
	}
	var text string
	if json.Unmarshal(req.Input, &text) == nil {
		return chatMessages(append(msgs, newChatMessage("user", jsonString(text)))), nil
	}
	var items []json.RawMessage
	if isNull(req.Input) || json.Unmarshal(req.Input, &items) != nil {
		return nil, badRequest("input", "input: expected a string or an array of input items")
	}
	if len(items) == 0 {
		return nil, badRequest("input", "input holds no items")
	}
	reasoning := "" // of the next assistant message
	assistant := func(m *chatMessage) {
		if reasoning != "" {
			m.obj.setString("reasoning_content", reasoning)
			reasoning = ""
		}
	}
	for i, raw := range items {
		field := fmt.Sprintf("input[%d]", i)
		var it struct {
			Type      string          `json:"type"`
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			CallID    string          `json:"call_id"`
			Name      string          `json:"name"`
			Arguments *string         `json:"arguments"`
			Output    json.RawMessage `json:"output"`
			Summary   json.RawMessage `json:"summary"`
		}
		if json.Unmarshal(raw, &it) != nil {
			return nil, badRequest(field, "%s: expected an input item object", field)
		}
		if it.Type == "" && it.Role != "" {
			it.Type = "message"
		}
		switch it.Type {
		case "message":
			role := it.Role
			switch role {
			case "user", "system", "developer", "assistant":
			default:
				return nil, badRequest(field+".role", "%s.role: %q is not one of user, system, developer, assistant", field, role)
			}
			content := it.Content
			if isNull(content) {
				return nil, badRequest(field+".content", "%s.content: required", field)
			}
			if json.Unmarshal(content, &text) != nil {
				parts, err := textParts(content, field+".content", "input_text", "output_text", "text", "refusal")
				if err != nil {
					return nil, err
				}
				content = jsonString(strings.Join(parts, ""))
			}
			m := newChatMessage(role, content)
			if role == "assistant" {
				assistant(m)
			}
			msgs = append(msgs, m)
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, badRequest(field, "%s: a function_call needs call_id and name", field)
			}
			args := "{}"
			if it.Arguments != nil {
				args = *it.Arguments
			}
			var last *chatMessage
			if len(msgs) > 0 && msgs[len(msgs)-1].role() == "assistant" {
				last = msgs[len(msgs)-1]
			} else {
				last = newChatMessage("assistant", jsonString(""))
				assistant(last)
				msgs = append(msgs, last)
			}
			last.calls = append(last.calls, chatToolCall(it.CallID, it.Name, jsonString(args)))
		case "function_call_output":
			if it.CallID == "" {
				return nil, badRequest(field+".call_id", "%s: a function_call_output needs call_id", field)
			}
			out := it.Output
			if isNull(out) {
				return nil, badRequest(field+".output", "%s.output: required", field)
			}
			if json.Unmarshal(out, &text) != nil {
				parts, err := textParts(out, field+".output", "input_text", "output_text", "text")
				if err != nil {
					return nil, err
				}
				out = jsonString(strings.Join(parts, ""))
			}
			m := newChatMessage("tool", out)
			m.obj.setString("tool_call_id", it.CallID)
			msgs = append(msgs, m)
		case "reasoning":
			// Its text goes back to the template as the next assistant
			// message's reasoning_content.
			// The reasoning text, else its summaries.
			var texts []string
			for _, src := range []struct {
				raw  json.RawMessage
				name string
			}{{it.Content, ".content"}, {it.Summary, ".summary"}} {
				if len(texts) > 0 || isNull(src.raw) {
					continue
				}
				parts, err := textParts(src.raw, field+src.name, "reasoning_text", "summary_text")
				if err != nil {
					return nil, err
				}
				texts = parts
			}
			reasoning += strings.Join(texts, "\n")
		case "item_reference":
			return nil, badRequest(field, "%s: item references are not supported: kt stores no items; send the item itself", field)
		default:
			return nil, badRequest(field+".type", "%s.type: %q is not supported (kt takes message, function_call, function_call_output and reasoning items)", field, it.Type)
		}
	}
	return chatMessages(msgs), nil
}

// responsesTool turns a Responses function tool into a chat tool.
func responsesTool(i int, raw json.RawMessage) (json.RawMessage, error) {
	field := fmt.Sprintf("tools[%d]", i)
	o, err := parseObject(raw)
	if err != nil {
		return nil, badRequest(field, "%s: expected a tool object", field)
	}
	var typ, name string
	v, _ := o.get("type")
	_ = json.Unmarshal(v, &typ)
	if typ != "function" {
		return nil, badRequest(field+".type", "%s.type: %q tools are not supported; kt returns function tool calls to the client (type \"function\")", field, typ)
	}
	v, _ = o.get("name")
	if json.Unmarshal(v, &name) != nil || name == "" {
		return nil, badRequest(field+".name", "%s: a function tool needs a name", field)
	}
	d, _ := o.get("description")
	p, _ := o.get("parameters")
	st, _ := o.get("strict")
	return chatTool(name, d, p, st), nil
}

// responsesToolChoice turns a Responses tool_choice into the chat API's.
func responsesToolChoice(raw json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		return raw, nil // auto, none, required: checked by the chat path
	}
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != "function" || named.Name == "" {
		return nil, badRequest("tool_choice", "tool_choice: expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}")
	}
	fn := jsonObject{}
	fn.setString("name", named.Name)
	c := jsonObject{}
	c.setString("type", "function")
	c.set("function", mustMarshal(fn))
	return mustMarshal(c), nil
}

// responsesFormat turns text.format into a chat response_format.
func responsesFormat(raw json.RawMessage) (*responseFormat, error) {
	var f struct {
		Type        string          `json:"type"`
		Name        json.RawMessage `json:"name"`
		Description json.RawMessage `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      json.RawMessage `json:"strict"`
	}
	if json.Unmarshal(raw, &f) != nil {
		return nil, badRequest("text.format", "text.format: expected an object with a type")
	}
	switch f.Type {
	case "text":
		return nil, nil
	case "json_object":
		return &responseFormat{Type: "json_object"}, nil
	case "json_schema":
		js := jsonObject{}
		for _, kv := range []struct {
			k string
			v json.RawMessage
		}{{"name", f.Name}, {"description", f.Description}, {"schema", f.Schema}, {"strict", f.Strict}} {
			if !isNull(kv.v) {
				js.set(kv.k, kv.v)
			}
		}
		return &responseFormat{Type: "json_schema", JSONSchema: mustMarshal(js)}, nil
	}
	return nil, badRequest("text.format.type", "text.format.type: %q is not one of text, json_object, json_schema", f.Type)
}

// Output items and the response object.

type responseOutputText struct {
	Type        string             `json:"type"`
	Text        string             `json:"text"`
	Annotations []any              `json:"annotations"`
	Logprobs    []chatTokenLogprob `json:"logprobs"`
}

type responseReasoningText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type responseObject struct {
	ID                string         `json:"id"`
	Object            string         `json:"object"`
	CreatedAt         int64          `json:"created_at"`
	Status            string         `json:"status"`
	Background        bool           `json:"background"`
	Error             *responseError `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Instructions       *string `json:"instructions"`
	MaxOutputTokens    *int    `json:"max_output_tokens"`
	MaxToolCalls       *int    `json:"max_tool_calls"`
	Model              string  `json:"model"`
	Output             []any   `json:"output"`
	ParallelToolCalls  bool    `json:"parallel_tool_calls"`
	PreviousResponseID *string `json:"previous_response_id"`
	Reasoning          struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
	} `json:"reasoning"`
	Store bool `json:"store"`
	Text  struct {
		Format    json.RawMessage `json:"format"`
		Verbosity *string         `json:"verbosity,omitempty"`
	} `json:"text"`
	Temperature float64           `json:"temperature"`
	ToolChoice  json.RawMessage   `json:"tool_choice"`
	Tools       []json.RawMessage `json:"tools"`
	TopLogprobs int               `json:"top_logprobs"`
	TopP        float64           `json:"top_p"`
	Truncation  string            `json:"truncation"`
	Usage       *responseUsage    `json:"usage"`
	User        *string           `json:"user"`
	Metadata    json.RawMessage   `json:"metadata"`
}

// object is the call's response object with status, output and usage.
func (call *responsesCall) object(status string, output []any, u *responseUsage) *responseObject {
	req := &call.req
	p := call.turn.plan.params
	o := &responseObject{ID: call.id, Object: "response", CreatedAt: call.created, Status: status,
		Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens, MaxToolCalls: req.MaxToolCalls,
		Model: call.turn.model, Output: output, ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		Temperature: p.Temperature, ToolChoice: req.ToolChoice, Tools: call.toolsEcho, TopP: p.TopP,
		Truncation: "disabled", Usage: u, Metadata: req.Metadata}
	if output == nil {
		o.Output = []any{}
	}
	if req.Reasoning != nil {
		o.Reasoning.Effort, o.Reasoning.Summary = req.Reasoning.Effort, req.Reasoning.Summary
	}
	o.Text.Format = json.RawMessage(`{"type":"text"}`)
	if req.Text != nil {
		if !isNull(req.Text.Format) {
			o.Text.Format = req.Text.Format
		}
		o.Text.Verbosity = req.Text.Verbosity
	}
	if isNull(o.ToolChoice) {
		o.ToolChoice = json.RawMessage(`"auto"`)
	}
	if req.TopLogprobs != nil {
		o.TopLogprobs = *req.TopLogprobs
	}
	if req.Truncation != nil {
		o.Truncation = *req.Truncation
	}
	if req.User != "" {
		o.User = &req.User
	}
	if isNull(o.Metadata) {
		o.Metadata = json.RawMessage("{}")
	}
	return o
}

// responsesItem is an output item being built: its kind (reasoning,
// message, function_call), id, text and logprobs or call.
type responsesItem struct {
	kind  string
	id    string
	text  strings.Builder
	lps   []chatTokenLogprob
	call  toolCall
	index int
}

// json is the item as an output item with status.
func (it *responsesItem) json(status string) any {
	switch it.kind {
	case "reasoning":
		return map[string]any{"id": it.id, "type": "reasoning", "summary": []any{}, "status": status,
			"content": []responseReasoningText{{Type: "reasoning_text", Text: it.text.String()}}, "encrypted_content": nil}
	case "message":
		return map[string]any{"id": it.id, "type": "message", "role": "assistant", "status": status,
			"content": []responseOutputText{it.part()}}
	}
	return map[string]any{"id": it.id, "type": "function_call", "status": status, "call_id": it.call.ID,
		"name": it.call.Function.Name, "arguments": it.call.Function.Arguments}
}

func (it *responsesItem) part() responseOutputText {
	lps := it.lps
	if lps == nil {
		lps = []chatTokenLogprob{}
	}
	return responseOutputText{Type: "output_text", Text: it.text.String(), Annotations: []any{}, Logprobs: lps}
}

// responsesTurn turns a chat turn's chunks into output items and, when
// emit is set, into the Responses stream's events.
type responsesTurn struct {
	call  *responsesCall
	emit  func(name string, v map[string]any) error // nil: not streaming
	seq   int
	items []*responsesItem
	open  *responsesItem // the reasoning or message item receiving text
	space spaceHold      // answer text that is only whitespace so far
	held  []chatTokenLogprob
}

func newResponsesTurn(call *responsesCall, emit func(string, map[string]any) error) *responsesTurn {
	return &responsesTurn{call: call, emit: emit}
}

// event sends one stream event (none when not streaming).
func (t *responsesTurn) event(name string, fields map[string]any) error {
	if t.emit == nil {
		return nil
	}
	fields["type"] = name
	fields["sequence_number"] = t.seq
	t.seq++
	return t.emit(name, fields)
}

// begin opens an item of kind, closing the open one.
func (t *responsesTurn) begin(kind string) error {
	if err := t.end(); err != nil {
		return err
	}
	prefix := map[string]string{"reasoning": "rs_", "message": "msg_"}[kind]
	it := &responsesItem{kind: kind, id: prefix + newID(), index: len(t.items)}
	t.items = append(t.items, it)
	t.open = it
	added := it.json("in_progress").(map[string]any)
	added["content"] = []any{} // the part comes with content_part.added
	if err := t.event("response.output_item.added", map[string]any{"output_index": it.index, "item": added}); err != nil {
		return err
	}
	var part any = responseOutputText{Type: "output_text", Annotations: []any{}, Logprobs: []chatTokenLogprob{}}
	if kind == "reasoning" {
		part = responseReasoningText{Type: "reasoning_text"}
	}
	return t.event("response.content_part.added", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "part": part})
}

// end closes the open item.
func (t *responsesTurn) end() error {
	it := t.open
	if it == nil {
		return nil
	}
	t.open = nil
	ids := map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0}
	with := func(k string, v any) map[string]any {
		m := map[string]any{k: v}
		for a, b := range ids {
			m[a] = b
		}
		return m
	}
	var err error
	if it.kind == "reasoning" {
		err = t.event("response.reasoning_text.done", with("text", it.text.String()))
		if err == nil {
			err = t.event("response.content_part.done", with("part", responseReasoningText{Type: "reasoning_text", Text: it.text.String()}))
		}
	} else {
		done := with("text", it.text.String())
		done["logprobs"] = it.part().Logprobs
		err = t.event("response.output_text.done", done)
		if err == nil {
			err = t.event("response.content_part.done", with("part", it.part()))
		}
	}
	if err != nil {
		return err
	}
	return t.event("response.output_item.done", map[string]any{"output_index": it.index, "item": it.json("completed")})
}

// chunk takes one chat chunk.
func (t *responsesTurn) chunk(c chatChunkChoice) error {
	if c.Logprobs != nil {
		t.held = append(t.held, c.Logprobs.Content...)
	}
	if r := c.Delta.ReasoningContent; r != nil && *r != "" {
		if t.open == nil || t.open.kind != "reasoning" {
			if err := t.begin("reasoning"); err != nil {
				return err
			}
		}
		t.open.text.WriteString(*r)
		if err := t.event("response.reasoning_text.delta", map[string]any{"item_id": t.open.id, "output_index": t.open.index,
			"content_index": 0, "delta": *r}); err != nil {
			return err
		}
	}
	if c.Delta.Content != nil {
		if err := t.content(t.space.feed(*c.Delta.Content)); err != nil {
			return err
		}
	}
	if c.FinishReason != nil {
		return t.finishChunk(c)
	}
	return nil
}

// content adds answer text to the message item, opening it if needed.
func (t *responsesTurn) content(text string) error {
	if text == "" {
		return nil
	}
	if t.open == nil || t.open.kind != "message" {
		if err := t.begin("message"); err != nil {
			return err
		}
	}
	lps := t.held
	t.held = nil
	t.open.text.WriteString(text)
	t.open.lps = append(t.open.lps, lps...)
	if lps == nil {
		lps = []chatTokenLogprob{}
	}
	return t.event("response.output_text.delta", map[string]any{"item_id": t.open.id, "output_index": t.open.index,
		"content_index": 0, "delta": text, "logprobs": lps})
}

// finishChunk closes the turn's items: the message (with whitespace-only
// text kept only when there is no tool call), then one function_call item
// per tool call.
func (t *responsesTurn) finishChunk(c chatChunkChoice) error {
	calls := c.Delta.ToolCalls
	if t.call.maxCalls > 0 && len(calls) > t.call.maxCalls {
		calls = calls[:t.call.maxCalls]
	}
	if len(calls) == 0 {
		rest := t.space.held
		t.space.held = ""
		if rest != "" || !t.hasMessage() {
			if t.open == nil || t.open.kind != "message" {
				if err := t.begin("message"); err != nil {
					return err
				}
			}
			if err := t.content(rest); err != nil {
				return err
			}
		}
	}
	if t.open != nil && t.open.kind == "message" && t.held != nil {
		t.open.lps = append(t.open.lps, t.held...)
		t.held = nil
	}
	if err := t.end(); err != nil {
		return err
	}
	for _, tc := range calls {
		it := &responsesItem{kind: "function_call", id: "fc_" + strings.TrimPrefix(tc.ID, "call_"), call: tc, index: len(t.items)}
		t.items = append(t.items, it)
		pending := it.json("in_progress").(map[string]any)
		pending["arguments"] = ""
		if err := t.event("response.output_item.added", map[string]any{"output_index": it.index, "item": pending}); err != nil {
			return err
		}
		if err := t.event("response.function_call_arguments.delta", map[string]any{"item_id": it.id, "output_index": it.index,
			"delta": tc.Function.Arguments}); err != nil {
			return err
		}
		if err := t.event("response.function_call_arguments.done", map[string]any{"item_id": it.id, "output_index": it.index,
			"name": tc.Function.Name, "arguments": tc.Function.Arguments}); err != nil {
			return err
		}
		if err := t.event("response.output_item.done", map[string]any{"output_index": it.index, "item": it.json("completed")}); err != nil {
			return err
		}
	}
	return nil
}

func (t *responsesTurn) hasMessage() bool {
	for _, it := range t.items {
		if it.kind == "message" {
			return true
		}
	}
	return false
}

// finish builds the final response object from the turn's items, its
// outcome and usage, and returns it with the name of its stream event.
func (t *responsesTurn) finish(o chatOutcome, u *usage) (*responseObject, string) {
	status, event := "completed", "response.completed"
	if o.res.finishReason() == "length" {
		status, event = "incomplete", "response.incomplete"
	}
	output := make([]any, len(t.items))
	for i, it := range t.items {
		st := "completed"
		if it.kind == "message" && status == "incomplete" {
			st = "incomplete"
		}
		output[i] = it.json(st)
	}
	ru := &responseUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	ru.InputTokensDetails.CachedTokens = u.cached
	ru.OutputTokensDetails.ReasoningTokens = u.ReasoningTokens
	resp := t.call.object(status, output, ru)
	if status == "incomplete" {
		resp.IncompleteDetails = &struct {
			Reason string `json:"reason"`
		}{"max_output_tokens"}
	}
	return resp, event
}

// streamResponses runs the turn and sends the Responses stream:
// response.created and response.in_progress, each item's added, delta and
// done events in output order, then response.completed (or
// response.incomplete when max_output_tokens cut it). A failure after the
// headers is an error event followed by response.failed.
func (s *Server) streamResponses(w http.ResponseWriter, r *http.Request, call *responsesCall) {
	if err := s.precheck(call.turn.plan.prompt, call.turn.plan.params); err != nil {
		writeError(w, renamed(err, responsesNames...))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ev := newSSE(w)
	tr := newResponsesTurn(call, func(name string, v map[string]any) error { return ev.sendEvent(name, v) })
	start := call.object("in_progress", nil, nil)
	if tr.event("response.created", map[string]any{"response": start}) != nil ||
		tr.event("response.in_progress", map[string]any{"response": start}) != nil {
		return
	}
	o, u, err := s.runTurn(ctx, call.turn, tr.chunk)
	if ev.err != nil {
		return
	}
	if err != nil {
		ae := asAPIError(err)
		_ = tr.event("error", map[string]any{"code": ae.Type, "message": ae.Message, "param": nil})
		failed := call.object("failed", nil, nil)
		failed.Error = &responseError{Code: "server_error", Message: ae.Message}
		_ = tr.event("response.failed", map[string]any{"response": failed})
		return
	}
	resp, name := tr.finish(o, u)
	_ = tr.event(name, map[string]any{"response": resp})
}
