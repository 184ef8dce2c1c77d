package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/ktserve/kt/engine"
)

// maxN bounds n (choices per request).
const maxN = 64

// maxStops bounds the stop strings of one request.
const maxStops = 16

// parseStop accepts a string, an array of strings or null.
func parseStop(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("stop", "field \"stop\": expected a string or an array of strings")
	}
	if len(many) > maxStops {
		return nil, badRequest("stop", "at most %d stop strings, got %d", maxStops, len(many))
	}
	out := many[:0]
	for _, s := range many {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// toParams converts the OpenAI sampling fields to engine parameters;
// defaultMax is used when the request gives no max_tokens (0: up to the
// context length).
func (f *samplingFields) toParams(defaultMax int) (engine.SamplingParams, int, error) {
	p := engine.DefaultSamplingParams()
	set := func(dst *float64, src *float64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&p.Temperature, f.Temperature)
	set(&p.TopP, f.TopP)
	set(&p.MinP, f.MinP)
	set(&p.FrequencyPenalty, f.FrequencyPenalty)
	set(&p.PresencePenalty, f.PresencePenalty)
	set(&p.RepetitionPenalty, f.RepetitionPenalty)
	if f.TopK != nil {
		p.TopK = *f.TopK
		if p.TopK == 0 {
			p.TopK = -1
		}
	}
	if f.Seed != nil {
		p.Seed, p.HasSeed = uint64(*f.Seed), true
	}
	p.MaxNewTokens = defaultMax
	for _, m := range []struct {
		name string
		v    *int
	}{{"max_tokens", f.MaxTokens}, {"max_completion_tokens", f.MaxCompletionTokens}} {
		if m.v == nil {
			continue
		}
		if *m.v < 1 {
			return p, 0, badRequest(m.name, "%s must be at least 1, got %d", m.name, *m.v)
		}
		p.MaxNewTokens = *m.v
	}
	if f.MinTokens != nil {
		if *f.MinTokens < 0 {
			return p, 0, badRequest("min_tokens", "min_tokens must not be negative, got %d", *f.MinTokens)
		}
		p.MinNewTokens = *f.MinTokens
	}
	p.StopTokenIDs = f.StopTokenIDs
	p.IgnoreEOS = f.IgnoreEOS
	var err error
	if p.LogitBias, err = parseLogitBias(f.LogitBias, "logit_bias"); err != nil {
		return p, 0, err
	}
	if err := refuseCustomLogitProcessor(f.CustomLogitProcessor, f.CustomParams, ""); err != nil {
		return p, 0, err
	}
	n := 1
	if f.N != nil {
		n = *f.N
		if n < 1 || n > maxN {
			return p, 0, badRequest("n", "n must be in [1, %d], got %d", maxN, n)
		}
	}
	if err := p.Validate(); err != nil {
		return p, 0, paramError(err)
	}
	return p, n, nil
}

// paramError turns an engine validation error into a 400 naming the field.
func paramError(err error) error {
	msg := strings.TrimPrefix(err.Error(), engine.ErrInvalidRequest.Error()+": ")
	param, _, _ := strings.Cut(msg, " ")
	if param == "max_new_tokens" {
		param = "max_tokens"
	}
	return badRequest(param, "%s", msg)
}

// seedFor gives choice i of n its own seed.
func seedFor(p engine.SamplingParams, i int) engine.SamplingParams {
	if p.HasSeed {
		p.Seed += uint64(i)
	}
	return p
}

// sse writes server-sent events; it is used from the handler goroutine only.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// fanIn runs n producers at once (run(i, send) for each i) and writes the
// events they send, in the order they arrive; once the client is gone it
// cancels them all. It returns when every producer has returned.
func (e *sse) fanIn(ctx context.Context, cancel context.CancelFunc, n int, run func(i int, send func(any) error)) {
	events := make(chan any, 16)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			run(i, func(v any) error {
				select {
				case events <- v:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		})
	}
	go func() {
		wg.Wait()
		close(events)
	}()
	for v := range events {
		if e.send(v) != nil {
			cancel() // the client is gone: stop every producer
		}
	}
}

// send writes one data event and flushes it.
func (e *sse) send(v any) error {
	if e.err != nil {
		return e.err
	}
	b, err := json.Marshal(v)
	if err != nil {
		e.err = fmt.Errorf("encoding an event: %w", err)
		return e.err
	}
	armWriteDeadline(e.w)
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", b); err != nil {
		e.err = err
		return err
	}
	e.err = e.rc.Flush()
	return e.err
}

func (e *sse) done() {
	if e.err == nil {
		armWriteDeadline(e.w)
		fmt.Fprint(e.w, "data: [DONE]\n\n")
		_ = e.rc.Flush()
	}
}

// errorEvent sends an error in the stream (after the headers are out).
func (e *sse) errorEvent(err error) {
	ae := asAPIError(err)
	_ = e.send(struct {
		Error errorDetail `json:"error"`
	}{errorDetail{Message: ae.Message, Type: ae.Type, Code: ae.Status}})
}
