// Package placement chooses which routed experts stay on the GPU in the
// hybrid step (SGLang's --kt-num-gpu-experts, --kt-gpu-experts-ratio and
// --kt-expert-placement-strategy, _init_kt_gpu_experts_masks): a per-layer
// mask, true = the expert's weights live on the GPU and the GPU computes
// it, false = the CPU expert engine does.
package placement

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/ktserve/kt/internal/torchpt"
)

// Strategy names an initial placement.
type Strategy string

// The strategies of --kt-expert-placement-strategy.
const (
	Uniform      Strategy = "uniform"       // N/L per MoE layer, the first N%L layers one more; experts 0..n-1
	FrontLoading Strategy = "front-loading" // fill from the first MoE layer, min(remaining, E) each; experts 0..n-1
	Random       Strategy = "random"        // a seeded permutation of all (MoE layer, expert) cells, the first N
	Frequency    Strategy = "frequency"     // global top-N (layer, expert) cells of recorded routing counts (--init-expert-location FILE.pt)
)

// RandomSeed is the seed of the random strategy (SGLang's 42). SGLang
// draws torch.randperm(L*E) from a torch generator seeded 42; kt cannot
// reproduce torch's generator, so it draws rand.New(rand.NewPCG(42, 0)).Perm
// instead: the same rule and seed, a different (but fixed) set of cells.
const RandomSeed = 42

// Request is what the flags ask for.
type Request struct {
	// PerLayer is --kt-num-gpu-experts (experts per MoE layer); < 0 unset.
	PerLayer int
	// Ratio is --kt-gpu-experts-ratio (fraction of all routed experts,
	// overrides PerLayer) when RatioSet.
	Ratio    float64
	RatioSet bool
	// Strategy is --kt-expert-placement-strategy; "" means Uniform.
	Strategy Strategy
	// StatsPath is the expert statistics file for Frequency
	// (--init-expert-location).
	StatsPath string
}

// Active reports whether r puts any expert on the GPU.
func (r Request) Active() bool {
	return r.RatioSet && r.Ratio > 0 || !r.RatioSet && r.PerLayer > 0
}

// Mask is one bool per expert of every model layer: Mask[l][e] is true
// when layer l's expert e is on the GPU. Rows of non-MoE layers are all
// true (as SGLang's), so a caller may index any layer.
type Mask [][]bool

// Count returns how many of layer l's experts are on the GPU.
func (m Mask) Count(l int) int {
	n := 0
	if l >= 0 && l < len(m) {
		for _, g := range m[l] {
			if g {
				n++
			}
		}
	}
	return n
}

// Compute returns the mask for a model whose layer l is a MoE layer when
// moe[l], with E routed experts per MoE layer, and the total number of GPU
// experts over the MoE layers. A request that puts no expert on the GPU
// gives a mask with every MoE row false (total 0).
func Compute(moe []bool, E int, r Request) (Mask, int, error) {
	if E <= 0 {
		return nil, 0, fmt.Errorf("placement: %d experts per layer", E)
	}
	var layers []int // model indices of the MoE layers
	m := make(Mask, len(moe))
	for l, isMoE := range moe {
		m[l] = make([]bool, E)
		if isMoE {
			layers = append(layers, l)
			continue
		}
		for e := range m[l] {
			m[l][e] = true
		}
	}
	L := len(layers)
	total := L * E
	var n int
	switch {
	case r.RatioSet:
		if r.Ratio < 0 || r.Ratio > 1 || r.Ratio != r.Ratio {
			return nil, 0, fmt.Errorf("placement: --kt-gpu-experts-ratio %v: want a fraction in [0, 1]", r.Ratio)
		}
		n = int(float64(total) * r.Ratio)
	case r.PerLayer > E:
		return nil, 0, fmt.Errorf("placement: --kt-num-gpu-experts %d: the model has %d routed experts per MoE layer", r.PerLayer, E)
	case r.PerLayer > 0:
		n = r.PerLayer * L
	}
	if n == 0 || L == 0 {
		return m, 0, nil
	}
	switch r.Strategy {
	case Uniform, "":
		for i, l := range layers {
			c := n / L
			if i < n%L {
				c++
			}
			fill(m[l], c)
		}
	case FrontLoading:
		left := n
		for _, l := range layers {
			c := min(left, E)
			fill(m[l], c)
			left -= c
		}
	case Random:
		perm := rand.New(rand.NewPCG(RandomSeed, 0)).Perm(total)
		for _, cell := range perm[:n] {
			m[layers[cell/E]][cell%E] = true
		}
	case Frequency:
		if r.StatsPath == "" {
			return nil, 0, errors.New("placement: frequency needs expert statistics (--init-expert-location FILE.pt)")
		}
		freq, err := LoadCounts(r.StatsPath, len(moe), E)
		if err != nil {
			return nil, 0, err
		}
		for _, cell := range topCells(freq, layers, n) {
			m[cell/E][cell%E] = true
		}
	default:
		return nil, 0, fmt.Errorf("placement: unknown strategy %q (uniform, front-loading, random, frequency)", r.Strategy)
	}
	return m, n, nil
}

// LoadCounts reads SGLang's expert statistics for a model of layers layers
// (num_hidden_layers) and E routed experts per layer: a torch.save file
// holding either a dict with "logical_count" (what SGLang's
// expert-distribution recorder dumps in stat mode) or the tensor itself,
// shaped [buffer, layers, E]. It returns the counts summed over the buffer
// dimension, [layers][E], as SGLang's _init_kt_gpu_experts_masks does.
func LoadCounts(path string, layers, E int) ([][]float64, error) {
	v, err := torchpt.Load(path)
	if err != nil {
		return nil, fmt.Errorf("placement: --init-expert-location: %w", err)
	}
	if d, ok := v.(map[string]any); ok {
		lc, ok := d["logical_count"]
		if !ok {
			keys := make([]string, 0, len(d))
			for k := range d {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			return nil, fmt.Errorf("placement: --init-expert-location %s: the dict has no \"logical_count\" (keys: %v)", path, keys)
		}
		v = lc
	}
	t, ok := v.(*torchpt.Tensor)
	if !ok {
		return nil, fmt.Errorf("placement: --init-expert-location %s: holds %T, want a [buffer, layers, experts] tensor or a dict with logical_count", path, v)
	}
	if len(t.Shape) != 3 {
		return nil, fmt.Errorf("placement: --init-expert-location %s: counts of shape %v, want 3 dims [buffer, layers, experts]", path, t.Shape)
	}
	if t.Shape[1] != layers || t.Shape[2] != E {
		return nil, fmt.Errorf("placement: --init-expert-location %s: counts of shape %v, but the model has %d layers of %d experts", path, t.Shape, layers, E)
	}
	out := make([][]float64, layers)
	for l := range out {
		out[l] = make([]float64, E)
	}
	for b := range t.Shape[0] {
		for l := range layers {
			for e := range E {
				out[l][e] += t.Data[(b*layers+l)*E+e]
			}
		}
	}
	return out, nil
}

// topCells returns the n (layer, expert) cells of the MoE layers with the
// largest counts, as layer*E+expert, ties to the lower layer then expert.
// SGLang takes torch.topk over every layer's row (dense rows count 0 and
// tie order is torch's); kt ranks MoE cells only, so no GPU slot goes to a
// dense layer's row, and breaks ties by position.
func topCells(freq [][]float64, layers []int, n int) []int {
	E := len(freq[0])
	cells := make([]int, 0, len(layers)*E)
	for _, l := range layers {
		for e := range E {
			cells = append(cells, l*E+e)
		}
	}
	slices.SortStableFunc(cells, func(a, b int) int {
		fa, fb := freq[a/E][a%E], freq[b/E][b%E]
		switch {
		case fa > fb:
			return -1
		case fa < fb:
			return 1
		}
		return 0
	})
	return cells[:min(n, len(cells))]
}

// fill marks experts 0..c-1 of row.
func fill(row []bool, c int) {
	for e := 0; e < c; e++ {
		row[e] = true
	}
}
