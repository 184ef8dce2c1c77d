//go:build linux && amd64 && cgo

package enginebench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/tensor"
)

// BenchShape is a model's MoE layer shape for kt bench.
type BenchShape struct {
	Name                                string
	Experts, Hidden, Intermediate, TopK int
}

// BenchShapes are the two reference layers, Qwen3.5-35B-A3B and Qwen3-30B-A3B
// (kt bench --type moe --model all).
var BenchShapes = []BenchShape{
	{Name: "qwen3.5-35b-a3b", Experts: 256, Hidden: 2048, Intermediate: 512, TopK: 8},
	{Name: "qwen3-30b-a3b", Experts: 128, Hidden: 2048, Intermediate: 768, TopK: 8},
}

// OtherBenchShapes are more models' layers kt bench knows by name, as their
// config.json files state them (n_routed_experts or num_experts,
// hidden_size, moe_intermediate_size, num_experts_per_tok). Any other
// model's layer is benched from its config.json (--model-path).
var OtherBenchShapes = []BenchShape{
	{Name: "qwen3-next-80b-a3b", Experts: 512, Hidden: 2048, Intermediate: 512, TopK: 10},
	{Name: "deepseek-v3", Experts: 256, Hidden: 7168, Intermediate: 2048, TopK: 8},
	{Name: "kimi-k2", Experts: 384, Hidden: 7168, Intermediate: 2048, TopK: 8},
}

// LookupBenchShape finds a named layer shape in BenchShapes or
// OtherBenchShapes, ignoring case.
func LookupBenchShape(name string) (BenchShape, bool) {
	for _, s := range slices.Concat(BenchShapes, OtherBenchShapes) {
		if strings.EqualFold(s.Name, name) {
			return s, true
		}
	}
	return BenchShape{}, false
}

// BenchShapeNames lists the names LookupBenchShape knows.
func BenchShapeNames() []string {
	var n []string
	for _, s := range slices.Concat(BenchShapes, OtherBenchShapes) {
		n = append(n, s.Name)
	}
	return n
}

// LayerBytesEstimate is the weight bytes a layer of shape s in method m
// takes, scales included (Method.bytesPerWeight), before it is built: what
// kt bench checks against the memory it may use (INT4_KGROUP at the
// SyntheticLayer's default group of 128).
func LayerBytesEstimate(s BenchShape, m cpuexperts.Method) int64 {
	return m.ExpertBytesEstimate(s.Hidden, s.Intermediate) * int64(s.Experts)
}

// BenchResult is one measured (method, token count) point.
type BenchResult struct {
	Method       cpuexperts.Method
	Kernels      string
	Tokens       int
	Seconds      float64 // per layer
	Iters        int
	BytesTouched int64                 // weight bytes of the distinct experts the batch routes to
	FLOPs        float64               // 2 * 3 * H * I * tokens * top-k
	Phases       cpuexperts.PhaseTimes // summed over the Iters timed tasks
	Trace        cpuexperts.TaskTrace  // means over the timed decode tasks (Config.Trace)
	// bytes per task that the prefetches in the gaps (BenchOptions.PrefetchHit)
	// were to read, and read before the task queued behind stopped them
	PrefetchPlanned, PrefetchRead int64
}

// GBps is the effective weight bandwidth, bytes touched / time.
func (r BenchResult) GBps() float64 { return float64(r.BytesTouched) / r.Seconds / 1e9 }

// TFLOPS is the arithmetic rate.
func (r BenchResult) TFLOPS() float64 { return r.FLOPs / r.Seconds / 1e12 }

// SyntheticLayer builds a layer of random weights for shape s and method m.
func SyntheticLayer(e *cpuexperts.Engine, s BenchShape, m cpuexperts.Method, seed uint64) (*cpuexperts.Layer, error) {
	spec := cpuexperts.LayerSpec{Method: m, Experts: s.Experts, Hidden: s.Hidden, Intermediate: s.Intermediate}
	dt := tensor.BF16
	switch m {
	case cpuexperts.FP8:
		dt = tensor.F8E4M3
	case cpuexperts.RAWINT4:
		dt = tensor.I32 // pack-quantized INT4, groups of 32
	}
	return e.NewLayer(spec, &cpuexperts.SyntheticSource{Spec: spec, DType: dt, Seed: seed})
}

// LastLevelCache returns the size of the largest CPU cache (0 if unknown).
func LastLevelCache() int64 {
	var best int64
	for i := 0; i < 8; i++ {
		b, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu0/cache/index%d/size", i))
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		mul := int64(1)
		switch {
		case strings.HasSuffix(s, "K"):
			mul, s = 1<<10, strings.TrimSuffix(s, "K")
		case strings.HasSuffix(s, "M"):
			mul, s = 1<<20, strings.TrimSuffix(s, "M")
		case strings.HasSuffix(s, "G"):
			mul, s = 1<<30, strings.TrimSuffix(s, "G")
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n*mul > best {
			best = n * mul
		}
	}
	return best
}

// BenchOptions are Bench's settings beyond the batch's shape.
type BenchOptions struct {
	MinTime time.Duration // time at least this long (and 2 iterations)
	// Gap > 0 makes the caller spin that long between tasks, as the hybrid
	// step's caller waits for a GPU piece between layers; Seconds is then
	// the tasks' own time.
	Gap   time.Duration
	Seed  uint64
	F32IO bool // f32 rows in and out (as the hybrid step hands its pinned rows over) instead of bf16
	// PrefetchHit >= 0 (with Gap) queues, as each gap begins, a prefetch
	// (Layer.Prefetch) of the experts the next task is predicted to pick, as
	// the hybrid step does with the next layer's router applied to the
	// layer's input: of each token's top-k, the first round(PrefetchHit·k)
	// are its real picks and the rest other experts. < 0: no prefetch.
	PrefetchHit float64
}

// Bench times layers (same shape and method) on random batches of the
// given size, bf16 in and out unless o.F32IO, for at least o.MinTime and 2
// iterations after a warm-up. Iterations go round the layers and through 64
// routings, as consecutive layers of a model do, so that the weights come
// from memory and not from the last-level cache: pass enough layers that
// their weights exceed it several times.
func Bench(layers []*cpuexperts.Layer, tokens, topK int, o BenchOptions) (BenchResult, error) {
	if len(layers) == 0 {
		return BenchResult{}, fmt.Errorf("bench: no layers")
	}
	l0 := layers[0]
	H := l0.Spec().Hidden
	rng := rand.New(rand.NewPCG(o.Seed, uint64(tokens)))
	const variants = 64
	xb := make([]uint16, tokens*H)
	for i := range xb {
		xb[i] = tensor.F32ToBF16(float32(rng.NormFloat64()))
	}
	out := make([]uint16, tokens*H)
	var xf, outf []float32
	if o.F32IO {
		xf, outf = make([]float32, tokens*H), make([]float32, tokens*H)
		for i, v := range xb {
			xf[i] = tensor.BF16ToF32(v)
		}
	}
	prefetch := o.Gap > 0 && o.PrefetchHit >= 0
	var predicted [variants][]int32
	var batches [variants]cpuexperts.Batch
	var touched int64
	for v := range batches {
		ids := make([]int32, tokens*topK)
		w := make([]float32, tokens*topK)
		seen := make([]bool, l0.Spec().Experts)
		hits := int(math.Round(min(o.PrefetchHit, 1) * float64(topK)))
		for t := 0; t < tokens; t++ {
			perm := rng.Perm(l0.Spec().Experts)
			for j := 0; j < topK; j++ {
				ids[t*topK+j] = int32(perm[j])
				w[t*topK+j] = 1 / float32(topK)
				seen[perm[j]] = true
			}
			if prefetch { // the real picks first, then experts it does not pick
				for j := 0; j < topK; j++ {
					pj := j
					if j >= hits {
						pj = topK + j - hits
					}
					predicted[v] = append(predicted[v], int32(perm[pj%len(perm)]))
				}
			}
		}
		for x, s := range seen {
			if s {
				touched += l0.ExpertBytes(x)
			}
		}
		batches[v] = cpuexperts.Batch{Tokens: tokens, TopK: topK, XBF16: xb, IDs: ids, Weights: w, OutBF16: out}
		if o.F32IO {
			batches[v].XBF16, batches[v].OutBF16, batches[v].X, batches[v].Out = nil, nil, xf, outf
		}
	}
	for _, l := range layers {
		if err := l.Forward(&batches[0]); err != nil {
			return BenchResult{}, fmt.Errorf("bench %s %d tokens: %w", l.Spec().Method, tokens, err)
		}
	}
	runtime.GC() // no collection competing with the workers while timing
	l0.Engine().Phases()
	l0.Engine().Trace()
	pfPlanned0, pfRead0 := l0.Engine().Prefetched()
	var iters int
	var busy time.Duration
	start := time.Now()
	batch := func(i int) int { return (i/len(layers) + i) % variants }
	for iters < 2 || time.Since(start) < o.MinTime+time.Duration(iters)*o.Gap {
		l := layers[iters%len(layers)]
		t0 := time.Now()
		if err := l.Forward(&batches[batch(iters)]); err != nil {
			return BenchResult{}, err
		}
		t1 := time.Now()
		busy += t1.Sub(t0)
		if prefetch {
			layers[(iters+1)%len(layers)].Prefetch(predicted[batch(iters+1)])
		}
		for o.Gap > 0 && time.Since(t1) < o.Gap {
		}
		iters++
	}
	el := busy.Seconds()
	if err := l0.Engine().Sync(); err != nil { // the last gap's prefetch
		return BenchResult{}, err
	}
	ph := l0.Engine().Phases()
	pfPlanned, pfRead := l0.Engine().Prefetched()
	return BenchResult{
		Phases: ph, Trace: l0.Engine().Trace(),
		PrefetchPlanned: (pfPlanned - pfPlanned0) / int64(iters), PrefetchRead: (pfRead - pfRead0) / int64(iters),
		Method: l0.Spec().Method, Kernels: l0.Engine().Kernels(l0.Spec().Method), Tokens: tokens,
		Seconds: el / float64(iters), Iters: iters, BytesTouched: touched / variants,
		FLOPs: 2 * 3 * float64(H) * float64(l0.Spec().Intermediate) * float64(tokens*topK),
	}, nil
}
