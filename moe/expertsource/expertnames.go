package expertsource

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ktserve/kt/moe/cpuexperts"
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
func (n ExpertNaming) Name(prefix string, l, e int, p cpuexperts.Proj) string {
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
func ExpertName(prefix string, l, e int, p cpuexperts.Proj) string {
	return fmt.Sprintf("%slayers.%d.mlp.experts.%d.%s_proj.weight", prefix, l, e, p)
}

// ExpertTensors is where a checkpoint keeps its routed experts: the tensor
// name prefix, the naming, and the layers holding experts, ascending.
type ExpertTensors struct {
	Prefix string
	Naming ExpertNaming
	Layers []int
	// Experts is one more than the highest expert index found in those
	// layers: the routed experts per layer the checkpoint holds (for
	// NamingFused the stacks' first dimension, 0 where dims is nil).
	Experts int
	// Others lists the other prefixes that hold experts too (a multi-token
	// prediction head's "mtp.", say), with their layer counts: they are
	// not the model's decoder layers and are left out.
	Others []string
}

// expertKey is one way a checkpoint holds experts: a prefix and a naming.
type expertKey struct {
	prefix string
	naming ExpertNaming
}

// parseExpertTensor reads a routed-expert tensor's name: its prefix and
// naming, layer and expert (-1 for a fused stack of every expert).
func parseExpertTensor(n string) (k expertKey, layer, expert int, ok bool) {
	if m := fusedTensorRE.FindStringSubmatch(n); m != nil {
		l, err := strconv.Atoi(m[2])
		return expertKey{m[1], NamingFused}, l, -1, err == nil && l <= 1<<20
	}
	m := expertTensorRE.FindStringSubmatch(n)
	if m == nil {
		return expertKey{}, 0, 0, false
	}
	l, err := strconv.Atoi(m[2])
	if err != nil || l > 1<<20 {
		return expertKey{}, 0, 0, false
	}
	e, err := strconv.Atoi(strings.Split(m[3], ".")[2])
	if err != nil || e >= 1<<16 {
		return expertKey{}, 0, 0, false
	}
	k = expertKey{m[1], NamingProj}
	if strings.HasPrefix(m[3], "block_sparse_moe.") {
		k.naming = NamingW123
	}
	return k, l, e, true
}

var (
	expertTensorRE = regexp.MustCompile(`^(.*)layers\.(\d+)\.(mlp\.experts\.\d+\.(?:gate|up|down)_proj|block_sparse_moe\.experts\.\d+\.w[123])\.weight(?:_packed)?$`)
	fusedTensorRE  = regexp.MustCompile(`^(.*)layers\.(\d+)\.mlp\.experts\.(?:gate_up|down)_proj$`)
)

// FindExpertTensors finds the routed experts among a checkpoint's tensor
// names: one naming (ExpertNaming), under the prefix that holds the most
// layers of them (ties: the shortest). dims (nil: unknown) gives a named
// tensor's shape, from which a fused stack's expert count is read. A
// checkpoint with none of them (gpt-oss's MXFP4 stacks, say) is refused,
// naming what was looked for.
func FindExpertTensors(names []string, dims func(name string) []int64) (ExpertTensors, error) {
	layers := map[expertKey]map[int]bool{}
	experts := map[expertKey]int{}
	for _, n := range names {
		k, l, e, ok := parseExpertTensor(n)
		if !ok {
			continue
		}
		if layers[k] == nil {
			layers[k] = map[int]bool{}
		}
		layers[k][l] = true
		if k.naming == NamingFused && dims != nil {
			if d := dims(n); len(d) == 3 && d[0] < 1<<16 {
				e = int(d[0]) - 1
			}
		}
		experts[k] = max(experts[k], e+1)
	}
	if len(layers) == 0 {
		return ExpertTensors{}, fmt.Errorf("no routed-expert tensors (looked for {prefix}layers.{L}.%s.weight, {prefix}layers.{L}.%s.weight and {prefix}layers.{L}.%s)", NamingProj, NamingW123, NamingFused)
	}
	keys := make([]expertKey, 0, len(layers))
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
