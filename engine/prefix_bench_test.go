package engine

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkPrefixCache serves a shared-prefix workload on a fixture twice
// per iteration, with the prefix cache on and off (two engines, same
// model, same run), and reports the prefill tokens each computed and the
// ratio of both the prefill work and the wall time (on/off; lower is
// better). The cache is flushed before every iteration, so each iteration
// starts cold.
//
//   - system/qwen3moe-b: 8 requests, one after another, with a 256-token
//     system prompt and distinct 32-token user messages (SGLang's
//     shared-system-prompt case), 4 new tokens each.
//   - multiturn/qwen35moe-b: a 6-turn chat on the hybrid (Gated DeltaNet)
//     model, each turn's prompt being the previous prompt, its 24-token
//     answer and a 40-token user message.
//
// go test ./engine -run '^$' -bench PrefixCache -benchtime 3x
func BenchmarkPrefixCache(b *testing.B) {
	for _, w := range []struct {
		name, fixture string
		run           func(b *testing.B, e *Engine, vocab int)
	}{
		{"system/qwen3moe-b", "qwen3moe-b", func(b *testing.B, e *Engine, vocab int) {
			sys := tokensOf(1, 256, vocab)
			for i := range 8 {
				benchAsk(b, e, slices.Concat(sys, tokensOf(100+i, 32, vocab)), 4)
			}
		}},
		{"multiturn/qwen35moe-b", "qwen35moe-b", func(b *testing.B, e *Engine, vocab int) {
			var chat []int32
			for i := range 6 {
				chat = append(chat, tokensOf(200+i, 40, vocab)...)
				chat = append(chat, benchAsk(b, e, chat, 24)...)
			}
		}},
	} {
		b.Run(w.name, func(b *testing.B) {
			on := runReal(b, loadFixtureRunner(b, w.fixture, 8192), Config{ChunkedPrefillSize: 256})
			off := runReal(b, loadFixtureRunner(b, w.fixture, 8192), Config{ChunkedPrefillSize: 256, DisableRadixCache: true})
			vocab := on.Info().VocabSize
			var tOn, tOff time.Duration
			var pOn, pOff uint64
			b.ResetTimer()
			for range b.N {
				if err := on.FlushCache(context.Background()); err != nil {
					b.Fatal(err)
				}
				for _, x := range []struct {
					e *Engine
					d *time.Duration
					p *uint64
				}{{on, &tOn, &pOn}, {off, &tOff, &pOff}} {
					before := x.e.Stats().PromptTokens
					start := time.Now()
					w.run(b, x.e, vocab)
					*x.d += time.Since(start)
					*x.p += x.e.Stats().PromptTokens - before
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(pOn)/n, "prefill-tok-on/op")
			b.ReportMetric(float64(pOff)/n, "prefill-tok-off/op")
			b.ReportMetric(float64(pOn)/float64(pOff), "prefill-ratio")
			b.ReportMetric(tOn.Seconds()*1e3/n, "ms-on/op")
			b.ReportMetric(tOff.Seconds()*1e3/n, "ms-off/op")
			b.ReportMetric(tOn.Seconds()/tOff.Seconds(), "time-ratio")
		})
	}
}

// benchAsk serves one greedy request and returns its output tokens.
func benchAsk(b *testing.B, e *Engine, prompt []int32, maxNew int) []int32 {
	p := greedy(maxNew)
	p.IgnoreEOS = true
	s, err := e.Submit(context.Background(), Request{Prompt: prompt, Params: p})
	if err != nil {
		b.Fatal(err)
	}
	var out []int32
	for {
		u, err := s.Next(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		for _, t := range u.Tokens {
			out = append(out, t.ID)
		}
		if u.Finish != nil {
			if u.Finish.Err != nil {
				b.Fatal(u.Finish.Err)
			}
			return out
		}
	}
}
