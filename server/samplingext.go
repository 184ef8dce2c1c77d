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

// nativeLogprobs are /generate's logprob fields, one value per prompt.
// Each is given once for every prompt, or as a list of one per prompt in
// a batch, as SGLang's GenerateReqInput takes them.
type nativeLogprobs struct {
	logprob  []bool    // return_logprob
	startLen []int     // logprob_start_len; negative: no prompt logprobs
	topN     []int     // top_logprobs_num
	tokenIDs [][]int32 // token_ids_logprob; nil: none
}

// parseNativeLogprobs reads return_logprob, logprob_start_len,
// top_logprobs_num and token_ids_logprob for n prompts. parallel says some
// prompt samples n > 1 times: then, as in SGLang, a field may not be a
// list of one value per prompt.
func parseNativeLogprobs(req *generateRequest, n int, parallel bool) (nativeLogprobs, error) {
	var lp nativeLogprobs
	var err error
	if lp.logprob, err = perPrompt(req.ReturnLogprob, "return_logprob", "a boolean", n, false, parallel); err != nil {
		return lp, err
	}
	if lp.startLen, err = perPrompt(req.LogprobStartLen, "logprob_start_len", "an integer", n, -1, parallel); err != nil {
		return lp, err
	}
	if lp.topN, err = perPrompt(req.TopLogprobsNum, "top_logprobs_num", "an integer", n, 0, parallel); err != nil {
		return lp, err
	}
	for i, k := range lp.topN {
		if k < 0 || k > engine.MaxTopLogprobs {
			return lp, badRequest("top_logprobs_num", "top_logprobs_num%s must be in [0, %d], got %d", listIndex(req.TopLogprobsNum, i), engine.MaxTopLogprobs, k)
		}
	}
	lp.tokenIDs, err = parseTokenIDsLogprob(req.TokenIDsLogprob, n, parallel)
	return lp, err
}

// perPrompt reads a field given as one value (of type what) for every
// prompt or as a list of one per prompt; absent or null is def, for the
// field or for one prompt.
func perPrompt[T any](raw json.RawMessage, field, what string, n int, def T, parallel bool) ([]T, error) {
	out := make([]T, n)
	for i := range out {
		out[i] = def
	}
	if !present(raw) {
		return out, nil
	}
	var one T
	if json.Unmarshal(raw, &one) == nil {
		for i := range out {
			out[i] = one
		}
		return out, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, badRequest(field, "%s: expected %s, or a list of one per prompt", field, what)
	}
	if parallel {
		return nil, badRequest(field, "%s: a list of one value per prompt cannot be used with sampling_params.n > 1 (as in SGLang); give one value for every prompt", field)
	}
	if len(list) != n {
		return nil, badRequest(field, "%s: %d values for %s (give one value for every prompt, or one per prompt)", field, len(list), promptCount(n))
	}
	for i, v := range list {
		if !present(v) {
			continue
		}
		if json.Unmarshal(v, &out[i]) != nil {
			return nil, badRequest(field, "%s[%d]: expected %s, got %s", field, i, what, v)
		}
	}
	return out, nil
}

// promptCount is "1 prompt" or "n prompts".
func promptCount(n int) string {
	if n == 1 {
		return "1 prompt"
	}
	return strconv.Itoa(n) + " prompts"
}

// listIndex is "[i]" where raw is a list, else "".
func listIndex(raw json.RawMessage, i int) string {
	if r := strings.TrimSpace(string(raw)); strings.HasPrefix(r, "[") {
		return "[" + strconv.Itoa(i) + "]"
	}
	return ""
}

// parseTokenIDsLogprob reads /generate's token_ids_logprob for n prompts
// as SGLang does: a token id or a list of token ids for every prompt, or a
// list of one list (or null) per prompt, which parallel (n > 1 sampling)
// refuses. Absent, null or empty lists mean none.
func parseTokenIDsLogprob(raw json.RawMessage, n int, parallel bool) ([][]int32, error) {
	const field = "token_ids_logprob"
	out := make([][]int32, n)
	if !present(raw) {
		return out, nil
	}
	var one []int32
	var id int32
	if json.Unmarshal(raw, &id) == nil {
		one = []int32{id}
	} else if json.Unmarshal(raw, &one) != nil {
		one = nil // what a failed Unmarshal filled in
		var per []json.RawMessage
		if json.Unmarshal(raw, &per) != nil {
			return nil, badRequest(field, "%s: expected a token id, a list of token ids, or one such list per prompt", field)
		}
		if parallel {
			return nil, badRequest(field, "%s: a list of one list per prompt cannot be used with sampling_params.n > 1 (as in SGLang); give one list for every prompt", field)
		}
		if len(per) != n {
			return nil, badRequest(field, "%s: %d lists for %s (give one list of token ids for every prompt, or one per prompt)", field, len(per), promptCount(n))
		}
		for i, v := range per {
			if present(v) && json.Unmarshal(v, &out[i]) != nil {
				return nil, badRequest(field, "%s[%d]: expected a list of token ids or null, got %s", field, i, v)
			}
		}
	}
	for i := range out {
		if one != nil {
			out[i] = one
		}
		if len(out[i]) == 0 {
			out[i] = nil
		} else if len(out[i]) > engine.MaxTokenIDsLogprob {
			return nil, badRequest(field, "%s lists %d tokens; at most %d are taken", field, len(out[i]), engine.MaxTokenIDsLogprob)
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
