package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/jsonconstraint"
)

// parseMessages turns the request's messages into template objects. Content
// given as an array of parts is joined into one string (text parts only).
func parseMessages(raw []json.RawMessage) ([]map[string]any, error) {
	if len(raw) == 0 {
		return nil, badRequest("messages", "messages must hold at least one message")
	}
	out := make([]map[string]any, len(raw))
	for i, r := range raw {
		var m map[string]any
		if err := json.Unmarshal(r, &m); err != nil || m == nil {
			return nil, badRequest(fmt.Sprintf("messages[%d]", i), "messages[%d]: expected an object with role and content", i)
		}
		role, ok := m["role"].(string)
		if !ok {
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role: expected one of system, developer, user, assistant, tool", i)
		}
		switch role {
		case "system", "user", "assistant", "tool":
		case "developer":
			m["role"] = "system"
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role: %q is not one of system, developer, user, assistant, tool", i, role)
		}
		switch c := m["content"].(type) {
		case nil:
			if role != "assistant" {
				return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: missing", i)
			}
			m["content"] = ""
		case string:
		case []any:
			var b strings.Builder
			for j, part := range c {
				pm, _ := part.(map[string]any)
				typ, _ := pm["type"].(string)
				text, isText := pm["text"].(string)
				if typ != "text" || !isText {
					return nil, badRequest(fmt.Sprintf("messages[%d].content[%d]", i, j), "messages[%d].content[%d]: only text parts are supported (got type %q): kt serves text-only models", i, j, typ)
				}
				b.WriteString(text)
			}
			m["content"] = b.String()
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: expected a string or an array of text parts", i)
		}
		// Tool call arguments arrive as JSON strings; templates want objects.
		if calls, ok := m["tool_calls"].([]any); ok {
			for _, c := range calls {
				cm, _ := c.(map[string]any)
				fn, _ := cm["function"].(map[string]any)
				if a, ok := fn["arguments"].(string); ok {
					var obj any
					if json.Unmarshal([]byte(a), &obj) == nil {
						fn["arguments"] = obj
					}
				}
			}
		}
		out[i] = m
	}
	return out, nil
}

// chatState turns one choice's text stream into reasoning, answer and tool
// calls.
type chatState struct {
	idx             int
	rs              *reasoningSplitter // nil: no reasoning split
	te              *toolExtractor     // nil: no tool parsing
	content         strings.Builder
	reasoning       strings.Builder
	reasoningTokens int
	wantLogprobs    bool
	logprobs        []chatTokenLogprob
}

// feed processes one delta and returns what it adds.
func (c *chatState) feed(s *Server, d genDelta, final bool) (reasoning, content string, lps []chatTokenLogprob) {
	content = d.Text
	if c.rs != nil {
		inBefore := c.rs.inReasoning()
		reasoning, content = c.rs.feed(content, final)
		if inBefore || c.rs.inReasoning() {
			c.reasoningTokens += len(d.Tokens)
		}
	}
	if c.te != nil {
		content = c.te.feed(content, final)
	}
	c.reasoning.WriteString(reasoning)
	c.content.WriteString(content)
	if c.wantLogprobs {
		lps = s.chatLogprobs(d.Tokens)
		c.logprobs = append(c.logprobs, lps...)
	}
	return reasoning, content, lps
}

func (s *Server) tokenText(id int32) (string, []int) {
	if s.tok == nil {
		return "", nil
	}
	b, _ := s.tok.TokenBytes(id)
	return string(b), bytesOf(b)
}

func (s *Server) chatLogprobs(toks []engine.Token) []chatTokenLogprob {
	out := make([]chatTokenLogprob, len(toks))
	for i, t := range toks {
		text, b := s.tokenText(t.ID)
		out[i] = chatTokenLogprob{Token: text, Logprob: finiteLogprob(t.Logprob), Bytes: b, TopLogprobs: []chatTopLogprob{}}
		for _, alt := range t.Top {
			at, ab := s.tokenText(alt.ID)
			out[i].TopLogprobs = append(out[i].TopLogprobs, chatTopLogprob{Token: at, Logprob: finiteLogprob(alt.Logprob), Bytes: ab})
		}
	}
	return out
}

// chatPlan is a validated chat request ready to run.
type chatPlan struct {
	id         string
	created    int64
	prompt     []int32
	promptText string
	params     engine.SamplingParams
	n          int
	stops      []string
	skip       bool
	noTrim     bool
	tools      []toolDef
	separate   bool
	jsonMode   bool
	usage      bool
}

func (s *Server) planChat(req *chatRequest) (*chatPlan, error) {
	if err := s.checkModel(req.Model); err != nil {
		return nil, err
	}
	if err := s.needTokenizer(); err != nil {
		return nil, err
	}
	if s.opt.Template == nil {
		return nil, badRequest("messages", "this model has no chat template; use /v1/completions or /generate")
	}
	msgs, err := parseMessages(req.Messages)
	if err != nil {
		return nil, err
	}
	tools := req.Tools
	if len(req.ToolChoice) > 0 {
		var choice string
		if json.Unmarshal(req.ToolChoice, &choice) != nil {
			return nil, badRequest("tool_choice", "tool_choice naming a function is not supported yet in kt; use \"auto\" or \"none\"")
		}
		switch choice {
		case "none":
			tools = nil
		case "auto":
		case "required":
			return nil, badRequest("tool_choice", "tool_choice \"required\" is not supported yet in kt; use \"auto\" or \"none\"")
		default:
			return nil, badRequest("tool_choice", "tool_choice must be \"auto\", \"none\" or \"required\", got %q", choice)
		}
	}
	var toolMaps []map[string]any
	for i, t := range tools {
		if t.Type != "function" || t.Function.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d]: expected {\"type\": \"function\", \"function\": {\"name\": ...}}", i)
		}
		b, _ := json.Marshal(t)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		toolMaps = append(toolMaps, m)
	}
	vars := map[string]any{"add_generation_prompt": !req.ContinueFinalMsg}
	for k, v := range req.ChatTemplateKwargs {
		vars[k] = v
	}
	if req.ReasoningEffort != "" {
		vars["reasoning_effort"] = req.ReasoningEffort
	}
	text, err := s.opt.Template.Render(msgs, toolMaps, vars)
	if err != nil {
		return nil, badRequest("messages", "rendering the chat template: %v", err)
	}
	if req.ContinueFinalMsg {
		// Drop the end-of-turn the template put after the last message.
		if i := strings.LastIndex(text, "<|im_end|>"); i >= 0 && strings.TrimSpace(text[i+len("<|im_end|>"):]) == "" {
			text = text[:i]
		}
	}
	p, n, err := req.toParams(0)
	if err != nil {
		return nil, err
	}
	stops, err := parseStop(req.Stop)
	if err != nil {
		return nil, err
	}
	if req.TopLogprobs != nil {
		if !req.Logprobs {
			return nil, badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
		p.TopLogprobs = *req.TopLogprobs
		if p.TopLogprobs < 0 || p.TopLogprobs > engine.MaxTopLogprobs {
			return nil, badRequest("top_logprobs", "top_logprobs must be in [0, %d], got %d", engine.MaxTopLogprobs, p.TopLogprobs)
		}
	}
	p.Logprobs = req.Logprobs
	plan := &chatPlan{
		id: newID(), created: time.Now().Unix(), prompt: s.tok.Encode(text), promptText: text,
		params: p, n: n, stops: stops, skip: req.SkipSpecialTokens == nil || *req.SkipSpecialTokens,
		noTrim: req.NoStopTrim, separate: req.SeparateReasoning == nil || *req.SeparateReasoning,
		usage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
	}
	if s.opt.ToolCallParser != "none" && len(tools) > 0 {
		plan.tools = tools
	}
	if rf := req.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text", "":
		case "json_object":
			plan.jsonMode = true
		case "json_schema":
			return nil, badRequest("response_format", "response_format json_schema is not supported yet in kt; json_object is")
		default:
			return nil, badRequest("response_format", "response_format type must be text, json_object or json_schema, got %q", rf.Type)
		}
	}
	return plan, nil
}

// specFor builds choice i's generation.
func (s *Server) specFor(plan *chatPlan, i int) genSpec {
	p := seedFor(plan.params, i)
	if plan.jsonMode {
		p.Constraint = jsonconstraint.New(s.tok, s.eng.EOSTokenIDs())
	}
	return genSpec{
		req:   engine.Request{ID: fmt.Sprintf("%s-%d", plan.id, i), Prompt: plan.prompt, Params: p},
		stops: plan.stops, skipSpecial: plan.skip, noStopTrim: plan.noTrim,
	}
}

func (s *Server) newChatState(plan *chatPlan, i int) *chatState {
	c := &chatState{idx: i, wantLogprobs: plan.params.Logprobs}
	if s.opt.ReasoningParser != "none" && plan.separate {
		c.rs = newReasoningSplitter(plan.promptText)
		if s.opt.ReasoningParser == "deepseek-r1" {
			c.rs.in = true
		}
	}
	if plan.tools != nil {
		c.te = &toolExtractor{tools: plan.tools, prefix: plan.id[:8] + fmt.Sprint(i)}
	}
	return c
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req chatRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	plan, err := s.planChat(&req)
	if err != nil {
		writeError(w, err)
		return
	}
	s.met.requests.Inc()
	s.met.promptTok.Add(float64(len(plan.prompt)))
	defer func() { s.met.e2e.Observe(time.Since(start).Seconds()) }()
	if req.Stream {
		s.streamChat(w, r, plan)
		return
	}
	type out struct {
		st  *chatState
		res genResult
		err error
	}
	outs := make([]out, plan.n)
	var wg sync.WaitGroup
	for i := range plan.n {
		wg.Go(func() {
			st := s.newChatState(plan, i)
			res, err := s.run(r.Context(), s.specFor(plan, i), func(d genDelta) error {
				st.feed(s, d, false)
				return nil
			})
			if err == nil {
				st.feed(s, genDelta{}, true)
			}
			outs[i] = out{st, res, err}
		})
	}
	wg.Wait()
	resp := chatResponse{ID: plan.id, Object: "chat.completion", Created: plan.created, Model: s.opt.ModelName,
		Metadata: metadata{WeightVersion: "default"}}
	u := usage{PromptTokens: len(plan.prompt)}
	for i, o := range outs {
		if o.err != nil {
			writeError(w, engineError(o.err))
			return
		}
		if o.res.Err != nil {
			writeError(w, fmt.Errorf("generation aborted: %w", o.res.Err))
			return
		}
		s.met.genTok.Add(float64(o.res.OutputTokens))
		u.CompletionTokens += o.res.OutputTokens
		u.ReasoningTokens += o.st.reasoningTokens
		msg := chatMessageOut{Role: "assistant", Content: strPtr(o.st.content.String())}
		if o.st.rs != nil && o.st.reasoning.Len() > 0 {
			msg.ReasoningContent = strPtr(o.st.reasoning.String())
		}
		fr := o.res.finishReason()
		if o.st.te != nil && len(o.st.te.calls) > 0 {
			msg.ToolCalls = o.st.te.calls
			for j := range msg.ToolCalls {
				msg.ToolCalls[j].Index = nil
			}
			if fr == "stop" {
				fr = "tool_calls"
			}
			if strings.TrimSpace(*msg.Content) == "" {
				msg.Content = nil
			}
		}
		ch := chatChoice{Index: i, Message: msg, FinishReason: &fr, MatchedStop: nullIfEmpty(o.res.MatchedStop)}
		if plan.params.Logprobs {
			ch.Logprobs = &chatLogprobs{Content: o.st.logprobs}
			if ch.Logprobs.Content == nil {
				ch.Logprobs.Content = []chatTokenLogprob{}
			}
		}
		resp.Choices = append(resp.Choices, ch)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	resp.Usage = &u
	writeJSON(w, http.StatusOK, resp)
}

func nullIfEmpty(m json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return json.RawMessage("null")
	}
	return m
}

// streamChat runs the choices and writes chat.completion.chunk events.
func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, plan *chatPlan) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// Check the request against the engine before the 200 goes out, so
	// that an over-long prompt is a 400, not an error event.
	if err := s.precheck(plan.prompt, plan.params); err != nil {
		writeError(w, err)
		return
	}
	ev := newSSE(w)
	chunk := func(choices []chatChunkChoice) chatChunk {
		return chatChunk{ID: plan.id, Object: "chat.completion.chunk", Created: plan.created, Model: s.opt.ModelName, Choices: choices}
	}
	events := make(chan any, 16)
	type fin struct {
		res genResult
		st  *chatState
		err error
	}
	fins := make([]fin, plan.n)
	var wg sync.WaitGroup
	for i := range plan.n {
		wg.Go(func() {
			st := s.newChatState(plan, i)
			send := func(c chatChunkChoice) error {
				select {
				case events <- chunk([]chatChunkChoice{c}):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if err := send(chatChunkChoice{Index: i, Delta: chatDelta{Role: "assistant", Content: strPtr("")}, MatchedStop: json.RawMessage("null")}); err != nil {
				fins[i] = fin{err: err}
				return
			}
			emit := func(reasoning, content string, lps []chatTokenLogprob) error {
				if reasoning == "" && content == "" && len(lps) == 0 {
					return nil
				}
				c := chatChunkChoice{Index: i, MatchedStop: json.RawMessage("null")}
				if reasoning != "" {
					c.Delta.ReasoningContent = &reasoning
				}
				if content != "" {
					c.Delta.Content = &content
				}
				if lps != nil {
					c.Logprobs = &chatLogprobs{Content: lps}
				}
				return send(c)
			}
			res, err := s.run(ctx, s.specFor(plan, i), func(d genDelta) error {
				return emit(st.feed(s, d, false))
			})
			if err == nil && res.Err == nil {
				if err = emit(st.feed(s, genDelta{}, true)); err == nil {
					fr := res.finishReason()
					c := chatChunkChoice{Index: i, MatchedStop: nullIfEmpty(res.MatchedStop), FinishReason: &fr}
					if st.te != nil && len(st.te.calls) > 0 {
						c.Delta.ToolCalls = st.te.calls
						if fr == "stop" {
							fr = "tool_calls"
						}
					}
					err = send(c)
				}
			}
			fins[i] = fin{res, st, err}
		})
	}
	go func() {
		wg.Wait()
		close(events)
	}()
	for e := range events {
		if ev.send(e) != nil {
			cancel() // the client is gone: stop every choice
		}
	}
	if ev.err != nil {
		return
	}
	u := usage{PromptTokens: len(plan.prompt)}
	for _, f := range fins {
		if f.err != nil {
			ev.errorEvent(engineError(f.err))
			return
		}
		if f.res.Err != nil {
			ev.errorEvent(fmt.Errorf("generation aborted: %w", f.res.Err))
			return
		}
		s.met.genTok.Add(float64(f.res.OutputTokens))
		u.CompletionTokens += f.res.OutputTokens
		u.ReasoningTokens += f.st.reasoningTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if plan.usage {
		c := chunk([]chatChunkChoice{})
		c.Usage = &u
		_ = ev.send(c)
	}
	ev.done()
}

// precheck validates a request against the engine's limits without
// submitting it.
func (s *Server) precheck(prompt []int32, p engine.SamplingParams) error {
	limit := s.eng.MaxSequenceTokens()
	if len(prompt) >= limit {
		return badRequest("messages", "the prompt has %d tokens; this server takes at most %d (context length %d, KV budget %d) including at least one output token",
			len(prompt), limit-1, s.eng.ContextLength(), s.eng.MaxTotalTokens())
	}
	if p.MaxNewTokens > 0 && len(prompt)+p.MaxNewTokens > limit {
		return badRequest("max_tokens", "the prompt (%d tokens) plus max_tokens (%d) exceeds %d tokens (context length %d, KV budget %d)",
			len(prompt), p.MaxNewTokens, limit, s.eng.ContextLength(), s.eng.MaxTotalTokens())
	}
	return nil
}
