package expertsource

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/moe/cpuexperts"
)

func TestFindExpertTensors(t *testing.T) {
	names := func(prefix string, naming ExpertNaming, layers []int, experts int) []string {
		var n []string
		for _, l := range layers {
			for e := range experts {
				for p := cpuexperts.Gate; p <= cpuexperts.Down; p++ {
					n = append(n, naming.Name(prefix, l, e, p))
				}
			}
			n = append(n, fmt.Sprintf("%slayers.%d.mlp.gate.weight", prefix, l))
		}
		return n
	}
	dense := []string{"model.embed_tokens.weight", "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight", "lm_head.weight"}
	cases := []struct {
		name   string
		tensor []string
		want   ExpertTensors
		err    string
	}{
		{name: "qwen3-moe", tensor: names("model.", NamingProj, []int{0, 1, 2}, 4),
			want: ExpertTensors{Prefix: "model.", Naming: NamingProj, Layers: []int{0, 1, 2}, Experts: 4}},
		{name: "deepseek: dense first layer, shared experts beside", tensor: append(append(slices.Clone(dense), names("model.", NamingProj, []int{1, 2, 10}, 8)...),
			"model.layers.1.mlp.shared_experts.gate_proj.weight", "model.layers.1.mlp.gate.e_score_correction_bias"),
			want: ExpertTensors{Prefix: "model.", Naming: NamingProj, Layers: []int{1, 2, 10}, Experts: 8}},
		{name: "qwen3.5 nested, mtp head beside", tensor: append(names("model.language_model.", NamingProj, []int{0, 1, 2, 3}, 8), names("mtp.", NamingProj, []int{0}, 8)...),
			want: ExpertTensors{Prefix: "model.language_model.", Naming: NamingProj, Layers: []int{0, 1, 2, 3}, Experts: 8,
				Others: []string{`"mtp." (mlp.experts.{E}.{gate,up,down}_proj, 1 layers)`}}},
		{name: "mixtral", tensor: names("model.", NamingW123, []int{0, 1}, 8),
			want: ExpertTensors{Prefix: "model.", Naming: NamingW123, Layers: []int{0, 1}, Experts: 8}},
		{name: "fp8 scales are not experts", tensor: append(names("", NamingProj, []int{5}, 2), "layers.5.mlp.experts.7.gate_proj.weight_scale_inv"),
			want: ExpertTensors{Prefix: "", Naming: NamingProj, Layers: []int{5}, Experts: 2}},
		{name: "transformers 5 fused stacks", tensor: []string{"model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj",
			"model.layers.1.mlp.experts.gate_up_proj", "model.layers.1.mlp.experts.down_proj", "model.layers.1.mlp.experts.gate_up_proj_scale_inv"},
			want: ExpertTensors{Prefix: "model.", Naming: NamingFused, Layers: []int{0, 1}}},
		{name: "dense model", tensor: dense, err: "no routed-expert tensors"},
		{name: "fused stacks (gpt-oss)", tensor: []string{"model.layers.0.mlp.experts.gate_up_proj_blocks", "model.layers.0.mlp.experts.down_proj_blocks"}, err: "no routed-expert tensors"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := FindExpertTensors(c.tensor, nil)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Prefix != c.want.Prefix || got.Naming != c.want.Naming || !slices.Equal(got.Layers, c.want.Layers) ||
				got.Experts != c.want.Experts || !slices.Equal(got.Others, c.want.Others) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestExpertNamingNames: the two namings' tensor names, projection by projection.
func TestExpertNamingNames(t *testing.T) {
	for _, c := range []struct {
		n    ExpertNaming
		p    cpuexperts.Proj
		want string
	}{
		{NamingProj, cpuexperts.Gate, "model.layers.3.mlp.experts.7.gate_proj.weight"},
		{NamingProj, cpuexperts.Down, "model.layers.3.mlp.experts.7.down_proj.weight"},
		{NamingW123, cpuexperts.Gate, "model.layers.3.block_sparse_moe.experts.7.w1.weight"},
		{NamingW123, cpuexperts.Up, "model.layers.3.block_sparse_moe.experts.7.w3.weight"},
		{NamingW123, cpuexperts.Down, "model.layers.3.block_sparse_moe.experts.7.w2.weight"},
		{NamingFused, cpuexperts.Up, "model.layers.3.mlp.experts.gate_up_proj"},
		{NamingFused, cpuexperts.Down, "model.layers.3.mlp.experts.down_proj"},
	} {
		if got := c.n.Name("model.", 3, 7, c.p); got != c.want {
			t.Errorf("%v %v: %s, want %s", c.n, c.p, got, c.want)
		}
	}
}

// FuzzFindExpertTensors: no list of names panics, and what is found holds.
func FuzzFindExpertTensors(f *testing.F) {
	f.Add("model.layers.1.mlp.experts.3.gate_proj.weight\nmtp.layers.0.mlp.experts.0.up_proj.weight")
	f.Add("model.layers.0.block_sparse_moe.experts.7.w2.weight")
	f.Add("model.language_model.layers.2.mlp.experts.gate_up_proj\nmodel.language_model.layers.2.mlp.experts.down_proj")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := FindExpertTensors(strings.Split(s, "\n"), nil)
		if err != nil {
			return
		}
		if len(got.Layers) == 0 || (got.Experts <= 0) != (got.Naming == NamingFused) || !slices.IsSorted(got.Layers) {
			t.Fatalf("found %+v", got)
		}
	})
}
