package qwen3moe

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/models"
)

// fixtures are the transformers reference checkpoints (testdata/models).
var fixtures = []string{"qwen3moe-a", "qwen3moe-b", "qwen3moe-c"}

const tol = 1e-3 // logprob tolerance against transformers

type refCase struct {
	Name           string         `json:"name"`
	PromptIDs      []int32        `json:"prompt_ids"`
	PromptLogprobs []*float64     `json:"prompt_logprobs"`
	GreedyIDs      []int32        `json:"greedy_ids"`
	GreedyLogprobs []float64      `json:"greedy_logprobs"`
	TopLogprobs    [][][2]float64 `json:"top_logprobs"`
	Top2Margin     []float64      `json:"top2_margin"`
}

func fixtureDir(name string) string { return filepath.Join("..", "..", "testdata", "models", name) }

func readRef(t *testing.T, name string) []refCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir(name), "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Cases []refCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r.Cases
}

func load(t *testing.T, name string, simd bool) *Runner {
	t.Helper()
	be := cpu.New(cpu.Options{Threads: 2, NoSIMD: !simd})
	r, err := Load(fixtureDir(name), models.Options{MaxSeqs: 4, MaxTotalTokens: 2048, MaxBatchTokens: 512, PageSize: 16, Backend: be, Experts: "backend"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); be.Close() })
	return r
}

// logSoftmax returns the log-probabilities of a logits row in float64.
func logSoftmax(row []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(s)
	out := make([]float64, len(row))
	for i, v := range row {
		out[i] = float64(v) - lse
	}
	return out
}

func argmax(lp []float64) int32 {
	best := 0
	for i, v := range lp {
		if v > lp[best] {
			best = i
		}
	}
	return int32(best)
}

// copyRows deep-copies logits rows (the runner reuses its buffers).
func copyRows(rows [][]float32) [][]float32 {
	out := make([][]float32, len(rows))
	for i, r := range rows {
		out[i] = append([]float32(nil), r...)
	}
	return out
}

// forward runs one single-chunk step on slot and returns the rows.
func forward(t *testing.T, r *Runner, slot int, toks []int32, all bool) [][]float32 {
	t.Helper()
	if err := r.Reserve(slot, len(toks)); err != nil {
		t.Fatal(err)
	}
	var out model.Logits
	pos := r.rb.Pool.Len(slot)
	if err := r.Forward(&model.Batch{Chunks: []model.Chunk{{Slot: slot, Pos: pos, Tokens: toks, AllLogits: all}}}, &out); err != nil {
		t.Fatal(err)
	}
	return copyRows(out.Rows[0])
}

// TestMatchesTransformers checks every prompt logprob and, teacher-forcing
// the reference's greedy continuation through the KV cache, every greedy
// token (where the reference's top-2 margin exceeds 1e-3), its logprob and
// the top-8 logprobs, for the SIMD and the portable kernels.
func TestMatchesTransformers(t *testing.T) {
	for _, fx := range fixtures {
		for _, simd := range []bool{true, false} {
			if simd && !cpu.New(cpu.Options{Threads: 1}).SIMD() {
				continue
			}
			t.Run(fmt.Sprintf("%s/simd=%v", fx, simd), func(t *testing.T) {
				r := load(t, fx, simd)
				var worst float64
				for _, c := range readRef(t, fx) {
					r.Free(0)
					rows := forward(t, r, 0, c.PromptIDs, true)
					for i := 1; i < len(c.PromptIDs); i++ {
						lp := logSoftmax(rows[i-1])[c.PromptIDs[i]]
						d := math.Abs(lp - *c.PromptLogprobs[i])
						worst = math.Max(worst, d)
						if d > tol {
							t.Errorf("%s: prompt token %d logprob %.6f, reference %.6f", c.Name, i, lp, *c.PromptLogprobs[i])
						}
					}
					last := rows[len(rows)-1]
					for s, want := range c.GreedyIDs {
						lp := logSoftmax(last)
						if got := argmax(lp); got != want && c.Top2Margin[s] > tol {
							t.Errorf("%s: greedy step %d: token %d, reference %d (margin %.4g)", c.Name, s, got, want, c.Top2Margin[s])
						}
						d := math.Abs(lp[want] - c.GreedyLogprobs[s])
						worst = math.Max(worst, d)
						if d > tol {
							t.Errorf("%s: greedy step %d logprob %.6f, reference %.6f", c.Name, s, lp[want], c.GreedyLogprobs[s])
						}
						for _, p := range c.TopLogprobs[s] {
							if d := math.Abs(lp[int(p[0])] - p[1]); d > tol {
								t.Errorf("%s: step %d top token %d logprob %.6f, reference %.6f", c.Name, s, int(p[0]), lp[int(p[0])], p[1])
							}
						}
						if s+1 < len(c.GreedyIDs) {
							last = forward(t, r, 0, []int32{want}, false)[0]
						}
					}
				}
				t.Logf("worst logprob difference %.3g", worst)
			})
		}
	}
}

// TestChunkedPrefillIdentical prefills the longest prompt in chunks of
// several sizes and checks the logits are bit-identical to one prefill.
func TestChunkedPrefillIdentical(t *testing.T) {
	for _, fx := range fixtures {
		r := load(t, fx, true)
		cases := readRef(t, fx)
		c := cases[len(cases)-1]
		r.Free(0)
		whole := forward(t, r, 0, c.PromptIDs, true)
		for _, size := range []int{1, 5, 16, 17, 64, 100} {
			if testing.Short() && size == 1 {
				continue
			}
			r.Free(1)
			var got [][]float32
			for i := 0; i < len(c.PromptIDs); i += size {
				got = append(got, forward(t, r, 1, c.PromptIDs[i:min(i+size, len(c.PromptIDs))], true)...)
			}
			requireIdentical(t, fmt.Sprintf("%s chunk %d", fx, size), got, whole)
		}
	}
}

func requireIdentical(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("%s: row %d logit %d = %v, want %v", what, i, j, got[i][j], want[i][j])
			}
		}
	}
}

// TestMixedBatchIdentical runs several sequences at different positions in
// one step (a decode, a prefill chunk starting mid-prompt, a fresh prompt)
// and checks each row against the sequence run alone.
func TestMixedBatchIdentical(t *testing.T) {
	for _, fx := range fixtures {
		cases := readRef(t, fx)
		a, b, c := cases[0].PromptIDs, cases[1].PromptIDs, cases[2].PromptIDs
		// alone
		r := load(t, fx, true)
		aloneA := forward(t, r, 0, a, true)
		r.Free(0)
		forward(t, r, 0, b[:30], true)
		aloneB := forward(t, r, 0, b[30:], true)
		r.Free(0)
		aloneC := forward(t, r, 0, c[:40], true)
		r.Free(0)
		// together: A's prompt minus its last token and B's first 30 go first
		forward(t, r, 2, a[:len(a)-1], false)
		forward(t, r, 1, b[:30], false)
		chunks := []model.Chunk{
			{Slot: 1, Pos: 30, Tokens: b[30:], AllLogits: true},
			{Slot: 2, Pos: len(a) - 1, Tokens: a[len(a)-1:], AllLogits: true},
			{Slot: 3, Pos: 0, Tokens: c[:40], AllLogits: true},
		}
		for _, ch := range chunks {
			if err := r.Reserve(ch.Slot, len(ch.Tokens)); err != nil {
				t.Fatal(err)
			}
		}
		var out model.Logits
		if err := r.Forward(&model.Batch{Chunks: chunks}, &out); err != nil {
			t.Fatal(err)
		}
		requireIdentical(t, fx+" decode row", copyRows(out.Rows[1]), aloneA[len(a)-1:])
		requireIdentical(t, fx+" prefill chunk", copyRows(out.Rows[0]), aloneB)
		requireIdentical(t, fx+" fresh prompt", copyRows(out.Rows[2]), aloneC)
	}
}

// TestForwardRejectsBadBatches checks misuse is an error, not a panic, and
// leaves the slot unchanged.
func TestForwardRejectsBadBatches(t *testing.T) {
	r := load(t, "qwen3moe-a", true)
	if err := r.Reserve(0, 4); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]model.Batch{
		"empty":         {},
		"bad slot":      {Chunks: []model.Chunk{{Slot: 9, Tokens: []int32{1}}}},
		"wrong pos":     {Chunks: []model.Chunk{{Slot: 0, Pos: 3, Tokens: []int32{1}}}},
		"no tokens":     {Chunks: []model.Chunk{{Slot: 0}}},
		"unreserved":    {Chunks: []model.Chunk{{Slot: 0, Tokens: make([]int32, 17)}}},
		"bad token":     {Chunks: []model.Chunk{{Slot: 0, Tokens: []int32{1000}}}},
		"negative tok":  {Chunks: []model.Chunk{{Slot: 0, Tokens: []int32{-1}}}},
		"slot twice":    {Chunks: []model.Chunk{{Slot: 0, Tokens: []int32{1}}, {Slot: 0, Tokens: []int32{2}}}},
		"too many toks": {Chunks: []model.Chunk{{Slot: 1, Tokens: make([]int32, 513)}}},
	} {
		var out model.Logits
		if err := r.Forward(&b, &out); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if r.rb.Pool.Len(0) != 0 {
		t.Fatalf("rejected batches advanced slot 0 to %d", r.rb.Pool.Len(0))
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := models.Load(t.TempDir(), models.Options{}); err == nil {
		t.Error("loading an empty directory succeeded")
	}
	dir := t.TempDir()
	cfg, _ := os.ReadFile(filepath.Join(fixtureDir("qwen3moe-a"), "config.json"))
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	if _, err := Load(dir, models.Options{}); err == nil {
		t.Error("loading without weights succeeded")
	} else {
		t.Log(err)
	}
	// weights of a different config: shape errors name the tensor
	st, _ := os.ReadFile(filepath.Join(fixtureDir("qwen3moe-b"), "model.safetensors"))
	os.WriteFile(filepath.Join(dir, "model.safetensors"), st, 0o644)
	if _, err := Load(dir, models.Options{}); err == nil {
		t.Error("loading mismatched weights succeeded")
	} else {
		t.Log(err)
	}
}

func TestRegistry(t *testing.T) {
	r, err := models.Load(fixtureDir("qwen3moe-b"), models.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if info := r.Info(); info.Architecture != Architecture || info.VocabSize != 1000 || len(info.EOSTokenIDs) == 0 {
		t.Fatalf("info %+v", info)
	}
}
