//go:build cgo

package cuda

import (
	"errors"
	"fmt"

	"github.com/ktserve/kt/tensor"
)

// The op set on the GPU. Every op queues work on a stream and returns at
// once; shapes are checked against buffer sizes before launching, so a bad
// call is an error, never an out-of-bounds access. Tensors are bf16 unless
// stated; strides are in elements.

const bf16Size = 2

const bf16T = tensor.BF16

func need(op, what string, b Buffer, bytes int64) error {
	if b.Size < bytes {
		return fmt.Errorf("cuda: %s: %s needs %d bytes, buffer has %d", op, what, bytes, b.Size)
	}
	return nil
}

// rows2D checks a [rows, cols] strided bf16 view.
func rows2D(op, what string, b Buffer, rows, cols int, stride int64) error {
	if rows <= 0 || cols <= 0 {
		return nil
	}
	if stride < int64(cols) {
		return fmt.Errorf("cuda: %s: %s stride %d below row width %d", op, what, stride, cols)
	}
	return need(op, what, b, ((int64(rows)-1)*stride+int64(cols))*bf16Size)
}

// NormMode selects the RMSNorm weight convention.
type NormMode int

const (
	// NormPlain is Qwen3's RMSNorm: y = w * bf16(x·r).
	NormPlain NormMode = 0
	// NormOnePlusW is the Gemma-style norm of Qwen3-Next and Qwen3.5:
	// y = x·r·(1+w), in float32.
	NormOnePlusW NormMode = 1
)

func blockFor(dim int) int {
	switch {
	case dim >= 1024:
		return 256
	case dim >= 256:
		return 128
	}
	return 64
}

// RMSNorm normalises rows of x ([rows, dim], row stride xStride) into out
// (row stride outStride); out may alias x.
func (d *Device) RMSNorm(s *Stream, out, x, w Buffer, rows, dim int, xStride, outStride int64, eps float32, mode NormMode) error {
	if err := rows2D("RMSNorm", "x", x, rows, dim, xStride); err != nil {
		return err
	}
	if err := rows2D("RMSNorm", "out", out, rows, dim, outStride); err != nil {
		return err
	}
	if err := need("RMSNorm", "weight", w, int64(dim)*bf16Size); err != nil {
		return err
	}
	return d.launch(s, "rmsnorm_bf16", grid1(rows), grid1(blockFor(dim)), 0, out, x, w, dim, eps, int(mode), xStride, outStride)
}

// AddRMSNorm adds x into the residual stream resid ([rows, dim], dense) and
// writes norm(resid) to out.
func (d *Device) AddRMSNorm(s *Stream, out, resid, x, w Buffer, rows, dim int, eps float32, mode NormMode) error {
	n := int64(rows) * int64(dim) * bf16Size
	for _, c := range []struct {
		name string
		b    Buffer
	}{{"out", out}, {"resid", resid}, {"x", x}} {
		if err := need("AddRMSNorm", c.name, c.b, n); err != nil {
			return err
		}
	}
	if err := need("AddRMSNorm", "weight", w, int64(dim)*bf16Size); err != nil {
		return err
	}
	return d.launch(s, "add_rmsnorm_bf16", grid1(rows), grid1(blockFor(dim)), 0, out, resid, x, w, dim, eps, int(mode))
}

// RMSNormGated is Qwen3-Next's gated norm: y = w·bf16(x·r) · silu(z), per
// row of dim (one head).
func (d *Device) RMSNormGated(s *Stream, out, x, z, w Buffer, rows, dim int, xStride, zStride, outStride int64, eps float32) error {
	for _, c := range []struct {
		name   string
		b      Buffer
		stride int64
	}{{"x", x, xStride}, {"z", z, zStride}, {"out", out, outStride}} {
		if err := rows2D("RMSNormGated", c.name, c.b, rows, dim, c.stride); err != nil {
			return err
		}
	}
	if err := need("RMSNormGated", "weight", w, int64(dim)*bf16Size); err != nil {
		return err
	}
	return d.launch(s, "rmsnorm_gated_bf16", grid1(rows), grid1(blockFor(dim)), 0, out, x, z, w, dim, eps, xStride, zStride, outStride)
}

// RopeMode selects how positions map to frequencies.
type RopeMode int

const (
	// RopeNeox uses one position per token (rotate_half pairs i, i+rot/2).
	RopeNeox RopeMode = 0
	// RopeMRoPEInterleaved is Qwen3.5's interleaved multimodal RoPE: pos
	// holds 3 rows (T, H, W) of T positions and Sections gives the H and W
	// section sizes.
	RopeMRoPEInterleaved RopeMode = 1
)

// RopeArgs describes a rotary embedding applied in place to x, laid out as
// [T, Heads, HeadDim] with token stride TokStride.
type RopeArgs struct {
	X         Buffer
	Pos       Buffer // int32 [T], or [3, T] for M-RoPE
	T, Heads  int
	HeadDim   int
	RotDim    int // rotated dims (partial rotary: < HeadDim)
	TokStride int64
	Theta     float32
	Mode      RopeMode
	Sections  [3]int // M-RoPE sections (T, H, W) in frequency pairs
}

// Rope applies rotary position embedding in place.
func (d *Device) Rope(s *Stream, a RopeArgs) error {
	if a.RotDim <= 0 || a.RotDim > a.HeadDim || a.RotDim%2 != 0 || a.RotDim > 512 {
		return fmt.Errorf("cuda: Rope: rotary dims %d for head dim %d", a.RotDim, a.HeadDim)
	}
	if err := rows2D("Rope", "x", a.X, a.T, a.Heads*a.HeadDim, a.TokStride); err != nil {
		return err
	}
	np := int64(a.T)
	if a.Mode == RopeMRoPEInterleaved {
		np *= 3
	}
	if err := need("Rope", "positions", a.Pos, np*4); err != nil {
		return err
	}
	return d.launch(s, "rope_bf16", grid2(a.T, a.Heads), grid1(a.RotDim/2), 0,
		a.X, a.Pos, a.T, a.HeadDim, a.RotDim, a.TokStride, a.Theta, int(a.Mode), a.Sections[1], a.Sections[2])
}

// KVCache is a paged attention cache for one layer: K and V each
// [Pages, PageSize, KVHeads, HeadDim] bf16.
type KVCache struct {
	K, V             Buffer
	Pages, PageSize  int
	KVHeads, HeadDim int
}

// NewKVCache allocates a layer's cache from the pool.
func (d *Device) NewKVCache(pages, pageSize, kvHeads, headDim int) (*KVCache, error) {
	n := int64(pages) * int64(pageSize) * int64(kvHeads) * int64(headDim) * bf16Size
	k, err := d.Alloc(n, "KV cache K")
	if err != nil {
		return nil, err
	}
	v, err := d.Alloc(n, "KV cache V")
	if err != nil {
		d.Free(k)
		return nil, err
	}
	return &KVCache{K: k, V: v, Pages: pages, PageSize: pageSize, KVHeads: kvHeads, HeadDim: headDim}, nil
}

// Free releases the cache.
func (c *KVCache) Free(d *Device) { d.Free(c.K); d.Free(c.V) }

// StoreKV writes T tokens' K and V (rows of KVHeads*HeadDim at the given
// token strides) into cache slots (int32 [T], page*PageSize+offset).
func (d *Device) StoreKV(s *Stream, c *KVCache, k, v Buffer, kStride, vStride int64, slots Buffer, T int) error {
	w := c.KVHeads * c.HeadDim
	if err := rows2D("StoreKV", "k", k, T, w, kStride); err != nil {
		return err
	}
	if err := rows2D("StoreKV", "v", v, T, w, vStride); err != nil {
		return err
	}
	if err := need("StoreKV", "slots", slots, int64(T)*4); err != nil {
		return err
	}
	return d.launch(s, "kv_store_bf16", grid1(T), grid1(256), 0, c.K, c.V, k, v, slots, c.KVHeads, c.HeadDim, kStride, vStride)
}

// AttnWorkspace holds the split-K partials of decode attention; size it
// with DecodeWorkspaceBytes.
type AttnWorkspace struct {
	Buf Buffer
}

// DecodeSplits picks how many splits decode attention uses for batch b
// with kvHeads heads and at most maxLen tokens: enough blocks to fill the
// GPU, each split at least 256 tokens.
func (d *Device) DecodeSplits(b, kvHeads, maxLen int) int {
	target := 2 * max(d.Info.SMs, 1)
	sp := max(1, target/max(1, b*kvHeads))
	sp = min(sp, max(1, (maxLen+255)/256), 64)
	return sp
}

// DecodeWorkspaceBytes is the workspace decode attention needs.
func DecodeWorkspaceBytes(b, qHeads, headDim, splits int) int64 {
	n := int64(b) * int64(qHeads) * int64(splits)
	return n*int64(headDim)*4 + n*2*4
}

// DecodeArgs describes decode attention: one query token per sequence.
type DecodeArgs struct {
	Out        Buffer // [B, QHeads, HeadDim]
	Q          Buffer // [B, QHeads, HeadDim], token stride QStride
	QStride    int64
	Cache      *KVCache
	BlockTable Buffer // int32 [B, MaxPages]
	MaxPages   int
	SeqLens    Buffer // int32 [B]: tokens in cache, the new one included
	B, QHeads  int
	Scale      float32
	Splits     int            // from DecodeSplits; 1 needs no workspace
	Work       *AttnWorkspace // DecodeWorkspaceBytes(B, QHeads, HeadDim, Splits)
}

// AttentionDecode computes softmax(q·Kᵀ·scale)·V over each sequence's cache.
func (d *Device) AttentionDecode(s *Stream, a DecodeArgs) error {
	c := a.Cache
	D := c.HeadDim
	if a.QHeads%c.KVHeads != 0 {
		return fmt.Errorf("cuda: AttentionDecode: %d query heads not a multiple of %d kv heads", a.QHeads, c.KVHeads)
	}
	G := a.QHeads / c.KVHeads
	var fn string
	switch {
	case D == 128 && G <= 16:
		fn = "attn_decode_d128_bf16"
	case D == 256 && G <= 8:
		fn = "attn_decode_d256_bf16"
	default:
		return fmt.Errorf("cuda: AttentionDecode: head dim %d with %d query heads per kv head not supported (128 with <=16, 256 with <=8)", D, G)
	}
	if err := rows2D("AttentionDecode", "q", a.Q, a.B, a.QHeads*D, a.QStride); err != nil {
		return err
	}
	if err := need("AttentionDecode", "out", a.Out, int64(a.B)*int64(a.QHeads)*int64(D)*bf16Size); err != nil {
		return err
	}
	if err := need("AttentionDecode", "block table", a.BlockTable, int64(a.B)*int64(a.MaxPages)*4); err != nil {
		return err
	}
	if err := need("AttentionDecode", "seq lens", a.SeqLens, int64(a.B)*4); err != nil {
		return err
	}
	splits := max(a.Splits, 1)
	var po, pml uint64
	if splits > 1 {
		if a.Work == nil {
			return fmt.Errorf("cuda: AttentionDecode: %d splits need a workspace", splits)
		}
		n := int64(a.B) * int64(a.QHeads) * int64(splits)
		if err := need("AttentionDecode", "workspace", a.Work.Buf, DecodeWorkspaceBytes(a.B, a.QHeads, D, splits)); err != nil {
			return err
		}
		po = a.Work.Buf.Ptr
		pml = a.Work.Buf.Ptr + uint64(n*int64(D)*4)
	}
	const maxG = 16
	smem := max(G*D+4*maxG*32, 8*maxG+4*G*D) * 4
	if err := d.launch(s, fn, dim3{uint32(a.B), uint32(c.KVHeads), uint32(splits)}, grid1(128), smem,
		a.Out, a.Q, a.QStride, c.K, c.V, a.BlockTable, a.MaxPages, a.SeqLens, c.PageSize, a.QHeads, c.KVHeads, a.Scale, splits, po, pml); err != nil {
		return err
	}
	if splits > 1 {
		return d.launch(s, "attn_decode_reduce", grid2(a.B, a.QHeads), grid1(D), 0, a.Out, po, pml, a.QHeads, D, splits)
	}
	return nil
}

// PrefillArgs describes causal attention for chunks of new tokens, already
// stored in the cache with StoreKV.
type PrefillArgs struct {
	Out        Buffer // [T, QHeads, HeadDim], token stride OutStride
	OutStride  int64
	Q          Buffer // [T, QHeads, HeadDim], token stride QStride
	QStride    int64
	Cache      *KVCache
	BlockTable Buffer // int32 [B, MaxPages]
	MaxPages   int
	CuQ        Buffer // int32 [B+1]: sequence s owns tokens CuQ[s]..CuQ[s+1]-1
	CtxLens    Buffer // int32 [B]: cached tokens per sequence, new ones included
	B, T       int
	MaxQLen    int
	QHeads     int
	Scale      float32
}

// AttentionPrefill computes causal attention for each new token over its
// sequence's cache.
func (d *Device) AttentionPrefill(s *Stream, a PrefillArgs) error {
	c := a.Cache
	D := c.HeadDim
	if D%32 != 0 || D > 256 {
		return fmt.Errorf("cuda: AttentionPrefill: head dim %d not a multiple of 32 up to 256", D)
	}
	if a.QHeads%c.KVHeads != 0 {
		return fmt.Errorf("cuda: AttentionPrefill: %d query heads not a multiple of %d kv heads", a.QHeads, c.KVHeads)
	}
	if err := rows2D("AttentionPrefill", "q", a.Q, a.T, a.QHeads*D, a.QStride); err != nil {
		return err
	}
	if err := rows2D("AttentionPrefill", "out", a.Out, a.T, a.QHeads*D, a.OutStride); err != nil {
		return err
	}
	if err := need("AttentionPrefill", "cu_q", a.CuQ, int64(a.B+1)*4); err != nil {
		return err
	}
	if err := need("AttentionPrefill", "ctx lens", a.CtxLens, int64(a.B)*4); err != nil {
		return err
	}
	smem := (8*D)*4 + 2*32*(D+2)*bf16Size
	return d.launch(s, "attn_prefill_bf16", dim3{uint32((a.MaxQLen + 7) / 8), uint32(a.QHeads), uint32(a.B)}, grid1(256), smem,
		a.Out, a.OutStride, a.Q, a.QStride, c.K, c.V, a.BlockTable, a.MaxPages, a.CuQ, a.CtxLens, c.PageSize, a.QHeads, c.KVHeads, D, a.Scale)
}

// ConvArgs describes Gated DeltaNet's causal depthwise conv1d + SiLU over
// packed sequences, with per-sequence state.
type ConvArgs struct {
	Out       Buffer // [T, C], token stride OutStride
	OutStride int64
	X         Buffer // [T, C], token stride XStride
	XStride   int64
	W         Buffer // [C, K]
	Bias      Buffer // [C] or zero Buffer
	State     Buffer // [slots, K-1, C] bf16; zero it for a new sequence
	Cu        Buffer // int32 [B+1]
	Slots     Buffer // int32 [B]
	B, T      int
	MaxLen    int // longest sequence in the batch
	C, K      int
}

// Conv1D runs the convolution and then updates the states.
func (d *Device) Conv1D(s *Stream, a ConvArgs) error {
	if a.K < 1 || a.K > 8 {
		return fmt.Errorf("cuda: Conv1D: kernel size %d not in 1..8", a.K)
	}
	if err := rows2D("Conv1D", "x", a.X, a.T, a.C, a.XStride); err != nil {
		return err
	}
	if err := rows2D("Conv1D", "out", a.Out, a.T, a.C, a.OutStride); err != nil {
		return err
	}
	if err := need("Conv1D", "weight", a.W, int64(a.C)*int64(a.K)*bf16Size); err != nil {
		return err
	}
	gx := (a.C + 127) / 128
	if err := d.launch(s, "conv1d_silu_bf16", dim3{uint32(gx), uint32((a.MaxLen + 31) / 32), uint32(a.B)}, grid1(128), 0,
		a.Out, a.OutStride, a.X, a.XStride, a.W, a.Bias, a.State, a.Cu, a.Slots, a.C, a.K); err != nil {
		return err
	}
	return d.launch(s, "conv_state_update_bf16", grid2(gx, a.B), grid1(128), 0, a.State, a.X, a.XStride, a.Cu, a.Slots, a.C, a.K)
}

// GDNGates computes g (float32 [T, Hv]) and beta (float32 [T, Hv]) from the
// a and b projections and the layer's A_log and dt_bias (float32 [Hv]).
func (d *Device) GDNGates(s *Stream, g, beta, a, b Buffer, aStride, bStride int64, aLog, dtBias Buffer, T, Hv int) error {
	if err := need("GDNGates", "g", g, int64(T)*int64(Hv)*4); err != nil {
		return err
	}
	if err := need("GDNGates", "beta", beta, int64(T)*int64(Hv)*4); err != nil {
		return err
	}
	if err := rows2D("GDNGates", "a", a, T, Hv, aStride); err != nil {
		return err
	}
	if err := rows2D("GDNGates", "b", b, T, Hv, bStride); err != nil {
		return err
	}
	return d.launch(s, "gdn_gates_f32", grid1(T), grid1(64), 0, g, beta, a, b, aStride, bStride, aLog, dtBias, Hv)
}

// GDNArgs describes the gated delta rule over packed sequences.
type GDNArgs struct {
	Out       Buffer // [T, Hv, Dv], token stride OutStride
	OutStride int64
	Q, K, V   Buffer // rows of Hk*Dk, Hk*Dk, Hv*Dv at token stride QKVStride
	QKVStride int64
	G, Beta   Buffer // float32 [T, Hv]
	State     Buffer // float32 [slots, Hv, Dk, Dv]; zero for a new sequence
	Cu        Buffer // int32 [B+1]
	Slots     Buffer // int32 [B]
	B, T      int
	Hk, Hv    int
	Dk, Dv    int
}

// GatedDeltaRule runs the recurrence over each sequence's new tokens,
// updating the states in place.
func (d *Device) GatedDeltaRule(s *Stream, a GDNArgs) error {
	if a.Dk != 128 || a.Dv%32 != 0 {
		return fmt.Errorf("cuda: GatedDeltaRule: key dim %d (want 128), value dim %d (want a multiple of 32)", a.Dk, a.Dv)
	}
	if a.Hk <= 0 || a.Hv%a.Hk != 0 {
		return fmt.Errorf("cuda: GatedDeltaRule: %d value heads not a multiple of %d key heads", a.Hv, a.Hk)
	}
	if err := rows2D("GatedDeltaRule", "q", a.Q, a.T, a.Hk*a.Dk, a.QKVStride); err != nil {
		return err
	}
	if err := rows2D("GatedDeltaRule", "v", a.V, a.T, a.Hv*a.Dv, a.QKVStride); err != nil {
		return err
	}
	if err := rows2D("GatedDeltaRule", "out", a.Out, a.T, a.Hv*a.Dv, a.OutStride); err != nil {
		return err
	}
	return d.launch(s, "gdn_recurrent_bf16", dim3{uint32(a.Hv), uint32(a.Dv / 32), uint32(a.B)}, grid1(32), 0,
		a.Out, a.OutStride, a.Q, a.K, a.V, a.QKVStride, a.G, a.Beta, a.State, a.Cu, a.Slots, a.Hk, a.Hv, a.Dv)
}

// RouterTopK turns router logits (bf16 [T, E]) into expert ids (int32
// [T, k]) and weights (float32 [T, k]).
func (d *Device) RouterTopK(s *Stream, ids, weights, logits Buffer, T, E, k int, normTopK bool) error {
	if k < 1 || k > 32 || k > E {
		return fmt.Errorf("cuda: RouterTopK: top-%d of %d experts", k, E)
	}
	if err := need("RouterTopK", "logits", logits, int64(T)*int64(E)*bf16Size); err != nil {
		return err
	}
	if err := need("RouterTopK", "ids", ids, int64(T)*int64(k)*4); err != nil {
		return err
	}
	if err := need("RouterTopK", "weights", weights, int64(T)*int64(k)*4); err != nil {
		return err
	}
	norm := 0
	if normTopK {
		norm = 1
	}
	return d.launch(s, "router_topk_bf16", grid1(T), grid1(256), E*4, ids, weights, logits, E, k, norm)
}

// Embed gathers rows of table (bf16 [V, H]) for ids (int32 [T]).
func (d *Device) Embed(s *Stream, out, table, ids Buffer, T, V, H int) error {
	if H%8 != 0 {
		return fmt.Errorf("cuda: Embed: hidden size %d not a multiple of 8", H)
	}
	if err := need("Embed", "out", out, int64(T)*int64(H)*bf16Size); err != nil {
		return err
	}
	if err := need("Embed", "table", table, int64(V)*int64(H)*bf16Size); err != nil {
		return err
	}
	return d.launch(s, "embed_bf16", grid1(T), grid1(128), 0, out, table, ids, V, H)
}

// WordCopy is one copy of KernelCopy: N bytes, a multiple of 4, from device
// address Src to device address Dst (pinned host memory through
// HostBuffer.DevicePtr included).
type WordCopy struct {
	Dst, Src uint64
	N        int64
}

// KernelCopy queues up to three copies as one kernel (m_copy_words). For
// copies of a few KiB between the device and pinned host memory, such as
// the hybrid step's hand-off, a kernel costs 2-3.5 µs on the stream where a
// copy-engine transfer of 8 KiB costs 6-12 (BenchmarkHandOff).
func (d *Device) KernelCopy(s *Stream, cs ...WordCopy) error {
	if len(cs) > 3 {
		return fmt.Errorf("cuda: KernelCopy of %d copies: at most 3", len(cs))
	}
	var c [3]WordCopy
	total := int64(0)
	for i, x := range cs {
		if x.N < 0 || x.N%4 != 0 || (x.N > 0 && (x.Dst == 0 || x.Src == 0)) {
			return fmt.Errorf("cuda: KernelCopy %d: %d bytes from %#x to %#x (want a multiple of 4 between non-null addresses)", i, x.N, x.Src, x.Dst)
		}
		c[i] = x
		total += x.N / 4
	}
	if total == 0 {
		return nil
	}
	grid := min(blocks64(total, 256), int64(4*max(d.Info.SMs, 1)))
	return d.launch(s, "m_copy_words", grid1(int(grid)), grid1(256), 0,
		c[0].Dst, c[0].Src, c[0].N/4, c[1].Dst, c[1].Src, c[1].N/4, c[2].Dst, c[2].Src, c[2].N/4)
}

// RouteLogits queues out[t][e] = Σ_h w[e][h]·g[h]·x[t][h] for n rows of x
// (f32 [n][H]) and E experts (w: bf16 router weights [E][H], g: f32 norm
// weights [H]): the router's logits of the RMS-normed rows up to each row's
// positive 1/rms factor, which no top-k depends on, in one launch
// (kernels/predict.cu). out is a device address, a Buffer's or pinned host
// memory's (HostBuffer.DevicePtr) with n·E floats.
func (d *Device) RouteLogits(s *Stream, out uint64, x, g, w Buffer, n, E, H int) error {
	if n < 0 || E < 1 || H < 1 || out == 0 || x.Size < int64(n)*int64(H)*4 || g.Size < int64(H)*4 || w.Size < int64(E)*int64(H)*2 {
		return fmt.Errorf("cuda: RouteLogits of %d rows, %d experts, hidden %d: buffers of %d, %d and %d bytes", n, E, H, x.Size, g.Size, w.Size)
	}
	return d.launch(s, "m_route_logits", grid1(int(blocks64(int64(n)*int64(E)*32, 256))), grid1(256), 0, out, x, g, w, n, E, H)
}

// HostCopy is one transfer of CopyHost: N bytes between the device buffer
// Dev and the pinned buffer Host at offset HostOff.
type HostCopy struct {
	Host    *HostBuffer
	HostOff int64
	Dev     Buffer
	N       int64
}

// KernelCopyMax is the most bytes CopyHost moves by kernel; more take the
// copy engines. On the H100 machine a kernel moved 8 KiB in 3.5 µs
// against 8-10 for a copy-engine transfer, 256 KiB in 10 against 16, and 8
// MiB at the same ~41 GB/s out and 3 % slower back (BenchmarkHandOff,
// docs/notes/session14_run/run10_log.txt).
const KernelCopyMax = 2 << 20

// CopyHost queues up to three transfers between device memory and pinned
// host memory, all to the host (toHost) or all from it: as one kernel over
// the pinned buffers' device addresses (KernelCopy) when they total at
// most KernelCopyMax bytes, else one copy-engine transfer each
// (Stream.CopyDtoH, Stream.CopyHtoD).
func (d *Device) CopyHost(s *Stream, toHost bool, cs ...HostCopy) error {
	total := int64(0)
	for _, c := range cs {
		total += c.N
	}
	if total > KernelCopyMax || len(cs) > 3 {
		var errs []error
		for _, c := range cs {
			if toHost {
				errs = append(errs, s.CopyDtoH(c.Host, c.HostOff, c.Dev, c.N))
			} else {
				errs = append(errs, s.CopyHtoD(c.Dev, c.Host, c.HostOff, c.N))
			}
		}
		return errors.Join(errs...)
	}
	var wc [3]WordCopy
	for i, c := range cs {
		if err := checkHostRange("CopyHost", c.Host, c.HostOff, c.Dev, c.N); err != nil {
			return err
		}
		hp, err := c.Host.DevicePtr()
		if err != nil {
			return err
		}
		wc[i] = WordCopy{Dst: hp + uint64(c.HostOff), Src: c.Dev.Ptr, N: c.N}
		if !toHost {
			wc[i].Dst, wc[i].Src = wc[i].Src, wc[i].Dst
		}
	}
	return d.KernelCopy(s, wc[:len(cs)]...)
}

// Add computes out = a + b over n bf16 elements.
func (d *Device) Add(s *Stream, out, a, b Buffer, n int) error {
	for _, x := range []Buffer{out, a, b} {
		if err := need("Add", "operand", x, int64(n)*bf16Size); err != nil {
			return err
		}
	}
	return d.launch(s, "add_bf16", grid1((n+255)/256), grid1(256), 0, out, a, b, int64(n))
}

// SiluMul computes out[r] = silu(gate) * up from rows [gate | up] of width
// 2*inter at row stride inStride.
func (d *Device) SiluMul(s *Stream, out, in Buffer, rows, inter int, inStride int64) error {
	if err := rows2D("SiluMul", "in", in, rows, 2*inter, inStride); err != nil {
		return err
	}
	if err := need("SiluMul", "out", out, int64(rows)*int64(inter)*bf16Size); err != nil {
		return err
	}
	return d.launch(s, "silu_mul_bf16", grid1(rows), grid1(256), 0, out, in, inter, inStride)
}

// SigmoidMul computes out = x * sigmoid(g) row-wise (attention output gate).
func (d *Device) SigmoidMul(s *Stream, out, x, g Buffer, rows, n int, xStride, gStride, outStride int64) error {
	for _, c := range []struct {
		name   string
		b      Buffer
		stride int64
	}{{"x", x, xStride}, {"g", g, gStride}, {"out", out, outStride}} {
		if err := rows2D("SigmoidMul", c.name, c.b, rows, n, c.stride); err != nil {
			return err
		}
	}
	return d.launch(s, "sigmoid_mul_bf16", grid1(rows), grid1(256), 0, out, x, g, n, xStride, gStride, outStride)
}

// GatedAdd adds sigmoid(gate[r]) * y[r] into out[r] (the shared expert's
// output gate; gate holds one logit per row at stride gateStride).
func (d *Device) GatedAdd(s *Stream, out, y, gate Buffer, gateStride int64, rows, n int) error {
	if err := need("GatedAdd", "out", out, int64(rows)*int64(n)*bf16Size); err != nil {
		return err
	}
	if err := need("GatedAdd", "y", y, int64(rows)*int64(n)*bf16Size); err != nil {
		return err
	}
	return d.launch(s, "gated_add_bf16", grid1(rows), grid1(256), 0, out, y, gate, gateStride, n)
}

// BF16ToF32 widens n elements.
func (d *Device) BF16ToF32(s *Stream, out, in Buffer, n int) error {
	if err := need("BF16ToF32", "out", out, int64(n)*4); err != nil {
		return err
	}
	return d.launch(s, "bf16_to_f32", grid1((n+255)/256), grid1(256), 0, out, in, int64(n))
}

// DequantFP8Block expands a block-scaled FP8 E4M3 weight [N, K] (scale_inv
// float32 [ceil(N/block), ceil(K/block)]) to bf16.
func (d *Device) DequantFP8Block(s *Stream, out, q, scale Buffer, N, K, block int) error {
	n := int64(N) * int64(K)
	if err := need("DequantFP8Block", "out", out, n*bf16Size); err != nil {
		return err
	}
	if err := need("DequantFP8Block", "weight", q, n); err != nil {
		return err
	}
	nb := int64((N+block-1)/block) * int64((K+block-1)/block)
	if err := need("DequantFP8Block", "scale", scale, nb*4); err != nil {
		return err
	}
	return d.launch(s, "fp8_block_dequant", grid1(int((n+255)/256)), grid1(256), 0, out, q, scale, N, K, block)
}

// PickParams are one row's pick settings as m_pick reads them (32 bytes;
// putPicks writes them from a model.Draw): the zero value is greedy.
type PickParams struct {
	InvT float32 // float32(1 / temperature); 0: greedy
	TopK int32   // <= 0 or >= V: off
	MinP float32 // <= 0: off
	_    int32
	TopP float64 // >= 1: off
	U    float64 // the sequence's uniform value in [0, 1)
}

// Pick writes out[r] = (token, its log-softmax) as float32 for each of B
// rows of logits (float32 [B, V]) under params (a device array of B
// PickParams; zero Buffer: every row greedy), as Backend.Pick does.
func (d *Device) Pick(s *Stream, out, logits, params Buffer, B, V int) error {
	if err := need("Pick", "logits", logits, int64(B)*int64(V)*4); err != nil {
		return err
	}
	if err := need("Pick", "out", out, int64(B)*8); err != nil {
		return err
	}
	if params.Ptr != 0 {
		if err := need("Pick", "params", params, int64(B)*32); err != nil {
			return err
		}
	}
	return d.launchPick(s, B, out, logits, V, params)
}

// pickGrid is the blocks m_pick is launched with per row (PICK_GRID in
// sample.cu): a cluster of 8 on sm_90 and later, one block (and seven that
// return at once) before.
const pickGrid = 8

// pickClusterRows is the most rows m_pick takes (8 blocks each, one wave
// of 128 SMs); more rows fill the GPU by themselves and go to m_pick_rows,
// one block each.
const pickClusterRows = 16

// launchPick launches the picks of rows rows with args (out, logits, V,
// params): m_pick with a cluster per row for up to pickClusterRows rows,
// m_pick_rows beyond, and from the first time a cluster launch fails on.
func (d *Device) launchPick(s *Stream, rows int, args ...any) error {
	if rows <= pickClusterRows && d.pickRowsOnly != nil && !d.pickRowsOnly.Load() {
		err := d.launch(s, "m_pick", grid1(rows*pickGrid), grid1(1024), 0, args...)
		if err == nil {
			return nil
		}
		d.pickRowsOnly.Store(true) // an error of another kind fails m_pick_rows too
	}
	return d.launch(s, "m_pick_rows", grid1(rows), grid1(1024), 0, args...)
}
