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

// DeltaState is one sequence's state for one Gated DeltaNet layer in the
// chunked form: the recurrent state at the last chunk boundary plus the rows
// of the chunk being filled. Rows are appended one token at a time, in the
// same arithmetic order whether the token arrives in a long prefill or as a
// single decode step, so a prompt prefilled in pieces yields bit-identical
// outputs and state to one prefill.
type DeltaState struct {
	// S is the recurrent state at the start of the open chunk,
	// [VHeads, KDim, VDim] row-major (transformers' layout).
	S []float32
	// K holds the open chunk's l2-normalised keys, [DeltaChunkSize, KHeads, KDim].
	K []float32
	// V holds the open chunk's corrected values ("v_new"), [DeltaChunkSize, VHeads, VDim].
	V []float32
	// G holds the open chunk's cumulative log decay, [DeltaChunkSize, VHeads].
	G []float32
	// Rows is the number of filled rows of the open chunk (0 <= Rows < DeltaChunkSize).
	Rows int
}

// Check reports a state whose buffers do not fit shape s.
func (st *DeltaState) Check(s DeltaShape) error {
	switch {
	case len(st.S) != s.StateLen():
		return fmt.Errorf("gated delta state: S has %d values, want %d", len(st.S), s.StateLen())
	case len(st.K) != DeltaChunkSize*s.KHeads*s.KDim:
		return fmt.Errorf("gated delta state: K has %d values, want %d", len(st.K), DeltaChunkSize*s.KHeads*s.KDim)
	case len(st.V) != DeltaChunkSize*s.VHeads*s.VDim:
		return fmt.Errorf("gated delta state: V has %d values, want %d", len(st.V), DeltaChunkSize*s.VHeads*s.VDim)
	case len(st.G) != DeltaChunkSize*s.VHeads:
		return fmt.Errorf("gated delta state: G has %d values, want %d", len(st.G), DeltaChunkSize*s.VHeads)
	case st.Rows < 0 || st.Rows >= DeltaChunkSize:
		return fmt.Errorf("gated delta state: %d open rows, want 0..%d", st.Rows, DeltaChunkSize-1)
	}
	return nil
}

// LinearAttention is the op set of Gated DeltaNet (linear attention) layers
// and of the norms Qwen3-Next and Qwen3.5 add. Activations are float32,
// token-major; every op works on one sequence's tokens in order, and the
// per-sequence state arguments are read and advanced in place.
type LinearAttention interface {
	// CausalConv1D applies a depthwise causal convolution followed by SiLU:
	// x and out are [n, channels]; w is [channels, kernel] (the checkpoint's
	// conv1d.weight without its middle axis); state holds the previous
	// kernel-1 input rows, [kernel-1, channels], oldest first, and is
	// updated to end with the last kernel-1 rows of x.
	CausalConv1D(x []float32, n, channels int, w []float32, kernel int, state, out []float32) error
	// GatedDeltaRule runs n tokens of the gated delta rule. q and k are
	// [n, KHeads, KDim] as projected (they are l2-normalised here, and q is
	// scaled by 1/sqrt(KDim)); v is [n, VHeads, VDim]; g is the log decay
	// and beta the write strength, both [n, VHeads]. out is [n, VHeads, VDim].
	GatedDeltaRule(q, k, v, g, beta []float32, n int, shape DeltaShape, st *DeltaState, out []float32) error
	// GatedRMSNorm computes rmsnorm(x)·w·silu(z) over rows of width dim.
	GatedRMSNorm(x, z, w []float32, rows, dim int, eps float32, out []float32) error
	// GemmaRMSNorm computes rmsnorm(x)·(1+w) over rows of width dim; out may alias x.
	GemmaRMSNorm(x, w []float32, rows, dim int, eps float32, out []float32) error
}
