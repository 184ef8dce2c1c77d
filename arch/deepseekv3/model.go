// Package deepseekv3 is the DeepSeek-V3 model definition (Hugging Face
// DeepseekV3ForCausalLM: DeepSeek-V3, R1, V3.1 and Kimi-K2), written against
// the backend op set plus backend.MLA and backend.GroupRouter: per layer
// rmsnorm -> multi-head latent attention (the query through q_a_proj ->
// q_a_layernorm -> q_b_proj, or one q_proj; kv_a_proj_with_mqa's latent
// normed and its rope key rotated, both kept in the paged cache; attention
// in latent space through kv_b_proj) -> o projection -> residual -> rmsnorm
// -> a dense SwiGLU MLP on the first first_k_dense_replace layers, else
// DeepSeek's router (sigmoid scores, correction bias for the choice,
// group-limited top-k, routed_scaling_factor) with the routed experts and
// the shared experts (one SwiGLU MLP of n_shared_experts ·
// moe_intermediate_size) -> residual; final rmsnorm and lm head on the rows
// whose logits are wanted.
//
// Checkpoints load in bf16, f32 or block-scaled FP8 (every linear with its
// weight_scale_inv, kv_a_proj_with_mqa included), with per-expert keys as
// published or transformers 5's fused 3-D experts. The
// multi-token-prediction layers past num_hidden_layers are not used.
package deepseekv3

import (
	"fmt"
	"github.com/ktserve/kt/tp"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/block"
	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/hybrid"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/tensor"
)

// Architecture is the HF architectures string this package serves.
const Architecture = "DeepseekV3ForCausalLM"

func init() {
	arch.Register(Architecture, func(dir string, o arch.Options) (model.Runner, error) {
		return Load(dir, o)
	})
}

// attention is one layer's multi-head latent attention weights.
type attention struct {
	qA, qANorm, qB backend.Tensor // the query's LoRA pair (q_lora_rank set)
	q              backend.Tensor // or its one projection
	kvA, kvANorm   backend.Tensor // kv_a_proj_with_mqa, kv_a_layernorm
	kvB, o         backend.Tensor // kv_b_proj, o_proj
	cache          *backend.MLACache
}

type layer struct {
	inNorm, postNorm backend.Tensor
	attn             attention
	moe              bool
	router, bias     backend.Tensor // mlp.gate.weight, e_score_correction_bias
	shared           block.MLP      // shared experts (MoE layers; Gate nil: none)
	mlp              block.MLP      // dense layers
}

// Runner is a loaded DeepSeek-V3 model; it implements model.Runner.
type Runner struct {
	runbase.Prefix                   // model.PrefixCache, from rb
	body           func(n int) error // layersForward
	shared         func(l, n int) backend.Tensor
	rb             *runbase.Base // checkpoint, backend, KV pages, step layout, lm head
	cfg            *Config
	mla            backend.MLA
	router         backend.GroupRouter
	params         backend.MLAParams
	heads          tp.Span // the rank's attention heads
	route          backend.GroupRoute
	layers         []layer
	embed          backend.Tensor
	norm           backend.Tensor
	lmHead         backend.Tensor

	routed *hybrid.Experts   // what computes the routed experts
	plan   *hybrid.Plan      // which rank computes which routed experts
	moe    []*hybrid.Weights // per layer: its routed experts, nil for a dense MLP
	blk    hybrid.Block      // what the MoE layers hand the routed experts

	// activations, sized at load from MaxBatchTokens
	x, h, tmp, sh, gate, up backend.Tensor
	seG, seU                backend.Tensor // the shared experts' gate and up
	qa, q, kv, attnOut      backend.Tensor
	rlogits, rw, rids       backend.Tensor
}

var (
	_ model.Runner      = (*Runner)(nil)
	_ model.PrefixCache = (*Runner)(nil)
)

// Load opens the checkpoint in dir and binds its weights to the backend in
// o (a new CPU backend when nil), which must implement backend.MLA and
// backend.GroupRouter.
func Load(dir string, o arch.Options) (*Runner, error) {
	rb, cfg, err := runbase.Open("deepseekv3", dir, o, modelconfig.DeepseekV3)
	if err != nil {
		return nil, err
	}
	r := &Runner{Prefix: runbase.NewPrefix(rb), rb: rb, cfg: cfg, moe: make([]*hybrid.Weights, cfg.NumLayers)}
	if err := r.check(); err != nil {
		r.rb.Close()
		return nil, err
	}
	if err := rb.Setup(dir, r.loadWeights, r.allocate); err != nil {
		r.Close()
		return nil, err
	}
	if r.plan.Computes() {
		if r.routed, err = hybrid.New(rb, cfg, r.moe); err != nil {
			r.Close()
			return nil, err
		}
	}
	if mtp := cfg.MTPTensors(rb.Ckpt.Names()); len(mtp) > 0 && rb.Opts.Notify != nil {
		rb.Opts.Notify(fmt.Sprintf("deepseekv3: skipping the %d tensors of the multi-token-prediction layers past layer %d (not used for generation)", len(mtp), cfg.NumLayers-1))
	}
	return r, nil
}

// check refuses what this definition does not run on the chosen backend.
func (r *Runner) check() error {
	be := r.rb.BE
	var ok bool
	if r.mla, ok = be.(backend.MLA); !ok {
		return fmt.Errorf("deepseekv3: backend %s has no multi-head latent attention op", be.Name())
	}
	if r.router, ok = be.(backend.GroupRouter); !ok {
		return fmt.Errorf("deepseekv3: backend %s has no grouped router op", be.Name())
	}
	if r.rb.Opts.LoRA != nil {
		return fmt.Errorf("deepseekv3: LoRA adapters are not supported for %s", Architecture)
	}
	c := r.cfg
	r.params = AttnParams(c)
	// with tensor parallelism the rank's heads: their rows of q_b_proj (or
	// q_proj) and kv_b_proj, their columns of o_proj; the latent cache,
	// shared by every head, is kept whole on every rank
	r.heads = r.rb.Layout().Split(c.NumHeads)
	r.params.Heads = r.heads.Count
	r.route = backend.GroupRoute{K: c.TopK, Groups: c.Routing.Groups, TopKGroups: c.Routing.TopKGroups,
		Norm: c.NormTopKProb, Scale: float32(c.Routing.ScalingFactor)}
	return nil
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

func (r *Runner) loadWeights() error {
	c, m := r.cfg, r.cfg.MLA
	H, heads := c.HiddenSize, c.NumHeads
	qk := m.QKNopeHeadDim + m.QKRopeHeadDim
	var err error
	if r.embed, err = r.rb.Embedding("model.embed_tokens.weight", c.VocabSize, H); err != nil {
		return err
	}
	if r.norm, err = r.rb.Weight("model.norm.weight", H); err != nil {
		return err
	}
	if r.lmHead, err = r.rb.LMHead(r.embed, c.TieWordEmbeddings, c.VocabSize, H); err != nil {
		return err
	}
	if r.plan, err = hybrid.NewPlan(r.rb, c); err != nil {
		return err
	}
	type w struct {
		dst   *backend.Tensor
		name  string
		shape []int
		split runbase.Split
	}
	hs := r.heads
	r.layers = make([]layer, c.NumLayers)
	for l := range r.layers {
		L := &r.layers[l]
		p := fmt.Sprintf("model.layers.%d.", l)
		ws := []w{
			{&L.inNorm, "input_layernorm.weight", []int{H}, runbase.Split{}},
			{&L.postNorm, "post_attention_layernorm.weight", []int{H}, runbase.Split{}},
			{&L.attn.kvA, "self_attn.kv_a_proj_with_mqa.weight", []int{m.KVLoRARank + m.QKRopeHeadDim, H}, runbase.Split{}},
			{&L.attn.kvANorm, "self_attn.kv_a_layernorm.weight", []int{m.KVLoRARank}, runbase.Split{}},
			{&L.attn.kvB, "self_attn.kv_b_proj.weight", []int{heads * (m.QKNopeHeadDim + m.VHeadDim), m.KVLoRARank},
				runbase.RowSplit(hs.Scale(m.QKNopeHeadDim + m.VHeadDim))},
			{&L.attn.o, "self_attn.o_proj.weight", []int{H, heads * m.VHeadDim}, runbase.ColSplit(hs.Scale(m.VHeadDim))},
		}
		if m.QLoRARank > 0 {
			ws = append(ws,
				w{&L.attn.qA, "self_attn.q_a_proj.weight", []int{m.QLoRARank, H}, runbase.Split{}},
				w{&L.attn.qANorm, "self_attn.q_a_layernorm.weight", []int{m.QLoRARank}, runbase.Split{}},
				w{&L.attn.qB, "self_attn.q_b_proj.weight", []int{heads * qk, m.QLoRARank}, runbase.RowSplit(hs.Scale(qk))})
		} else {
			ws = append(ws, w{&L.attn.q, "self_attn.q_proj.weight", []int{heads * qk, H}, runbase.RowSplit(hs.Scale(qk))})
		}
		L.moe = c.Layers[l].IsMoE
		if L.moe && r.plan.OnRank(l) { // rank 0 routes, or every rank with device experts
			ws = append(ws, w{&L.router, "mlp.gate.weight", []int{c.NumExperts, H}, runbase.Split{}},
				w{&L.bias, "mlp.gate.e_score_correction_bias", []int{c.NumExperts}, runbase.Split{}})
		}
		for _, x := range ws {
			if *x.dst, err = r.rb.WeightSplit(p+x.name, x.split, x.shape...); err != nil {
				return err
			}
		}
		if !L.moe {
			if L.mlp, err = block.LoadMLP(r.rb, p+"mlp.", c.IntermediateSize, H); err != nil {
				return err
			}
			continue
		}
		if c.SharedExperts > 0 {
			if L.shared, err = block.LoadMLP(r.rb, p+"mlp.shared_experts.", c.SharedExperts*c.MoEIntermediateSize, H); err != nil {
				return err
			}
		}
		if !r.plan.OnRank(l) {
			continue // rank 0 computes the routed experts
		}
		if r.moe[l], err = hybrid.Load(r.rb, r.plan, l, p+"mlp.experts.", c.NumExperts, H, c.MoEIntermediateSize); err != nil {
			return err
		}
		// the hybrid step's next-layer prediction ranks the raw router
		// logits (a prefetch hint: the bias and groups are left out)
		r.moe[l].Router, r.moe[l].RouterNorm = L.router, L.postNorm
	}
	return nil
}

// allocate sizes activations and the latent caches from the options.
func (r *Runner) allocate() error {
	c, o, be := r.cfg, r.rb.Opts, r.rb.BE
	if err := r.rb.AllocStep(c.HiddenSize, c.VocabSize); err != nil {
		return err
	}
	var err error
	for l := range r.layers {
		if r.layers[l].attn.cache, err = r.mla.AllocMLA(r.rb.Pool.NumPages(), o.PageSize, r.params.MLAShape); err != nil {
			return err
		}
	}
	T, H := o.MaxBatchTokens, c.HiddenSize
	// with tensor parallelism the rank's share of the MLP widths
	inter, sharedInter := max(block.Width(r.rb, c.IntermediateSize), 1), max(block.Width(r.rb, c.SharedExperts*c.MoEIntermediateSize), 1)
	k := max(c.TopK, 1)
	act := be.ActDType()
	for _, a := range []struct {
		dst   *backend.Tensor
		dt    tensor.DType
		shape []int
	}{
		{&r.x, act, []int{T, H}}, {&r.h, act, []int{T, H}}, {&r.tmp, act, []int{T, H}}, {&r.sh, act, []int{T, H}},
		{&r.qa, act, []int{T, max(c.MLA.QLoRARank, 1)}}, {&r.q, act, []int{T, r.params.QWidth()}},
		{&r.kv, act, []int{T, r.params.CacheWidth()}}, {&r.attnOut, act, []int{T, r.heads.Count * c.MLA.VHeadDim}},
		{&r.gate, act, []int{T, inter}}, {&r.up, act, []int{T, inter}},
		{&r.seG, act, []int{T, sharedInter}}, {&r.seU, act, []int{T, sharedInter}},
		{&r.rlogits, act, []int{T, max(c.NumExperts, 1)}},
		{&r.rw, act, []int{T, k}}, {&r.rids, tensor.I32, []int{T, k}},
	} {
		if *a.dst, err = be.Alloc(a.dt, a.shape...); err != nil {
			return fmt.Errorf("allocating activations: %w", err)
		}
	}
	r.blk = hybrid.Block{In: r.h, Out: r.tmp, RouteWeights: r.rw, RouteIDs: r.rids, Residual: r.x}
	if c.SharedExperts > 0 {
		r.shared = r.sharedExperts // made once: a method value allocates
		r.blk.Shared = r.shared
	}
	return nil
}

// Info implements model.Runner.
func (r *Runner) Info() model.Info { return r.rb.Info }

// Reserve implements model.Runner.
func (r *Runner) Reserve(slot, n int) error { return r.rb.Reserve(slot, n) }

// Free implements model.Runner.
func (r *Runner) Free(slot int) { r.rb.Free(slot) }

// FreeTokens implements model.Runner.
func (r *Runner) FreeTokens() int { return r.rb.FreeTokens() }

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
	be := r.rb.BE
	eps := float32(r.cfg.RMSNormEps)
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
		r.attend(&L.attn, n)
		be.MatMul(r.tmp, r.attnOut, L.attn.o, n)
		r.rb.AllReduce(r.tmp, n) // o is row-parallel
		backend.AddRMSNorm(be, r.h, r.x, r.tmp, L.postNorm, eps, n)
		if L.moe {
			// the residual stream is the same on every rank: rank 0
			// computes the routed experts (with device experts, or in a
			// layerwise prefill step, every rank its share: hybrid.Plan)
			// with its shard of the shared experts, the other ranks their
			// shards
			if r.plan.Runs(l, n) {
				be.MatMul(r.rlogits, r.h, L.router, n)
				r.router.RouterGroupTopK(r.rw, r.rids, r.rlogits, L.bias, &r.route, n)
				if err := r.routed.Layer(l, &r.blk, n); err != nil {
					return err
				}
			} else if r.shared != nil {
				L.shared.Forward(be, r.tmp, r.h, r.seG, r.seU, n)
			}
			if r.shared != nil || r.plan.Reduced(l, n) {
				r.rb.AllReduce(r.tmp, n)
			} else {
				r.rb.Broadcast(r.tmp, n)
			}
		} else {
			L.mlp.Forward(be, r.tmp, r.h, r.gate, r.up, n)
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

// attend queues one layer's attention over the first n rows of r.h into
// r.attnOut (before the o projection).
func (r *Runner) attend(a *attention, n int) {
	be := r.rb.BE
	if a.qA != nil {
		be.MatMul(r.qa, r.h, a.qA, n)
		be.RMSNorm(r.qa, r.qa, a.qANorm, innerEps, n)
		be.MatMul(r.q, r.qa, a.qB, n)
	} else {
		be.MatMul(r.q, r.h, a.q, n)
	}
	be.MatMul(r.kv, r.h, a.kvA, n)
	r.mla.MLAttention(r.attnOut, r.q, r.kv, a.kvANorm, a.kvB, a.cache, &r.params, n)
}

// sharedExperts queues MoE layer l's shared experts over the first n rows
// of r.h into r.sh (hybrid.Block.Shared).
func (r *Runner) sharedExperts(l, n int) backend.Tensor {
	r.layers[l].shared.Forward(r.rb.BE, r.sh, r.h, r.seG, r.seU, n)
	return r.sh
}
