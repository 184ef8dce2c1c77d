package doctor

import (
	"fmt"
	"strings"

	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/tp"
)

// Tensor parallelism (--tensor-parallel-size): whether the model's widths
// split over the ranks (model.tp), and on the GPU whether there are enough
// GPUs, NCCL and peer access between them (gpu.tp, gpu.go).

// tpSizes are the sizes model.tp lists when none is asked for.
var tpSizes = []int{2, 4, 8}

// checkTP reports, for Env.TPSize > 1, whether the model splits over that
// many ranks and what each rank holds; for one rank, the sizes it splits
// over.
func checkTP(env *Env) []Result {
	if env.ModelPath == "" {
		return nil
	}
	m := env.loadModel()
	if m.cfgErr != nil {
		return nil
	}
	c := m.cfg
	r := modelResult("model.tp")
	n := env.TPSize
	if n <= 1 {
		var ok []string
		for _, s := range tpSizes {
			if tp.CheckModel(c, s) == nil {
				ok = append(ok, fmt.Sprint(s))
			}
		}
		r.Status = Pass
		r.Detail = "one rank; --tensor-parallel-size splits this model over " + orNoneOf(ok, "no size of 2, 4 or 8") + " ranks"
		r.Data = map[string]any{"tp_sizes": ok}
		return []Result{r}
	}
	r.Data = map[string]any{"tp_size": n, "gpus_needed": n}
	if err := tp.CheckModel(c, n); err != nil {
		r.Status, r.Detail = Fail, oneLine(err)
		r.Hint = "pick a size that divides the heads and widths named (kt doctor --model-path DIR lists those that do)"
		return []Result{r}
	}
	r.Status = Pass
	r.Detail = fmt.Sprintf("--tensor-parallel-size %d: needs %d GPUs (GPUs --base-gpu-id .. +%d), or %d CPU ranks with --device cpu; each rank holds %s",
		n, n, n-1, n, rankShare(c, n))
	return []Result{r}
}

// rankShare says what one of n ranks holds of model c.
func rankShare(c *modelconfig.Config, n int) string {
	l := tp.Layout{Size: n}
	var parts []string
	if c.NumLayers > c.NumLinearLayers() {
		kv := l.KVHeads(c.NumHeads, c.NumKVHeads)
		s := fmt.Sprintf("%d of %d attention heads and %d of %d kv heads", c.NumHeads/n, c.NumHeads, kv.Count, c.NumKVHeads)
		if c.NumKVHeads < n {
			s += " (replicated)"
		}
		parts = append(parts, s)
	}
	if c.NumLinearLayers() > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d Gated DeltaNet key heads with their state", c.Linear.NumKeyHeads/n, c.Linear.NumKeyHeads))
	}
	parts = append(parts, fmt.Sprintf("%d of %d vocabulary rows", l.Vocab(c.VocabSize).Count, c.VocabSize))
	if c.NumMoELayers() > 0 {
		parts = append(parts, "rank 0 computes the routed experts for all")
	}
	return strings.Join(parts, ", ")
}

// orNoneOf joins xs with commas, or says none.
func orNoneOf(xs []string, none string) string {
	if len(xs) == 0 {
		return none
	}
	return strings.Join(xs, ", ")
}
