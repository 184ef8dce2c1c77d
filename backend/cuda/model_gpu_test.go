//go:build cgo

package cuda_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/ktserve/kt/arch"
	_ "github.com/ktserve/kt/arch/all"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/engine/sample"
	testfixtures "github.com/ktserve/kt/internal/fixtures"
	"github.com/ktserve/kt/model"
)

// The whole model on the GPU through the same model definitions, against
// the transformers fixtures (testdata/models, or $KT_TESTDATA_MODELS).
//
// Tolerance: the fixtures' references are float32. MatMul splits the
// activations into two bf16 halves (one tensor-core GEMM of twice the
// rows), which tracks float32: logprobs must match within modelTol (the
// CPU backend's own tolerance is 1e-3; the measured worst on the H100 was
// 2.2e-3, a top-8 logprob of qwen35moe-a; worst differences are logged per
// fixture). F32 checkpoints (qwen3moe-c) run F32 GEMMs. Greedy
// tokens must equal the reference's wherever its top-2 margin exceeds
// 2·modelTol.
const modelTol = 5e-3

var fixtures = []string{"qwen3moe-a", "qwen3moe-b", "qwen3moe-c", "qwen3next-a", "qwen3next-b", "qwen35moe-a", "qwen35moe-b",
	// block-scaled FP8 checkpoints: FP8 MatMul weights and FP8 MoE experts
	"qwen3moe-fp8-a", "qwen3moe-fp8-b", "qwen35moe-fp8",
	// trained on real text (tools/train/train_moe.py)
	"qwen3moe-trained",
	// Multi-head Latent Attention, grouped sigmoid routing (DeepSeek-V3, Kimi-K2)
	"deepseekv3-a", "deepseekv3-b", "deepseekv3-c", "deepseekv3-fp8"}

var fixtureDir = testfixtures.Dir

var (
	devOnce sync.Once
	dev     *cuda.Device
	devErr  error
)

func gpu(t *testing.T) *cuda.Device {
	t.Helper()
	devOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kt-cuda-model-test")
		if err != nil {
			devErr = err
			return
		}
		dev, devErr = cuda.Open(cuda.Options{PoolBytes: 8 << 30, CacheDir: dir})
	})
	if devErr != nil {
		if errors.Is(devErr, cuda.ErrUnavailable) {
			t.Skipf("no GPU: %v", devErr)
		}
		t.Fatal(devErr)
	}
	return dev
}

// runner is a loaded model plus each slot's length.
type runner struct {
	r   model.Runner
	pos map[int]int
}

func load(t *testing.T, name string, onGPU bool) *runner {
	t.Helper()
	var be backend.Backend
	if onGPU {
		g, err := cuda.NewBackendOn(gpu(t))
		if err != nil {
			t.Fatal(err)
		}
		be = g
	} else {
		be = cpu.New(cpu.Options{})
	}
	r, err := arch.Load(fixtureDir(name), arch.Options{MaxSeqs: 4, MaxTotalTokens: 2048, MaxBatchTokens: 512, PageSize: 16, Backend: be})
	if err != nil {
		be.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); be.Close() })
	return &runner{r: r, pos: map[int]int{}}
}

func (r *runner) free(slot int) { r.r.Free(slot); r.pos[slot] = 0 }

// forward runs one chunk on slot and returns copies of its logits rows.
func (r *runner) forward(t *testing.T, slot int, toks []int32, all bool) [][]float32 {
	t.Helper()
	out := r.batch(t, model.Chunk{Slot: slot, Tokens: toks, AllLogits: all})
	return out[0]
}

// batch runs chunks (Pos filled in from the tracked lengths) in one step.
func (r *runner) batch(t *testing.T, chunks ...model.Chunk) [][][]float32 {
	t.Helper()
	for i := range chunks {
		c := &chunks[i]
		c.Pos = r.pos[c.Slot]
		if err := r.r.Reserve(c.Slot, len(c.Tokens)); err != nil {
			t.Fatal(err)
		}
	}
	var out model.Logits
	if err := r.r.Forward(&model.Batch{Chunks: chunks}, &out); err != nil {
		t.Fatal(err)
	}
	res := make([][][]float32, len(chunks))
	for i, c := range chunks {
		r.pos[c.Slot] += len(c.Tokens)
		for _, row := range out.Rows[i] {
			res[i] = append(res[i], append([]float32(nil), row...))
		}
	}
	return res
}

func logSoftmax(row []float32) []float64 { return sample.LogSoftmax(row, nil) }

func argmax(lp []float64) int32 {
	best := 0
	for i, v := range lp {
		if v > lp[best] {
			best = i
		}
	}
	return int32(best)
}

// maxLogprobDiff is the largest |log-softmax difference| over rows.
func maxLogprobDiff(a, b [][]float32) float64 {
	var worst float64
	for i := range a {
		la, lb := logSoftmax(a[i]), logSoftmax(b[i])
		for j := range la {
			worst = math.Max(worst, math.Abs(la[j]-lb[j]))
		}
	}
	return worst
}

// TestModelsMatchTransformers checks every prompt logprob and, teacher
// forcing the reference's greedy continuation through the KV cache, each
// greedy token and its logprob and the top logprobs, on the GPU; it also
// reports the largest difference to the CPU backend's logprobs.
func TestModelsMatchTransformers(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx, func(t *testing.T) {
			g, c := load(t, fx, true), load(t, fx, false)
			var worstRef, worstCPU float64
			flips := 0
			for _, rc := range testfixtures.Load(t, fx) {
				g.free(0)
				c.free(0)
				rows := g.forward(t, 0, rc.PromptIDs, true)
				worstCPU = math.Max(worstCPU, maxLogprobDiff(rows, c.forward(t, 0, rc.PromptIDs, true)))
				for i := 1; i < len(rc.PromptIDs); i++ {
					lp := logSoftmax(rows[i-1])[rc.PromptIDs[i]]
					d := math.Abs(lp - *rc.PromptLogprobs[i])
					worstRef = math.Max(worstRef, d)
					if d > modelTol {
						t.Errorf("%s: prompt token %d logprob %.6f, reference %.6f", rc.Name, i, lp, *rc.PromptLogprobs[i])
					}
				}
				last := rows[len(rows)-1]
				for s, want := range rc.GreedyIDs {
					lp := logSoftmax(last)
					if got := argmax(lp); got != want {
						if rc.Top2Margin[s] > 2*modelTol {
							t.Errorf("%s: greedy step %d: token %d, reference %d (margin %.4g)", rc.Name, s, got, want, rc.Top2Margin[s])
						} else {
							flips++
						}
					}
					d := math.Abs(lp[want] - rc.GreedyLogprobs[s])
					worstRef = math.Max(worstRef, d)
					if d > modelTol {
						t.Errorf("%s: greedy step %d logprob %.6f, reference %.6f", rc.Name, s, lp[want], rc.GreedyLogprobs[s])
					}
					for _, p := range rc.TopLogprobs[s] {
						d := math.Abs(lp[int(p[0])] - p[1])
						worstRef = math.Max(worstRef, d)
						if d > modelTol {
							t.Errorf("%s: step %d top token %d logprob %.6f, reference %.6f", rc.Name, s, int(p[0]), lp[int(p[0])], p[1])
						}
					}
					if s+1 < len(rc.GreedyIDs) {
						last = g.forward(t, 0, []int32{want}, false)[0]
						cl := c.forward(t, 0, []int32{want}, false)[0]
						worstCPU = math.Max(worstCPU, maxLogprobDiff([][]float32{last}, [][]float32{cl}))
					}
				}
			}
			t.Logf("RESULT %s: worst |logprob - transformers| %.3g, worst |logprob - cpu backend| %.3g (tolerance %g), greedy flips at small margins %d",
				fx, worstRef, worstCPU, modelTol, flips)
		})
	}
}

// TestChunkedPrefill prefills the longest prompt in chunks of several sizes
// on the GPU; logprobs must match one whole prefill within modelTol
// (cuBLASLt may pick other algorithms for other row counts, so they are not
// bit-identical as on the CPU).
func TestChunkedPrefill(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx, func(t *testing.T) {
			g := load(t, fx, true)
			cases := testfixtures.Load(t, fx)
			c := cases[len(cases)-1]
			g.free(0)
			whole := g.forward(t, 0, c.PromptIDs, true)
			var worst float64
			for _, size := range []int{1, 5, 16, 17, 64, 100} {
				g.free(1)
				var got [][]float32
				for i := 0; i < len(c.PromptIDs); i += size {
					got = append(got, g.forward(t, 1, c.PromptIDs[i:min(i+size, len(c.PromptIDs))], true)...)
				}
				if len(got) != len(whole) {
					t.Fatalf("chunk %d: %d rows, want %d", size, len(got), len(whole))
				}
				d := maxLogprobDiff(got, whole)
				worst = math.Max(worst, d)
				if d > modelTol {
					t.Errorf("chunk %d: logprobs differ from one prefill by %.3g", size, d)
				}
			}
			t.Logf("RESULT %s chunked prefill (1..100): worst logprob difference to one prefill %.3g", fx, worst)
		})
	}
}

// TestMixedBatch runs a decode, a prefill chunk starting mid-prompt and a
// fresh prompt in one step on the GPU and compares each with the sequence
// run alone.
func TestMixedBatch(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx, func(t *testing.T) {
			cases := testfixtures.Load(t, fx)
			a, b, c := cases[0].PromptIDs, cases[1].PromptIDs, cases[2].PromptIDs
			g := load(t, fx, true)
			aloneA := g.forward(t, 0, a, true)
			g.free(0)
			g.forward(t, 0, b[:30], true)
			aloneB := g.forward(t, 0, b[30:], true)
			g.free(0)
			aloneC := g.forward(t, 0, c[:40], true)
			g.free(0)
			g.forward(t, 2, a[:len(a)-1], false)
			g.forward(t, 1, b[:30], false)
			out := g.batch(t,
				model.Chunk{Slot: 1, Tokens: b[30:], AllLogits: true},
				model.Chunk{Slot: 2, Tokens: a[len(a)-1:], AllLogits: true},
				model.Chunk{Slot: 3, Tokens: c[:40], AllLogits: true})
			var worst float64
			for _, cmp := range []struct {
				name      string
				got, want [][]float32
			}{{"prefill chunk", out[0], aloneB}, {"decode row", out[1], aloneA[len(a)-1:]}, {"fresh prompt", out[2], aloneC}} {
				if len(cmp.got) != len(cmp.want) {
					t.Fatalf("%s: %d rows, want %d", cmp.name, len(cmp.got), len(cmp.want))
				}
				d := maxLogprobDiff(cmp.got, cmp.want)
				worst = math.Max(worst, d)
				if d > modelTol {
					t.Errorf("%s: logprobs differ from the sequence alone by %.3g", cmp.name, d)
				}
			}
			t.Logf("RESULT %s mixed batch: worst logprob difference to sequences alone %.3g", fx, worst)
		})
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if dev != nil {
		if err := dev.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the GPU:", err)
		}
	}
	os.Exit(code)
}
