package server

import (
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/ktserve/kt/engine"
)

// parseLogitBias reads logit_bias: an object mapping token ids, as
// strings, to a bias in [-100, 100] added to that token's logit (OpenAI's
// and SGLang's shape). null or {} is no bias.
func parseLogitBias(raw json.RawMessage, field string) (map[int32]float32, error) {
	if !present(raw) {
		return nil, nil
	}
	var m map[string]float64
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, badRequest(field, "field %q: expected an object mapping token ids to numbers, e.g. {\"50256\": -100}", field)
	}
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[int32]float32, len(m))
	for k, v := range m {
		id, err := strconv.ParseInt(strings.TrimSpace(k), 10, 32)
		if err != nil || id < 0 {
			return nil, badRequest(field, "%s: key %q is not a token id (a non-negative integer)", field, k)
		}
		if math.IsNaN(v) || v < -engine.MaxLogitBias || v > engine.MaxLogitBias {
			return nil, badRequest(field, "%s: the bias of token %d must be in [-%d, %d], got %v", field, id, engine.MaxLogitBias, engine.MaxLogitBias, v)
		}
		out[int32(id)] = float32(v)
	}
	return out, nil
}

// refuseCustomLogitProcessor refuses custom_logit_processor and
// custom_params (given and not null): SGLang runs them as pickled Python
// code, which kt does not execute. prefix is "" or "sampling_params.".
func refuseCustomLogitProcessor(processor, params json.RawMessage, prefix string) error {
	if present(processor) {
		return badRequest("custom_logit_processor", "custom_logit_processor is a serialized Python object that SGLang runs in its sampler; kt does not run Python code, so it cannot apply one (use logit_bias, stop_token_ids or a regex/json_schema constraint)")
	}
	if present(params) {
		return badRequest(prefix+"custom_params", "%scustom_params are the arguments of a custom logit processor, which kt does not run (it needs Python)", prefix)
	}
	return nil
}

// checkTokenParams checks the token ids of p's logit_bias and
// token_ids_logprob against the model's vocabulary.
func (s *Server) checkTokenParams(p engine.SamplingParams) error {
	vocab := s.eng.Info().VocabSize
	for t := range p.LogitBias {
		if int(t) >= vocab {
			return badRequest("logit_bias", "logit_bias: token %d is outside the vocabulary [0, %d)", t, vocab)
		}
	}
	for i, t := range p.TokenIDsLogprob {
		if t < 0 || int(t) >= vocab {
			return badRequest("token_ids_logprob", "token_ids_logprob[%d] = %d is outside the vocabulary [0, %d)", i, t, vocab)
		}
	}
	return nil
}

// parseTokenIDsLogprob reads /generate's token_ids_logprob: one list of
// token ids for every prompt, or one list per prompt (n prompts). nil
// lists mean none.
func parseTokenIDsLogprob(raw json.RawMessage, n int) ([][]int32, error) {
	out := make([][]int32, n)
	if !present(raw) {
		return out, nil
	}
	var one []int32
	if json.Unmarshal(raw, &one) == nil {
		for i := range out {
			out[i] = one
		}
	} else {
		var per [][]int32
		if json.Unmarshal(raw, &per) != nil {
			return nil, badRequest("token_ids_logprob", "token_ids_logprob: expected an array of token ids, or one array per prompt")
		}
		if len(per) != n {
			return nil, badRequest("token_ids_logprob", "%d token_ids_logprob lists for %d prompts", len(per), n)
		}
		out = per
	}
	for _, ids := range out {
		if len(ids) > engine.MaxTokenIDsLogprob {
			return nil, badRequest("token_ids_logprob", "token_ids_logprob lists %d tokens; at most %d are taken", len(ids), engine.MaxTokenIDsLogprob)
		}
	}
	return out, nil
}

// samplingKeys are the keys nativeSampling reads (its json tags).
var samplingKeys = func() map[string]bool {
	keys := map[string]bool{}
	t := reflect.TypeFor[nativeSampling]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys[name] = true
		}
	}
	return keys
}()

// checkSamplingKeys refuses sampling_params keys that kt does not read (one
// object, or one per prompt), naming the key, as SGLang refuses keys its
// SamplingParams does not declare.
func checkSamplingKeys(raw json.RawMessage) error {
	if !present(raw) {
		return nil
	}
	var objs []map[string]json.RawMessage
	var one map[string]json.RawMessage
	if json.Unmarshal(raw, &one) == nil {
		objs = []map[string]json.RawMessage{one}
	} else if json.Unmarshal(raw, &objs) != nil {
		return nil // not objects: nativeSamplings says what is wrong
	}
	for _, o := range objs {
		keys := make([]string, 0, len(o))
		for k := range o {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if samplingKeys[k] {
				continue
			}
			return badRequest("sampling_params."+k, "unknown sampling_params key %q (see SGLang's sampling parameters: max_new_tokens, stop, stop_token_ids, stop_regex, temperature, top_p, top_k, min_p, frequency_penalty, presence_penalty, repetition_penalty, min_new_tokens, n, json_schema, regex, ebnf, ignore_eos, skip_special_tokens, no_stop_trim, logit_bias, sampling_seed, ...)", k)
		}
	}
	return nil
}
