package server

import (
	"context"
	"net/http"
	"strings"
)

// streamGenerate runs the call's items at once and sends every update of
// each as an event, as SGLang's /generate does: the item's output so far
// (text, output_ids, meta_info with its logprobs), or with --stream-output
// only what is new since that item's previous event; then the item's last
// event with its finish_reason. In a batch (a list of prompts, or n > 1)
// every event carries the item's "index": prompt i's sample j is
// i*n + j.
func (s *Server) streamGenerate(w http.ResponseWriter, r *http.Request, call *nativeCall) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ev := newSSE(w)
	results := make([]genResult, len(call.items))
	errs := make([]error, len(call.items))
	ev.fanIn(ctx, cancel, len(call.items), func(i int, send func(any) error) {
		results[i], errs[i] = s.streamGenerateItem(ctx, call, call.items[i], func(out map[string]any) error {
			if call.batch {
				out["index"] = i
			}
			return send(out)
		})
	})
	if ev.err != nil {
		return
	}
	if err := s.tally(results, errs); err != nil {
		ev.errorEvent(err)
		return
	}
	ev.done()
}

// streamGenerateItem runs one item, sending an output object for every
// delta and a last one with the finish (unless the generation failed).
func (s *Server) streamGenerateItem(ctx context.Context, call *nativeCall, it nativeItem, send func(map[string]any) error) (genResult, error) {
	var ids []int32
	var text strings.Builder
	acc := genResult{}
	sentIDs, sentText := 0, 0
	output := func(res *genResult, final bool) map[string]any {
		out := s.nativeOutput(call, it, res, ids, text.String(), final)
		if s.opt.StreamOutput {
			sliceNative(out, sentIDs, sentText)
			sentIDs, sentText = len(ids), text.Len()
		}
		return out
	}
	res, err := s.run(ctx, it.spec, func(d genDelta) error {
		for _, t := range d.Tokens {
			ids = append(ids, t.ID)
		}
		acc.Tokens = append(acc.Tokens, d.Tokens...)
		if d.PromptLogprobs != nil {
			acc.PromptLogprobs, acc.PromptTop, acc.PromptIDs = d.PromptLogprobs, d.PromptTop, d.PromptIDs
		}
		text.WriteString(d.Text)
		if len(d.Tokens) == 0 && d.Text == "" {
			return nil
		}
		return send(output(&acc, false))
	})
	if err != nil || res.Err != nil {
		return res, err
	}
	return res, send(output(&res, true))
}

// sliceNative cuts an output object down to what is new since output id
// fromID and text byte fromText: its text, output_ids and the output
// logprobs in meta_info. The counts in meta_info stay totals.
func sliceNative(out map[string]any, fromID, fromText int) {
	if t, ok := out["text"].(string); ok {
		out["text"] = t[fromText:]
	}
	if ids, ok := out["output_ids"].([]int32); ok {
		out["output_ids"] = nonNil(ids[fromID:])
	}
	meta, _ := out["meta_info"].(map[string]any)
	for _, k := range []string{"output_token_logprobs", "output_top_logprobs"} {
		if l, ok := meta[k].([]any); ok {
			meta[k] = l[fromID:]
		}
	}
}
