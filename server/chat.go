package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ktserve/kt/chattemplate"
	"github.com/ktserve/kt/constraint"
	"github.com/ktserve/kt/constraint/jsonobject"
	"github.com/ktserve/kt/engine"
)

// chatInput is a chat request's template input: the messages and tools as
// the client sent them (key order kept), normalized as SGLang does before it
// calls apply_chat_template.
type chatInput struct {
	conv chattemplate.Conversation
	// prefix is the content of a final assistant message to continue
	// (continue_final_message): appended to the rendered prompt.
	prefix string
	tools  []toolDef  // the tools offered to the model (nil: none)
	choice toolChoice // tool_choice
	// thinking is chat_template_kwargs "thinking" when it is a boolean: the
	// switch of DeepSeek-V3.1's and Kimi-K2's reasoning (reasoningFormatFor).
	thinking *bool
	// toolHistory counts the tool calls of the conversation's assistant
	// messages (Kimi-K2's call ids continue from it).
	toolHistory int
}

// buildChatInput validates and normalizes the request's messages, tools and
// template arguments without reordering any object's keys:
//   - role "developer" becomes "system";
//   - content null becomes "" (an assistant message may omit it), an array
//     of text parts becomes their texts joined by spaces (SGLang's string
//     content format), other parts are refused;
//   - members set to null are dropped (SGLang's model_dump + filter);
//   - an assistant's tool_calls[].function.arguments given as a JSON string
//     is parsed into the object the templates iterate over;
//   - a final assistant message is continued (continue_final_message: its
//     content follows the generation prompt) or else turned into a user
//     message, as SGLang does.
func buildChatInput(req *chatRequest) (*chatInput, error) {
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must hold at least one message")
	}
	msgs := make([]jsonObject, len(req.Messages))
	in := &chatInput{conv: chattemplate.Conversation{AddGenerationPrompt: true}}
	for i, r := range req.Messages {
		m, err := normalizeMessage(i, r)
		if err != nil {
			return nil, err
		}
		msgs[i] = m
		if calls, ok := m.get("tool_calls"); ok {
			var list []json.RawMessage
			if json.Unmarshal(calls, &list) == nil {
				in.toolHistory += len(list)
			}
		}
	}
	last := msgs[len(msgs)-1]
	if role, _ := last.get("role"); string(role) == `"assistant"` {
		var content string
		if c, _ := last.get("content"); json.Unmarshal(c, &content) == nil {
			if req.ContinueFinalMsg {
				in.prefix = content
				msgs = msgs[:len(msgs)-1]
			} else {
				msgs[len(msgs)-1] = jsonObject{}
				msgs[len(msgs)-1].setString("role", "user")
				msgs[len(msgs)-1].setString("content", content)
			}
		}
	}
	raw := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		raw[i], _ = m.MarshalJSON()
	}
	in.conv.Messages = jsonArray(raw)

	tools, raws, choice, err := parseTools(req)
	if err != nil {
		return nil, err
	}
	in.choice = choice
	if len(tools) > 0 {
		in.conv.Tools = jsonArray(raws)
		in.tools = tools
	}

	// Template variables: reasoning_effort, then chat_template_kwargs
	// (which may override it), in the client's order.
	kw := jsonObject{}
	if req.ReasoningEffort != "" {
		kw.setString("reasoning_effort", req.ReasoningEffort)
	}
	if !isNull(req.ChatTemplateKwargs) {
		o, err := parseObject(req.ChatTemplateKwargs)
		if err != nil {
			return nil, badRequest("chat_template_kwargs", "field \"chat_template_kwargs\": expected an object")
		}
		for _, f := range o {
			kw.set(f.key, f.val)
		}
	}
	if len(kw) > 0 {
		in.conv.ChatTemplateKwargs, _ = kw.MarshalJSON()
	}
	if v, ok := kw.get("thinking"); ok {
		var b bool
		if json.Unmarshal(v, &b) == nil {
			in.thinking = &b
		}
	}
	return in, nil
}

// normalizeMessage checks message i and normalizes it (see buildChatInput).
func normalizeMessage(i int, r json.RawMessage) (jsonObject, error) {
	field := func(f string) string { return fmt.Sprintf("messages[%d]%s", i, f) }
	m, err := parseObject(r)
	if err != nil {
		return nil, badRequest(field(""), "messages[%d]: expected an object with role and content", i)
	}
	var role string
	if v, _ := m.get("role"); json.Unmarshal(v, &role) != nil {
		return nil, badRequest(field(".role"), "messages[%d].role: expected one of system, developer, user, assistant, tool", i)
	}
	switch role {
	case "system", "user", "assistant", "tool":
	case "developer":
		m.setString("role", "system")
	default:
		return nil, badRequest(field(".role"), "messages[%d].role: %q is not one of system, developer, user, assistant, tool", i, role)
	}
	content, _ := m.get("content")
	switch {
	case isNull(content):
		if role != "assistant" {
			return nil, badRequest(field(".content"), "messages[%d].content: missing", i)
		}
		m.setString("content", "")
	case content[0] == '"':
	case content[0] == '[':
		var parts []json.RawMessage
		if json.Unmarshal(content, &parts) != nil {
			return nil, badRequest(field(".content"), "messages[%d].content: expected a string or an array of text parts", i)
		}
		texts := make([]string, 0, len(parts))
		for j, part := range parts {
			var p struct {
				Type string  `json:"type"`
				Text *string `json:"text"`
			}
			_ = json.Unmarshal(part, &p)
			if p.Type != "text" || p.Text == nil {
				return nil, badRequest(field(fmt.Sprintf(".content[%d]", j)), "messages[%d].content[%d]: only text parts are supported (got type %q): kt serves text-only models", i, j, p.Type)
			}
			texts = append(texts, *p.Text)
		}
		m.setString("content", strings.Join(texts, " "))
	default:
		return nil, badRequest(field(".content"), "messages[%d].content: expected a string or an array of text parts", i)
	}
	m.dropNulls()
	if role == "assistant" {
		if err := parseToolCallArguments(i, &m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// parseToolCallArguments replaces each tool_calls[j].function.arguments given
// as a JSON string (OpenAI's wire form) with the object it encodes, keeping
// its key order, as SGLang does: chat templates such as Qwen3-Coder's and
// Qwen3.5's iterate over the arguments. A string that is not a JSON object
// is a 400 naming the field.
func parseToolCallArguments(i int, m *jsonObject) error {
	raw, ok := m.get("tool_calls")
	if !ok {
		return nil
	}
	var calls []json.RawMessage
	if json.Unmarshal(raw, &calls) != nil {
		return badRequest(fmt.Sprintf("messages[%d].tool_calls", i), "messages[%d].tool_calls: expected an array of tool calls", i)
	}
	changed := false
	for j, c := range calls {
		call, err := parseObject(c)
		if err != nil {
			return badRequest(fmt.Sprintf("messages[%d].tool_calls[%d]", i, j), "messages[%d].tool_calls[%d]: expected an object", i, j)
		}
		fnRaw, ok := call.get("function")
		if !ok {
			continue
		}
		fn, err := parseObject(fnRaw)
		if err != nil {
			continue
		}
		args, ok := fn.get("arguments")
		var s string
		if !ok || json.Unmarshal(args, &s) != nil {
			continue // already an object (or absent): passed as is
		}
		name := fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, j)
		if _, err := parseObject(json.RawMessage(s)); err != nil || !json.Valid([]byte(s)) {
			return badRequest(name, "%s: must be a JSON object encoded as a string, got %.80q", name, s)
		}
		fn.set("arguments", json.RawMessage(s))
		call.set("function", mustMarshal(fn))
		calls[j] = mustMarshal(call)
		changed = true
	}
	if changed {
		m.set("tool_calls", jsonArray(calls))
	}
	return nil
}

func mustMarshal(o jsonObject) json.RawMessage {
	b, _ := o.MarshalJSON()
	return b
}

// chatState turns one choice's text stream into reasoning, answer and tool
// calls.
type chatState struct {
	idx          int
	rs           *reasoningSplitter // nil: no reasoning split
	te           *toolExtractor     // nil: no tool parsing
	content      strings.Builder
	reasoning    strings.Builder
	wantLogprobs bool
	logprobs     []chatTokenLogprob
}

// feed processes one delta and returns what it adds.
func (c *chatState) feed(s *Server, d genDelta, final bool) (reasoning, content string, lps []chatTokenLogprob) {
	content = d.Text
	if c.rs != nil {
		reasoning, content = c.rs.feed(content, final)
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
	adapter    int    // LoRA adapter id (adapterOf)
	model      string // the model responses name (responseModel)
	id         string
	created    int64
	prompt     []int32
	promptText string
	params     engine.SamplingParams
	n          int
	stops      []string
	stopRegex  []stopRegex
	skip       bool
	noTrim     bool
	tools      []toolDef
	separate   bool
	jsonMode   bool
	grammar    *constraint.Grammar // response_format json_schema
	usage      bool
	toolArray  bool // forced tool calls written as a JSON array (toolchoice.go)
	// reasoning is the reasoning parser's format for this request (nil:
	// --reasoning-parser none).
	reasoning   *reasoningFormat
	toolHistory int // chatInput.toolHistory
}

// planChat checks a chat request and renders its prompt: everything its
// choices need to run (specFor, newChatState).
func (s *Server) planChat(ctx context.Context, req *chatRequest) (*chatPlan, error) {
	adapter, err := s.adapterOf(req.Model)
	if err != nil {
		return nil, err
	}
	if err := s.needTokenizer(); err != nil {
		return nil, err
	}
	if s.opt.Template == nil {
		return nil, badRequest("messages", "this model has no chat template (start kt serve with --chat-template FILE.jinja); use /v1/completions or /generate")
	}
	in, err := buildChatInput(req)
	if err != nil {
		return nil, err
	}
	text, err := s.opt.Template.RenderContext(ctx, in.conv)
	if err != nil {
		return nil, badRequest("messages", "rendering the chat template: %v", err)
	}
	text += in.prefix
	p, n, err := req.toParams(0)
	if err != nil {
		return nil, err
	}
	stops, err := parseStop(req.Stop)
	if err != nil {
		return nil, err
	}
	stopRe, err := parseStopRegex(req.StopRegex, "stop_regex")
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
	prompt, err := s.encode("messages", text)
	if err != nil {
		return nil, err
	}
	bound := batchBound{}
	bound.add(s, n, prompt, p)
	if err := s.checkBatch(bound, batchFields{prompts: "messages", n: "n", maxTokens: "max_tokens", topLogprobs: "top_logprobs"}); err != nil {
		return nil, err
	}
	plan := &chatPlan{adapter: adapter, model: s.responseModel(req.Model),
		id: newID(), created: time.Now().Unix(), prompt: prompt, promptText: text,
		params: p, n: n, stops: stops, stopRegex: stopRe, skip: req.SkipSpecialTokens == nil || *req.SkipSpecialTokens,
		noTrim: req.NoStopTrim, separate: req.SeparateReasoning == nil || *req.SeparateReasoning,
		usage:       req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		reasoning:   reasoningFormatFor(s.opt.ReasoningParser, text, in.thinking),
		toolHistory: in.toolHistory,
	}
	if len(in.tools) > 0 {
		// As SGLang: with tools offered, special tokens stay in the text,
		// for formats whose markers are special tokens (Kimi-K2's).
		plan.skip = false
	}
	if s.opt.ToolCallParser != "none" && len(in.tools) > 0 {
		plan.tools = in.tools
	}
	g, jsonObject, err := s.routeGrammar(&req.samplingFields, req.ResponseFormat, nil)
	if err != nil {
		return nil, err
	}
	plan.grammar, plan.jsonMode = g, jsonObject
	if err := s.planToolChoice(plan, in, req.ParallelToolCalls == nil || *req.ParallelToolCalls); err != nil {
		return nil, err
	}
	return plan, nil
}

// specFor builds choice i's generation.
func (s *Server) specFor(plan *chatPlan, i int) genSpec {
	p := seedFor(plan.params, i)
	if plan.jsonMode {
		p.Constraint = jsonobject.New(s.tok, s.eng.EOSTokenIDs())
	}
	if plan.grammar != nil {
		p.Constraint = plan.grammar.NewConstraint()
	}
	if p.Constraint != nil {
		p.Constraint = s.withThinking(p.Constraint, plan.reasoning, plan.promptText)
	}
	return genSpec{
		req:   engine.Request{ID: fmt.Sprintf("%s-%d", plan.id, i), Prompt: plan.prompt, Params: p, Adapter: plan.adapter},
		stops: plan.stops, stopRegex: plan.stopRegex, skipSpecial: plan.skip, noStopTrim: plan.noTrim,
	}
}

// newChatState is choice i's output parser: reasoning and tool calls
// apart when the server's parsers and the request ask for it.
func (s *Server) newChatState(plan *chatPlan, i int) *chatState {
	c := &chatState{idx: i, wantLogprobs: plan.params.Logprobs}
	if plan.reasoning != nil && plan.separate {
		c.rs = newReasoningSplitter(plan.reasoning)
	}
	if plan.tools != nil {
		c.te = &toolExtractor{tools: plan.tools, prefix: plan.id[:8] + fmt.Sprint(i), array: plan.toolArray,
			section: sectionFormats[s.opt.ToolCallParser], history: plan.toolHistory}
	}
	return c
}

// handleChat answers /v1/chat/completions.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req chatRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	plan, err := s.planChat(r.Context(), &req)
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
	s.answerChat(w, r, plan)
}

// chatOutcome is one choice's end: its result, parser state and error.
type chatOutcome struct {
	res genResult
	st  *chatState
	err error
}

// chatTally counts the outcomes' tokens in usage (and the generated ones
// in the metrics) up to the first failure, which it returns.
func (s *Server) chatTally(plan *chatPlan, outs []chatOutcome) (*usage, error) {
	u := usage{PromptTokens: len(plan.prompt)}
	for i, o := range outs {
		if o.err != nil {
			return nil, engineError(o.err)
		}
		if o.res.Err != nil {
			return nil, fmt.Errorf("generation aborted: %w", o.res.Err)
		}
		s.met.genTok.Add(float64(o.res.OutputTokens))
		if i == 0 {
			u.cached = o.res.CachedTokens
		}
		u.CompletionTokens += o.res.OutputTokens
		u.ReasoningTokens += s.reasoningTokens(plan, o)
	}
	u.total(s.opt.CacheReport)
	return &u, nil
}

// answerChat runs the plan's choices at once and answers with all of them.
func (s *Server) answerChat(w http.ResponseWriter, r *http.Request, plan *chatPlan) {
	outs := make([]chatOutcome, plan.n)
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
			outs[i] = chatOutcome{res, st, err}
		})
	}
	wg.Wait()
	u, err := s.chatTally(plan, outs)
	if err != nil {
		writeError(w, err)
		return
	}
	resp := chatResponse{ID: plan.id, Object: "chat.completion", Created: plan.created, Model: plan.model,
		Metadata: metadata{WeightVersion: "default"}, Usage: u}
	for i, o := range outs {
		resp.Choices = append(resp.Choices, chatChoiceOf(plan, i, o))
	}
	writeJSON(w, http.StatusOK, resp)
}

// chatChoiceOf is choice i's answer: its message (reasoning and tool calls
// apart when parsed), finish reason and logprobs.
func chatChoiceOf(plan *chatPlan, i int, o chatOutcome) chatChoice {
	msg := chatMessageOut{Role: "assistant", Content: strPtr(o.st.content.String())}
	if o.st.rs != nil && o.st.reasoning.Len() > 0 {
		msg.ReasoningContent = strPtr(o.st.reasoning.String())
	}
	fr := o.res.finishReason()
	if o.st.te != nil {
		*msg.Content = o.st.te.answer(*msg.Content)
	}
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
	return ch
}

// nullIfEmpty is m, or JSON null when m is empty.
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
		return chatChunk{ID: plan.id, Object: "chat.completion.chunk", Created: plan.created, Model: plan.model, Choices: choices}
	}
	outs := make([]chatOutcome, plan.n)
	ev.fanIn(ctx, cancel, plan.n, func(i int, send func(any) error) {
		outs[i] = s.streamChatChoice(ctx, plan, i, func(c chatChunkChoice) error {
			return send(chunk([]chatChunkChoice{c}))
		})
	})
	if ev.err != nil {
		return
	}
	u, err := s.chatTally(plan, outs)
	if err != nil {
		ev.errorEvent(err)
		return
	}
	if plan.usage {
		c := chunk([]chatChunkChoice{})
		c.Usage = u
		_ = ev.send(c)
	}
	ev.done()
}

// streamChatChoice runs choice i, sending its role, each delta (reasoning,
// content, logprobs) and its finish (with the tool calls) through send. A
// delta never goes out empty: the logprobs of tokens that add no text yet
// (part of a UTF-8 character, a stop string or tag held back, a tool call)
// wait for the next delta with text, or go with the finish.
func (s *Server) streamChatChoice(ctx context.Context, plan *chatPlan, i int, send func(chatChunkChoice) error) chatOutcome {
	st := s.newChatState(plan, i)
	if err := send(chatChunkChoice{Index: i, Delta: chatDelta{Role: "assistant", Content: strPtr("")}, MatchedStop: json.RawMessage("null")}); err != nil {
		return chatOutcome{err: err}
	}
	var held []chatTokenLogprob
	emit := func(reasoning, content string, lps []chatTokenLogprob) error {
		held = append(held, lps...)
		if reasoning == "" && content == "" {
			return nil
		}
		lps, held = held, nil
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
			if held != nil {
				c.Logprobs = &chatLogprobs{Content: held}
			}
			if st.te != nil && len(st.te.calls) > 0 {
				c.Delta.ToolCalls = st.te.calls
				if fr == "stop" {
					fr = "tool_calls"
				}
			}
			err = send(c)
		}
	}
	return chatOutcome{res, st, err}
}

// precheck validates a request against the engine's limits without
// submitting it.
func (s *Server) precheck(prompt []int32, p engine.SamplingParams) error {
	if err := s.checkTokenParams(p); err != nil {
		return err
	}
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
