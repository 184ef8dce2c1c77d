package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ktserve/kt/engine"
)

// generateRequest is SGLang's native /generate body.
type generateRequest struct {
	Text                json.RawMessage `json:"text"`
	InputIDs            json.RawMessage `json:"input_ids"`
	SamplingParams      json.RawMessage `json:"sampling_params"`
	ReturnLogprob       json.RawMessage `json:"return_logprob"`
	LogprobStartLen     json.RawMessage `json:"logprob_start_len"`
	TopLogprobsNum      json.RawMessage `json:"top_logprobs_num"`
	ReturnTextInLogprob bool            `json:"return_text_in_logprobs"`
	Stream              bool            `json:"stream"`
	RID                 json.RawMessage `json:"rid"`
	LoRAPath            json.RawMessage `json:"lora_path"`
	Image               json.RawMessage `json:"image_data"`
	// TokenIDsLogprob lists tokens whose logprobs are returned at every
	// position (one list, or one per prompt: parseTokenIDsLogprob).
	TokenIDsLogprob      json.RawMessage `json:"token_ids_logprob"`
	CustomLogitProcessor json.RawMessage `json:"custom_logit_processor"`
}

// nativeSampling is SGLang's sampling_params object.
type nativeSampling struct {
	MaxNewTokens      *int            `json:"max_new_tokens"`
	MinNewTokens      int             `json:"min_new_tokens"`
	Stop              json.RawMessage `json:"stop"`
	StopTokenIDs      []int32         `json:"stop_token_ids"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`
	MinP              *float64        `json:"min_p"`
	FrequencyPenalty  float64         `json:"frequency_penalty"`
	PresencePenalty   float64         `json:"presence_penalty"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	SkipSpecialTokens *bool           `json:"skip_special_tokens"`
	NoStopTrim        bool            `json:"no_stop_trim"`
	N                 *int            `json:"n"`
	Seed              *int64          `json:"sampling_seed"`
	JSONSchema        json.RawMessage `json:"json_schema"`
	Regex             string          `json:"regex"`
	EBNF              string          `json:"ebnf"`
	StructuralTag     json.RawMessage `json:"structural_tag"`
	StopRegex         json.RawMessage `json:"stop_regex"`
	LogitBias         json.RawMessage `json:"logit_bias"`
	CustomParams      json.RawMessage `json:"custom_params"`
	// SpacesBetweenSpecialTokens changes nothing for byte-level BPE
	// tokenizers (Hugging Face's fast tokenizers ignore it too).
	SpacesBetweenSpecialTokens *bool `json:"spaces_between_special_tokens"`
	StreamInterval             *int  `json:"stream_interval"`
}

// defaultMaxNewTokens is SGLang's default for /generate.
const defaultMaxNewTokens = 128

func (ns *nativeSampling) toParams() (engine.SamplingParams, []string, int, error) {
	p := engine.DefaultSamplingParams()
	p.MaxNewTokens = defaultMaxNewTokens
	if ns.MaxNewTokens != nil {
		if *ns.MaxNewTokens < 0 {
			return p, nil, 0, badRequest("sampling_params.max_new_tokens", "max_new_tokens must not be negative, got %d", *ns.MaxNewTokens)
		}
		p.MaxNewTokens = *ns.MaxNewTokens
		p.PromptOnly = p.MaxNewTokens == 0 // score the prompt only
	}
	if err := ns.checkExtensions(&p); err != nil {
		return p, nil, 0, err
	}
	p.MinNewTokens = ns.MinNewTokens
	if ns.Temperature != nil {
		p.Temperature = *ns.Temperature
	}
	if ns.TopP != nil {
		p.TopP = *ns.TopP
	}
	if ns.TopK != nil {
		p.TopK = *ns.TopK
		if p.TopK == 0 {
			p.TopK = -1
		}
	}
	if ns.MinP != nil {
		p.MinP = *ns.MinP
	}
	if ns.RepetitionPenalty != nil {
		p.RepetitionPenalty = *ns.RepetitionPenalty
	}
	p.FrequencyPenalty, p.PresencePenalty = ns.FrequencyPenalty, ns.PresencePenalty
	p.IgnoreEOS = ns.IgnoreEOS
	p.StopTokenIDs = ns.StopTokenIDs
	if ns.Seed != nil {
		p.Seed, p.HasSeed = uint64(*ns.Seed), true
	}
	if err := p.Validate(); err != nil {
		return p, nil, 0, paramError(err)
	}
	stops, err := parseStop(ns.Stop)
	if err != nil {
		return p, nil, 0, err
	}
	n := 1
	if ns.N != nil {
		if *ns.N < 1 || *ns.N > maxN {
			return p, nil, 0, badRequest("sampling_params.n", "n must be in [1, %d], got %d", maxN, *ns.N)
		}
		n = *ns.N
	}
	return p, stops, n, nil
}

// nativeItem is one sequence a /generate call runs: prompt prompt of the
// call, with its own seed and constraint when n > 1.
type nativeItem struct {
	spec     genSpec
	prompt   int
	logprobs bool
}

// nativeCall is a parsed /generate request.
type nativeCall struct {
	req      generateRequest
	prompts  [][]int32
	adapters []int            // LoRA adapter of each prompt
	sps      []nativeSampling // sampling_params of each prompt
	lp       nativeLogprobs   // return_logprob and its companions, per prompt
	batch    bool             // answer with a list
	items    []nativeItem     // set by planGenerate
	start    time.Time        // when the request arrived
}

// handleGenerate answers SGLang's native /generate.
func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	call, err := s.parseGenerate(w, r)
	if err == nil {
		err = s.planGenerate(call)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.met.requests.Inc()
	defer func() { s.met.e2e.Observe(time.Since(call.start).Seconds()) }()
	if call.req.Stream {
		s.streamGenerate(w, r, call)
		return
	}
	s.answerGenerate(w, r, call)
}

// parseGenerate reads a /generate body: its prompts, their adapters,
// sampling parameters and logprob requests.
func (s *Server) parseGenerate(w http.ResponseWriter, r *http.Request) (*nativeCall, error) {
	call := &nativeCall{start: time.Now()}
	req := &call.req
	if err := decodeJSON(w, r, req); err != nil {
		return nil, err
	}
	if present(req.Image) {
		return nil, badRequest("image_data", "image inputs are not supported: kt serves text-only models")
	}
	var err error
	if call.prompts, call.batch, err = s.nativePrompts(req); err != nil {
		return nil, err
	}
	n := len(call.prompts)
	if call.adapters, err = s.loraPathIDs(req.LoRAPath, n); err != nil {
		return nil, err
	}
	if err := checkSamplingKeys(req.SamplingParams); err != nil {
		return nil, err
	}
	if call.sps, err = nativeSamplings(req.SamplingParams, n); err != nil {
		return nil, err
	}
	if err := refuseCustomLogitProcessor(req.CustomLogitProcessor, nil, ""); err != nil {
		return nil, err
	}
	parallel := false // some prompt samples n > 1 times
	for _, sp := range call.sps {
		parallel = parallel || sp.N != nil && *sp.N > 1
	}
	if call.lp, err = parseNativeLogprobs(req, n, parallel); err != nil {
		return nil, err
	}
	return call, nil
}

// present reports whether a JSON field was given and is not null.
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// nativePrompts reads the prompts of a /generate body (text or input_ids)
// and whether they came as a list (batch).
func (s *Server) nativePrompts(req *generateRequest) (prompts [][]int32, batch bool, err error) {
	switch {
	case present(req.Text) && present(req.InputIDs):
		return nil, false, badRequest("text", "give either text or input_ids, not both")
	case present(req.InputIDs):
		var one []int32
		var nested [][]int32
		batch = json.Unmarshal(req.InputIDs, &nested) == nil
		if !batch && json.Unmarshal(req.InputIDs, &one) != nil {
			return nil, false, badRequest("input_ids", "field \"input_ids\": expected an array of token ids or an array of such arrays (give text in \"text\")")
		}
		prompts, err = s.parsePrompts(req.InputIDs, "input_ids")
		return prompts, batch, err
	case present(req.Text):
		var str string
		if json.Unmarshal(req.Text, &str) != nil {
			var list []string
			if json.Unmarshal(req.Text, &list) != nil {
				return nil, false, badRequest("text", "field \"text\": expected a string or an array of strings")
			}
			batch = true
		}
		prompts, err = s.parsePrompts(req.Text, "text")
		return prompts, batch, err
	}
	return nil, false, badRequest("text", "give the prompt as text or input_ids")
}

// nativeSamplings reads sampling_params: one object for all n prompts, or
// one per prompt.
func nativeSamplings(raw json.RawMessage, n int) ([]nativeSampling, error) {
	sps := make([]nativeSampling, n)
	if !present(raw) {
		return sps, nil
	}
	var one nativeSampling
	err := json.Unmarshal(raw, &one)
	if err == nil {
		for i := range sps {
			sps[i] = one
		}
		return sps, nil
	}
	var list []nativeSampling
	if json.Unmarshal(raw, &list) != nil {
		return nil, samplingTypeError(err)
	}
	if len(list) != n {
		return nil, badRequest("sampling_params", "%d sampling_params for %d prompts", len(list), n)
	}
	return list, nil
}

// generateFields are /generate's names for the fields that set its batch
// and response size.
var generateFields = batchFields{prompts: "text", n: "sampling_params.n",
	maxTokens: "sampling_params.max_new_tokens", topLogprobs: "top_logprobs_num"}

// planGenerate checks each prompt's sampling parameters against the server
// and the engine, bounds the batch and its response before compiling any
// grammar, and lists the sequences to run (call.items).
func (s *Server) planGenerate(call *nativeCall) error {
	type promptPlan struct {
		p      engine.SamplingParams
		stops  []string
		stopRe []stopRegex
		n      int
	}
	plans := make([]promptPlan, len(call.prompts))
	var bound batchBound
	for i, pr := range call.prompts {
		p, stops, n, err := call.sps[i].toParams()
		if err != nil {
			return err
		}
		if len(stops) > 0 && s.tok == nil {
			return badRequest("sampling_params.stop", "stop strings need a tokenizer; this server was started with --skip-tokenizer-init (use stop_token_ids)")
		}
		stopRe, err := parseStopRegex(call.sps[i].StopRegex, "sampling_params.stop_regex")
		if err != nil {
			return err
		}
		if len(stopRe) > 0 && s.tok == nil {
			return badRequest("sampling_params.stop_regex", "stop regexes need a tokenizer; this server was started with --skip-tokenizer-init (use stop_token_ids)")
		}
		if call.lp.logprob[i] {
			p.Logprobs = true
			p.TopLogprobs = call.lp.topN[i]
			p.PromptLogprobs = call.lp.startLen[i] >= 0
			if p.PromptLogprobs {
				p.PromptTopLogprobs = call.lp.topN[i]
			}
			p.TokenIDsLogprob = call.lp.tokenIDs[i]
		}
		if err := s.precheck(pr, p); err != nil {
			return err
		}
		bound.add(s, n, pr, p)
		plans[i] = promptPlan{p, stops, stopRe, n}
	}
	if err := s.checkBatch(bound, generateFields); err != nil {
		return err
	}
	for i, pr := range call.prompts {
		sp, pl := &call.sps[i], plans[i]
		g, err := s.nativeGrammar(sp)
		if err != nil {
			return err
		}
		if pl.n > 1 {
			call.batch = true
		}
		skip := sp.SkipSpecialTokens == nil || *sp.SkipSpecialTokens
		for j := range pl.n {
			pj := seedFor(pl.p, j)
			if g != nil {
				pj.Constraint = g.NewConstraint()
			}
			call.items = append(call.items, nativeItem{
				spec: genSpec{req: engine.Request{ID: fmt.Sprintf("gen-%d-%d", i, j), Prompt: pr, Params: pj, Adapter: call.adapters[i]},
					stops: pl.stops, stopRegex: pl.stopRe, skipSpecial: skip, noStopTrim: sp.NoStopTrim},
				prompt: i, logprobs: call.lp.logprob[i],
			})
		}
	}
	return nil
}

// nativeOutput is one item's answer object (a stream chunk unless final).
func (s *Server) nativeOutput(call *nativeCall, it nativeItem, res *genResult, ids []int32, text string, final bool) map[string]any {
	req := &call.req
	meta := map[string]any{
		"id":                it.spec.req.ID,
		"prompt_tokens":     len(call.prompts[it.prompt]),
		"completion_tokens": len(ids),
		"cached_tokens":     res.CachedTokens,
		"weight_version":    "default",
		"e2e_latency":       time.Since(call.start).Seconds(),
		"finish_reason":     nil,
	}
	if final {
		meta["finish_reason"] = nativeFinish(res, len(ids))
	}
	if it.logprobs {
		meta["output_token_logprobs"] = s.nativeLogprobs(res.Tokens, req.ReturnTextInLogprob)
		if call.lp.topN[it.prompt] > 0 {
			tops := make([]any, len(res.Tokens))
			for k, t := range res.Tokens {
				tops[k] = s.nativeTop(t.Top, req.ReturnTextInLogprob)
			}
			meta["output_top_logprobs"] = tops
		}
		if call.lp.tokenIDs[it.prompt] != nil {
			meta["output_token_ids_logprobs"] = s.nativeOutputIDs(res.Tokens, req.ReturnTextInLogprob)
		}
		if it.spec.req.Params.PromptLogprobs {
			startLen := call.lp.startLen[it.prompt]
			prompt := call.prompts[it.prompt]
			meta["input_token_logprobs"] = s.nativeInput(prompt, res.PromptLogprobs, startLen, req.ReturnTextInLogprob)
			if call.lp.topN[it.prompt] > 0 {
				meta["input_top_logprobs"] = s.nativeInputLists(len(prompt), res.PromptTop, startLen, req.ReturnTextInLogprob)
			}
			if call.lp.tokenIDs[it.prompt] != nil {
				meta["input_token_ids_logprobs"] = s.nativeInputLists(len(prompt), res.PromptIDs, startLen, req.ReturnTextInLogprob)
			}
		}
	}
	out := map[string]any{"output_ids": ids, "meta_info": meta}
	if s.tok != nil {
		out["text"] = text
	}
	return out
}

// answerGenerate runs the call's items at once and answers with their
// outputs (a list for a batch).
func (s *Server) answerGenerate(w http.ResponseWriter, r *http.Request, call *nativeCall) {
	results := make([]genResult, len(call.items))
	errs := make([]error, len(call.items))
	var wg sync.WaitGroup
	for i, it := range call.items {
		wg.Go(func() {
			results[i], errs[i] = s.run(r.Context(), it.spec, func(genDelta) error { return nil })
		})
	}
	wg.Wait()
	if err := s.tally(results, errs); err != nil {
		writeError(w, err)
		return
	}
	outs := make([]any, len(call.items))
	for i, it := range call.items {
		outs[i] = s.nativeOutput(call, it, &results[i], tokenIDs(results[i].Tokens), results[i].Text, true)
	}
	if call.batch {
		writeJSON(w, http.StatusOK, outs)
		return
	}
	writeJSON(w, http.StatusOK, outs[0])
}

func samplingTypeError(err error) error {
	if te, ok := err.(*json.UnmarshalTypeError); ok && te.Field != "" {
		return badRequest("sampling_params."+te.Field, "sampling_params.%s: expected %s, got JSON %s", te.Field, jsonTypeName(te.Type.String()), te.Value)
	}
	return badRequest("sampling_params", "sampling_params: expected an object (or one per prompt): %v", err)
}

func tokenIDs(toks []engine.Token) []int32 {
	out := make([]int32, len(toks))
	for i, t := range toks {
		out[i] = t.ID
	}
	return out
}

// nativeFinish is SGLang's finish_reason object.
func nativeFinish(res *genResult, n int) map[string]any {
	switch res.Reason {
	case engine.FinishStop:
		return map[string]any{"type": "stop", "matched": nullIfEmpty(res.MatchedStop)}
	case engine.FinishLength:
		return map[string]any{"type": "length", "length": n}
	}
	msg := "aborted"
	if res.Err != nil {
		msg = res.Err.Error()
	}
	return map[string]any{"type": "abort", "message": msg}
}

// nativeLogprobs gives [logprob, id, text|null] per token.
func (s *Server) nativeLogprobs(toks []engine.Token, withText bool) []any {
	out := make([]any, len(toks))
	for i, t := range toks {
		out[i] = s.triple(finiteLogprob(t.Logprob), t.ID, withText)
	}
	return out
}

func (s *Server) nativeTop(top []engine.TokenLogprob, withText bool) []any {
	out := make([]any, len(top))
	for i, t := range top {
		out[i] = s.triple(finiteLogprob(t.Logprob), t.ID, withText)
	}
	return out
}

func (s *Server) nativeInput(prompt []int32, lps []engine.TokenLogprob, startLen int, withText bool) []any {
	var out []any
	for j := startLen; j < len(prompt); j++ {
		if j == 0 || j-1 >= len(lps) {
			out = append(out, s.tripleAny(nil, prompt[j], withText))
			continue
		}
		out = append(out, s.triple(finiteLogprob(lps[j-1].Logprob), prompt[j], withText))
	}
	return out
}

func (s *Server) triple(lp float64, id int32, withText bool) []any {
	return s.tripleAny(lp, id, withText)
}

func (s *Server) tripleAny(lp any, id int32, withText bool) []any {
	var text any
	if withText && s.tok != nil {
		t, _ := s.tokenText(id)
		text = t
	}
	return []any{lp, id, text}
}
