package servebench

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Dataset names (sglang.bench_serving's --dataset-name).
const (
	// DatasetRandom draws each prompt's ids at random (the default).
	DatasetRandom = "random"
	// DatasetSharedPrefix is sglang.bench_serving's generated-shared-prefix
	// workload: groups of requests that share a system prompt.
	DatasetSharedPrefix = "generated-shared-prefix"
)

// SharedPrefixConfig shapes the generated-shared-prefix dataset. Field
// meanings and defaults (DefaultSharedPrefix) follow sglang.bench_serving's
// --gsp-* flags: NumGroups system prompts, PromptsPerGroup questions each;
// every request is its group's system prompt followed by its own question.
type SharedPrefixConfig struct {
	NumGroups       int `json:"gsp_num_groups"`        // --gsp-num-groups
	PromptsPerGroup int `json:"gsp_prompts_per_group"` // --gsp-prompts-per-group
	SystemPromptLen int `json:"gsp_system_prompt_len"` // --gsp-system-prompt-len
	QuestionLen     int `json:"gsp_question_len"`      // --gsp-question-len
	OutputLen       int `json:"gsp_output_len"`        // --gsp-output-len
	// RangeRatio draws each length uniformly from
	// [max(len×RangeRatio, 1), len] (--gsp-range-ratio; 1: exact lengths).
	RangeRatio float64 `json:"gsp_range_ratio"`
	// Ordered sends the requests group by group instead of shuffled
	// (--gsp-ordered).
	Ordered bool `json:"gsp_ordered"`
}

// DefaultSharedPrefix is sglang.bench_serving's default shared-prefix
// workload: 64 groups × 16 prompts, 2048-token system prompts, 128-token
// questions, 256 output tokens, exact lengths.
var DefaultSharedPrefix = SharedPrefixConfig{NumGroups: 64, PromptsPerGroup: 16, SystemPromptLen: 2048,
	QuestionLen: 128, OutputLen: 256, RangeRatio: 1}

// validate checks the configuration.
func (c *SharedPrefixConfig) validate() error {
	if c.NumGroups <= 0 || c.PromptsPerGroup <= 0 || c.SystemPromptLen <= 0 || c.QuestionLen <= 0 || c.OutputLen <= 0 {
		return fmt.Errorf("servebench: generated-shared-prefix: groups (%d), prompts per group (%d), system prompt length (%d), question length (%d) and output length (%d) must be positive",
			c.NumGroups, c.PromptsPerGroup, c.SystemPromptLen, c.QuestionLen, c.OutputLen)
	}
	if c.RangeRatio < 0 || c.RangeRatio > 1 || math.IsNaN(c.RangeRatio) {
		return fmt.Errorf("servebench: generated-shared-prefix: range ratio %v: want a value in [0, 1]", c.RangeRatio)
	}
	if n := int64(c.NumGroups) * int64(c.PromptsPerGroup); n > 1<<20 {
		return fmt.Errorf("servebench: generated-shared-prefix: %d groups × %d prompts is %d requests, more than 2^20", c.NumGroups, c.PromptsPerGroup, n)
	}
	if c.SystemPromptLen > 1<<24 || c.QuestionLen > 1<<24 || c.OutputLen > 1<<24 {
		return fmt.Errorf("servebench: generated-shared-prefix: lengths %d/%d/%d: want at most 2^24 tokens each", c.SystemPromptLen, c.QuestionLen, c.OutputLen)
	}
	if tot := int64(c.NumGroups) * int64(c.PromptsPerGroup) * int64(c.SystemPromptLen+c.QuestionLen); tot > 1<<26 {
		return fmt.Errorf("servebench: generated-shared-prefix: %d prompt tokens in all, more than 2^26", tot)
	}
	return nil
}

// sharedPrefixRequests builds the generated-shared-prefix requests in the
// order sglang.bench_serving does: the system prompt lengths (one per
// group), the question lengths and the output lengths (one per request)
// are drawn first, then the system prompts' ids, then the questions' ids
// (uniform below vocab); request i of group g is system prompt g followed
// by question g·PromptsPerGroup+i; the list is then shuffled unless
// Ordered. SGLang joins the two texts with "\n\n"; with token ids there is
// no separator, so a request's prompt is exactly system + question tokens.
func sharedPrefixRequests(rng *rand.Rand, c SharedPrefixConfig, vocab int) []benchRequest {
	n := c.NumGroups * c.PromptsPerGroup
	lens := func(full, num int) []int {
		lo := max(int(float64(full)*c.RangeRatio), 1)
		out := make([]int, num)
		for i := range out {
			out[i] = lo + rng.IntN(full-lo+1)
		}
		return out
	}
	sysLens := lens(c.SystemPromptLen, c.NumGroups)
	qLens := lens(c.QuestionLen, n)
	outLens := lens(c.OutputLen, n)
	ids := func(k int) []int {
		out := make([]int, k)
		for i := range out {
			out[i] = rng.IntN(vocab)
		}
		return out
	}
	systems := make([][]int, c.NumGroups)
	for g := range systems {
		systems[g] = ids(sysLens[g])
	}
	questions := make([][]int, n)
	for i := range questions {
		questions[i] = ids(qLens[i])
	}
	reqs := make([]benchRequest, 0, n)
	for g, sys := range systems {
		for p := range c.PromptsPerGroup {
			i := g*c.PromptsPerGroup + p
			prompt := make([]int, 0, len(sys)+len(questions[i]))
			prompt = append(append(prompt, sys...), questions[i]...)
			reqs = append(reqs, benchRequest{ids: prompt, outputLen: outLens[i], group: g, prefixLen: len(sys)})
		}
	}
	if !c.Ordered {
		rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	}
	return reqs
}
