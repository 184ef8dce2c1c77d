package engine

import (
	"context"
	"sync"
	"testing"

	"github.com/ktserve/kt/engine/sample"
	"github.com/ktserve/kt/model"
)

// pickingRunner stands for a GPU runner that picks beside the logits
// (model.Chunk.PickOnly): when every chunk of a step asks, it returns each
// row's pick under the chunk's Draw (greedy or sampled, made by
// sample.Sampler.Pick) as model.Logits.Picks and no rows.
type pickingRunner struct {
	model.Runner
	picked int // steps answered with picks
}

func (p *pickingRunner) Forward(b *model.Batch, out *model.Logits) error {
	if err := p.Runner.Forward(b, out); err != nil {
		return err
	}
	for _, ch := range b.Chunks {
		if !ch.PickOnly {
			return nil
		}
	}
	out.Picks = out.Picks[:0]
	var sm sample.Sampler
	for i, rows := range out.Rows {
		id, lp, err := sm.Pick(rows[len(rows)-1], b.Chunks[i].Draw)
		if err != nil {
			id = -1
		}
		out.Picks = append(out.Picks, model.Pick{ID: id, Logprob: float64(lp)})
	}
	out.Rows = out.Rows[:0]
	p.picked++
	return nil
}

// TestRunnerPicks serves greedy requests with and without logprobs, and
// sampled ones, at once through a runner that picks: plain decode steps
// take the picks, and every answer equals the one without picks (the
// sampled ones too: the runner draws with the value the host would have).
func TestRunnerPicks(t *testing.T) {
	const fx = "qwen3moe-a"
	reqs := []SamplingParams{greedy(8), lpParams(6), greedy(24)} // the long one outlasts the rest: steps of picks only
	sampled := DefaultSamplingParams()
	sampled.Temperature, sampled.Seed, sampled.MaxNewTokens = 0.7, 3, 6
	filtered := sampled
	filtered.TopK, filtered.TopP, filtered.MinP, filtered.Seed, filtered.Logprobs = 40, 0.9, 0.02, 11, true
	penalized := sampled
	penalized.FrequencyPenalty = 0.5 // the host draws: rows, not picks
	reqs = append(reqs, sampled, filtered, penalized)
	for i := range reqs {
		reqs[i].IgnoreEOS = true
	}
	run := func(r model.Runner, together bool) []result {
		e := runReal(t, r, Config{})
		out := make([]result, len(reqs))
		var wg sync.WaitGroup
		for i, p := range reqs {
			s, err := e.Submit(context.Background(), Request{Prompt: tokensOf(i, 9+i, 300), Params: p})
			if err != nil {
				t.Fatal(err)
			}
			if !together {
				out[i] = collect(t, s)
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); out[i] = collect(t, s) }()
		}
		wg.Wait()
		return out
	}
	want := run(loadFixtureRunner(t, fx, 2048), false)
	for _, together := range []bool{false, true} {
		pr := &pickingRunner{Runner: loadFixtureRunner(t, fx, 2048)}
		got := run(pr, together)
		if pr.picked == 0 {
			t.Fatalf("together=%v: no step took the picks", together)
		}
		for i := range reqs {
			sameAnswer(t, "request "+string(rune('0'+i)), got[i], want[i])
		}
	}
}
