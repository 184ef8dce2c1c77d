package backend

import "fmt"

// MLAShape is one multi-head latent attention layer's widths (DeepSeek-V3,
// Kimi-K2): per head a query and key of Nope+RopeDim and a value of VDim;
// keys and values come from one shared latent of Rank values per token
// through kv_b_proj [Heads·(Nope+VDim), Rank] (per head Nope key rows, then
// VDim value rows), and one rotary key of RopeDim shared by every head.
type MLAShape struct {
	Heads               int
	Nope, RopeDim, VDim int
	Rank                int
}

// QWidth is the query row width: Heads·(Nope+RopeDim).
func (s MLAShape) QWidth() int { return s.Heads * (s.Nope + s.RopeDim) }

// CacheWidth is the values one token keeps per layer: Rank + RopeDim.
func (s MLAShape) CacheWidth() int { return s.Rank + s.RopeDim }

// Validate reports a shape the op cannot run.
func (s MLAShape) Validate() error {
	if s.Heads <= 0 || s.Nope <= 0 || s.RopeDim <= 0 || s.RopeDim%2 != 0 || s.VDim <= 0 || s.Rank <= 0 {
		return fmt.Errorf("MLA: shape %+v must be positive with an even rope width", s)
	}
	return nil
}

// MLARope is the rotary embedding MLA applies to the rope parts of the
// query and the key: angle pos·InvFreq[i] for pair i (RopeDim/2
// frequencies, computed by the model: default or YaRN), cos and sin each
// multiplied by AttnFactor (YaRN's attention scaling; 1 otherwise), the
// rotate-half rule on the RopeDim values; with Interleave the values are
// first de-interleaved (x0, x2, ..., x1, x3, ...), as transformers'
// apply_rotary_pos_emb_interleave does.
type MLARope struct {
	InvFreq    []float32
	AttnFactor float32
	Interleave bool
}

// MLAParams are MLAttention's fixed parameters for one layer.
type MLAParams struct {
	MLAShape
	Rope MLARope
	// Scale multiplies q·k before the softmax (qk_head_dim^-0.5, times
	// YaRN's mscale² in DeepSeek-V3).
	Scale float32
	// Eps is kv_a_layernorm's RMSNorm epsilon.
	Eps float32
}

// MLACache is one layer's paged latent cache: per token the normed latent
// and the rotated key, [pages, PageSize, Width] F32 with Width = Rank +
// RopeDim, allocated by MLA.AllocMLA.
type MLACache struct {
	Latent     Tensor
	PageSize   int
	Width      int
	TotalPages int
}

// MLA is the op multi-head latent attention adds to Ops. Like Ops it records
// errors for Sync and works on the layout set by SetStep.
//
//   - MLAttention(out, q, kv, kvNorm, kvB, c, p, n): q is the query
//     projection [n, Heads·(Nope+RopeDim)] (per head Nope values, then
//     RopeDim), kv the kv_a_proj_with_mqa output [n, Rank+RopeDim] (latent,
//     then the rope key), kvNorm the kv_a_layernorm weight [Rank], kvB
//     kv_b_proj [Heads·(Nope+VDim), Rank] (float or block-scaled FP8), out
//     [n, Heads·VDim]. Each row's cache entry is [rmsnorm(latent)·kvNorm |
//     rope(key)] at its position; then for each row and head h, with the
//     key rows Wk_h and value rows Wv_h of kvB, over the sequence's
//     positions 0..pos: score_j = (q_nope·(Wk_h·c_j) + rope(q_rope)·k_j)·Scale,
//     out = Wv_h·Σ_j softmax(score)_j c_j — transformers' attention with
//     keys and values expanded from the latent, computed in latent space
//     (Wk_hᵀq_nope against the cached latents) for every row, so a row's
//     result does not depend on the step it runs in. q and kv are not
//     modified.
type MLA interface {
	AllocMLA(pages, pageSize int, s MLAShape) (*MLACache, error)
	MLAttention(out, q, kv, kvNorm, kvB Tensor, c *MLACache, p *MLAParams, n int)
}

// GroupRoute is RouterGroupTopK's parameters (DeepSeek-V3's router).
type GroupRoute struct {
	K                  int     // experts per token
	Groups, TopKGroups int     // expert groups, and how many are eligible per token
	Norm               bool    // renormalise the k weights (sum + 1e-20)
	Scale              float32 // routed_scaling_factor, applied last
}

// GroupRouter is DeepSeek-V3's router as an op.
//
//   - RouterGroupTopK(wts, ids, logits, bias, g, n): per row of logits
//     [n, E]: s = sigmoid(logits), c = s + bias (bias [E], any float
//     dtype); each of g.Groups consecutive groups of E/Groups experts scores
//     the sum of its two largest c; the g.TopKGroups best groups (ties: lower
//     group) stay eligible and every other expert's c becomes 0; the g.K
//     largest c (ties: lower id) are the ids, their weights s (not c),
//     divided by their sum + 1e-20 when g.Norm, times g.Scale. wts F32
//     [n, K], ids I32 [n, K]. Rows at or past the step's Live (when set) get
//     ids -1 and weights 0, as RouterTopK.
type GroupRouter interface {
	RouterGroupTopK(wts, ids, logits, bias Tensor, g *GroupRoute, n int)
}

// CheckMLA checks MLAttention's parameters against the cache c and its
// row count n against the step's stepTokens tokens.
func CheckMLA(p *MLAParams, c *MLACache, n, stepTokens int) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if c == nil || c.Width != p.CacheWidth() {
		return fmt.Errorf("MLAttention: cache width does not fit rank %d + rope %d", p.Rank, p.RopeDim)
	}
	if len(p.Rope.InvFreq) != p.RopeDim/2 {
		return fmt.Errorf("MLAttention: %d rope frequencies for rope width %d", len(p.Rope.InvFreq), p.RopeDim)
	}
	if n != stepTokens {
		return fmt.Errorf("MLAttention: %d rows but the step has %d tokens", n, stepTokens)
	}
	return nil
}

// CheckMLAPages is CheckKVPages for a latent cache.
func CheckMLAPages(seqs []Seq, c *MLACache) error {
	return CheckKVPages(seqs, &KVCache{PageSize: c.PageSize, TotalPages: c.TotalPages})
}

// CheckMLAKVB checks MLAttention's kv_b_proj weight: a 2-D float or
// block-scaled FP8 matrix [Heads·(Nope+VDim), Rank].
func CheckMLAKVB(w Arg, s MLAShape) error {
	if err := CheckMatMulWeight(w); err != nil {
		return fmt.Errorf("MLAttention: %w", err)
	}
	if w.Shape[0] != s.Heads*(s.Nope+s.VDim) || w.Shape[1] != s.Rank {
		return fmt.Errorf("MLAttention: kv_b_proj %s is %v, want [%d, %d]", w.Label(), w.Shape, s.Heads*(s.Nope+s.VDim), s.Rank)
	}
	return nil
}

// CheckGroupRoute checks RouterGroupTopK's parameters against the router's
// experts columns.
func CheckGroupRoute(g *GroupRoute, experts int) error {
	switch {
	case g.K < 1 || g.K > experts:
		return fmt.Errorf("RouterGroupTopK: top-k %d with %d experts", g.K, experts)
	case g.Groups < 1 || experts%g.Groups != 0 || experts/g.Groups < 2:
		return fmt.Errorf("RouterGroupTopK: %d groups of %d experts (each group needs at least 2)", g.Groups, experts)
	case g.TopKGroups < 1 || g.TopKGroups > g.Groups:
		return fmt.Errorf("RouterGroupTopK: %d eligible groups of %d", g.TopKGroups, g.Groups)
	}
	return nil
}

// CheckRouterBias checks RouterGroupTopK's bias: a float vector of the
// router's experts.
func CheckRouterBias(b Arg, experts int) error {
	if !IsFloat(b.DType) || b.Len != experts {
		return fmt.Errorf("RouterGroupTopK: bias %s must be a float vector of %d experts", b.Label(), experts)
	}
	return nil
}
