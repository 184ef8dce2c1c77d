// Package block holds the layer pieces the Qwen model definitions
// (qwen3moe, qwen3next) run the same way: the attention block from the
// q/k/v projections to the attention output (per-head q/k RMSNorm, NeoX
// rotary, grouped-query attention over the paged KV cache), the SwiGLU MLP
// (dense layers and shared experts), the softmax top-k router, and how their
// parameters and KV caches are sized from the config. What differs per
// architecture (how the weights are stored, Qwen3-Next's output gate and
// Gemma-style norms, where the blocks' outputs go) stays in the model
// packages.
package block

import (
	"math"

	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/tp"
)

// Params returns the rotary and attention parameters of c's attention
// layers (scale 1/sqrt(head dim)).
func Params(c *modelconfig.Config) (backend.Rope, backend.Attn) {
	hd := c.HeadDim
	return backend.Rope{HeadDim: hd, RotaryDim: c.Rope.RotaryDim, Theta: c.Rope.Theta},
		backend.Attn{Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd)))}
}

// RankParams is Params for rb's rank of a tensor-parallel model: its
// query heads and the kv heads they read (tp.Layout.KVHeads).
func RankParams(rb *runbase.Base, c *modelconfig.Config) (backend.Rope, backend.Attn) {
	rope, attn := Params(c)
	q, kv := RankHeads(rb, c)
	attn.Heads, attn.KVHeads = q.Count, kv.Count
	return rope, attn
}

// RankHeads returns the attention query heads and kv heads rb's rank
// holds (all of them without tensor parallelism).
func RankHeads(rb *runbase.Base, c *modelconfig.Config) (q, kv tp.Span) {
	l := rb.Layout()
	return l.Split(c.NumHeads), l.KVHeads(c.NumHeads, c.NumKVHeads)
}

// AllocKV allocates one attention layer's paged KV cache: the pool's pages
// of the options' page size, the rank's kv heads of c and c's head dim.
func AllocKV(rb *runbase.Base, c *modelconfig.Config) (*backend.KVCache, error) {
	_, kv := RankHeads(rb, c)
	return rb.BE.AllocKV(rb.Pool.NumPages(), rb.Opts.PageSize, kv.Count, c.HeadDim)
}

// Attention is one attention layer's weights: the q, k, v projections
// [heads·hd, H], [kvHeads·hd, H] (twice), the o projection [H, heads·hd],
// the per-head RMSNorm weights [hd] of q and k, and the layer's KV cache.
type Attention struct {
	Q, K, V, O backend.Tensor
	// Gate, when set, is a further projection of the block's input that
	// the model uses itself (Qwen3-Next's output gate): Attend computes it
	// into AttnBufs.Gate together with q, k and v.
	Gate         backend.Tensor
	QNorm, KNorm backend.Tensor
	w            [4]backend.Tensor // Attend's MatMulGroup weights (a field: a local array would escape)
	KV           *backend.KVCache
	// Lo runs the LoRA deltas LQ, LK, LV of the q, k, v projections (nil:
	// no adapters); the model applies the o projection's itself.
	Lo         *LoRAs
	LQ, LK, LV LoRA
}

// BindLoRA binds the adapters' q/k/v/o_proj LoRA of layer (prefix
// "self_attn."): q, k, v into a, o returned for the model's o projection.
// qFull, kvd and qd are the checkpoint's q_proj and k/v_proj rows and
// o_proj columns; q, kv and o the parts the model holds of them (as it
// split the weights: the rank's heads, a doubled q_proj's query rows).
func (a *Attention) BindLoRA(lo *LoRAs, layer, hidden, qFull, kvd, qd int, q, kv, o runbase.Split) (oLoRA LoRA, err error) {
	a.Lo = lo
	if a.LQ, err = lo.Bind(layer, "self_attn.q_proj", qFull, hidden, q); err != nil {
		return oLoRA, err
	}
	if a.LK, err = lo.Bind(layer, "self_attn.k_proj", kvd, hidden, kv); err != nil {
		return oLoRA, err
	}
	if a.LV, err = lo.Bind(layer, "self_attn.v_proj", kvd, hidden, kv); err != nil {
		return oLoRA, err
	}
	return lo.Bind(layer, "self_attn.o_proj", hidden, qd, o)
}

// AttnBufs are the activations the attention block writes: Q and Out
// [T, heads·hd], K and V [T, kvHeads·hd], and Gate for Attention.Gate.
type AttnBufs struct {
	Q, K, V, Out, Gate backend.Tensor
	proj               [4]backend.Tensor // Attend's MatMulGroup outputs
}

// Attend runs the attention block on the first n rows of h up to the
// attention output (buf.Out, before the o projection): q, k, v projections,
// per-head RMSNorm of q and k, rotary on q and k, then attention over the
// KV cache (which the step's k and v rows join). The projections, and
// a.Gate's, read h together (backend.MatMulGroup).
func (a *Attention) Attend(be backend.Ops, buf *AttnBufs, h backend.Tensor, rope *backend.Rope, p *backend.Attn, eps float32, n int) {
	a.w, buf.proj = [4]backend.Tensor{a.Q, a.K, a.V, a.Gate}, [4]backend.Tensor{buf.Q, buf.K, buf.V, buf.Gate}
	m := 3
	if a.Gate != nil {
		m = 4
	}
	backend.MatMulGroup(be, h, n, buf.proj[:m], a.w[:m])
	a.Lo.Apply(&a.LQ, buf.Q, h, n)
	a.Lo.Apply(&a.LK, buf.K, h, n)
	a.Lo.Apply(&a.LV, buf.V, h, n)
	be.RMSNorm(buf.Q, buf.Q, a.QNorm, eps, n*p.Heads)
	be.RMSNorm(buf.K, buf.K, a.KNorm, eps, n*p.KVHeads)
	be.Rope(buf.Q, rope, p.Heads, n)
	be.Rope(buf.K, rope, p.KVHeads, n)
	be.Attention(buf.Out, buf.Q, buf.K, buf.V, a.KV, p, n)
}

// MLP is a SwiGLU MLP's weights: gate and up [I, H], down [H, I].
type MLP struct {
	Gate, Up, Down backend.Tensor
	w, out         [2]backend.Tensor // Forward's MatMulGroup (fields: local arrays would escape)
	// Lo runs the LoRA deltas of the three projections (nil: none).
	Lo                *LoRAs
	LGate, LUp, LDown LoRA
}

// BindLoRA binds the adapters' gate/up/down_proj LoRA of the MLP module
// prefix p of layer (e.g. "mlp.shared_expert."), of intermediate size
// inter, split over the ranks as LoadMLP splits the weights.
func (m *MLP) BindLoRA(lo *LoRAs, layer int, p string, inter, hidden int) (err error) {
	m.Lo = lo
	if lo == nil {
		return nil
	}
	col, row := lo.rb.ColumnParallel(inter), lo.rb.RowParallel(inter)
	if m.LGate, err = lo.Bind(layer, p+"gate_proj", inter, hidden, col); err != nil {
		return err
	}
	if m.LUp, err = lo.Bind(layer, p+"up_proj", inter, hidden, col); err != nil {
		return err
	}
	m.LDown, err = lo.Bind(layer, p+"down_proj", hidden, inter, row)
	return err
}

// LoadMLP binds the SwiGLU MLP stored under p (p+"gate_proj.weight",
// "up_proj.weight", "down_proj.weight") with intermediate size inter. With
// tensor parallelism gate and up are column-parallel and down row-parallel:
// the rank holds its share of the intermediate columns (Width), and
// Forward's output is a partial sum for runbase.Base.AllReduce.
func LoadMLP(rb *runbase.Base, p string, inter, hidden int) (MLP, error) {
	var m MLP
	var err error
	for _, w := range []struct {
		dst        *backend.Tensor
		name       string
		rows, cols int
		split      runbase.Split
	}{
		{&m.Gate, "gate_proj.weight", inter, hidden, rb.ColumnParallel(inter)},
		{&m.Up, "up_proj.weight", inter, hidden, rb.ColumnParallel(inter)},
		{&m.Down, "down_proj.weight", hidden, inter, rb.RowParallel(inter)},
	} {
		if *w.dst, err = rb.WeightSplit(p+w.name, w.split, w.rows, w.cols); err != nil {
			return MLP{}, err
		}
	}
	return m, nil
}

// Width is the intermediate width of the rank's share of an MLP of
// intermediate size inter (Forward's scratch width).
func Width(rb *runbase.Base, inter int) int { return rb.Layout().Split(inter).Count }

// Forward computes out = down(silu(gate(x)) · up(x)) over n rows, with g
// and u [T, I] as scratch.
func (m *MLP) Forward(be backend.Ops, out, x, g, u backend.Tensor, n int) {
	m.w, m.out = [2]backend.Tensor{m.Gate, m.Up}, [2]backend.Tensor{g, u}
	backend.MatMulGroup(be, x, n, m.out[:], m.w[:])
	m.Lo.Apply(&m.LGate, g, x, n)
	m.Lo.Apply(&m.LUp, u, x, n)
	be.SiLUMul(g, g, u, n)
	be.MatMul(out, g, m.Down, n)
	m.Lo.Apply(&m.LDown, out, g, n)
}

// Route runs the router [E, H] on n rows of h and keeps each row's top k
// experts: logits [T, E], weights wts and ids [T, k] (renormalised when
// norm is set).
func Route(be backend.Ops, wts, ids, logits, h, router backend.Tensor, k int, norm bool, n int) {
	be.MatMul(logits, h, router, n)
	be.RouterTopK(wts, ids, logits, k, norm, n)
}
