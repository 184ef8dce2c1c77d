package engine

import "github.com/ktserve/kt/engine/sample"

// sampleParams are the settings the sampler (engine/sample) needs.
func (p *SamplingParams) sampleParams() sample.Params {
	return sample.Params{Temperature: p.Temperature, TopP: p.TopP, TopK: p.TopK, MinP: p.MinP,
		FrequencyPenalty: p.FrequencyPenalty, PresencePenalty: p.PresencePenalty,
		RepetitionPenalty: p.RepetitionPenalty, Constraint: p.Constraint}
}
