// Package modelconfig reads a Hugging Face model directory's config.json and
// generation_config.json for the architectures kt serves, derives the facts
// a model definition needs (which layers are MoE or dense, full or linear
// attention, head and rotary dimensions, expert counts), and checks that a
// checkpoint holds every tensor the config implies with the right shape.
//
// Supported architectures, chosen by the "architectures" string:
// Qwen3MoeForCausalLM, Qwen3NextForCausalLM, Qwen3_5MoeForConditionalGeneration
// and Qwen3_5MoeForCausalLM (Qwen3.5 keeps its text fields under
// "text_config"), and DeepseekV3ForCausalLM (DeepSeek-V3, R1, V3.1 and
// Kimi-K2).
package modelconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Family groups architectures that share one model definition.
type Family int

// Model families.
const (
	Qwen3Moe   Family = iota + 1 // Qwen3-MoE: full attention, routed experts only
	Qwen3Next                    // Qwen3-Next: Gated DeltaNet + gated attention, shared expert
	Qwen35Moe                    // Qwen3.5-MoE: like Qwen3-Next, split projections, M-RoPE, vision tower
	DeepseekV3                   // DeepSeek-V3 and Kimi-K2: multi-head latent attention, grouped sigmoid routing, shared experts
)

func (f Family) String() string {
	switch f {
	case Qwen3Moe:
		return "qwen3_moe"
	case Qwen3Next:
		return "qwen3_next"
	case Qwen35Moe:
		return "qwen3_5_moe"
	case DeepseekV3:
		return "deepseek_v3"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

// architectures maps HF "architectures" strings to families.
var architectures = map[string]Family{
	"Qwen3MoeForCausalLM":                Qwen3Moe,
	"Qwen3NextForCausalLM":               Qwen3Next,
	"Qwen3_5MoeForConditionalGeneration": Qwen35Moe,
	"Qwen3_5MoeForCausalLM":              Qwen35Moe,
	"DeepseekV3ForCausalLM":              DeepseekV3,
}

// gatedDeltaNet reports whether f is a Qwen3-Next-style family (Gated
// DeltaNet layers, gated attention, zero-centred norms, a gated shared
// expert).
func (f Family) gatedDeltaNet() bool { return f == Qwen3Next || f == Qwen35Moe }

// SupportedArchitectures lists the architectures strings kt accepts, sorted.
func SupportedArchitectures() []string {
	out := make([]string, 0, len(architectures))
	for a := range architectures {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// AttentionKind is a layer's token mixer.
type AttentionKind int

// Token mixers.
const (
	FullAttention   AttentionKind = iota + 1 // softmax attention with a KV cache
	LinearAttention                          // Gated DeltaNet with a recurrent state
)

func (k AttentionKind) String() string {
	switch k {
	case FullAttention:
		return "full_attention"
	case LinearAttention:
		return "linear_attention"
	}
	return fmt.Sprintf("AttentionKind(%d)", int(k))
}

// Layer holds the derived facts of one decoder layer.
type Layer struct {
	Index     int
	Attention AttentionKind
	// IsMoE is true for a sparse MoE block (router + routed experts, plus
	// a shared expert where the family has one), false for a dense MLP of
	// Config.IntermediateSize.
	IsMoE bool
}

// Rope holds the rotary position embedding settings.
type Rope struct {
	Theta float64
	// Type is HF's rope_type ("default", "linear", "yarn", "dynamic", ...).
	Type string
	// Factor and OriginalMaxPositions apply to the scaled types.
	Factor               float64
	OriginalMaxPositions int
	// PartialRotaryFactor is the fraction of each head's dimensions that
	// rotate; RotaryDim = int(HeadDim * PartialRotaryFactor), the leading
	// dimensions of each head.
	PartialRotaryFactor float64
	RotaryDim           int
	// MRopeSection splits RotaryDim/2 frequencies among the temporal,
	// height and width position ids (Qwen3.5); MRopeInterleaved selects the
	// interleaved layout. For text-only input all three ids are equal and
	// M-RoPE reduces to plain RoPE.
	MRopeSection     []int
	MRopeInterleaved bool
	// YaRN (Type "yarn"): BetaFast and BetaSlow bound the ramp between
	// interpolated and extrapolated frequencies (transformers' defaults 32
	// and 1); MScale and MScaleAllDim set the attention factor on cos/sin
	// (mscale/mscale_all_dim) and, in DeepSeek-V3, the softmax scale
	// (mscale_all_dim); AttentionFactor, when stated, replaces the cos/sin
	// factor; Truncate rounds the ramp's bounds to whole dimensions
	// (default true).
	BetaFast, BetaSlow   float64
	MScale, MScaleAllDim float64
	AttentionFactor      *float64 `json:",omitempty"`
	Truncate             bool
}

// MLADims are multi-head latent attention's widths (DeepseekV3): the
// query through a LoRA pair of rank QLoRARank (0: one q_proj), keys and
// values from a shared latent of KVLoRARank plus one rotary key of
// QKRopeHeadDim; per head the query and key are QKNopeHeadDim +
// QKRopeHeadDim wide and the value VHeadDim.
type MLADims struct {
	QLoRARank, KVLoRARank                  int
	QKNopeHeadDim, QKRopeHeadDim, VHeadDim int
	// RopeInterleave: the rotary dims are stored interleaved (x0, y0, x1,
	// y1, ...) and de-interleaved before the rotate-half rule.
	RopeInterleave bool
}

// GroupRouting is DeepSeek-V3's router: sigmoid scores, a per-expert
// correction bias added for the choice only, the experts in Groups equal
// groups of which the TopKGroups with the largest sum of their two best
// biased scores are eligible, the top-k eligible experts weighted by
// their unbiased scores (renormalised when NormTopKProb) times
// ScalingFactor.
type GroupRouting struct {
	Groups, TopKGroups int
	ScalingFactor      float64
}

// LinearAttentionDims are the Gated DeltaNet widths (Qwen3-Next, Qwen3.5).
type LinearAttentionDims struct {
	NumKeyHeads, NumValueHeads int
	KeyHeadDim, ValueHeadDim   int
	ConvKernel                 int
	KeyDim                     int // NumKeyHeads * KeyHeadDim
	ValueDim                   int // NumValueHeads * ValueHeadDim
	ConvDim                    int // 2*KeyDim + ValueDim: channels of the causal conv1d
}

// Config is a parsed, validated model configuration with derived facts.
type Config struct {
	Architecture string // the HF architectures string
	Family       Family
	ModelType    string

	VocabSize             int
	HiddenSize            int
	NumLayers             int
	NumHeads              int
	NumKVHeads            int
	HeadDim               int
	IntermediateSize      int // dense MLP width (layers with IsMoE false); 0 if unused
	MaxPositionEmbeddings int
	RMSNormEps            float64
	HiddenAct             string
	AttentionBias         bool
	TieWordEmbeddings     bool
	// DType is the checkpoint's dtype as config.json states it ("dtype",
	// or the older "torch_dtype"; text config first), e.g. "bfloat16";
	// "" when absent.
	DType string
	// AttnOutputGate: q_proj emits 2*NumHeads*HeadDim, the second half a
	// sigmoid gate on the attention output (Qwen3-Next, Qwen3.5).
	AttnOutputGate bool
	// ZeroCenteredNorm: RMSNorm weights are stored as w and applied as
	// (1+w) (Qwen3-Next, Qwen3.5; not the gated norm inside linear
	// attention).
	ZeroCenteredNorm bool

	NumExperts                   int
	TopK                         int // experts per token
	NormTopKProb                 bool
	MoEIntermediateSize          int
	SharedExpertIntermediateSize int // 0 when there is no shared expert
	DecoderSparseStep            int
	MLPOnlyLayers                []int

	Rope   Rope
	Linear LinearAttentionDims // zero for Qwen3Moe and DeepseekV3

	// DeepseekV3 only (zero otherwise): the attention's widths, the
	// router, the shared experts (SharedExperts of MoEIntermediateSize,
	// one MLP of their summed width), the leading dense layers and the
	// multi-token-prediction layers the checkpoint holds past NumLayers
	// (num_nextn_predict_layers; not used for generation).
	MLA                MLADims
	Routing            GroupRouting
	SharedExperts      int
	FirstKDenseReplace int
	MTPLayers          int

	Layers []Layer

	BOSTokenID  *int
	PadTokenID  *int
	EOSTokenIDs []int

	// Quantization is quantization_config.quant_method ("" when absent);
	// "fp8" checkpoints carry F8_E4M3 linear weights with block scales
	// (weight_scale_inv) of WeightBlockSize.
	Quantization    string
	WeightBlockSize []int
	// Int4GroupSize is the group size of compressed-tensors pack-quantized
	// weights (symmetric INT4, one scale per group of input columns, as
	// Kimi-K2-Thinking's routed experts); 0 unless Quantization is
	// "compressed-tensors".
	Int4GroupSize int

	// TextPrefix is where the language model's tensors live in the
	// checkpoint: "model." or, for Qwen3_5MoeForConditionalGeneration,
	// "model.language_model.".
	TextPrefix string
}

// NumMoELayers counts the layers with a sparse MoE block.
func (c *Config) NumMoELayers() int {
	n := 0
	for _, l := range c.Layers {
		if l.IsMoE {
			n++
		}
	}
	return n
}

// NumLinearLayers counts the linear-attention layers.
func (c *Config) NumLinearLayers() int {
	n := 0
	for _, l := range c.Layers {
		if l.Attention == LinearAttention {
			n++
		}
	}
	return n
}

// Load reads and parses dir/config.json.
func Load(dir string) (*Config, error) {
	p := filepath.Join(dir, "config.json")
	b, err := readSmall(p)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return c, nil
}

// maxConfigSize caps how much of a config file is read.
const maxConfigSize = 16 << 20

func readSmall(p string) ([]byte, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("modelconfig: %w", err)
	}
	if st.Size() > maxConfigSize {
		return nil, fmt.Errorf("modelconfig: %s is %d bytes, more than the %d-byte limit", p, st.Size(), maxConfigSize)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("modelconfig: %w", err)
	}
	return b, nil
}

// Parse parses the contents of a config.json. All missing or inconsistent
// fields are reported together, each named by its JSON path.
func Parse(data []byte) (*Config, error) {
	var errs []error
	top, err := newObject("", data, &errs)
	if err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	archs := top.optStrings("architectures")
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(archs) == 0 {
		return nil, fmt.Errorf("architectures: missing (supported: %v)", SupportedArchitectures())
	}
	c := &Config{Architecture: archs[0]}
	fam, ok := architectures[archs[0]]
	if !ok {
		return nil, fmt.Errorf("architectures: %q is not supported (supported: %v)", archs[0], SupportedArchitectures())
	}
	c.Family = fam
	c.ModelType = top.optString("model_type", "")
	c.TextPrefix = "model."
	text := top
	// Qwen3_5MoeForConditionalGeneration nests the text model's fields
	// under text_config; Qwen3_5MoeForCausalLM configs are flat.
	if t, ok := top.sub("text_config"); ok && fam == Qwen35Moe {
		text = t
	} else if c.Architecture == "Qwen3_5MoeForConditionalGeneration" {
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		return nil, errors.New("text_config: missing (Qwen3_5MoeForConditionalGeneration keeps its text model fields there)")
	}
	if c.Architecture == "Qwen3_5MoeForConditionalGeneration" {
		c.TextPrefix = "model.language_model."
	}
	c.parseText(top, text)
	c.parseQuant(top, text)
	if len(errs) == 0 {
		c.derive(text)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

func (c *Config) parseText(top, t object) {
	c.VocabSize = t.intField("vocab_size")
	c.HiddenSize = t.intField("hidden_size")
	c.NumLayers = t.intField("num_hidden_layers")
	c.NumHeads = t.intField("num_attention_heads")
	if c.Family == DeepseekV3 {
		c.NumKVHeads = t.optInt("num_key_value_heads", c.NumHeads)
		c.parseMLA(t)
	} else {
		c.NumKVHeads = t.intField("num_key_value_heads")
		if t.has("head_dim") {
			c.HeadDim = t.intField("head_dim")
		} else if c.NumHeads > 0 {
			c.HeadDim = c.HiddenSize / c.NumHeads
		}
	}
	c.MaxPositionEmbeddings = t.optInt("max_position_embeddings", 32768)
	if c.MaxPositionEmbeddings <= 0 {
		t.fail("max_position_embeddings", "must be positive, is %d", c.MaxPositionEmbeddings)
	}
	c.RMSNormEps = t.optFloat("rms_norm_eps", 1e-6)
	c.HiddenAct = t.optString("hidden_act", "silu")
	c.AttentionBias = t.optBool("attention_bias", false)
	// tie_word_embeddings may sit on the outer config (Qwen3.5) or the text
	// config; the outer one wins, as in transformers.
	c.TieWordEmbeddings = t.optBool("tie_word_embeddings", false)
	if top.path != t.path && top.has("tie_word_embeddings") {
		c.TieWordEmbeddings = top.optBool("tie_word_embeddings", false)
	}
	for _, o := range []object{t, top} {
		for _, k := range []string{"dtype", "torch_dtype"} {
			if c.DType == "" {
				c.DType = o.optString(k, "")
			}
		}
	}
	c.AttnOutputGate = c.Family.gatedDeltaNet() && t.optBool("attn_output_gate", true)
	c.ZeroCenteredNorm = c.Family.gatedDeltaNet()

	if c.Family == DeepseekV3 && t.has("n_routed_experts") {
		c.NumExperts = t.intField("n_routed_experts")
	} else if t.has("num_experts") {
		c.NumExperts = t.intField("num_experts")
	} else if t.has("num_local_experts") {
		c.NumExperts = t.intField("num_local_experts")
	} else {
		t.fail("num_experts", "missing")
	}
	c.TopK = t.intField("num_experts_per_tok")
	c.MoEIntermediateSize = t.intField("moe_intermediate_size")
	switch c.Family {
	case Qwen3Moe:
		c.NormTopKProb = t.optBool("norm_topk_prob", false)
	case Qwen3Next:
		c.NormTopKProb = t.optBool("norm_topk_prob", true)
	case Qwen35Moe:
		c.NormTopKProb = true // the Qwen3.5 router always renormalises
	case DeepseekV3:
		c.NormTopKProb = t.optBool("norm_topk_prob", true)
		c.parseGroupRouting(t)
	}
	if c.Family.gatedDeltaNet() {
		c.SharedExpertIntermediateSize = t.intField("shared_expert_intermediate_size")
	}
	if c.Family == DeepseekV3 {
		c.DecoderSparseStep = 1
	} else if c.Family != Qwen35Moe {
		c.DecoderSparseStep = t.optInt("decoder_sparse_step", 1)
		if c.DecoderSparseStep < 1 {
			t.fail("decoder_sparse_step", "must be at least 1, is %d", c.DecoderSparseStep)
			c.DecoderSparseStep = 1
		}
		c.MLPOnlyLayers = t.optInts("mlp_only_layers")
	} else {
		c.DecoderSparseStep = 1
	}
	c.IntermediateSize = t.optInt("intermediate_size", 0)

	if c.Family.gatedDeltaNet() {
		c.Linear.NumKeyHeads = t.intField("linear_num_key_heads")
		c.Linear.NumValueHeads = t.intField("linear_num_value_heads")
		c.Linear.KeyHeadDim = t.intField("linear_key_head_dim")
		c.Linear.ValueHeadDim = t.intField("linear_value_head_dim")
		c.Linear.ConvKernel = t.optInt("linear_conv_kernel_dim", 4)
		c.Linear.KeyDim = c.Linear.NumKeyHeads * c.Linear.KeyHeadDim
		c.Linear.ValueDim = c.Linear.NumValueHeads * c.Linear.ValueHeadDim
		c.Linear.ConvDim = 2*c.Linear.KeyDim + c.Linear.ValueDim
		if c.Linear.ConvKernel < 1 {
			t.fail("linear_conv_kernel_dim", "must be positive, is %d", c.Linear.ConvKernel)
		}
	}
	if t.optBool("use_sliding_window", false) {
		t.fail("use_sliding_window", "sliding-window attention is not supported")
	}

	c.parseRope(t)

	c.BOSTokenID = optIntPtr(t, "bos_token_id")
	c.PadTokenID = optIntPtr(t, "pad_token_id")
	c.EOSTokenIDs = t.optIntOrInts("eos_token_id")
	if len(c.EOSTokenIDs) == 0 && top.path != t.path {
		c.EOSTokenIDs = top.optIntOrInts("eos_token_id")
	}
}

func optIntPtr(o object, name string) *int {
	if !o.has(name) {
		return nil
	}
	v := o.optInt(name, 0)
	return &v
}

// parseRope reads rope_parameters (transformers 5, Qwen3.5) or the older
// rope_theta / rope_scaling / partial_rotary_factor fields.
func (c *Config) parseRope(t object) {
	r := &c.Rope
	r.Type = "default"
	r.Theta = t.optFloat("rope_theta", 10000)
	r.Factor = 1
	defPartial := 1.0
	if c.Family.gatedDeltaNet() {
		defPartial = 0.25 // transformers' default for Qwen3-Next and Qwen3.5
	}
	r.PartialRotaryFactor = t.optFloat("partial_rotary_factor", defPartial)
	scaling, hasScaling := t.sub("rope_scaling")
	params, hasParams := t.sub("rope_parameters")
	if hasParams {
		scaling, hasScaling = params, true
		r.Theta = params.optFloat("rope_theta", r.Theta)
		r.PartialRotaryFactor = params.optFloat("partial_rotary_factor", r.PartialRotaryFactor)
		r.MRopeSection = params.optInts("mrope_section")
		r.MRopeInterleaved = params.optBool("mrope_interleaved", false)
	}
	if hasScaling {
		typ := scaling.optString("rope_type", "")
		if typ == "" {
			typ = scaling.optString("type", "default")
		}
		r.Type = typ
		r.Factor = scaling.optFloat("factor", 1)
		r.OriginalMaxPositions = scaling.optInt("original_max_position_embeddings", 0)
		r.BetaFast = scaling.optFloat("beta_fast", 0)
		r.BetaSlow = scaling.optFloat("beta_slow", 0)
		r.MScale = scaling.optFloat("mscale", 0)
		r.MScaleAllDim = scaling.optFloat("mscale_all_dim", 0)
		if scaling.has("attention_factor") {
			f := scaling.optFloat("attention_factor", 1)
			r.AttentionFactor = &f
		}
		r.Truncate = scaling.optBool("truncate", true)
		if r.MRopeSection == nil && !hasParams {
			r.MRopeSection = scaling.optInts("mrope_section")
			r.MRopeInterleaved = scaling.optBool("mrope_interleaved", false)
		}
	}
	if r.Theta <= 0 {
		t.fail("rope_theta", "must be positive, is %g", r.Theta)
	}
	if !(r.PartialRotaryFactor > 0 && r.PartialRotaryFactor <= 1) {
		t.fail("partial_rotary_factor", "must be in (0, 1], is %g", r.PartialRotaryFactor)
	}
	switch r.Type {
	case "default", "linear", "dynamic", "yarn", "mrope":
	default:
		t.fail("rope_parameters.rope_type", "%q is not supported (default, linear, dynamic, yarn)", r.Type)
	}
}

func (c *Config) parseQuant(top, t object) {
	q, ok := top.sub("quantization_config")
	if !ok {
		q, ok = t.sub("quantization_config")
	}
	if !ok {
		return
	}
	c.Quantization = q.optString("quant_method", "")
	switch c.Quantization {
	case "fp8":
		c.WeightBlockSize = q.optInts("weight_block_size")
		if len(c.WeightBlockSize) != 2 || c.WeightBlockSize[0] <= 0 || c.WeightBlockSize[1] <= 0 {
			q.fail("weight_block_size", "must be two positive integers, is %v", c.WeightBlockSize)
		}
	case "compressed-tensors":
		c.Int4GroupSize = parsePackedInt4(q)
	default:
		q.fail("quant_method", "%q is not supported (fp8 block-scaled and compressed-tensors pack-quantized INT4 checkpoints load directly; use kt quant for other INT4/INT8)", c.Quantization)
	}
}

// parsePackedInt4 reads a compressed-tensors quantization_config of the
// kind Kimi-K2-Thinking ships: format pack-quantized, one config group of
// symmetric INT4 weights with a scale per group of input columns, weights
// only. It returns the group size (0 after a failure).
func parsePackedInt4(q object) int {
	if f := q.optString("format", ""); f != "pack-quantized" {
		q.fail("format", "%q is not supported (compressed-tensors: pack-quantized only)", f)
		return 0
	}
	groups, ok := q.sub("config_groups")
	if !ok || len(groups.m) != 1 {
		q.fail("config_groups", "want one group, has %d", len(groups.m))
		return 0
	}
	for name := range groups.m {
		g, ok := groups.sub(name)
		if !ok {
			return 0
		}
		if g.has("input_activations") {
			g.fail("input_activations", "activation quantization is not supported (weights only)")
		}
		w, ok := g.sub("weights")
		if !ok {
			g.fail("weights", "missing")
			return 0
		}
		bits, typ := w.optInt("num_bits", 0), w.optString("type", "")
		strategy, sym, dynamic := w.optString("strategy", ""), w.optBool("symmetric", false), w.optBool("dynamic", false)
		size := w.optInt("group_size", 0)
		switch {
		case bits != 4 || typ != "int":
			w.fail("num_bits", "%d-bit %q weights are not supported (4-bit int only)", bits, typ)
		case strategy != "group" || size <= 0:
			w.fail("strategy", "%q with group_size %d is not supported (group, with a positive group_size)", strategy, size)
		case !sym || dynamic:
			w.fail("symmetric", "symmetric %v, dynamic %v is not supported (symmetric static scales only)", sym, dynamic)
		default:
			return size
		}
	}
	return 0
}

// Sanity caps: far above any real model, low enough that an absurd value
// cannot drive a huge allocation.
const (
	maxLayers  = 4096
	maxExperts = 1 << 16
)

// derive computes per-layer facts and checks cross-field consistency.
func (c *Config) derive(t object) {
	if c.NumLayers > maxLayers {
		t.fail("num_hidden_layers", "%d is more than %d", c.NumLayers, maxLayers)
		return
	}
	if c.NumExperts > maxExperts {
		t.fail("num_experts", "%d is more than %d", c.NumExperts, maxExperts)
		return
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		t.fail("num_key_value_heads", "%d does not divide num_attention_heads %d (the heads must be a multiple of the kv heads)", c.NumKVHeads, c.NumHeads)
	}
	if c.TopK > c.NumExperts {
		t.fail("num_experts_per_tok", "%d is more than num_experts %d", c.TopK, c.NumExperts)
	}
	if c.HeadDim <= 0 {
		t.fail("head_dim", "must be positive (hidden_size / num_attention_heads is %d)", c.HeadDim)
	}
	r := &c.Rope
	r.RotaryDim = int(float64(c.HeadDim) * r.PartialRotaryFactor)
	if c.Family == DeepseekV3 {
		r.RotaryDim = int(float64(c.MLA.QKRopeHeadDim) * r.PartialRotaryFactor)
		c.deriveDeepseek(t)
	}
	if r.RotaryDim <= 0 || r.RotaryDim%2 != 0 {
		t.fail("partial_rotary_factor", "gives rotary dimension %d of head_dim %d; it must be even and positive", r.RotaryDim, c.HeadDim)
	}
	if len(r.MRopeSection) > 0 {
		sum := 0
		for _, s := range r.MRopeSection {
			sum += s
		}
		if sum != r.RotaryDim/2 {
			t.fail("rope_parameters.mrope_section", "%v sums to %d, but the rotary dimension %d has %d frequencies", r.MRopeSection, sum, r.RotaryDim, r.RotaryDim/2)
		}
	}
	if c.Family.gatedDeltaNet() && c.Linear.NumKeyHeads > 0 && c.Linear.NumValueHeads%c.Linear.NumKeyHeads != 0 {
		t.fail("linear_num_value_heads", "%d is not a multiple of linear_num_key_heads %d", c.Linear.NumValueHeads, c.Linear.NumKeyHeads)
	}

	c.Layers = make([]Layer, c.NumLayers)
	mlpOnly := map[int]bool{}
	for _, l := range c.MLPOnlyLayers {
		if l < 0 || l >= c.NumLayers {
			t.fail("mlp_only_layers", "layer %d is out of range [0, %d)", l, c.NumLayers)
		}
		mlpOnly[l] = true
	}
	kinds := c.layerKinds(t)
	for i := range c.Layers {
		c.Layers[i] = Layer{Index: i, Attention: kinds[i]}
		if c.Family == Qwen35Moe {
			c.Layers[i].IsMoE = true
		} else if c.Family == DeepseekV3 {
			c.Layers[i].IsMoE = i >= c.FirstKDenseReplace && c.NumExperts > 0
		} else {
			c.Layers[i].IsMoE = !mlpOnly[i] && (i+1)%c.DecoderSparseStep == 0
		}
	}
	if c.NumMoELayers() < c.NumLayers && c.IntermediateSize <= 0 {
		t.fail("intermediate_size", "missing: layers %v are dense MLPs and need it", c.denseLayers())
	}
	if c.NumLinearLayers() > 0 && !c.Family.gatedDeltaNet() {
		t.fail("layer_types", "%s has no linear-attention layers", c.Architecture)
	}
}

func (c *Config) denseLayers() []int {
	var out []int
	for _, l := range c.Layers {
		if !l.IsMoE {
			out = append(out, l.Index)
		}
	}
	return out
}

// layerKinds returns each layer's token mixer from layer_types, else
// full_attention_interval (every n-th layer is full attention).
func (c *Config) layerKinds(t object) []AttentionKind {
	kinds := make([]AttentionKind, c.NumLayers)
	for i := range kinds {
		kinds[i] = FullAttention
	}
	if types := t.optStrings("layer_types"); types != nil {
		if len(types) != c.NumLayers {
			t.fail("layer_types", "has %d entries for num_hidden_layers %d", len(types), c.NumLayers)
			return kinds
		}
		for i, s := range types {
			switch s {
			case "full_attention":
				kinds[i] = FullAttention
			case "linear_attention":
				kinds[i] = LinearAttention
			default:
				t.fail("layer_types", "entry %d is %q, not full_attention or linear_attention", i, s)
			}
		}
		return kinds
	}
	if !c.Family.gatedDeltaNet() {
		return kinds
	}
	n := t.optInt("full_attention_interval", 4)
	if n < 1 {
		t.fail("full_attention_interval", "must be at least 1, is %d", n)
		return kinds
	}
	for i := range kinds {
		if (i+1)%n != 0 {
			kinds[i] = LinearAttention
		}
	}
	return kinds
}

// MarshalText renders f by its HF model_type name.
func (f Family) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// MarshalText renders k by its HF layer_types name.
func (k AttentionKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }
