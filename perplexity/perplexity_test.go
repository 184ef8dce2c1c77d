package perplexity

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/ktserve/kt/arch"
	_ "github.com/ktserve/kt/arch/all" // register every architecture
	"github.com/ktserve/kt/arch/qwen3moe"
	"github.com/ktserve/kt/internal/fixtures"
	"github.com/ktserve/kt/model"
)

func load(t *testing.T, dir, experts string) model.Runner {
	t.Helper()
	r, err := arch.Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 512 + 16, MaxBatchTokens: 256, Threads: 2, Device: "cpu",
		Experts: experts, ExpertThreads: 2, ExpertPools: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestWindows(t *testing.T) {
	ids := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	cases := []struct {
		n, ctx int
		want   []int // window lengths
	}{
		{0, 4, nil},
		{1, 4, nil},
		{2, 4, []int{2}},
		{4, 4, []int{4}},
		{5, 4, []int{4}}, // a last window of one token scores nothing
		{6, 4, []int{4, 2}},
		{11, 5, []int{5, 5}},
		{11, 2, []int{2, 2, 2, 2, 2}},
		{11, 100, []int{11}},
	}
	for _, c := range cases {
		ws := Windows(ids[:c.n], c.ctx)
		var lens []int
		for i, w := range ws {
			lens = append(lens, len(w))
			if w[0] != int32(i*c.ctx) {
				t.Errorf("n=%d ctx=%d: window %d starts at %d", c.n, c.ctx, i, w[0])
			}
		}
		if !slices.Equal(lens, c.want) {
			t.Errorf("n=%d ctx=%d: windows %v, want %v", c.n, c.ctx, lens, c.want)
		}
	}
}

// TestMatchesTransformers scores each reference prompt of a fixture as one
// window: the NLL is the mean of transformers' prompt logprobs.
func TestMatchesTransformers(t *testing.T) {
	for _, fx := range []string{"qwen3moe-a", "qwen3moe-b"} {
		r := load(t, fixtures.Dir(fx), "backend")
		for _, c := range fixtures.Load(t, fx) {
			var want float64
			for _, lp := range c.PromptLogprobs[1:] {
				want -= *lp
			}
			want /= float64(len(c.PromptIDs) - 1)
			res, err := Score(r, c.PromptIDs, Options{Ctx: 512})
			if err != nil {
				t.Fatal(err)
			}
			if res.Tokens != len(c.PromptIDs)-1 || res.Windows != 1 || res.InputTokens != len(c.PromptIDs) {
				t.Errorf("%s/%s: %+v", fx, c.Name, res)
			}
			if math.Abs(res.NLL-want) > 1e-4 || math.Abs(res.Perplexity-math.Exp(want)) > 1e-4*math.Exp(want) {
				t.Errorf("%s/%s: NLL %.6f perplexity %.4f, transformers %.6f %.4f", fx, c.Name, res.NLL, res.Perplexity, want, math.Exp(want))
			}
		}
	}
}

// TestWindowsAddUp scores a long prompt in windows of several sizes and
// chunk sizes: the total NLL is the sum of each window scored alone.
func TestWindowsAddUp(t *testing.T) {
	const fx = "qwen3moe-a"
	r := load(t, fixtures.Dir(fx), "backend")
	cases := fixtures.Load(t, fx)
	ids := cases[len(cases)-1].PromptIDs
	for _, c := range []struct{ ctx, chunk int }{{32, 0}, {32, 7}, {64, 16}, {149, 0}, {150, 40}} {
		res, err := Score(r, ids, Options{Ctx: c.ctx, Chunk: c.chunk})
		if err != nil {
			t.Fatal(err)
		}
		ws := Windows(ids, c.ctx)
		var sum float64
		var n int
		for _, w := range ws {
			one, err := Score(r, w, Options{Ctx: len(w)})
			if err != nil {
				t.Fatal(err)
			}
			sum += one.NLL * float64(one.Tokens)
			n += one.Tokens
		}
		cut := (len(ids) + c.ctx - 1) / c.ctx // windows, a last one of one token included
		if res.Windows != len(ws) || res.Tokens != n || res.Tokens != len(ids)-cut {
			t.Errorf("ctx %d: %d windows %d tokens, want %d and %d", c.ctx, res.Windows, res.Tokens, len(ws), n)
		}
		if want := sum / float64(n); math.Abs(res.NLL-want) > 1e-9 {
			t.Errorf("ctx %d chunk %d: NLL %.9f, windows alone %.9f", c.ctx, c.chunk, res.NLL, want)
		}
	}
}

func TestScoreErrors(t *testing.T) {
	r := load(t, fixtures.Dir("qwen3moe-a"), "backend")
	long := make([]int32, 600)
	cases := []struct {
		name string
		ids  []int32
		ctx  int
		is   error
	}{
		{"empty", nil, 512, ErrNothingToScore},
		{"one token", []int32{5}, 512, ErrNothingToScore},
		{"window of one", []int32{5, 6}, 1, nil},
		{"beyond the model's positions", long, 600, nil},
		{"token outside the vocabulary", []int32{5, 100000}, 512, nil},
	}
	for _, c := range cases {
		_, err := Score(r, c.ids, Options{Ctx: c.ctx})
		t.Logf("%s: %v", c.name, err)
		if err == nil || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("%s: error %v", c.name, err)
		}
	}
}

// TestExpertEngine scores a synthetic model whose shapes the CPU expert
// engine takes with its BF16 method and with the backend's reference MoE
// op: the NLLs agree within the engine's tolerance. It skips where the
// engine cannot run (no cgo, or a CPU without its kernels).
func TestExpertEngine(t *testing.T) {
	dir := t.TempDir()
	shape := qwen3moe.SynthShape{Layers: 2, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 32, Experts: 8, TopK: 2, MoEInter: 128, Vocab: 300, Exp: 123}
	if err := qwen3moe.WriteSynthetic(dir, shape, 5); err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, 90)
	for i := range ids {
		ids[i] = int32(i * 37 % shape.Vocab)
	}
	ref, err := Score(load(t, dir, "backend"), ids, Options{Ctx: 40})
	if err != nil {
		t.Fatal(err)
	}
	r, err := arch.Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 512 + 16, MaxBatchTokens: 256, Threads: 2, Device: "cpu",
		Experts: "BF16", ExpertWeightPath: dir, ExpertThreads: 2, ExpertPools: 1})
	if err != nil {
		t.Skipf("CPU expert engine unavailable here: %v", err)
	}
	defer r.Close()
	eng, err := Score(r, ids, Options{Ctx: 40})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reference op NLL %.6f, engine (%s) %.6f", ref.NLL, arch.ExpertPath(r), eng.NLL)
	if eng.Tokens != ref.Tokens || math.Abs(eng.NLL-ref.NLL) > 0.01 {
		t.Errorf("engine: %d tokens NLL %.6f; reference op: %d tokens NLL %.6f", eng.Tokens, eng.NLL, ref.Tokens, ref.NLL)
	}
}
