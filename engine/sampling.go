package engine

import "github.com/ktserve/kt/engine/sample"

// sampleParams are the settings the sampler (engine/sample) needs.
func (p *SamplingParams) sampleParams() sample.Params {
	return sample.Params{Temperature: p.Temperature, TopP: p.TopP, TopK: p.TopK, MinP: p.MinP,
		FrequencyPenalty: p.FrequencyPenalty, PresencePenalty: p.PresencePenalty,
		RepetitionPenalty: p.RepetitionPenalty, LogitBias: p.LogitBias, Constraint: p.Constraint}
}

// topN returns the n largest entries of row as (id, logprob), best first,
// given sample.LogSumExp's results.
func topN(sm *sample.Sampler, row []float32, n int, mx, lse float64) []TokenLogprob {
	ids := sm.Largest(row, n)
	out := make([]TokenLogprob, len(ids))
	for i, id := range ids {
		out[i] = TokenLogprob{ID: id, Logprob: sample.Logprob(row, id, mx, lse)}
	}
	return out
}

// idLogprobs returns the logprobs of ids in row, given sample.LogSumExp's
// results.
func idLogprobs(row []float32, ids []int32, mx, lse float64) []TokenLogprob {
	out := make([]TokenLogprob, len(ids))
	for i, id := range ids {
		out[i] = TokenLogprob{ID: id, Logprob: sample.Logprob(row, id, mx, lse)}
	}
	return out
}
