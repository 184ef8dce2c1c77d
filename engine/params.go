package engine

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ktserve/kt/engine/sample"
)

// ErrInvalidRequest is wrapped by every error Submit returns for a request
// that can never run (bad parameters, prompt too long); the server answers
// such errors with 400.
var ErrInvalidRequest = errors.New("invalid request")

// ErrStopped is returned by Submit after the engine has stopped.
var ErrStopped = errors.New("engine: stopped")

// Constraint restricts which tokens may be sampled next (for example to keep
// the output valid JSON); it is the sampler's interface. The engine calls
// Allow for candidate tokens and Advance for the token it picked, from the
// scheduler goroutine only.
type Constraint = sample.Constraint

// SamplingParams controls how one sequence's tokens are chosen and when it
// stops. The zero value is not valid: use DefaultSamplingParams.
type SamplingParams struct {
	Temperature       float64 // 0 means greedy
	TopP              float64 // (0, 1]; 1 disables
	TopK              int     // 0 or -1 disables
	MinP              float64 // [0, 1]; 0 disables
	FrequencyPenalty  float64 // [-2, 2]
	PresencePenalty   float64 // [-2, 2]
	RepetitionPenalty float64 // (0, 2]; 1 disables
	Seed              uint64
	HasSeed           bool

	MaxNewTokens int     // tokens to generate at most; 0 means up to the context length
	MinNewTokens int     // stop tokens are ignored before this many tokens
	StopTokenIDs []int32 // in addition to the model's EOS tokens
	IgnoreEOS    bool    // do not stop at the model's EOS tokens

	Logprobs       bool // report each output token's log probability
	TopLogprobs    int  // and this many alternatives (0..20)
	PromptLogprobs bool // report the log probability of each prompt token after the first
	// PromptTopLogprobs reports this many alternatives (0..20) at each
	// prompt position after the first (with PromptLogprobs).
	PromptTopLogprobs int
	// TokenIDsLogprob lists tokens whose log probabilities are reported at
	// every output position (Token.IDs) and, with PromptLogprobs, at every
	// prompt position after the first (Update.PromptIDs), in this order.
	TokenIDsLogprob []int32

	// LogitBias is added to the logits of its tokens before any draw
	// (after the penalties, as SGLang); values in [-100, 100]. Reported
	// logprobs stay those of the model's own distribution.
	LogitBias map[int32]float32
	// PromptOnly ends the sequence once its prompt is computed, with
	// FinishLength and no output token: prompt scoring (max_new_tokens 0).
	PromptOnly bool

	Constraint Constraint // optional
}

// DefaultSamplingParams returns SGLang's defaults: temperature 1, no
// filtering, no penalties.
func DefaultSamplingParams() SamplingParams {
	return SamplingParams{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
}

// MaxTopLogprobs bounds SamplingParams.TopLogprobs and PromptTopLogprobs.
const MaxTopLogprobs = 20

// MaxTokenIDsLogprob bounds SamplingParams.TokenIDsLogprob.
const MaxTokenIDsLogprob = 1024

// MaxLogitBias bounds the magnitude of a SamplingParams.LogitBias value.
const MaxLogitBias = 100

// Validate checks the parameters' ranges; its errors name the parameter.
func (p *SamplingParams) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, a...))
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !finite(p.Temperature) || p.Temperature < 0:
		return bad("temperature must be a non-negative number, got %v", p.Temperature)
	case !finite(p.TopP) || p.TopP <= 0 || p.TopP > 1:
		return bad("top_p must be in (0, 1], got %v", p.TopP)
	case p.TopK < -1:
		return bad("top_k must be -1 (disabled) or positive, got %d", p.TopK)
	case !finite(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return bad("min_p must be in [0, 1], got %v", p.MinP)
	case !finite(p.FrequencyPenalty) || p.FrequencyPenalty < -2 || p.FrequencyPenalty > 2:
		return bad("frequency_penalty must be in [-2, 2], got %v", p.FrequencyPenalty)
	case !finite(p.PresencePenalty) || p.PresencePenalty < -2 || p.PresencePenalty > 2:
		return bad("presence_penalty must be in [-2, 2], got %v", p.PresencePenalty)
	case !finite(p.RepetitionPenalty) || p.RepetitionPenalty <= 0 || p.RepetitionPenalty > 2:
		return bad("repetition_penalty must be in (0, 2], got %v", p.RepetitionPenalty)
	case p.MaxNewTokens < 0:
		return bad("max_new_tokens must not be negative, got %d", p.MaxNewTokens)
	case p.MinNewTokens < 0:
		return bad("min_new_tokens must not be negative, got %d", p.MinNewTokens)
	case p.MaxNewTokens > 0 && p.MinNewTokens > p.MaxNewTokens:
		return bad("min_new_tokens (%d) exceeds max_new_tokens (%d)", p.MinNewTokens, p.MaxNewTokens)
	case p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs:
		return bad("top_logprobs must be in [0, %d], got %d", MaxTopLogprobs, p.TopLogprobs)
	case p.PromptTopLogprobs < 0 || p.PromptTopLogprobs > MaxTopLogprobs:
		return bad("top_logprobs must be in [0, %d] for the prompt, got %d", MaxTopLogprobs, p.PromptTopLogprobs)
	case len(p.TokenIDsLogprob) > MaxTokenIDsLogprob:
		return bad("token_ids_logprob lists %d tokens; at most %d are taken", len(p.TokenIDsLogprob), MaxTokenIDsLogprob)
	}
	for t, v := range p.LogitBias {
		if !finite(float64(v)) || v < -MaxLogitBias || v > MaxLogitBias {
			return bad("logit_bias of token %d must be in [-%d, %d], got %v", t, MaxLogitBias, MaxLogitBias, v)
		}
	}
	return nil
}

// checkVocab checks the token ids of p against a vocabulary of vocab
// tokens; its errors name the parameter.
func (p *SamplingParams) checkVocab(vocab int) error {
	for i, t := range p.TokenIDsLogprob {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("%w: token_ids_logprob[%d] = %d is outside the vocabulary [0, %d)", ErrInvalidRequest, i, t, vocab)
		}
	}
	for t := range p.LogitBias {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("%w: logit_bias token %d is outside the vocabulary [0, %d)", ErrInvalidRequest, t, vocab)
		}
	}
	return nil
}

// Request is one sequence to generate.
type Request struct {
	ID     string  // for logs; need not be unique
	Prompt []int32 // at least one token
	Params SamplingParams
	// Adapter is the LoRA adapter id the request asked for (0: the base
	// model), passed to the runner with every chunk (model.Chunk.Adapter).
	Adapter int
}

// FinishReason says why a sequence ended.
type FinishReason string

// The finish reasons, named as in the OpenAI API.
const (
	FinishStop   FinishReason = "stop"   // a stop token (or, set by the server, a stop string)
	FinishLength FinishReason = "length" // max_new_tokens or the context length
	FinishAbort  FinishReason = "abort"  // cancelled, or the engine could not continue
)

// TokenLogprob is a token with its log probability.
type TokenLogprob struct {
	ID      int32
	Logprob float32
}

// Token is one generated token.
type Token struct {
	ID      int32
	Logprob float32        // set when SamplingParams.Logprobs
	Top     []TokenLogprob // the TopLogprobs most likely tokens, best first
	IDs     []TokenLogprob // the SamplingParams.TokenIDsLogprob tokens, in that order
}

// Finish is the end of a sequence.
type Finish struct {
	Reason FinishReason
	// MatchedStop is the stop token that ended the sequence, or -1.
	MatchedStop int32
	// Err explains an abort the client did not ask for.
	Err error
	// PromptTokens and OutputTokens count the sequence's tokens.
	PromptTokens, OutputTokens int
	// Preemptions counts how often the sequence was preempted and recomputed.
	Preemptions int
	// CachedTokens is the number of prompt tokens the prefix cache
	// supplied when the sequence was first admitted (usage's
	// prompt_tokens_details.cached_tokens).
	CachedTokens int
	// DecodeStepTime is the forward-pass time of the steps that decoded
	// the sequence's tokens after its first (each step's whole time, shared
	// with the sequences decoded beside it).
	DecodeStepTime time.Duration
}
