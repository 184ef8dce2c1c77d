//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ktserve/kt/tensor"
)

// BenchShape is a model's MoE layer shape for kt bench.
type BenchShape struct {
	Name                                string
	Experts, Hidden, Intermediate, TopK int
}

// BenchShapes are the layers the issue names: Qwen3.5-35B-A3B and Qwen3-30B-A3B.
var BenchShapes = []BenchShape{
	{Name: "qwen3.5-35b-a3b", Experts: 256, Hidden: 2048, Intermediate: 512, TopK: 8},
	{Name: "qwen3-30b-a3b", Experts: 128, Hidden: 2048, Intermediate: 768, TopK: 8},
}

// BenchResult is one measured (method, token count) point.
type BenchResult struct {
	Method       Method
	Kernels      string
	Tokens       int
	Seconds      float64 // per layer
	Iters        int
	BytesTouched int64   // weight bytes of the distinct experts the batch routes to
	FLOPs        float64 // 2 * 3 * H * I * tokens * top-k
}

// GBps is the effective weight bandwidth, bytes touched / time.
func (r BenchResult) GBps() float64 { return float64(r.BytesTouched) / r.Seconds / 1e9 }

// TFLOPS is the arithmetic rate.
func (r BenchResult) TFLOPS() float64 { return r.FLOPs / r.Seconds / 1e12 }

// SyntheticLayer builds a layer of random weights for shape s and method m.
func (e *Engine) SyntheticLayer(s BenchShape, m Method, seed uint64) (*Layer, error) {
	spec := LayerSpec{Method: m, Experts: s.Experts, Hidden: s.Hidden, Intermediate: s.Intermediate}
	dt := tensor.BF16
	if m == FP8 {
		dt = tensor.F8E4M3
	}
	return e.NewLayer(spec, &SyntheticSource{Spec: spec, DType: dt, Seed: seed})
}

// Bench times l on random batches of the given size (bf16 in and out, as
// the GPU path hands them over) for at least minTime and 2 iterations,
// after one warm-up. Each iteration uses a fresh routing.
func (l *Layer) Bench(tokens, topK int, minTime time.Duration, seed uint64) (BenchResult, error) {
	H := l.spec.Hidden
	rng := rand.New(rand.NewPCG(seed, uint64(tokens)))
	const variants = 4
	xb := make([]uint16, tokens*H)
	for i := range xb {
		xb[i] = tensor.F32ToBF16(float32(rng.NormFloat64()))
	}
	out := make([]uint16, tokens*H)
	var batches [variants]Batch
	var touched int64
	for v := range batches {
		ids := make([]int32, tokens*topK)
		w := make([]float32, tokens*topK)
		seen := map[int32]bool{}
		for t := 0; t < tokens; t++ {
			perm := rng.Perm(l.spec.Experts)
			for j := 0; j < topK; j++ {
				ids[t*topK+j] = int32(perm[j])
				w[t*topK+j] = 1 / float32(topK)
				seen[int32(perm[j])] = true
			}
		}
		for x := range seen {
			touched += l.ExpertBytes(int(x))
		}
		batches[v] = Batch{Tokens: tokens, TopK: topK, XBF16: xb, IDs: ids, Weights: w, OutBF16: out}
	}
	if err := l.Forward(&batches[0]); err != nil {
		return BenchResult{}, fmt.Errorf("bench %s %d tokens: %w", l.spec.Method, tokens, err)
	}
	var iters int
	var bytes int64
	start := time.Now()
	for iters < 2 || time.Since(start) < minTime {
		b := &batches[iters%variants]
		if err := l.Forward(b); err != nil {
			return BenchResult{}, err
		}
		iters++
	}
	el := time.Since(start).Seconds()
	bytes = touched / variants
	return BenchResult{
		Method: l.spec.Method, Kernels: l.e.Kernels(l.spec.Method), Tokens: tokens,
		Seconds: el / float64(iters), Iters: iters, BytesTouched: bytes,
		FLOPs: 2 * 3 * float64(H) * float64(l.spec.Intermediate) * float64(tokens*topK),
	}, nil
}
