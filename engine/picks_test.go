package engine

import (
	"context"
	"sync"
	"testing"

	"github.com/ktserve/kt/model"
)

// pickingRunner stands for a GPU runner that picks beside the logits
// (model.Chunk.PickOnly): when every chunk of a step asks, it returns the
// first maximum of each row as model.Logits.Picks and no rows.
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
	for _, rows := range out.Rows {
		row, best := rows[len(rows)-1], int32(-1)
		for i, v := range row {
			if best < 0 || v > row[best] {
				best = int32(i)
			}
		}
		out.Picks = append(out.Picks, model.Pick{ID: best})
	}
	out.Rows = out.Rows[:0]
	p.picked++
	return nil
}

// TestRunnerPicks serves greedy requests with and without logprobs, and a
// sampled one, at once through a runner that picks: plain greedy decode
// steps take the picks, and every answer equals the one without picks.
func TestRunnerPicks(t *testing.T) {
	const fx = "qwen3moe-a"
	reqs := []SamplingParams{greedy(8), lpParams(6), greedy(10)}
	sampled := DefaultSamplingParams()
	sampled.Temperature, sampled.Seed, sampled.MaxNewTokens = 0.7, 3, 6
	reqs = append(reqs, sampled)
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
