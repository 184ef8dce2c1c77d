package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ktserve/kt/engine"
)

// decoder turns token ids into text incrementally: bytes of a character
// split over tokens are held back until the character is complete.
type decoder struct {
	tok     Tokenizer
	skip    bool // skip special tokens
	pending []byte
}

func (d *decoder) add(id int32) string {
	if d.tok == nil || d.skip && d.tok.IsSpecial(id) {
		return ""
	}
	b, _ := d.tok.TokenBytes(id)
	d.pending = append(d.pending, b...)
	cut := completePrefix(d.pending)
	out := string(d.pending[:cut])
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return out
}

// flush returns what is held back (an unfinished character).
func (d *decoder) flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// completePrefix returns the length of b without an unfinished UTF-8
// character at its end.
func completePrefix(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

// genSpec is one sequence to generate for a route.
type genSpec struct {
	req         engine.Request
	stops       []string
	stopRegex   []stopRegex // stop_regex
	skipSpecial bool
	noStopTrim  bool
}

// genDelta is what one read of the engine stream adds: visible text (stop
// strings handled) and the tokens it came from.
type genDelta struct {
	Text           string
	Tokens         []engine.Token
	PromptLogprobs []engine.TokenLogprob // once, with the first delta, when asked for
	PromptTop      [][]engine.TokenLogprob
	PromptIDs      [][]engine.TokenLogprob
}

// genResult is how a sequence ended.
type genResult struct {
	Reason         engine.FinishReason
	MatchedStop    json.RawMessage // a token id, a stop string, or null
	PromptTokens   int
	OutputTokens   int
	CachedTokens   int // prompt tokens the prefix cache supplied
	PromptLogprobs []engine.TokenLogprob
	PromptTop      [][]engine.TokenLogprob // the prompt's top logprobs (engine.Update.PromptTop)
	PromptIDs      [][]engine.TokenLogprob // the prompt's token_ids_logprob (engine.Update.PromptIDs)
	Text           string                  // all visible text
	Tokens         []engine.Token
	Err            error // an abort the client did not ask for
	FirstToken     time.Time
}

func (r *genResult) finishReason() string {
	if r.Reason == engine.FinishAbort {
		return "abort"
	}
	return string(r.Reason)
}

// run submits spec to the engine and calls onDelta for every update until
// the sequence ends. Stop strings and stop regexes are matched here, in the
// request's goroutine (stopMatcher.find says where each cuts the output):
// text a stop could still cut is held back from onDelta until it is known
// not to be, so the deltas add up to the final text. The text of the stop token that ends
// the sequence (an EOS or stop_token_ids token) is left out, as SGLang
// does, unless noStopTrim. onDelta may return an error (the client went
// away) to cancel the sequence.
func (s *Server) run(ctx context.Context, spec genSpec, onDelta func(genDelta) error) (genResult, error) {
	start := time.Now()
	st, err := s.eng.Submit(ctx, spec.req)
	if err != nil {
		return genResult{}, err
	}
	defer st.Cancel() // no-op once finished; frees the slot on early return
	dec := decoder{tok: s.tok, skip: spec.skipSpecial}
	stops := newStopMatcher(spec.stops, spec.stopRegex)
	var stopIDs map[int32]bool // tokens whose text waits for the finish
	if !spec.noStopTrim {
		stopIDs = s.stopTokenSet(spec.req.Params)
	}
	var res genResult
	var full strings.Builder
	sent := 0
	held := int32(-1) // a stop token whose text waits for the next update
	lastTok := start
	for {
		u, err := st.Next(ctx)
		if err != nil {
			return res, err
		}
		if u.PromptLogprobs != nil {
			res.PromptLogprobs, res.PromptTop, res.PromptIDs = u.PromptLogprobs, u.PromptTop, u.PromptIDs
		}
		delta := genDelta{PromptLogprobs: u.PromptLogprobs, PromptTop: u.PromptTop, PromptIDs: u.PromptIDs}
		// addText decodes id onto the text and reports whether a stop
		// string or regex ended it there (delta then has the text up to it).
		addText := func(id int32) bool {
			before := full.Len()
			full.WriteString(dec.add(id))
			if stops.empty() {
				return false
			}
			text := full.String()
			hit, ok := stops.find(text, before)
			if !ok {
				return false
			}
			end := hit.cut
			if spec.noStopTrim {
				end = hit.keep
			}
			end = max(end, sent) // held back: a stream never has more
			delta.Text += text[sent:end]
			sent = end
			full.Reset()
			full.WriteString(text[:end])
			res.Reason = engine.FinishStop
			res.MatchedStop, _ = json.Marshal(hit.matched)
			st.Cancel()
			return true
		}
		stopped := false
		if held >= 0 {
			id := held
			held = -1
			ended := len(u.Tokens) == 0 && u.Finish != nil && u.Finish.Reason == engine.FinishStop && u.Finish.MatchedStop == id
			if !ended {
				stopped = addText(id)
			}
		}
		for k, tk := range u.Tokens {
			if stopped {
				break
			}
			now := time.Now()
			if res.FirstToken.IsZero() {
				res.FirstToken = now
				s.met.ttft.Observe(now.Sub(start).Seconds())
			} else {
				s.met.itl.Observe(now.Sub(lastTok).Seconds())
			}
			lastTok = now
			res.OutputTokens++
			res.Tokens = append(res.Tokens, tk)
			delta.Tokens = append(delta.Tokens, tk)
			if stopIDs[tk.ID] && k == len(u.Tokens)-1 {
				if u.Finish == nil {
					held = tk.ID // the finish says whether it ended the sequence
					continue
				}
				if u.Finish.Reason == engine.FinishStop && u.Finish.MatchedStop == tk.ID {
					continue // the stop token: no text
				}
			}
			stopped = addText(tk.ID)
		}
		if stopped {
			res.Text = full.String()
			if err := onDelta(delta); err != nil {
				return res, err
			}
			// Wait for the engine to confirm, so counts are final.
			for u.Finish == nil {
				if u, err = st.Next(ctx); err != nil {
					return res, err
				}
			}
			res.PromptTokens = u.Finish.PromptTokens
			res.CachedTokens = u.Finish.CachedTokens
			return res, nil
		}
		if u.Finish != nil {
			full.WriteString(dec.flush())
		}
		text := full.String()
		safe := len(text)
		if u.Finish == nil && !stops.empty() {
			safe = max(sent, stops.safeEnd(text))
			for safe > sent && safe < len(text) && !utf8.RuneStart(text[safe]) {
				safe--
			}
		}
		delta.Text = text[sent:safe]
		sent = safe
		if delta.Text != "" || len(delta.Tokens) > 0 || delta.PromptLogprobs != nil {
			if err := onDelta(delta); err != nil {
				return res, err
			}
		}
		if f := u.Finish; f != nil {
			res.Text = text
			res.Reason = f.Reason
			res.PromptTokens = f.PromptTokens
			res.CachedTokens = f.CachedTokens
			res.Err = f.Err
			if f.MatchedStop >= 0 {
				res.MatchedStop = json.RawMessage(strconv.Itoa(int(f.MatchedStop)))
			}
			if f.Reason == engine.FinishAbort && f.Err != nil {
				s.met.aborted.Inc()
			}
			return res, nil
		}
	}
}

// engineError maps an engine Submit error to an HTTP error.
func engineError(err error) error {
	switch {
	case err == nil:
		return nil
	case isInvalid(err):
		return badRequest("", "%s", strings.TrimPrefix(err.Error(), engine.ErrInvalidRequest.Error()+": "))
	case err == engine.ErrStopped:
		return &apiError{Status: 503, Type: "service_unavailable", Message: "the server is shutting down"}
	}
	return fmt.Errorf("generation: %w", err)
}
