package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ktserve/kt/constraint"
	"github.com/ktserve/kt/constraint/jsonobject"
	"github.com/ktserve/kt/engine"
)

// parsePrompts accepts a string, an array of strings, an array of token
// ids, or an array of arrays of token ids.
func (s *Server) parsePrompts(raw json.RawMessage, field string) ([][]int32, error) {
	var one string
	var many []string
	var ids []int32
	var idss [][]int32
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, badRequest(field, "%s is required", field)
	case json.Unmarshal(raw, &one) == nil:
		if err := s.needTokenizer(); err != nil {
			return nil, err
		}
		ids, err := s.encode(field, one)
		if err != nil {
			return nil, err
		}
		return [][]int32{ids}, nil
	case json.Unmarshal(raw, &ids) == nil:
		return [][]int32{ids}, nil
	case json.Unmarshal(raw, &many) == nil:
		if err := s.needTokenizer(); err != nil {
			return nil, err
		}
		out := make([][]int32, len(many))
		for i, t := range many {
			ids, err := s.encode(fmt.Sprintf("%s[%d]", field, i), t)
			if err != nil {
				return nil, err
			}
			out[i] = ids
		}
		if len(out) == 0 {
			return nil, badRequest(field, "%s is an empty array", field)
		}
		return out, nil
	case json.Unmarshal(raw, &idss) == nil:
		if len(idss) == 0 {
			return nil, badRequest(field, "%s is an empty array", field)
		}
		return idss, nil
	}
	return nil, badRequest(field, "field %q: expected a string, an array of strings, an array of token ids or an array of arrays of token ids", field)
}

// completionCall is a parsed and checked /v1/completions request: n
// choices per prompt, choice i from prompt i/n.
type completionCall struct {
	req        completionRequest
	prompts    [][]int32
	n          int
	p          engine.SamplingParams
	stops      []string
	stopRegex  []stopRegex
	grammar    *constraint.Grammar // nil: none
	jsonObject bool                // response_format json_object
	adapter    int
	model      string // the model responses name (responseModel)
	id         string
	created    int64
	specs      []genSpec // set by planCompletion
	start      time.Time // when the request arrived
}

// handleCompletions answers /v1/completions.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	call, err := s.parseCompletion(w, r)
	if err == nil {
		err = s.checkCompletion(call)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.met.requests.Inc()
	defer func() { s.met.e2e.Observe(time.Since(call.start).Seconds()) }()
	s.planCompletion(call)
	if call.req.Stream {
		s.streamCompletion(w, r, call)
		return
	}
	s.answerCompletion(w, r, call)
}

// parseCompletion reads a /v1/completions body into a call: its prompts
// and sampling parameters.
func (s *Server) parseCompletion(w http.ResponseWriter, r *http.Request) (*completionCall, error) {
	call := &completionCall{start: time.Now()}
	req := &call.req
	if err := decodeJSON(w, r, req); err != nil {
		return nil, err
	}
	var err error
	if call.adapter, err = s.adapterOf(req.Model); err != nil {
		return nil, err
	}
	call.model = s.responseModel(req.Model)
	if call.prompts, err = s.parsePrompts(req.Prompt, "prompt"); err != nil {
		return nil, err
	}
	if req.Suffix != "" {
		return nil, badRequest("suffix", "suffix is not supported yet in kt")
	}
	promptOnly := req.MaxTokens != nil && *req.MaxTokens == 0
	if promptOnly {
		req.MaxTokens = nil // max_tokens 0: score the prompt only
	}
	if call.p, call.n, err = req.toParams(16); err != nil { // OpenAI's default max_tokens for completions
		return nil, err
	}
	if promptOnly {
		call.p.MaxNewTokens, call.p.PromptOnly = 0, true
	}
	if call.stopRegex, err = parseStopRegex(req.StopRegex, "stop_regex"); err != nil {
		return nil, err
	}
	if req.BestOf != nil && *req.BestOf != call.n {
		return nil, badRequest("best_of", "best_of other than n is not supported yet in kt")
	}
	if call.stops, err = parseStop(req.Stop); err != nil {
		return nil, err
	}
	return call, nil
}

// checkCompletion checks what the call asks of the server (a tokenizer,
// logprobs, a grammar), each prompt against the engine's limits, and the
// batch and its response against the server's limits.
func (s *Server) checkCompletion(call *completionCall) error {
	req := &call.req
	if (len(call.stops) > 0 || len(call.stopRegex) > 0 || req.Echo) && s.tok == nil {
		return s.needTokenizer()
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > engine.MaxTopLogprobs {
			return badRequest("logprobs", "logprobs must be in [0, %d], got %d", engine.MaxTopLogprobs, *req.Logprobs)
		}
		call.p.Logprobs = true
		call.p.TopLogprobs = *req.Logprobs
		call.p.PromptLogprobs = req.Echo
		if req.Echo {
			call.p.PromptTopLogprobs = *req.Logprobs
		}
	}
	var bound batchBound
	for _, pr := range call.prompts {
		if err := s.precheck(pr, call.p); err != nil {
			return err
		}
		bound.add(s, call.n, pr, call.p)
	}
	if err := s.checkBatch(bound, batchFields{prompts: "prompt", n: "n", maxTokens: "max_tokens", topLogprobs: "logprobs"}); err != nil {
		return err
	}
	var err error
	call.grammar, call.jsonObject, err = s.routeGrammar(&req.samplingFields, req.ResponseFormat, req.JSONSchema)
	return err
}

// planCompletion makes the call's sequences (call.specs), each with its
// seed and constraint, and counts their prompt tokens.
func (s *Server) planCompletion(call *completionCall) {
	req := &call.req
	call.id, call.created = "cmpl-"+newID(), time.Now().Unix()
	skip := req.SkipSpecialTokens == nil || *req.SkipSpecialTokens
	call.specs = make([]genSpec, len(call.prompts)*call.n)
	for i := range call.specs {
		pr := call.prompts[i/call.n]
		s.met.promptTok.Add(float64(len(pr)))
		pi := seedFor(call.p, i%call.n)
		switch {
		case call.grammar != nil:
			pi.Constraint = call.grammar.NewConstraint()
		case call.jsonObject:
			pi.Constraint = jsonobject.New(s.tok, s.eng.EOSTokenIDs())
		}
		call.specs[i] = genSpec{req: engine.Request{ID: fmt.Sprintf("%s-%d", call.id, i), Prompt: pr, Params: pi, Adapter: call.adapter},
			stops: call.stops, stopRegex: call.stopRegex, skipSpecial: skip, noStopTrim: req.NoStopTrim}
	}
}

// echo is the prompt text choice i starts with (echo: true), else "".
func (s *Server) echo(call *completionCall, i int) string {
	if !call.req.Echo || s.tok == nil {
		return ""
	}
	return s.tok.Decode(call.prompts[i/call.n])
}

// completionChoiceOf is choice i with text and, when asked, the logprobs
// of toks (and of the prompt, withPrompt and echo).
func (s *Server) completionChoiceOf(call *completionCall, i int, text string, toks []engine.Token, res *genResult, withPrompt bool) completionChoice {
	c := completionChoice{Index: i, Text: text, MatchedStop: json.RawMessage("null")}
	if call.p.Logprobs {
		c.Logprobs = s.completionLogprobs(call.prompts[i/call.n], res, toks, withPrompt && call.req.Echo, text)
	}
	return c
}

// completionUsage counts the call's tokens (each prompt once) from its
// results.
func (s *Server) completionUsage(call *completionCall, results []genResult) *usage {
	u := usage{}
	for i := range results {
		if i%call.n == 0 {
			u.PromptTokens += len(call.prompts[i/call.n])
			u.cached += results[i].CachedTokens
		}
		u.CompletionTokens += results[i].OutputTokens
	}
	u.total(s.opt.CacheReport)
	return &u
}

// tally counts the generated tokens of the results, in order, in the
// metrics up to the first failure (an engine error, or an aborted
// generation), which it returns; nil if none failed.
func (s *Server) tally(results []genResult, errs []error) error {
	for i := range results {
		if errs[i] != nil {
			return engineError(errs[i])
		}
		if results[i].Err != nil {
			return fmt.Errorf("generation aborted: %w", results[i].Err)
		}
		s.met.genTok.Add(float64(results[i].OutputTokens))
	}
	return nil
}

// answerCompletion runs the call's sequences at once and answers with
// every choice.
func (s *Server) answerCompletion(w http.ResponseWriter, r *http.Request, call *completionCall) {
	results := make([]genResult, len(call.specs))
	errs := make([]error, len(call.specs))
	var wg sync.WaitGroup
	for i := range call.specs {
		wg.Go(func() {
			results[i], errs[i] = s.run(r.Context(), call.specs[i], func(genDelta) error { return nil })
		})
	}
	wg.Wait()
	if err := s.tally(results, errs); err != nil {
		writeError(w, err)
		return
	}
	resp := completionResponse{ID: call.id, Object: "text_completion", Created: call.created, Model: call.model}
	for i := range results {
		res := &results[i]
		c := s.completionChoiceOf(call, i, s.echo(call, i)+res.Text, res.Tokens, res, true)
		fr := res.finishReason()
		c.FinishReason = &fr
		c.MatchedStop = nullIfEmpty(res.MatchedStop)
		resp.Choices = append(resp.Choices, c)
	}
	resp.Usage = s.completionUsage(call, results)
	writeJSON(w, http.StatusOK, resp)
}

// streamCompletion runs the call's sequences at once, sending each delta
// as an event, then each choice's finish, then the usage when asked.
func (s *Server) streamCompletion(w http.ResponseWriter, r *http.Request, call *completionCall) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ev := newSSE(w)
	results := make([]genResult, len(call.specs))
	errs := make([]error, len(call.specs))
	ev.fanIn(ctx, cancel, len(call.specs), func(i int, emit func(any) error) {
		send := func(c completionChoice) error {
			return emit(completionResponse{ID: call.id, Object: "text_completion", Created: call.created, Model: call.model, Choices: []completionChoice{c}})
		}
		// A chunk goes out only with text: tokens that add none yet
		// (part of a UTF-8 character, a possible stop string) wait
		// with their logprobs for the next chunk with text, or for
		// the finish. text_offset counts the bytes of the tokens
		// before, from the choice's start (as without streaming).
		var held []engine.Token
		var prompt []engine.TokenLogprob
		var promptTop [][]engine.TokenLogprob
		sent, off := false, 0
		res, err := s.run(ctx, call.specs[i], func(d genDelta) error {
			held = append(held, d.Tokens...)
			if d.PromptLogprobs != nil {
				prompt, promptTop = d.PromptLogprobs, d.PromptTop
			}
			text := d.Text
			if !sent {
				text = s.echo(call, i) + text
			}
			if text == "" {
				return nil
			}
			c := s.completionChoiceOf(call, i, text, held, &genResult{PromptLogprobs: prompt, PromptTop: promptTop}, !sent)
			off = shiftOffsets(c.Logprobs, off)
			held, sent = nil, true
			return send(c)
		})
		if err == nil && res.Err == nil {
			fr := res.finishReason()
			c := completionChoice{Index: i, FinishReason: &fr, MatchedStop: nullIfEmpty(res.MatchedStop)}
			if len(held) > 0 {
				c.Logprobs = s.completionChoiceOf(call, i, "", held, &genResult{PromptLogprobs: prompt, PromptTop: promptTop}, !sent).Logprobs
				shiftOffsets(c.Logprobs, off)
			}
			err = send(c)
		}
		results[i], errs[i] = res, err
	})
	if ev.err != nil {
		return
	}
	if err := s.tally(results, errs); err != nil {
		ev.errorEvent(err)
		return
	}
	u := s.completionUsage(call, results)
	if call.req.StreamOptions != nil && call.req.StreamOptions.IncludeUsage {
		_ = ev.send(completionResponse{ID: call.id, Object: "text_completion", Created: call.created, Model: call.model, Choices: []completionChoice{}, Usage: u})
	}
	ev.done()
}

// shiftOffsets moves lp's text offsets by off bytes and returns the
// offset after its last token (off for nil or no tokens).
func shiftOffsets(lp *completionLogprob, off int) int {
	if lp == nil || len(lp.TextOffset) == 0 {
		return off
	}
	for j := range lp.TextOffset {
		lp.TextOffset[j] += off
	}
	last := len(lp.TextOffset) - 1
	return lp.TextOffset[last] + len(lp.Tokens[last])
}

// completionLogprobs builds the legacy logprobs object; with echo the prompt
// tokens come first (the first with a null logprob).
func (s *Server) completionLogprobs(prompt []int32, res *genResult, toks []engine.Token, echo bool, text string) *completionLogprob {
	lp := &completionLogprob{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	off := 0
	add := func(id int32, logprob *float64, top map[string]float64) {
		t, _ := s.tokenText(id)
		lp.Tokens = append(lp.Tokens, t)
		lp.TokenLogprobs = append(lp.TokenLogprobs, logprob)
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, off)
		off += len(t)
	}
	if echo && res != nil {
		for j, id := range prompt {
			if j == 0 || j-1 >= len(res.PromptLogprobs) {
				add(id, nil, nil)
				continue
			}
			v := finiteLogprob(res.PromptLogprobs[j-1].Logprob)
			var top map[string]float64
			if j-1 < len(res.PromptTop) {
				top = s.topMap(res.PromptTop[j-1])
			}
			add(id, &v, top)
		}
	}
	for _, t := range toks {
		v := finiteLogprob(t.Logprob)
		add(t.ID, &v, s.topMap(t.Top))
	}
	return lp
}
