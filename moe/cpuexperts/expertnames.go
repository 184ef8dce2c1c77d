package cpuexperts

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ExpertNaming is how a Hugging Face checkpoint names its routed experts'
// tensors.
type ExpertNaming int

const (
	// NamingProj is {prefix}layers.{L}.mlp.experts.{E}.{gate,up,down}_proj.weight:
	// Qwen2/3 MoE, Qwen3-Next, Qwen3.5, DeepSeek V2/V3, Kimi K2, GLM-4.5.
	NamingProj ExpertNaming = iota
	// NamingW123 is {prefix}layers.{L}.block_sparse_moe.experts.{E}.{w1,w3,w2}.weight
	// (w1 the gate, w3 the up, w2 the down projection): Mixtral, MiniMax.
	NamingW123
	// NamingFused is {prefix}layers.{L}.mlp.experts.gate_up_proj [E, 2I, H]
	// (each expert's gate rows, then its up rows) and ...down_proj [E, H, I]:
	// the layout transformers 5 saves MoE checkpoints in.
	NamingFused
)

// String names the naming by its pattern.
func (n ExpertNaming) String() string {
	switch n {
	case NamingW123:
		return "block_sparse_moe.experts.{E}.w1/w3/w2"
	case NamingFused:
		return "mlp.experts.{gate_up,down}_proj"
	}
	return "mlp.experts.{E}.{gate,up,down}_proj"
}

// Name is the tensor name of expert e's projection p in layer l under
// prefix; with NamingFused the name of the stack that holds it.
func (n ExpertNaming) Name(prefix string, l, e int, p Proj) string {
	switch n {
	case NamingW123:
		return fmt.Sprintf("%slayers.%d.block_sparse_moe.experts.%d.%s.weight", prefix, l, e, [...]string{"w1", "w3", "w2"}[p])
	case NamingFused:
		return fmt.Sprintf("%slayers.%d.mlp.experts.%s", prefix, l, [...]string{"gate_up_proj", "gate_up_proj", "down_proj"}[p])
	}
	return ExpertName(prefix, l, e, p)
}

// ExpertName is the HF name of expert e's projection p in layer l
// (NamingProj).
func ExpertName(prefix string, l, e int, p Proj) string {
	return fmt.Sprintf("%slayers.%d.mlp.experts.%d.%s_proj.weight", prefix, l, e, p)
}

// ExpertTensors is where a checkpoint keeps its routed experts: the tensor
// name prefix, the naming, and the layers holding experts, ascending.
type ExpertTensors struct {
	Prefix string
	Naming ExpertNaming
	Layers []int
	// Experts is one more than the highest expert index found in those
	// layers: the routed experts per layer the checkpoint holds (0 for
	// NamingFused, whose stacks' first dimension says it).
	Experts int
	// Others lists the other prefixes that hold experts too (a multi-token
	// prediction head's "mtp.", say), with their layer counts: they are
	// not the model's decoder layers and are left out.
	Others []string
}

var (
	expertTensorRE = regexp.MustCompile(`^(.*)layers\.(\d+)\.(mlp\.experts\.\d+\.(?:gate|up|down)_proj|block_sparse_moe\.experts\.\d+\.w[123])\.weight$`)
	fusedTensorRE  = regexp.MustCompile(`^(.*)layers\.(\d+)\.mlp\.experts\.(?:gate_up|down)_proj$`)
)

// FindExpertTensors finds the routed experts among a checkpoint's tensor
// names: one naming (ExpertNaming), under the prefix that holds the most
// layers of them (ties: the shortest). A checkpoint with none of them
// (gpt-oss's MXFP4 stacks, say) is refused, naming what was looked for.
func FindExpertTensors(names []string) (ExpertTensors, error) {
	type key struct {
		prefix string
		naming ExpertNaming
	}
	layers := map[key]map[int]bool{}
	experts := map[key]int{}
	for _, n := range names {
		if m := fusedTensorRE.FindStringSubmatch(n); m != nil {
			if l, err := strconv.Atoi(m[2]); err == nil && l <= 1<<20 {
				k := key{m[1], NamingFused}
				if layers[k] == nil {
					layers[k] = map[int]bool{}
				}
				layers[k][l] = true
			}
			continue
		}
		m := expertTensorRE.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		l, err := strconv.Atoi(m[2])
		if err != nil || l > 1<<20 {
			continue
		}
		e, err := strconv.Atoi(strings.Split(m[3], ".")[2])
		if err != nil || e >= 1<<16 {
			continue
		}
		k := key{m[1], NamingProj}
		if strings.HasPrefix(m[3], "block_sparse_moe.") {
			k.naming = NamingW123
		}
		if layers[k] == nil {
			layers[k] = map[int]bool{}
		}
		layers[k][l] = true
		experts[k] = max(experts[k], e+1)
	}
	if len(layers) == 0 {
		return ExpertTensors{}, fmt.Errorf("no routed-expert tensors (looked for {prefix}layers.{L}.%s.weight, {prefix}layers.{L}.%s.weight and {prefix}layers.{L}.%s)", NamingProj, NamingW123, NamingFused)
	}
	keys := make([]key, 0, len(layers))
	for k := range layers {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if len(layers[a]) != len(layers[b]) {
			return len(layers[a]) > len(layers[b])
		}
		if len(a.prefix) != len(b.prefix) {
			return len(a.prefix) < len(b.prefix)
		}
		if a.prefix != b.prefix {
			return a.prefix < b.prefix
		}
		return a.naming < b.naming
	})
	best := keys[0]
	t := ExpertTensors{Prefix: best.prefix, Naming: best.naming, Experts: experts[best]}
	for l := range layers[best] {
		t.Layers = append(t.Layers, l)
	}
	slices.Sort(t.Layers)
	for _, k := range keys[1:] {
		t.Others = append(t.Others, fmt.Sprintf("%q (%s, %d layers)", k.prefix, k.naming, len(layers[k])))
	}
	return t, nil
}
