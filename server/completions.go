package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/jsonconstraint"
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
		return [][]int32{s.tok.Encode(one)}, nil
	case json.Unmarshal(raw, &ids) == nil:
		return [][]int32{ids}, nil
	case json.Unmarshal(raw, &many) == nil:
		if err := s.needTokenizer(); err != nil {
			return nil, err
		}
		out := make([][]int32, len(many))
		for i, t := range many {
			out[i] = s.tok.Encode(t)
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

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req completionRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	adapter, err := s.adapterOf(req.Model)
	if err != nil {
		writeError(w, err)
		return
	}
	prompts, err := s.parsePrompts(req.Prompt, "prompt")
	if err != nil {
		writeError(w, err)
		return
	}
	if req.Suffix != "" {
		writeError(w, badRequest("suffix", "suffix is not supported yet in kt"))
		return
	}
	p, n, err := req.toParams(16) // OpenAI's default max_tokens for completions
	if err != nil {
		writeError(w, err)
		return
	}
	if req.BestOf != nil && *req.BestOf != n {
		writeError(w, badRequest("best_of", "best_of other than n is not supported yet in kt"))
		return
	}
	stops, err := parseStop(req.Stop)
	if err != nil {
		writeError(w, err)
		return
	}
	if (len(stops) > 0 || req.Echo) && s.tok == nil {
		writeError(w, s.needTokenizer())
		return
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > engine.MaxTopLogprobs {
			writeError(w, badRequest("logprobs", "logprobs must be in [0, %d], got %d", engine.MaxTopLogprobs, *req.Logprobs))
			return
		}
		p.Logprobs = true
		p.TopLogprobs = *req.Logprobs
		p.PromptLogprobs = req.Echo
	}
	g, jsonObject, err := s.routeGrammar(&req.samplingFields, req.ResponseFormat, req.JSONSchema)
	if err != nil {
		writeError(w, err)
		return
	}
	for _, pr := range prompts {
		if err := s.precheck(pr, p); err != nil {
			writeError(w, err)
			return
		}
	}
	s.met.requests.Inc()
	defer func() { s.met.e2e.Observe(time.Since(start).Seconds()) }()
	id, created := "cmpl-"+newID(), time.Now().Unix()
	skip := req.SkipSpecialTokens == nil || *req.SkipSpecialTokens
	total := len(prompts) * n
	specs := make([]genSpec, total)
	for i := range total {
		pr := prompts[i/n]
		s.met.promptTok.Add(float64(len(pr)))
		pi := seedFor(p, i%n)
		switch {
		case g != nil:
			pi.Constraint = g.NewConstraint()
		case jsonObject:
			pi.Constraint = jsonconstraint.New(s.tok, s.eng.EOSTokenIDs())
		}
		specs[i] = genSpec{req: engine.Request{ID: fmt.Sprintf("%s-%d", id, i), Prompt: pr, Params: pi, Adapter: adapter},
			stops: stops, skipSpecial: skip, noStopTrim: req.NoStopTrim}
	}
	echo := func(i int) string {
		if !req.Echo || s.tok == nil {
			return ""
		}
		return s.tok.Decode(prompts[i/n])
	}
	mkChoice := func(i int, text string, toks []engine.Token, res *genResult, withPrompt bool) completionChoice {
		c := completionChoice{Index: i, Text: text, MatchedStop: json.RawMessage("null")}
		if p.Logprobs {
			c.Logprobs = s.completionLogprobs(prompts[i/n], res, toks, withPrompt && req.Echo, text)
		}
		return c
	}

	if !req.Stream {
		results := make([]genResult, total)
		errs := make([]error, total)
		var wg sync.WaitGroup
		for i := range total {
			wg.Go(func() {
				results[i], errs[i] = s.run(r.Context(), specs[i], func(genDelta) error { return nil })
			})
		}
		wg.Wait()
		resp := completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.opt.ModelName}
		u := usage{}
		for i := range total {
			if errs[i] != nil {
				writeError(w, engineError(errs[i]))
				return
			}
			res := &results[i]
			if res.Err != nil {
				writeError(w, fmt.Errorf("generation aborted: %w", res.Err))
				return
			}
			s.met.genTok.Add(float64(res.OutputTokens))
			c := mkChoice(i, echo(i)+res.Text, res.Tokens, res, true)
			fr := res.finishReason()
			c.FinishReason = &fr
			c.MatchedStop = nullIfEmpty(res.MatchedStop)
			resp.Choices = append(resp.Choices, c)
			if i%n == 0 {
				u.PromptTokens += len(prompts[i/n])
				u.cached += res.CachedTokens
			}
			u.CompletionTokens += res.OutputTokens
		}
		u.total(s.opt.CacheReport)
		resp.Usage = &u
		writeJSON(w, http.StatusOK, resp)
		return
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ev := newSSE(w)
	events := make(chan completionResponse, 16)
	results := make([]genResult, total)
	errs := make([]error, total)
	var wg sync.WaitGroup
	for i := range total {
		wg.Go(func() {
			send := func(c completionChoice) error {
				select {
				case events <- completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.opt.ModelName, Choices: []completionChoice{c}}:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			first := true
			res, err := s.run(ctx, specs[i], func(d genDelta) error {
				text := d.Text
				if first {
					text = echo(i) + text
				}
				withPrompt := first
				first = false
				return send(mkChoice(i, text, d.Tokens, &genResult{PromptLogprobs: d.PromptLogprobs}, withPrompt))
			})
			if err == nil && res.Err == nil {
				fr := res.finishReason()
				c := completionChoice{Index: i, FinishReason: &fr, MatchedStop: nullIfEmpty(res.MatchedStop)}
				err = send(c)
			}
			results[i], errs[i] = res, err
		})
	}
	go func() {
		wg.Wait()
		close(events)
	}()
	for e := range events {
		if ev.send(e) != nil {
			cancel()
		}
	}
	if ev.err != nil {
		return
	}
	u := usage{}
	for i := range total {
		if errs[i] != nil {
			ev.errorEvent(engineError(errs[i]))
			return
		}
		if results[i].Err != nil {
			ev.errorEvent(fmt.Errorf("generation aborted: %w", results[i].Err))
			return
		}
		s.met.genTok.Add(float64(results[i].OutputTokens))
		if i%n == 0 {
			u.PromptTokens += len(prompts[i/n])
			u.cached += results[i].CachedTokens
		}
		u.CompletionTokens += results[i].OutputTokens
	}
	u.total(s.opt.CacheReport)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		_ = ev.send(completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.opt.ModelName, Choices: []completionChoice{}, Usage: &u})
	}
	ev.done()
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
			add(id, &v, nil)
		}
	}
	for _, t := range toks {
		v := finiteLogprob(t.Logprob)
		top := map[string]float64{}
		for _, alt := range t.Top {
			at, _ := s.tokenText(alt.ID)
			if _, dup := top[at]; !dup {
				top[at] = finiteLogprob(alt.Logprob)
			}
		}
		add(t.ID, &v, top)
	}
	return lp
}
