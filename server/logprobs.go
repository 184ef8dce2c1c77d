package server

import (
	"github.com/ktserve/kt/engine"
)

// checkExtensions reads the sampling_params SGLang has beyond the OpenAI
// set into p: logit_bias, and refuses custom_params and a stream_interval
// other than 1.
func (ns *nativeSampling) checkExtensions(p *engine.SamplingParams) error {
	bias, err := parseLogitBias(ns.LogitBias, "sampling_params.logit_bias")
	if err != nil {
		return err
	}
	p.LogitBias = bias
	if err := refuseCustomLogitProcessor(nil, ns.CustomParams, "sampling_params."); err != nil {
		return err
	}
	if ns.StreamInterval != nil && *ns.StreamInterval != 1 {
		return badRequest("sampling_params.stream_interval", "sampling_params.stream_interval other than 1 is not supported yet in kt (a stream sends every token as it comes), got %d", *ns.StreamInterval)
	}
	return nil
}

// nativeOutputIDs gives, per output token, the logprobs of the requested
// token_ids_logprob tokens as [logprob, id, text|null] (SGLang's
// output_token_ids_logprobs).
func (s *Server) nativeOutputIDs(toks []engine.Token, withText bool) []any {
	out := make([]any, len(toks))
	for i, t := range toks {
		out[i] = s.nativeTop(t.IDs, withText)
	}
	return out
}

// nativeInputLists gives SGLang's input_top_logprobs or
// input_token_ids_logprobs for a prompt of n tokens from position
// startLen on: null for position 0 (nothing predicts it), else the list
// of [logprob, id, text|null] at that position (lists[j-1] for position j).
func (s *Server) nativeInputLists(n int, lists [][]engine.TokenLogprob, startLen int, withText bool) []any {
	out := make([]any, 0, max(n-startLen, 0))
	for j := startLen; j < n; j++ {
		if j == 0 || j-1 >= len(lists) {
			out = append(out, nil)
			continue
		}
		out = append(out, s.nativeTop(lists[j-1], withText))
	}
	return out
}

// topMap is the legacy completions top_logprobs object of one position:
// token text to logprob, the first of tokens with the same text kept.
func (s *Server) topMap(top []engine.TokenLogprob) map[string]float64 {
	m := map[string]float64{}
	for _, alt := range top {
		at, _ := s.tokenText(alt.ID)
		if _, dup := m[at]; !dup {
			m[at] = finiteLogprob(alt.Logprob)
		}
	}
	return m
}
