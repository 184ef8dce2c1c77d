// Package backend defines the op set that every model definition is written
// against and every compute backend (backend/cpu, backend/cuda) implements.
//
// # Model
//
// A Backend owns its memory. Tensors are opaque handles (Tensor) to arrays
// the backend allocated: weights are handed over once at load time with
// Weight (the CPU backend keeps bf16/f16/f32 weights in place in the mmap of
// the safetensors file, a GPU backend uploads them), activations and KV pages
// are allocated once with Alloc, sized from the maximum number of tokens in
// one step and the maximum number of sequences. Nothing is allocated per
// token: a forward pass is a sequence of op calls on those buffers.
//
// Activations are row-major matrices. A buffer allocated as [maxTokens, d]
// is used for any step of n <= maxTokens tokens: ops take the number of rows
// to process (n) and touch only the first n rows. Ops that work on sub-rows
// (per-head norms, rotary) view the buffer as rows of the width they need:
// a q buffer [maxTokens, heads*headDim] is [n*heads, headDim] for RMSNorm
// with a [headDim] weight.
//
// # Steps
//
// One forward pass is one Step: the concatenation of several sequences'
// chunks (prefill chunks, whole prompts and single decode tokens mixed).
// SetStep hands the backend the step's token ids, positions, sequence spans
// and KV page tables; ops that depend on the layout (Embed, Rope, Attention,
// GatherRows) use the step set last. A GPU backend copies the step's
// metadata to device buffers of fixed address there.
//
// # Errors
//
// Ops do not return errors: a backend records the first failure (a shape
// mismatch, a device error) and reports it from Sync, which also waits for
// queued work to finish. After a failure, later ops are no-ops until Sync
// returns the error; the next step starts clean.
//
// # Op semantics (the contract every backend is tested against)
//
// Floating-point activations (hidden states, projections, router logits and
// weights) are in the backend's ActDType: F32 on the CPU, where results
// match transformers' float32 reference; a GPU backend may choose BF16 to
// halve activation traffic and use bf16 GEMMs. Models allocate them with
// Alloc(be.ActDType(), ...). Weights may be BF16, F16 or F32; products
// accumulate in F32. Matrix weights follow the PyTorch nn.Linear layout
// [out, in]. Token ids and expert ids are I32.
//
// A MatMul weight (and a routed expert's) may also be block-scaled FP8, as
// FP8 checkpoints (Qwen3-*-FP8, DeepSeek-V3) store their linear layers: an
// F8_E4M3 [O, K] tensor q with a Host.Scale of F32 (or BF16/F16, widened at
// load) [ceil(O/bn), ceil(K/bk)] (the checkpoint's weight_scale_inv) and
// Host.Block = [bn, bk] (quantization_config.weight_block_size; 128x128 in
// published checkpoints, any positive sizes accepted, O and K need not be
// multiples). The weight is w[o, k] = f32(fp8(q[o, k])) * scale[o/bn, k/bk]
// (the F32 product, what dequantising the checkpoint in float32 gives) and
// MatMul accumulates x·wᵀ in F32 as for any other weight. Backends keep the
// weight in FP8 (one byte per element) and decode it on the fly; E4M3 codes
// 0x7f/0xff (NaN) never occur in checkpoints and their decoding is not part
// of the contract. CheckFP8 (checks.go) is the shared validation.
//
//   - Embed(out, table): out[i] = table[step.Tokens[i]] for every token.
//   - MatMul(out, x, w, n): out[i, o] = sum_k x[i, k] * w[o, k], i < n.
//   - RMSNorm(out, x, w, eps, rows): width = len(w); each row r of x:
//     out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w. out may equal x.
//   - Rope(x, r, heads, n): rotates x viewed as [n, heads, r.HeadDim] in place
//     by the NeoX (rotate-half) rule on the first r.RotaryDim dims of every
//     head, using step.Pos of each token.
//   - Attention(out, q, k, v, kv, p, n): appends the step's k, v rows to the
//     paged cache kv (layer p.Layer) at each token's position, then computes
//     causal grouped-query attention for each token over its sequence's
//     positions 0..pos: out[i, h] = softmax(q[i,h]·K^T * scale) V with kv head
//     h / (heads/kvHeads).
//   - Add(out, a, b, n): out = a + b over n rows of out's width.
//   - SiLUMul(out, gate, up, n): out = silu(gate) * up (SwiGLU activation).
//   - RouterTopK(wts, ids, logits, k, norm, n): softmax over each row of
//     logits [n, E], keep the k largest (ties: lower id first), renormalise
//     them to sum 1 when norm is set. wts is F32 [n, k], ids I32 [n, k].
//     Rows at or past the step's Live (when set) get ids -1 and weights 0.
//   - MoE(out, x, e, wts, ids, n): out[i] = sum_j wts[i,j] *
//     down_e(silu(gate_e(x[i])) * up_e(x[i])), e = ids[i,j]; ids < 0 and experts without
//     weights (Experts) are skipped (experts served elsewhere).
//   - GatherRows(out, x, first, count): out[j] = x[step.OutRows[first+j]]
//     for j < count (the lm head runs on the gathered rows in blocks).
//   - Read(dst, t, rows): copies the first rows rows of t to host memory as
//     float32 (waits for queued work).
package backend

import (
	"fmt"
	"math"
	"slices"

	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/tensor"
)

// Tensor is an opaque handle to an array owned by a backend. Only the
// backend that made it may use it.
type Tensor interface {
	// DType is the element type.
	DType() tensor.DType
	// Shape is the allocated shape, row-major (the last dimension is
	// contiguous). Callers must not modify it.
	Shape() []int
}

// Host describes weight data in host memory handed to Backend.Weight. Data
// may alias a read-only mmap that outlives the backend.
type Host struct {
	Name  string // tensor name, for error messages
	DType tensor.DType
	Shape []int
	Data  []byte // len(Data) == product(Shape) * DType.Size()

	// Scale and Block make an F8_E4M3 matrix block-scaled FP8 (see the
	// package comment): Scale holds the [ceil(O/bn), ceil(K/bk)] block
	// scales (weight_scale_inv), Block is [bn, bk]. Both are unset for
	// every other weight.
	Scale *Host
	Block [2]int
	// Int4Group > 0 makes h a compressed-tensors pack-quantized INT4
	// matrix (routed experts only; the CPU expert engine reads it, a
	// backend takes its bf16 values, expertsource.PackedInt4BF16): Shape
	// stays [rows, cols], Data holds rows x ceil(cols/8) little-endian
	// words of eight 4-bit codes (value + 8, the lowest nibble first) and
	// Scale the [rows, ceil(cols/Int4Group)] group scales.
	Int4Group int
}

// FP8 reports whether h is a block-scaled FP8 weight (h.Scale set).
func (h Host) FP8() bool { return h.Scale != nil && h.Int4Group == 0 }

// PackedInt4 reports whether h is a pack-quantized INT4 matrix.
func (h Host) PackedInt4() bool { return h.Int4Group > 0 }

// Check validates that h's data length matches its shape and dtype, and for
// a block-scaled FP8 weight its scales and block shape (CheckFP8).
func (h Host) Check() error {
	if h.PackedInt4() {
		return checkPackedInt4(h)
	}
	if h.Scale != nil || h.DType == tensor.F8E4M3 {
		if err := CheckFP8(h); err != nil {
			return err
		}
	}
	return h.checkSize()
}

// checkPackedInt4 checks a pack-quantized INT4 matrix's words and group
// scales against its [rows, cols] shape.
func checkPackedInt4(h Host) error {
	if len(h.Shape) != 2 || h.Shape[0] < 1 || h.Shape[1] < 1 || h.DType != tensor.I32 || h.Scale == nil {
		return fmt.Errorf("tensor %s: packed INT4 wants I32 words, a [rows, cols] shape and group scales (%s %v)", h.Name, h.DType, h.Shape)
	}
	rows, cols := h.Shape[0], h.Shape[1]
	if want := 4 * rows * ((cols + 7) / 8); len(h.Data) != want {
		return fmt.Errorf("tensor %s: packed INT4 [%d %d] needs %d bytes of words, have %d", h.Name, rows, cols, want, len(h.Data))
	}
	groups := (cols + h.Int4Group - 1) / h.Int4Group
	if !slices.Equal(h.Scale.Shape, []int{rows, groups}) {
		return fmt.Errorf("tensor %s: group scales %v, want [%d %d] (groups of %d)", h.Name, h.Scale.Shape, rows, groups, h.Int4Group)
	}
	return h.Scale.checkSize()
}

func (h Host) checkSize() error {
	n := 1
	for _, d := range h.Shape {
		if d < 0 {
			return fmt.Errorf("tensor %s: negative dimension in shape %v", h.Name, h.Shape)
		}
		n *= d
	}
	if sz := h.DType.Size(); sz == 0 || n*sz != len(h.Data) {
		return fmt.Errorf("tensor %s: %s %v needs %d bytes, have %d", h.Name, h.DType, h.Shape, n*h.DType.Size(), len(h.Data))
	}
	return nil
}

// Seq is one sequence's span of rows in a Step.
type Seq struct {
	Slot  int // sequence slot (for recurrent state); KV pages come from Pages
	Start int // first row of the step that belongs to this sequence
	Len   int // number of rows (tokens) in this step, >= 1
	Pos   int // position of the first row = tokens already cached
	// Pages lists the KV cache page ids holding positions
	// [0, Pos+Len): position p lives in page Pages[p/PageSize] at offset
	// p%PageSize.
	Pages []int32
	// Adapter is the LoRA adapter id of the sequence's request (0: the
	// base model); LoRAAdd selects rows by it.
	Adapter int
}

// Step is the layout of one forward pass. Rows of every activation buffer
// are tokens in the order of Tokens; each Seq owns a contiguous span.
type Step struct {
	Tokens  []int32 // token ids, one per row
	Pos     []int32 // absolute position of each row
	Seqs    []Seq
	OutRows []int32 // rows whose logits are wanted, in output order
	// Draws are the picks' settings, one per output row, for a Picker
	// (empty: every pick greedy).
	Draws []model.Draw
	// Live is, in a decode step padded to a graph's batch size, the rows
	// before the padding (0: no padding rows). Padding rows' results are
	// never read: RouterTopK routes them nowhere, so no expert computes
	// them.
	Live int
}

// LiveRows returns how many of the first n rows are the batch's own: Live
// when it is set and below n, else n (also for a nil step).
func (s *Step) LiveRows(n int) int {
	if s != nil && s.Live > 0 && s.Live < n {
		return s.Live
	}
	return n
}

// Rope is a rotary-embedding configuration (NeoX rotate-half layout).
type Rope struct {
	HeadDim   int     // per-head width of the rotated tensor
	RotaryDim int     // leading dims of each head that rotate (even, <= HeadDim)
	Theta     float64 // base
}

// InvFreq returns the rotary inverse frequencies theta^(-2i/RotaryDim) as
// float32, the precision transformers computes them in.
func (r Rope) InvFreq() []float32 {
	f := make([]float32, r.RotaryDim/2)
	for i := range f {
		e := float32(2*i) / float32(r.RotaryDim)
		f[i] = float32(1 / math.Pow(r.Theta, float64(e)))
	}
	return f
}

// KVCache is one layer's paged key and value storage, allocated by
// Backend.AllocKV.
type KVCache struct {
	K, V       Tensor // [pages, PageSize, kvHeads, headDim]
	PageSize   int
	KVHeads    int
	HeadDim    int
	TotalPages int
}

// Attn holds the fixed parameters of an attention layer.
type Attn struct {
	Heads   int
	KVHeads int
	HeadDim int
	Scale   float32 // usually 1/sqrt(HeadDim)
}

// Experts is one MoE layer's routed experts: per expert, gate and up
// [inter, hidden] and down [hidden, inter] weights. MoE also accepts
// experts whose three weights are nil (served elsewhere: the hybrid step's
// CPU experts, another tensor-parallel rank's) and skips them as it skips
// ids < 0.
type Experts struct {
	Gate, Up, Down []Tensor
	Hidden, Inter  int
	// LoRA is the layer's expert LoRA (nil: none); see ExpertLoRA.
	LoRA *ExpertLoRA
}

// Backend is a compute device with its memory and the op set.
type Backend interface {
	// Name says what runs the ops ("cpu (avx512)", "cuda:0 H100 ...").
	Name() string
	// Weight hands a weight tensor to the backend (in place or uploaded).
	Weight(h Host) (Tensor, error)
	// Alloc allocates a zeroed activation buffer.
	Alloc(dt tensor.DType, shape ...int) (Tensor, error)
	// ActDType is the element type of float activation buffers (F32 or
	// BF16); see the package comment.
	ActDType() tensor.DType
	// AllocKV allocates one layer's paged KV cache.
	AllocKV(pages, pageSize, kvHeads, headDim int) (*KVCache, error)
	// SetStep sets the layout that the following ops use. The backend
	// may keep s until the next SetStep; callers must not modify it
	// meanwhile.
	SetStep(s *Step) error
	// Sync waits for queued ops and returns the first error since the
	// last Sync, clearing it.
	Sync() error
	// Close frees everything the backend allocated.
	Close() error

	Ops
}

// Ops is the op set; see the package comment for exact semantics.
type Ops interface {
	Embed(out, table Tensor)
	MatMul(out, x, w Tensor, n int)
	RMSNorm(out, x, w Tensor, eps float32, rows int)
	Rope(x Tensor, r *Rope, heads, n int)
	Attention(out, q, k, v Tensor, kv *KVCache, p *Attn, n int)
	Add(out, a, b Tensor, n int)
	SiLUMul(out, gate, up Tensor, n int)
	RouterTopK(wts, ids, logits Tensor, k int, norm bool, n int)
	MoE(out, x Tensor, e *Experts, wts, ids Tensor, n int)
	GatherRows(out, x Tensor, first, count int)
	Read(dst []float32, t Tensor, rows int) error
}
