// Package qwen3moe is the Qwen3-MoE model definition (Hugging Face
// Qwen3MoeForCausalLM), written once against the backend op set: per layer
// rmsnorm -> q/k/v projections -> per-head q/k rmsnorm -> NeoX rotary ->
// causal GQA attention over the paged KV cache -> o projection -> residual ->
// rmsnorm -> softmax top-k router and SwiGLU experts (or a dense SwiGLU MLP
// on mlp_only_layers / off decoder_sparse_step) -> residual; final rmsnorm
// and lm head (tied or not) on the rows whose logits are wanted.
//
// Checkpoints load with per-expert keys as published
// (mlp.experts.E.{gate,up,down}_proj.weight) or with transformers 5's fused
// 3-D tensors (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj
// [E, H, I]); either way the CPU backend uses the bf16 bytes in place in
// the mmap.
package qwen3moe

import (
	"fmt"

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
const Architecture = "Qwen3MoeForCausalLM"

func init() {
	arch.Register(Architecture, func(dir string, o arch.Options) (model.Runner, error) {
		return Load(dir, o)
	})
}

type layer struct {
	inNorm, postNorm backend.Tensor
	attn             block.Attention
	moe              bool
	router           backend.Tensor
	mlp              block.MLP  // dense layers
	lo               block.LoRA // the o projection's adapters
}

// Runner is a loaded Qwen3-MoE model; it implements model.Runner.
type Runner struct {
	runbase.Prefix                   // model.PrefixCache, from rb
	body           func(n int) error // layersForward
	rb             *runbase.Base     // checkpoint, backend, KV pages, step layout, lm head
	cfg            *Config
	rope           backend.Rope
	attn           backend.Attn
	layers         []layer
	embed          backend.Tensor
	norm           backend.Tensor
	lmHead         backend.Tensor

	lo     *block.LoRAs      // non-expert LoRA adapters (nil: none)
	routed *hybrid.Experts   // what computes the routed experts (nil: another rank)
	plan   *hybrid.Plan      // which rank computes which routed experts
	moe    []*hybrid.Weights // per layer: its routed experts, nil for a dense MLP
	blk    hybrid.Block      // what the MoE layers hand the routed experts

	// activations, sized at load from MaxBatchTokens
	x, h, tmp, gate, up backend.Tensor
	ab                  block.AttnBufs
	rlogits, rw, rids   backend.Tensor
}

var (
	_ model.Runner      = (*Runner)(nil)
	_ model.PrefixCache = (*Runner)(nil)
)

// Load opens the checkpoint in dir and binds its weights to the backend in
// o (a new CPU backend when nil).
func Load(dir string, o arch.Options) (*Runner, error) {
	rb, cfg, err := runbase.Open("qwen3moe", dir, o, modelconfig.Qwen3Moe)
	if err != nil {
		return nil, err
	}
	r := &Runner{Prefix: runbase.NewPrefix(rb), rb: rb, cfg: cfg, moe: make([]*hybrid.Weights, cfg.NumLayers)}
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

func (r *Runner) loadWeights() error {
	c := r.cfg
	H, hd := c.HiddenSize, c.HeadDim
	qd, kd := c.NumHeads*hd, c.NumKVHeads*hd
	// with tensor parallelism: the rank's heads (q, k, v column-parallel,
	// o row-parallel)
	qh, kvh := block.RankHeads(r.rb, c)
	qs, kvs := runbase.RowSplit(qh.Scale(hd)), runbase.RowSplit(kvh.Scale(hd))
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
	if r.lo, err = block.NewLoRAs(r.rb); err != nil {
		return err
	}
	if r.plan, err = hybrid.NewPlan(r.rb, c); err != nil {
		return err
	}
	r.layers = make([]layer, c.NumLayers)
	for l := range r.layers {
		L := &r.layers[l]
		p := fmt.Sprintf("model.layers.%d.", l)
		for _, w := range []struct {
			dst   *backend.Tensor
			name  string
			split runbase.Split
			shape []int
		}{
			{&L.inNorm, "input_layernorm.weight", runbase.Split{}, []int{H}},
			{&L.postNorm, "post_attention_layernorm.weight", runbase.Split{}, []int{H}},
			{&L.attn.Q, "self_attn.q_proj.weight", qs, []int{qd, H}},
			{&L.attn.K, "self_attn.k_proj.weight", kvs, []int{kd, H}},
			{&L.attn.V, "self_attn.v_proj.weight", kvs, []int{kd, H}},
			{&L.attn.O, "self_attn.o_proj.weight", runbase.ColSplit(qh.Scale(hd)), []int{H, qd}},
			{&L.attn.QNorm, "self_attn.q_norm.weight", runbase.Split{}, []int{hd}},
			{&L.attn.KNorm, "self_attn.k_norm.weight", runbase.Split{}, []int{hd}},
		} {
			if *w.dst, err = r.rb.WeightSplit(p+w.name, w.split, w.shape...); err != nil {
				return err
			}
		}
		if L.lo, err = L.attn.BindLoRA(r.lo, l, H, qd, kd, qd, qs, kvs, runbase.ColSplit(qh.Scale(hd))); err != nil {
			return err
		}
		L.moe = c.Layers[l].IsMoE
		if !L.moe {
			if L.mlp, err = block.LoadMLP(r.rb, p+"mlp.", c.IntermediateSize, H); err != nil {
				return err
			}
			if err := L.mlp.BindLoRA(r.lo, l, "mlp.", c.IntermediateSize, H); err != nil {
				return err
			}
			continue
		}
		if !r.plan.OnRank(l) {
			continue // rank 0 computes the routed experts
		}
		if L.router, err = r.rb.Weight(p+"mlp.gate.weight", c.NumExperts, H); err != nil {
			return err
		}
		if r.moe[l], err = hybrid.Load(r.rb, r.plan, l, p+"mlp.experts.", c.NumExperts, H, c.MoEIntermediateSize); err != nil {
			return err
		}
		r.moe[l].Router, r.moe[l].RouterNorm = L.router, L.postNorm
	}
	return r.lo.Unused()
}

// allocate sizes activations and the KV cache from the options.
func (r *Runner) allocate() error {
	c, o, be := r.cfg, r.rb.Opts, r.rb.BE
	if err := r.rb.AllocStep(c.HiddenSize, c.VocabSize); err != nil {
		return err
	}
	hd := c.HeadDim
	r.rope, r.attn = block.RankParams(r.rb, c)
	var err error
	for l := range r.layers {
		if r.layers[l].attn.KV, err = block.AllocKV(r.rb, c); err != nil {
			return err
		}
	}
	T, H := o.MaxBatchTokens, c.HiddenSize
	inter := max(block.Width(r.rb, c.IntermediateSize), 1)
	k := max(c.TopK, 1)
	act := be.ActDType()
	for _, a := range []struct {
		dst   *backend.Tensor
		dt    tensor.DType
		shape []int
	}{
		{&r.x, act, []int{T, H}}, {&r.h, act, []int{T, H}}, {&r.tmp, act, []int{T, H}},
		{&r.ab.Q, act, []int{T, r.attn.Heads * hd}}, {&r.ab.Out, act, []int{T, r.attn.Heads * hd}},
		{&r.ab.K, act, []int{T, r.attn.KVHeads * hd}}, {&r.ab.V, act, []int{T, r.attn.KVHeads * hd}},
		{&r.gate, act, []int{T, inter}}, {&r.up, act, []int{T, inter}},
		{&r.rlogits, act, []int{T, max(c.NumExperts, 1)}},
		{&r.rw, act, []int{T, k}}, {&r.rids, tensor.I32, []int{T, k}},
	} {
		if *a.dst, err = be.Alloc(a.dt, a.shape...); err != nil {
			return fmt.Errorf("allocating activations: %w", err)
		}
	}
	r.blk = hybrid.Block{In: r.h, Out: r.tmp, RouteWeights: r.rw, RouteIDs: r.rids, Residual: r.x}
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
	be, c := r.rb.BE, r.cfg
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
		L.attn.Attend(be, &r.ab, r.h, &r.rope, &r.attn, eps, n)
		be.MatMul(r.tmp, r.ab.Out, L.attn.O, n)
		r.lo.Apply(&L.lo, r.tmp, r.ab.Out, n)
		r.rb.AllReduce(r.tmp, n) // o is row-parallel
		backend.AddRMSNorm(be, r.h, r.x, r.tmp, L.postNorm, eps, n)
		if L.moe {
			// the residual stream is the same on every rank: rank 0
			// computes the routed experts once and hands them over, or
			// with device experts every rank its share of them (rank 0
			// also the rest), in a layerwise prefill step its share of
			// every expert, and the shares are summed (hybrid.Plan)
			if r.plan.Runs(l, n) {
				block.Route(be, r.rw, r.rids, r.rlogits, r.h, L.router, c.TopK, c.NormTopKProb, n)
				if err := r.routed.Layer(l, &r.blk, n); err != nil {
					return err
				}
			}
			if r.plan.Reduced(l, n) {
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

// DecodeWeightBytes is the number of weight bytes one decode token reads
// (attention and norms of every layer, the router, the top-k experts of
// MoE layers or the dense MLP, the final norm and the lm head): the
// numerator of the memory-bandwidth bound on decode speed.
func (r *Runner) DecodeWeightBytes() int64 {
	c := r.cfg
	wsize := func(t backend.Tensor) int64 {
		n := int64(t.DType().Size())
		for _, d := range t.Shape() {
			n *= int64(d)
		}
		return n
	}
	var total int64
	for l := range r.layers {
		L := &r.layers[l]
		a := &L.attn
		for _, t := range []backend.Tensor{L.inNorm, L.postNorm, a.Q, a.K, a.V, a.O, a.QNorm, a.KNorm} {
			total += wsize(t)
		}
		if L.moe {
			if r.moe[l] == nil {
				continue // another rank's routed experts
			}
			total += wsize(L.router) + int64(c.TopK)*(wsize(r.moe[l].Gate[0])+wsize(r.moe[l].Up[0])+wsize(r.moe[l].Down[0]))
		} else {
			total += wsize(L.mlp.Gate) + wsize(L.mlp.Up) + wsize(L.mlp.Down)
		}
	}
	row := wsize(r.embed) / int64(c.VocabSize)
	return total + row + wsize(r.norm) + wsize(r.lmHead)
}
