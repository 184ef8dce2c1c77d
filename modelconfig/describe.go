package modelconfig

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ktserve/kt/internal/units"
	"github.com/ktserve/kt/tensor"
)

// Describe writes a human-readable description of a model: architecture,
// layer kinds, attention and expert shapes, and (when r is not nil) the
// checkpoint's size, expert layout and check outcome.
func Describe(w io.Writer, c *Config, g *GenerationConfig, r *Report) error {
	var b strings.Builder
	line := func(k, format string, args ...any) {
		fmt.Fprintf(&b, "%-16s %s\n", k, fmt.Sprintf(format, args...))
	}
	line("architecture", "%s (%s)", c.Architecture, c.Family)
	var full, linear, moe, dense []int
	for _, l := range c.Layers {
		if l.Attention == FullAttention {
			full = append(full, l.Index)
		} else {
			linear = append(linear, l.Index)
		}
		if l.IsMoE {
			moe = append(moe, l.Index)
		} else {
			dense = append(dense, l.Index)
		}
	}
	line("layers", "%d: %d MoE, %d dense MLP; %d full attention, %d linear attention", c.NumLayers, len(moe), len(dense), len(full), len(linear))
	line("  full attn", "%s", ranges(full))
	if len(linear) > 0 {
		line("  linear attn", "%s (Gated DeltaNet)", ranges(linear))
	}
	if len(dense) > 0 {
		line("  dense MLP", "%s (intermediate %d)", ranges(dense), c.IntermediateSize)
	}
	gate := ""
	if c.AttnOutputGate {
		gate = ", sigmoid output gate"
	}
	if c.Family == DeepseekV3 {
		line("attention", "%s", describeMLA(c))
	} else {
		line("attention", "%d query heads, %d KV heads, head_dim %d%s", c.NumHeads, c.NumKVHeads, c.HeadDim, gate)
	}
	line("kv cache", "%d values per token (%s at float32)", c.KVValuesPerToken(), units.Bytes(c.KVBytesPerToken()))
	rope := fmt.Sprintf("%d of %d dims rotate (factor %g), theta %g, %s", c.Rope.RotaryDim, c.HeadDim, c.Rope.PartialRotaryFactor, c.Rope.Theta, c.Rope.Type)
	if c.Rope.Type != "default" {
		rope += fmt.Sprintf(" x%g from %d", c.Rope.Factor, c.Rope.OriginalMaxPositions)
	}
	if c.Rope.Type == "yarn" {
		rope += fmt.Sprintf(" (beta %g/%g, mscale %g, mscale_all_dim %g)", c.Rope.BetaFast, c.Rope.BetaSlow, c.Rope.MScale, c.Rope.MScaleAllDim)
	}
	if len(c.Rope.MRopeSection) > 0 {
		kind := "chunked"
		if c.Rope.MRopeInterleaved {
			kind = "interleaved"
		}
		rope += fmt.Sprintf(", M-RoPE sections %v %s", c.Rope.MRopeSection, kind)
	}
	line("rope", "%s", rope)
	if len(linear) > 0 {
		d := c.Linear
		line("linear attn", "%d key heads x %d, %d value heads x %d, conv kernel %d", d.NumKeyHeads, d.KeyHeadDim, d.NumValueHeads, d.ValueHeadDim, d.ConvKernel)
	}
	norm := "renormalised"
	if !c.NormTopKProb {
		norm = "not renormalised"
	}
	line("experts", "%d routed, top-%d (%s), intermediate %d", c.NumExperts, c.TopK, norm, c.MoEIntermediateSize)
	if c.SharedExpertIntermediateSize > 0 {
		line("shared expert", "intermediate %d, sigmoid gate", c.SharedExpertIntermediateSize)
	}
	if c.Family == DeepseekV3 {
		g := c.Routing
		line("router", "sigmoid scores + correction bias for the choice; top-%d of %d groups; weights x%g", g.TopKGroups, g.Groups, g.ScalingFactor)
		if c.SharedExperts > 0 {
			line("shared experts", "%d of intermediate %d (one MLP of %d)", c.SharedExperts, c.MoEIntermediateSize, c.SharedExperts*c.MoEIntermediateSize)
		}
	}
	tied := "separate lm_head"
	if c.TieWordEmbeddings {
		tied = "tied to the embeddings"
	}
	line("vocab", "%d, %s; hidden %d, max positions %d", c.VocabSize, tied, c.HiddenSize, c.MaxPositionEmbeddings)
	stops := StopTokenIDs(c, g)
	line("stop tokens", "%v", stops)
	if g != nil && (g.Temperature != nil || g.TopP != nil || g.TopK != nil) {
		var s []string
		if g.Temperature != nil {
			s = append(s, fmt.Sprintf("temperature %g", *g.Temperature))
		}
		if g.TopP != nil {
			s = append(s, fmt.Sprintf("top_p %g", *g.TopP))
		}
		if g.TopK != nil {
			s = append(s, fmt.Sprintf("top_k %d", *g.TopK))
		}
		line("sampling", "%s", strings.Join(s, ", "))
	}
	if c.Quantization != "" {
		if c.Int4GroupSize > 0 {
			line("quantization", "%s, pack-quantized INT4, groups of %d", c.Quantization, c.Int4GroupSize)
		} else {
			line("quantization", "%s, blocks %v", c.Quantization, c.WeightBlockSize)
		}
	}
	if r != nil {
		var dts []string
		keys := make([]tensor.DType, 0, len(r.DTypeBytes))
		for k := range r.DTypeBytes {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			dts = append(dts, fmt.Sprintf("%s %s", k, units.Bytes(r.DTypeBytes[k])))
		}
		line("weights", "%d tensors, %s (%s), prefix %q", r.NumTensors, units.Bytes(r.TotalBytes), strings.Join(dts, ", "), r.Prefix)
		line("parameters", "%s", humanCount(r.Params))
		line("routed experts", "%s in %s layout; %s read per token (top-%d of %d in %d layers)",
			units.Bytes(r.RoutedExpertBytes), r.ExpertLayout, units.Bytes(r.ActiveExpertBytesPerToken), c.TopK, c.NumExperts, len(moe))
		if r.Extras > 0 {
			line("extras", "%d tensors (vision tower / MTP) not used for text generation", r.Extras)
		}
		if r.OK() {
			line("check", "ok: every tensor the config implies is present with the right shape and dtype")
		} else {
			line("check", "%d problems:", len(r.Problems))
			for _, p := range r.Problems {
				fmt.Fprintf(&b, "%-16s   %s\n", "", p)
			}
		}
		if len(r.Unexpected) > 0 {
			line("unexpected", "%d tensors not implied by the config: %s", len(r.Unexpected), strings.Join(first(r.Unexpected, 5), ", "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(slices.Clone(s[:n]), "...")
	}
	return s
}

// ranges renders sorted ints compactly: "0-2,5,7-9", or "none".
func ranges(xs []int) string {
	if len(xs) == 0 {
		return "none"
	}
	return units.Ranges(xs, ",")
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
