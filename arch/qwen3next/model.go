// Package qwen3next is the model definition of Qwen3-Next
// (Qwen3NextForCausalLM) and Qwen3.5 MoE (Qwen3_5MoeForConditionalGeneration,
// Qwen3_5MoeForCausalLM), written once against the backend op set plus its
// linear-attention ops. Per layer: Gemma-style rmsnorm x·(1+w) -> a Gated
// DeltaNet (projections, causal conv1d + SiLU, l2-normalised gated delta
// rule with per-sequence state, gated rmsnorm, out projection) or gated
// attention (q projection with a sigmoid output gate, per-head q/k norms,
// rotary on the first partial_rotary_factor of each head, causal GQA over
// the paged KV cache) -> residual -> rmsnorm -> softmax top-k routed experts
// plus a shared expert scaled by a sigmoid gate (or a dense MLP on Qwen3-Next's
// mlp_only_layers) -> residual; final norm and lm head.
//
// Qwen3-Next checkpoints fuse the Gated DeltaNet input projections per key
// head (in_proj_qkvz, in_proj_ba); Qwen3.5 stores in_proj_qkv, in_proj_z,
// in_proj_b and in_proj_a under model.language_model. Both load into the same
// layout. Qwen3.5's vision tower (model.visual.*) and the MTP head (mtp.*)
// are skipped. Qwen3.5's M-RoPE gives text-only input equal temporal, height
// and width positions, which is plain rotary.
package qwen3next

import (
	"fmt"
	"log/slog"
	"math"
	"strings"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/block"
	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/hybrid"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/tensor"
	"github.com/ktserve/kt/tp"
)

func init() {
	for _, a := range []string{ArchNext, ArchQwen35, ArchQwen35Text} {
		arch.Register(a, func(dir string, o arch.Options) (model.Runner, error) {
			return Load(dir, o)
		})
	}
}

// Indices of a Gated DeltaNet layer's in projections (layer.inProj).
const (
	inQKV = iota
	inZ
	inB
	inA
)

type layer struct {
	linear           bool
	inNorm, postNorm backend.Tensor

	// Gated DeltaNet
	li                     int               // index among linear layers
	inProj                 [4]backend.Tensor // in projections qkv, z, b, a (inQKV...), read together
	conv, aLog, dtBias     backend.Tensor
	gnorm, outProj         backend.Tensor
	convChannels, valueWd  int
	lqkv, lz, lb, la, lout block.LoRA // their adapters

	// gated attention
	attn  block.Attention
	lgate block.LoRA // q_proj's adapters on the gate rows (attn.Gate: the gate's half of q_proj)
	lo    block.LoRA // o_proj's adapters

	// MLP
	moe     bool
	router  backend.Tensor
	shared  block.MLP      // the shared expert
	seScale backend.Tensor // its sigmoid gate [1, H]
	mlp     block.MLP      // dense layers
}

// Runner is a loaded Qwen3-Next or Qwen3.5 MoE model; it implements
// model.Runner.
type Runner struct {
	runbase.Prefix                   // model.PrefixCache, from rb
	body           func(n int) error // layersForward
	rb             *runbase.Base     // checkpoint, backend, KV pages, step layout, lm head
	cfg            *Config
	lo             *block.LoRAs      // non-expert LoRA adapters (nil: none)
	routed         *hybrid.Experts   // what computes the routed experts (nil: another rank)
	plan           *hybrid.Plan      // which rank computes which routed experts
	moe            []*hybrid.Weights // per layer: its routed experts, nil for a dense MLP
	blk            hybrid.Block      // what the MoE layers hand the routed experts
	la             backend.LinearAttention
	prefix         string // "model." or "model.language_model."
	state          backend.LinearState
	rope           backend.Rope
	attn           backend.Attn
	delta          backend.DeltaShape // the rank's Gated DeltaNet heads
	full           backend.DeltaShape // the model's
	kHeads         tp.Span            // the rank's key heads of full
	layers         []layer
	embed          backend.Tensor
	norm           backend.Tensor
	lmHead         backend.Tensor

	// activations, sized at load from MaxBatchTokens
	x, h, tmp, tmp2           backend.Tensor
	mixed, convOut, z, core   backend.Tensor
	ga, gb, gg, gbeta         backend.Tensor
	ab                        block.AttnBufs
	inOut                     [4]backend.Tensor // mixed, z, gb, ga: the in projections' outputs
	rlogits, rw, rids         backend.Tensor
	seG, seU, seS, mlpG, mlpU backend.Tensor
}

var (
	_ model.Runner      = (*Runner)(nil)
	_ model.PrefixCache = (*Runner)(nil)
)

// Load opens the checkpoint in dir and binds its weights to the backend in
// o (a new CPU backend when nil). The backend must implement
// backend.LinearAttention.
func Load(dir string, o arch.Options) (*Runner, error) {
	rb, cfg, err := runbase.Open("qwen3next", dir, o, modelconfig.Qwen3Next, modelconfig.Qwen35Moe)
	if err != nil {
		return nil, err
	}
	r := &Runner{Prefix: runbase.NewPrefix(rb), rb: rb, cfg: cfg, moe: make([]*hybrid.Weights, cfg.NumLayers)}
	la, ok := rb.BE.(backend.LinearAttention)
	if !ok {
		r.Close()
		return nil, fmt.Errorf("qwen3next: backend %s has no linear-attention ops", rb.BE.Name())
	}
	r.la = la
	if err := rb.Setup(dir, r.loadWeights, r.allocate); err != nil {
		r.Close()
		return nil, err
	}
	if !r.plan.Computes() {
		return r, nil // rank 0 computes the routed experts for every rank
	}
	if r.routed, err = hybrid.New(rb, cfg, r.moe); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// ExpertPath says what computes the routed experts (the CPU expert engine
// and its kernels, or the backend's MoE op and why).
func (r *Runner) ExpertPath() string { return r.routed.Path() }

// HybridTiming reports the hybrid step's hand-off times when
// KT_HYBRID_TIMING=1 asked for them, else "" (arch.HybridTiming).
func (r *Runner) HybridTiming() string { return r.routed.Timing() }

// LayerwiseSummary reports what layerwise GPU prefill and the dynamic
// expert update did so far, else "" (arch.LayerwiseSummary).
func (r *Runner) LayerwiseSummary() string { return r.routed.LayerwiseStats().String() }

// Config returns the model's configuration.
func (r *Runner) Config() *Config { return r.cfg }

// Backend returns the backend the model runs on.
func (r *Runner) Backend() backend.Backend { return r.rb.BE }

// f32Weight hands a small checkpoint tensor to the backend as F32 with
// shape `as` (same element count), adding `add` to every element (1 turns a
// zero-centred Gemma norm weight w into 1+w).
func (r *Runner) f32Weight(name string, shape, as []int, add float32) (backend.Tensor, error) {
	return r.f32WeightSplit(name, shape, as, add, runbase.Split{})
}

// f32WeightSplit is f32Weight of the part s of the tensor viewed as `as`
// (a rank's share, runbase.SplitHost).
func (r *Runner) f32WeightSplit(name string, shape, as []int, add float32, s runbase.Split) (backend.Tensor, error) {
	h, err := r.rb.Host(name, shape...)
	if err != nil {
		return nil, err
	}
	t, err := r.rb.Ckpt.Tensor(name)
	if err != nil {
		return nil, err
	}
	v, err := t.ToF32()
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	data := make([]byte, 4*len(v))
	for i, x := range v {
		putF32(data[4*i:], x+add)
	}
	part, err := runbase.SplitHost(backend.Host{Name: h.Name, DType: tensor.F32, Shape: as, Data: data}, s)
	if err != nil {
		return nil, err
	}
	return r.rb.BE.Weight(part)
}

func putF32(b []byte, f float32) {
	u := math.Float32bits(f)
	b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}

// gatherRows builds a weight from row ranges of a checkpoint matrix (a
// copy): each part is (first row, row count), concatenated in order; an
// FP8 matrix's block scales come along (backend.GatherRows).
func (r *Runner) gatherRows(src backend.Host, name string, parts [][2]int) (backend.Tensor, error) {
	h, err := backend.GatherRows(src, name, parts)
	if err != nil {
		return nil, err
	}
	return r.rb.BE.Weight(h)
}

func (r *Runner) loadWeights() error {
	c := r.cfg
	r.prefix = "model."
	if _, ok := r.rb.Ckpt.Info("model.language_model.embed_tokens.weight"); ok {
		r.prefix = "model.language_model."
	}
	var vision, mtp int
	for _, n := range r.rb.Ckpt.Names() {
		switch {
		case strings.HasPrefix(n, "model.visual.") || strings.HasPrefix(n, "visual."):
			vision++
		case strings.HasPrefix(n, "mtp."):
			mtp++
		}
	}
	if vision+mtp > 0 {
		slog.Info("qwen3next: skipping tensors not used for text generation", "vision_tower", vision, "mtp", mtp)
	}
	H := c.HiddenSize
	var err error
	if r.embed, err = r.rb.Embedding(r.prefix+"embed_tokens.weight", c.VocabSize, H); err != nil {
		return err
	}
	if r.norm, err = r.f32Weight(r.prefix+"norm.weight", []int{H}, []int{H}, 1); err != nil {
		return err
	}
	if r.lmHead, err = r.rb.LMHead(r.embed, c.TieWordEmbeddings, c.VocabSize, H); err != nil {
		return err
	}
	r.full = backend.DeltaShape{KHeads: c.Linear.NumKeyHeads, VHeads: c.Linear.NumValueHeads, KDim: c.Linear.KeyHeadDim, VDim: c.Linear.ValueHeadDim}
	// with tensor parallelism the rank's key heads and their value heads
	r.kHeads = r.rb.Layout().Split(r.full.KHeads)
	r.delta = r.full
	r.delta.KHeads, r.delta.VHeads = r.kHeads.Count, r.full.VHeads/r.rb.Layout().Size
	if r.lo, err = block.NewLoRAs(r.rb); err != nil {
		return err
	}
	if r.plan, err = hybrid.NewPlan(r.rb, c); err != nil {
		return err
	}
	r.layers = make([]layer, c.NumLayers)
	nLinear := 0
	for l := range r.layers {
		L := &r.layers[l]
		p := fmt.Sprintf("%slayers.%d.", r.prefix, l)
		if L.inNorm, err = r.f32Weight(p+"input_layernorm.weight", []int{H}, []int{H}, 1); err != nil {
			return err
		}
		if L.postNorm, err = r.f32Weight(p+"post_attention_layernorm.weight", []int{H}, []int{H}, 1); err != nil {
			return err
		}
		L.linear = c.Layers[l].Attention == modelconfig.LinearAttention
		if L.linear {
			L.li = nLinear
			nLinear++
			err = r.loadLinear(L, l, p+"linear_attn.")
		} else {
			err = r.loadAttention(L, l, p+"self_attn.")
		}
		if err != nil {
			return err
		}
		if err := r.loadMLP(L, l, p+"mlp."); err != nil {
			return err
		}
	}
	return r.lo.Unused()
}

// loadLinear binds a Gated DeltaNet layer, un-interleaving Qwen3-Next's
// fused projections into Qwen3.5's layout: qkv rows [q heads | k heads |
// v heads], z, b, a.
//
// With tensor parallelism the rank holds its key heads and their value
// heads: their rows of the in projections and conv1d channels (column-
// parallel), their A_log and dt_bias, their columns of out_proj (row-
// parallel); conv and recurrent state are allocated for them alone.
func (r *Runner) loadLinear(L *layer, l int, p string) error {
	c, d, f := r.cfg, r.delta, r.full
	H := c.HiddenSize
	vd, fvd := d.VHeads*d.VDim, f.VHeads*f.VDim
	ch := d.ConvChannels()
	L.convChannels, L.valueWd = ch, vd
	k0, k1 := r.kHeads.First, r.kHeads.First+r.kHeads.Count
	vh := tp.Span{First: k0 * (f.VHeads / f.KHeads), Count: d.VHeads} // the rank's value heads
	// the rank's rows of the qkv layout [q heads | k heads | v heads]
	qkvRows := []tp.Span{r.kHeads.Scale(f.KDim), {First: f.KHeads*f.KDim + k0*f.KDim, Count: d.KHeads * f.KDim},
		{First: 2*f.KHeads*f.KDim + vh.First*f.VDim, Count: vh.Count * f.VDim}}
	var err error
	if _, fused := r.rb.Ckpt.Info(p + "in_proj_qkvz.weight"); fused {
		rep := f.VHeads / f.KHeads
		grp := 2*f.KDim + 2*rep*f.VDim
		qkvz, err := r.rb.Host(p+"in_proj_qkvz.weight", f.KHeads*grp, H)
		if err != nil {
			return err
		}
		ba, err := r.rb.Host(p+"in_proj_ba.weight", 2*f.VHeads, H)
		if err != nil {
			return err
		}
		var qkv, z, b, a [][2]int
		for kh := k0; kh < k1; kh++ {
			qkv = append(qkv, [2]int{kh * grp, d.KDim})
		}
		for kh := k0; kh < k1; kh++ {
			qkv = append(qkv, [2]int{kh*grp + d.KDim, d.KDim})
		}
		for kh := k0; kh < k1; kh++ {
			qkv = append(qkv, [2]int{kh*grp + 2*d.KDim, rep * d.VDim})
			z = append(z, [2]int{kh*grp + 2*d.KDim + rep*d.VDim, rep * d.VDim})
			b = append(b, [2]int{kh * 2 * rep, rep})
			a = append(a, [2]int{kh*2*rep + rep, rep})
		}
		if L.inProj[inQKV], err = r.gatherRows(qkvz, p+"in_proj_qkvz.weight[qkv]", qkv); err != nil {
			return err
		}
		if L.inProj[inZ], err = r.gatherRows(qkvz, p+"in_proj_qkvz.weight[z]", z); err != nil {
			return err
		}
		if L.inProj[inB], err = r.gatherRows(ba, p+"in_proj_ba.weight[b]", b); err != nil {
			return err
		}
		if L.inProj[inA], err = r.gatherRows(ba, p+"in_proj_ba.weight[a]", a); err != nil {
			return err
		}
	} else {
		for _, w := range []struct {
			dst   *backend.Tensor
			name  string
			split runbase.Split
			shape []int
		}{
			{&L.inProj[inQKV], "in_proj_qkv.weight", runbase.RowSplit(qkvRows...), []int{f.ConvChannels(), H}},
			{&L.inProj[inZ], "in_proj_z.weight", runbase.RowSplit(vh.Scale(f.VDim)), []int{fvd, H}},
			{&L.inProj[inB], "in_proj_b.weight", runbase.RowSplit(vh), []int{f.VHeads, H}},
			{&L.inProj[inA], "in_proj_a.weight", runbase.RowSplit(vh), []int{f.VHeads, H}},
		} {
			if *w.dst, err = r.rb.WeightSplit(p+w.name, w.split, w.shape...); err != nil {
				return err
			}
		}
	}
	K := c.Linear.ConvKernel
	if L.conv, err = r.f32WeightSplit(p+"conv1d.weight", []int{f.ConvChannels(), 1, K}, []int{f.ConvChannels(), K}, 0, runbase.RowSplit(qkvRows...)); err != nil {
		return err
	}
	if L.aLog, err = r.f32WeightSplit(p+"A_log", []int{f.VHeads}, []int{f.VHeads}, 0, runbase.RowSplit(vh)); err != nil {
		return err
	}
	if L.dtBias, err = r.f32WeightSplit(p+"dt_bias", []int{f.VHeads}, []int{f.VHeads}, 0, runbase.RowSplit(vh)); err != nil {
		return err
	}
	if L.gnorm, err = r.f32Weight(p+"norm.weight", []int{d.VDim}, []int{d.VDim}, 0); err != nil {
		return err
	}
	if L.outProj, err = r.rb.WeightSplit(p+"out_proj.weight", runbase.ColSplit(vh.Scale(f.VDim)), H, fvd); err != nil {
		return err
	}
	// the adapters' factors split as the weights (Qwen3.5's layout)
	for _, b := range []struct {
		dst     *block.LoRA
		module  string
		out, in int
		split   runbase.Split
	}{
		{&L.lqkv, "in_proj_qkv", f.ConvChannels(), H, runbase.RowSplit(qkvRows...)},
		{&L.lz, "in_proj_z", fvd, H, runbase.RowSplit(vh.Scale(f.VDim))},
		{&L.lb, "in_proj_b", f.VHeads, H, runbase.RowSplit(vh)},
		{&L.la, "in_proj_a", f.VHeads, H, runbase.RowSplit(vh)},
		{&L.lout, "out_proj", H, fvd, runbase.ColSplit(vh.Scale(f.VDim))},
	} {
		if *b.dst, err = r.lo.Bind(l, "linear_attn."+b.module, b.out, b.in, b.split); err != nil {
			return err
		}
	}
	return nil
}

// loadAttention binds a gated attention layer, splitting the doubled q
// projection (per head: hd query rows, then hd gate rows) into two weights.
func (r *Runner) loadAttention(L *layer, l int, p string) error {
	c := r.cfg
	H, hd, nh := c.HiddenSize, c.HeadDim, c.NumHeads
	kvd := c.NumKVHeads * hd
	qg, err := r.rb.Host(p+"q_proj.weight", 2*nh*hd, H)
	if err != nil {
		return err
	}
	// with tensor parallelism the rank's heads (q, gate, k, v column-
	// parallel, o row-parallel)
	qh, kvh := block.RankHeads(r.rb, c)
	var qRows, gRows [][2]int
	for h := qh.First; h < qh.First+qh.Count; h++ {
		qRows = append(qRows, [2]int{2 * h * hd, hd})
		gRows = append(gRows, [2]int{2*h*hd + hd, hd})
	}
	a := &L.attn
	if a.Q, err = r.gatherRows(qg, p+"q_proj.weight[q]", qRows); err != nil {
		return err
	}
	if a.Gate, err = r.gatherRows(qg, p+"q_proj.weight[gate]", gRows); err != nil {
		return err
	}
	if a.K, err = r.rb.WeightSplit(p+"k_proj.weight", runbase.RowSplit(kvh.Scale(hd)), kvd, H); err != nil {
		return err
	}
	if a.V, err = r.rb.WeightSplit(p+"v_proj.weight", runbase.RowSplit(kvh.Scale(hd)), kvd, H); err != nil {
		return err
	}
	if a.O, err = r.rb.WeightSplit(p+"o_proj.weight", runbase.ColSplit(qh.Scale(hd)), H, nh*hd); err != nil {
		return err
	}
	if a.QNorm, err = r.f32Weight(p+"q_norm.weight", []int{hd}, []int{hd}, 1); err != nil {
		return err
	}
	if a.KNorm, err = r.f32Weight(p+"k_norm.weight", []int{hd}, []int{hd}, 1); err != nil {
		return err
	}
	if L.lo, err = a.BindLoRA(r.lo, l, H, 2*nh*hd, kvd, nh*hd, rowSplit(qRows), runbase.RowSplit(kvh.Scale(hd)), runbase.ColSplit(qh.Scale(hd))); err != nil {
		return err
	}
	L.lgate, err = r.lo.Bind(l, "self_attn.q_proj", 2*nh*hd, H, rowSplit(gRows))
	return err
}

// rowSplit is the split holding the row parts (first, count) of a matrix.
func rowSplit(parts [][2]int) runbase.Split {
	spans := make([]tp.Span, len(parts))
	for i, p := range parts {
		spans[i] = tp.Span{First: p[0], Count: p[1]}
	}
	return runbase.RowSplit(spans...)
}

// loadMLP binds the sparse MoE block (router, experts, shared expert and
// its gate) or a dense MLP.
func (r *Runner) loadMLP(L *layer, l int, p string) error {
	c := r.cfg
	H := c.HiddenSize
	var err error
	L.moe = c.Layers[l].IsMoE
	if !L.moe {
		if L.mlp, err = block.LoadMLP(r.rb, p, c.IntermediateSize, H); err != nil {
			return err
		}
		return L.mlp.BindLoRA(r.lo, l, "mlp.", c.IntermediateSize, H)
	}
	if L.shared, err = block.LoadMLP(r.rb, p+"shared_expert.", c.SharedExpertIntermediateSize, H); err != nil {
		return err
	}
	if err := L.shared.BindLoRA(r.lo, l, "mlp.shared_expert.", c.SharedExpertIntermediateSize, H); err != nil {
		return err
	}
	if L.seScale, err = r.rb.Weight(p+"shared_expert_gate.weight", 1, H); err != nil {
		return err
	}
	if !r.plan.OnRank(l) {
		return nil // rank 0 computes the routed experts
	}
	if L.router, err = r.rb.Weight(p+"gate.weight", c.NumExperts, H); err != nil {
		return err
	}
	if r.moe[l], err = hybrid.Load(r.rb, r.plan, l, p+"experts.", c.NumExperts, H, c.MoEIntermediateSize); err != nil {
		return err
	}
	r.moe[l].Router, r.moe[l].RouterNorm = L.router, L.postNorm
	return nil
}

// allocate sizes activations, the KV cache of the attention layers and the
// linear-attention state from the options.
func (r *Runner) allocate() error {
	c, o, d := r.cfg, r.rb.Opts, r.delta
	if err := r.rb.AllocStep(c.HiddenSize, c.VocabSize); err != nil {
		return err
	}
	var err error
	hd := c.HeadDim
	r.rope, r.attn = block.RankParams(r.rb, c)
	nLinear := 0
	for l := range r.layers {
		if r.layers[l].linear {
			nLinear++
			continue
		}
		if r.layers[l].attn.KV, err = block.AllocKV(r.rb, c); err != nil {
			return err
		}
	}
	if nLinear > 0 {
		if r.state, err = r.la.AllocLinearState(backend.LinearShape{Layers: nLinear, ConvKernel: c.Linear.ConvKernel, Delta: d}, r.rb.StateSlots()); err != nil {
			return err
		}
		r.rb.UsePrefixState(r.state)
	}
	T, H := o.MaxBatchTokens, c.HiddenSize
	k := max(c.TopK, 1)
	lin := func(v int) int { // linear-attention widths are 0 without such layers
		if nLinear == 0 {
			return 1
		}
		return v
	}
	for _, a := range []struct {
		dst   *backend.Tensor
		dt    tensor.DType
		shape []int
	}{
		{&r.x, tensor.F32, []int{T, H}}, {&r.h, tensor.F32, []int{T, H}},
		{&r.tmp, tensor.F32, []int{T, H}}, {&r.tmp2, tensor.F32, []int{T, H}},
		{&r.mixed, tensor.F32, []int{T, lin(d.ConvChannels())}}, {&r.convOut, tensor.F32, []int{T, lin(d.ConvChannels())}},
		{&r.z, tensor.F32, []int{T, lin(d.VHeads * d.VDim)}}, {&r.core, tensor.F32, []int{T, lin(d.VHeads * d.VDim)}},
		{&r.ga, tensor.F32, []int{T, lin(d.VHeads)}}, {&r.gb, tensor.F32, []int{T, lin(d.VHeads)}},
		{&r.gg, tensor.F32, []int{T, lin(d.VHeads)}}, {&r.gbeta, tensor.F32, []int{T, lin(d.VHeads)}},
		{&r.ab.Q, tensor.F32, []int{T, r.attn.Heads * hd}}, {&r.ab.Gate, tensor.F32, []int{T, r.attn.Heads * hd}},
		{&r.ab.Out, tensor.F32, []int{T, r.attn.Heads * hd}},
		{&r.ab.K, tensor.F32, []int{T, r.attn.KVHeads * hd}}, {&r.ab.V, tensor.F32, []int{T, r.attn.KVHeads * hd}},
		{&r.rlogits, tensor.F32, []int{T, max(c.NumExperts, 1)}},
		{&r.rw, tensor.F32, []int{T, k}}, {&r.rids, tensor.I32, []int{T, k}},
		{&r.seG, tensor.F32, []int{T, max(block.Width(r.rb, c.SharedExpertIntermediateSize), 1)}},
		{&r.seU, tensor.F32, []int{T, max(block.Width(r.rb, c.SharedExpertIntermediateSize), 1)}},
		{&r.seS, tensor.F32, []int{T, 1}},
		{&r.mlpG, tensor.F32, []int{T, max(block.Width(r.rb, c.IntermediateSize), 1)}}, {&r.mlpU, tensor.F32, []int{T, max(block.Width(r.rb, c.IntermediateSize), 1)}},
	} {
		if *a.dst, err = r.rb.BE.Alloc(a.dt, a.shape...); err != nil {
			return fmt.Errorf("allocating activations: %w", err)
		}
	}
	r.inOut = [4]backend.Tensor{inQKV: r.mixed, inZ: r.z, inB: r.gb, inA: r.ga}
	r.blk = hybrid.Block{In: r.h, Out: r.tmp, RouteWeights: r.rw, RouteIDs: r.rids, Residual: r.x, Shared: r.sharedExpert}
	return nil
}

// Info implements model.Runner.
func (r *Runner) Info() model.Info { return r.rb.Info }

// Reserve implements model.Runner.
func (r *Runner) Reserve(slot, n int) error { return r.rb.Reserve(slot, n) }

// Free implements model.Runner: the slot's KV pages and its
// linear-attention state are released.
func (r *Runner) Free(slot int) {
	r.rb.Free(slot)
	if r.state != nil {
		r.state.Free(slot)
	}
}

// FreeTokens implements model.Runner.
func (r *Runner) FreeTokens() int { return r.rb.FreeTokens() }

// LinearStateBytes is the memory one sequence's linear-attention state takes.
func (r *Runner) LinearStateBytes() int64 {
	if r.state == nil {
		return 0
	}
	return r.state.BytesPerSeq()
}

// Close implements model.Runner.
func (r *Runner) Close() error {
	r.routed.Close()
	return r.rb.Close()
}

// GraphStats reports what the decode graph path did (arch.GraphStatsOf).
func (r *Runner) GraphStats() arch.GraphStats { return r.rb.GraphStats() }

// Forward implements model.Runner.
func (r *Runner) Forward(b *model.Batch, out *model.Logits) error {
	h := runbase.Head{X: r.x, Norm: r.norm, LMHead: r.lmHead, Eps: float32(r.cfg.RMSNormEps)}
	if r.body == nil {
		r.body = r.layersForward // made once: a method value allocates
	}
	return r.rb.Forward(b, out, h, r.body)
}

// layersForward queues the embedding and every layer for the step's n rows
// (the step Forward began).
func (r *Runner) layersForward(n int) error {
	be, la, c := r.rb.BE, r.la, r.cfg
	eps := float32(c.RMSNormEps)
	r.rb.Embed(r.x, r.embed)
	be.RMSNorm(r.h, r.x, r.layers[0].inNorm, eps, n)
	// the hybrid step predicts the first MoE layer's picks from here
	if r.routed != nil {
		if err := r.routed.StepStart(r.x, n); err != nil {
			return err
		}
	}
	for l := range r.layers {
		L := &r.layers[l]
		if L.linear {
			backend.MatMulGroup(be, r.h, n, r.inOut[:], L.inProj[:])
			r.lo.Apply(&L.lqkv, r.mixed, r.h, n)
			r.lo.Apply(&L.lz, r.z, r.h, n)
			r.lo.Apply(&L.lb, r.gb, r.h, n)
			r.lo.Apply(&L.la, r.ga, r.h, n)
			la.CausalConv1D(r.convOut, r.mixed, L.conv, r.state, L.li, n)
			la.DeltaGates(r.gg, r.gbeta, r.ga, r.gb, L.aLog, L.dtBias, n)
			la.GatedDeltaRule(r.core, r.convOut, r.gg, r.gbeta, r.state, L.li, n)
			la.GatedRMSNorm(r.core, r.core, r.z, L.gnorm, eps, n*r.delta.VHeads)
			be.MatMul(r.tmp, r.core, L.outProj, n)
			r.lo.Apply(&L.lout, r.tmp, r.core, n)
			r.rb.AllReduce(r.tmp, n) // out_proj is row-parallel
		} else {
			L.attn.Attend(be, &r.ab, r.h, &r.rope, &r.attn, eps, n) // the gate too (r.ab.Gate)
			r.lo.Apply(&L.lgate, r.ab.Gate, r.h, n)
			la.SigmoidGate(r.ab.Out, r.ab.Out, r.ab.Gate, n)
			be.MatMul(r.tmp, r.ab.Out, L.attn.O, n)
			r.lo.Apply(&L.lo, r.tmp, r.ab.Out, n)
			r.rb.AllReduce(r.tmp, n) // o is row-parallel
		}
		backend.AddRMSNorm(be, r.h, r.x, r.tmp, L.postNorm, eps, n)
		if L.moe {
			if r.plan.Runs(l, n) {
				block.Route(be, r.rw, r.rids, r.rlogits, r.h, L.router, c.TopK, c.NormTopKProb, n)
				// routed experts plus the shared expert (sharedExpert),
				// which runs on the backend while the CPU computes the
				// routed experts in the hybrid step
				if err := r.routed.Layer(l, &r.blk, n); err != nil {
					return err
				}
			} else {
				// rank 0 computes the routed experts (the residual
				// stream is the same on every rank; hybrid.Plan says
				// when each rank computes a share): this rank adds its
				// share of the shared expert
				r.sharedInto(r.tmp, l, n)
			}
			r.rb.AllReduce(r.tmp, n) // the shared expert's down is row-parallel
		} else {
			L.mlp.Forward(be, r.tmp, r.h, r.mlpG, r.mlpU, n)
			r.rb.AllReduce(r.tmp, n) // down is row-parallel
		}
		// the residual add, with the next layer's input norm where there
		// is one (the final norm runs on the rows the head keeps)
		if l+1 < len(r.layers) {
			backend.AddRMSNorm(be, r.h, r.x, r.tmp, r.layers[l+1].inNorm, eps, n)
		} else {
			be.Add(r.x, r.x, r.tmp, n)
		}
	}
	return nil
}

// sharedExpert queues MoE layer l's shared expert over the first n rows of
// r.h, scaled by its sigmoid gate, into r.tmp2 (hybrid.Block.Shared).
func (r *Runner) sharedExpert(l, n int) backend.Tensor {
	r.sharedInto(r.tmp2, l, n)
	return r.tmp2
}

// sharedInto queues MoE layer l's shared expert over the first n rows of
// r.h, scaled by its sigmoid gate, into out (r.tmp2 as scratch).
func (r *Runner) sharedInto(out backend.Tensor, l, n int) {
	be, L := r.rb.BE, &r.layers[l]
	L.shared.Forward(be, r.tmp2, r.h, r.seG, r.seU, n)
	be.MatMul(r.seS, r.h, L.seScale, n)
	r.la.SigmoidGate(out, r.tmp2, r.seS, n)
}
