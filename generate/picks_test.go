package generate

import (
	"math"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/qwen3moe"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/engine/sample"
	"github.com/ktserve/kt/internal/fixtures"
	"github.com/ktserve/kt/model"
)

// pickingCPU is the CPU backend with backend.Picker, made on the host the
// way the sampler picks (sample.Sampler.Pick under the step's Draws): the
// path a GPU runner takes (model.Chunk.PickOnly, model.Logits.Picks),
// without a GPU.
type pickingCPU struct {
	*cpu.Backend
	draws []model.Draw // the step's, from SetStep
	calls int
	sm    sample.Sampler
}

func (b *pickingCPU) SetStep(s *backend.Step) error {
	b.draws = append(b.draws[:0], s.Draws...)
	return b.Backend.SetStep(s)
}

func (b *pickingCPU) Pick(out, logits backend.Tensor, rows int) {
	b.calls++
	V := logits.Shape()[1]
	l, o := logits.(*cpu.Tensor).F32(), out.(*cpu.Tensor).F32()
	for r := 0; r < rows; r++ {
		var d model.Draw
		if r < len(b.draws) {
			d = b.draws[r]
		}
		id, lp, err := b.sm.Pick(l[r*V:(r+1)*V], d)
		if err != nil {
			o[2*r], o[2*r+1] = -1, 0
			continue
		}
		o[2*r], o[2*r+1] = float32(id), lp
	}
}

// TestRunnerPicks decodes greedily and sampled with a backend that picks
// beside the logits: the same tokens as reading the rows (a sampled draw
// takes the value the host's would), logprobs within the float32 the picks
// are stored in; top logprobs still read rows.
func TestRunnerPicks(t *testing.T) {
	load := func(be backend.Backend) *qwen3moe.Runner {
		r, err := qwen3moe.Load(fixtures.Dir("qwen3moe-a"), arch.Options{Backend: be, Experts: "backend", MaxSeqs: 2, MaxTotalTokens: 1024, MaxBatchTokens: 64, Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	pb := &pickingCPU{Backend: cpu.New(cpu.Options{Threads: 2})}
	t.Cleanup(func() { pb.Close() })
	plain, picking := load(nil), load(pb)
	prompt := []int32{615, 892, 721, 286, 283, 347}
	// one step by hand: picks, no rows
	if err := picking.Reserve(0, len(prompt)); err != nil {
		t.Fatal(err)
	}
	var out model.Logits
	if err := picking.Forward(&model.Batch{Chunks: []model.Chunk{{Slot: 0, Tokens: prompt, PickOnly: true}}}, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Picks) != 1 || len(out.Rows) != 0 || out.Picks[0].ID < 0 {
		t.Fatalf("PickOnly step: %d picks %v, %d rows", len(out.Picks), out.Picks, len(out.Rows))
	}
	picking.Free(0)
	for _, p := range []Params{
		{MaxNewTokens: 12, IgnoreEOS: true},
		{MaxNewTokens: 6, IgnoreEOS: true, TopLogprobs: 2},
		{MaxNewTokens: 6, IgnoreEOS: true, Temperature: 0.8, Seed: 5},
		{MaxNewTokens: 8, IgnoreEOS: true, Temperature: 0.7, TopK: 30, TopP: 0.9, Seed: 9},
	} {
		pb.calls = 0
		want, err := Run(plain, prompt, p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Run(picking, prompt, p)
		if err != nil {
			t.Fatal(err)
		}
		if pb.calls == 0 {
			t.Fatalf("%+v: the backend never picked", p)
		}
		for i := range want.Output {
			w, g := want.Output[i], got.Output[i]
			if g.ID != w.ID || math.Abs(g.Logprob-w.Logprob) > 1e-6*max(1, math.Abs(w.Logprob)) || len(g.Top) != len(w.Top) {
				t.Fatalf("%+v token %d: got %+v, want %+v", p, i, g, w)
			}
		}
	}
}
