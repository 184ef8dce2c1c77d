package backend

import "fmt"

// DeltaChunkSize is the number of tokens in one chunk of the chunked gated
// delta rule (Qwen3-Next and Qwen3.5 use 64, as transformers' reference does).
// Chunks are aligned to absolute sequence positions, so a sequence's chunk
// boundaries do not depend on how its tokens were split into forward steps.
const DeltaChunkSize = 64

// DeltaShape describes the heads of one Gated DeltaNet layer. Each key head
// serves VHeads/KHeads consecutive value heads (transformers'
// repeat_interleave), so VHeads must be a multiple of KHeads.
type DeltaShape struct {
	KHeads, VHeads int // query/key heads and value heads
	KDim, VDim     int // per-head key and value widths
}

// Validate reports a shape the ops cannot run.
func (s DeltaShape) Validate() error {
	if s.KHeads <= 0 || s.VHeads <= 0 || s.KDim <= 0 || s.VDim <= 0 {
		return fmt.Errorf("gated delta rule: non-positive shape %+v", s)
	}
	if s.VHeads%s.KHeads != 0 {
		return fmt.Errorf("gated delta rule: %d value heads is not a multiple of %d key heads", s.VHeads, s.KHeads)
	}
	return nil
}

// StateLen is the length of the recurrent state S: [VHeads, KDim, VDim].
func (s DeltaShape) StateLen() int { return s.VHeads * s.KDim * s.VDim }

// ConvChannels is the width of the mixed q|k|v row the causal conv1d runs
// over: 2·KHeads·KDim + VHeads·VDim.
func (s DeltaShape) ConvChannels() int { return 2*s.KHeads*s.KDim + s.VHeads*s.VDim }

// LinearShape sizes the per-sequence state of a model's linear-attention
// layers.
type LinearShape struct {
	Layers     int // linear-attention layers (indexed 0..Layers-1 by the ops)
	ConvKernel int // conv1d kernel width
	Delta      DeltaShape
}

// LinearState is the per-sequence state (conv history and gated-delta-rule
// state) of every linear-attention layer, for sequence slots
// 0..maxSeqs-1, allocated by LinearAttention.AllocLinearState. Memory for a
// slot is taken when a sequence first uses it and returned by Free.
type LinearState interface {
	// Free releases slot's state; the slot then starts from zero state.
	Free(slot int)
	// CopySlot makes slot dst's state a copy of slot src's (a prefix
	// cache's snapshot, taken or restored); a src that holds no state
	// copies as zero. Like the ops it is ordered with them (queued on the
	// GPU); a bad slot is an error at once.
	CopySlot(dst, src int) error
	// BytesPerSeq is the memory one sequence's state takes.
	BytesPerSeq() int64
}

// LinearAttention is the op set that Gated DeltaNet layers (Qwen3-Next,
// Qwen3.5) and gated attention add to Ops. Like Ops, the ops record errors
// for Sync and work on the layout set by SetStep: the sequence ops
// (CausalConv1D, GatedDeltaRule) run each Step.Seqs span against its slot's
// state in st, treating a span with Pos 0 as the start of a new sequence
// (its state is zeroed first), and advance the state by the span's tokens.
//
//   - CausalConv1D(out, x, w, st, layer, n): x and out are F32
//     [n, ConvChannels]; w is the checkpoint's conv1d.weight
//     [ConvChannels, 1, ConvKernel]. out[t, c] = silu(Σ_j w[c, j]·x[t-K+1+j, c])
//     over the sequence's inputs (earlier steps' from the state).
//   - GatedDeltaRule(out, qkv, g, beta, st, layer, n): qkv is the conv
//     output [n, ConvChannels] = q [KHeads·KDim] | k [KHeads·KDim] |
//     v [VHeads·VDim]; g (log decay) and beta are F32 [n, VHeads]; out is
//     [n, VHeads·VDim]. q and k are l2-normalised (eps 1e-6), q is scaled by
//     1/sqrt(KDim), and o_t = S_tᵀq_t with S_t = e^{g_t}S_{t-1} +
//     k_t(β_t(v_t − e^{g_t}S_{t-1}ᵀk_t))ᵀ.
//   - DeltaGates(g, beta, a, b, aLog, dtBias, n): a and b are [n, VHeads];
//     g = −exp(aLog)·softplus(a + dtBias), beta = sigmoid(b); aLog and
//     dtBias are [VHeads] weights of any float dtype.
//   - GatedRMSNorm(out, x, z, w, eps, rows): width = len(w); per row
//     out = x/sqrt(mean(x²)+eps)·w·silu(z). out may equal x.
//   - SigmoidGate(out, x, gate, n): out[i, j] = x[i, j]·sigmoid(gate[i, j mod
//     gate width]); the gate is as wide as x (attention output gate) or one
//     column (shared-expert gate). out may equal x.
type LinearAttention interface {
	AllocLinearState(shape LinearShape, maxSeqs int) (LinearState, error)
	CausalConv1D(out, x, w Tensor, st LinearState, layer, n int)
	GatedDeltaRule(out, qkv, g, beta Tensor, st LinearState, layer, n int)
	DeltaGates(g, beta, a, b, aLog, dtBias Tensor, n int)
	GatedRMSNorm(out, x, z, w Tensor, eps float32, rows int)
	SigmoidGate(out, x, gate Tensor, n int)
}
