//go:build cgo

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// Block-scaled FP8 weights (the contract in package backend) stay FP8 in
// device memory, one byte per element, beside their float32 block scales;
// no bf16 copy is made. MatMul picks one of three kernels of
// kernels/fp8.cu:
//
//   - fp8_gemv for decode-sized steps (n <= fp8GemvRows): a warp per output
//     streams the codes with 16-byte loads, activations stay float32;
//   - fp8_split_gemm for larger n: the weight dequantised into bf16 hi and
//     lo halves in a reusable scratch buffer, then one cuBLASLt bf16 GEMM
//     over the split activations and weights (fp8SplitGemm; 4x the flops
//     of a bf16 GEMM, still several times faster than the tile kernel);
//   - fp8_gemm_mma where cuBLASLt refuses the shape, on sm_80+: 64x64 tiles on the tensor cores
//     (mma.sync m16n8k16 bf16), the codes decoded to bf16 in shared memory
//     (exact), the float32 activations split into two bf16 halves as the
//     bf16 MatMul does, block scales applied per k-block to float32 partial
//     sums;
//   - fp8_matmul_gen for any other shape (block sizes not multiples of 16,
//     unaligned rows, older GPUs).
//
// cuBLASLt's block-scaled FP8 GEMM is not used: it needs the activations
// quantised to FP8 too (1x128 blocks), an error of up to 2^-4 relative per
// activation, where these kernels keep about 16 bits of them (the CPU
// backend, the reference, keeps all 24).
//
// Routed experts stay FP8 too: the MoE op runs fp8_moe_gateup and
// fp8_moe_down over them, each element f32(e4m3) * scale as on the CPU.
// (Dequantising them once to bf16 would round every weight to 8 bits,
// which moves qwen3moe-fp8-a by up to 3.0 in logprob, on the CPU too when
// its experts are rounded the same way.)

// fp8GemvRows is the most activation rows fp8_gemv takes.
const fp8GemvRows = 8

// fp8Info is an FP8 tensor's quantisation on the device.
type fp8Info struct {
	scale  Buffer // float32 [ceil(O/bn), sc]
	bn, bk int
	sc     int
}

// widenScale returns h's float data as float32 bytes (little-endian).
func widenScale(h *backend.Host) ([]byte, error) {
	sz := h.DType.Size()
	n := len(h.Data) / sz
	out := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		var v float32
		switch h.DType {
		case tensor.F32:
			v = math.Float32frombits(binary.LittleEndian.Uint32(h.Data[4*i:]))
		case tensor.BF16:
			v = tensor.BF16ToF32(binary.LittleEndian.Uint16(h.Data[2*i:]))
		case tensor.F16:
			v = tensor.F16ToF32(binary.LittleEndian.Uint16(h.Data[2*i:]))
		default:
			return nil, fmt.Errorf("tensor %s: scale dtype %s", h.Name, h.DType)
		}
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out, nil
}

// weightFP8 uploads a checked block-scaled FP8 weight: the codes and the
// scales widened to float32.
func (b *Backend) weightFP8(h backend.Host) (*Tensor, error) {
	sc, err := widenScale(h.Scale)
	if err != nil {
		return nil, err
	}
	o, k := h.Shape[0], h.Shape[1]
	buf, err := b.alloc(int64(len(h.Data)), "weight "+h.Name)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", h.Name, err)
	}
	sbuf, err := b.alloc(int64(len(sc)), "weight scales "+h.Scale.Name)
	if err != nil {
		b.free(buf)
		return nil, fmt.Errorf("tensor %s: %w", h.Name, err)
	}
	if err := Upload(b.d, buf, h.Data); err != nil {
		b.free(buf)
		b.free(sbuf)
		return nil, fmt.Errorf("tensor %s: %w", h.Name, err)
	}
	if err := Upload(b.d, sbuf, sc); err != nil {
		b.free(buf)
		b.free(sbuf)
		return nil, fmt.Errorf("tensor %s: %w", h.Name, err)
	}
	return &Tensor{dt: tensor.F8E4M3, shape: []int{o, k}, n: o * k, buf: buf, name: h.Name,
		fp8: &fp8Info{scale: sbuf, bn: h.Block[0], bk: h.Block[1], sc: (k + h.Block[1] - 1) / h.Block[1]}}, nil
}

// fp8Kernel names the kernel MatMul runs for n rows of an FP8 weight.
func (b *Backend) fp8Kernel(xs, wt *Tensor, n int) string {
	f, k := wt.fp8, wt.shape[1]
	aligned := k%16 == 0 && wt.buf.Ptr%16 == 0 && xs.buf.Ptr%16 == 0
	switch {
	case b.fp8Force != "":
		return b.fp8Force
	case n <= fp8GemvRows && aligned && f.bk%16 == 0:
		return "fp8_gemv"
	case n > fp8GemvRows && !b.gemmRefused(fp8SplitShape(n, wt.shape[0], k)):
		return "fp8_split_gemm"
	case f.bk%16 == 0 && b.d.Info.Major >= 8:
		return "fp8_gemm_mma"
	}
	return "fp8_matmul_gen"
}

// matmulFP8 is MatMul for an FP8 weight wt [o, k] (checked by MatMul).
func (b *Backend) matmulFP8(os, xs, wt *Tensor, n, o, k int) {
	f := wt.fp8
	var err error
	name := b.fp8Kernel(xs, wt, n)
	if name == "fp8_split_gemm" {
		if b.fp8SplitGemm(os, xs, wt, n, o, k) {
			return
		}
		if !b.ok() {
			return
		}
		if b.fp8Force != "" {
			b.fail("MatMul: forced kernel fp8_split_gemm: cuBLASLt refused [%d,%d]x[%d,%d]", 2*n, k, 2*o, k)
			return
		}
		// cuBLASLt refused the shape: the tile kernels from now on
		b.gemmOK[fp8SplitShape(n, o, k)] = false
		name = b.fp8Kernel(xs, wt, n)
	}
	switch name {
	case "fp8_gemv":
		err = b.d.launch(b.s, name, grid1(blocks(o, 8)), grid1(256), 0, os.buf, xs.buf, wt.buf, f.scale, n, o, k, f.bn, f.bk, f.sc)
	case "fp8_gemm_mma":
		vec := 0
		if k%16 == 0 && wt.buf.Ptr%16 == 0 && xs.buf.Ptr%16 == 0 {
			vec = 1
		}
		err = b.d.launch(b.s, name, grid2(blocks(o, 64), blocks(n, 64)), grid1(128), 0, os.buf, xs.buf, wt.buf, f.scale, n, o, k, f.bn, f.bk, f.sc, vec)
	default:
		err = b.d.launch(b.s, "fp8_matmul_gen", grid2(blocks(o, 8), n), grid1(256), 0, os.buf, xs.buf, wt.buf, f.scale, o, k, f.bn, f.bk, f.sc)
	}
	b.check("MatMul", err)
}

// fp8SplitShape is the cuBLASLt GEMM shape of fp8SplitGemm for n rows of
// an [o, k] weight: [2n, k]·[2o, k]ᵀ (hi and lo halves of both).
func fp8SplitShape(n, o, k int) gemmShape { return gemmShape{2 * n, 2 * o, k, tensor.F8E4M3} }

// fp8SplitGemm is MatMul of n > fp8GemvRows rows through cuBLASLt: the
// weight dequantised into hi and lo bf16 halves (fp8_dequant_split, a
// scratch buffer reused by every FP8 weight), the activations split into
// hi and lo (m_split_bf16), one bf16 GEMM [2n, k]·[2o, k]ᵀ, the four
// products summed (fp8_add_quarters). About 16 bits of weights and
// activations, as the bf16 split MatMul. It reports false, having queued
// nothing, when cuBLASLt does not take the shape.
func (b *Backend) fp8SplitGemm(os, xs, wt *Tensor, n, o, k int) bool {
	f := wt.fp8
	m, ok := int64(n)*int64(k), int64(o)*int64(k)
	if !b.growBuf(&b.fp8W, 4*ok, "FP8 weight bf16 halves") || !b.growBuf(&b.gemmTmp, 16*int64(n)*int64(o), "FP8 MatMul split output") {
		return false
	}
	if b.scratch.Size < 4*m && !b.check("MatMul", b.ensureScratch(4*m)) {
		return false
	}
	g := GemmArgs{M: 2 * n, N: 2 * o, K: k, A: b.scratch, B: b.fp8W, D: b.gemmTmp, AType: tensor.BF16, BType: tensor.BF16, DType: tensor.F32}
	// (GemmSupported checks the buffer sizes too: asked only once they
	// exist)
	if !b.gemmSupported(fp8SplitShape(n, o, k), g) {
		return false
	}
	if !b.check("MatMul", b.d.launch(b.s, "fp8_dequant_split", grid2(int(min(blocks64(int64(k), 256), 64)), min(o, 65535)), grid1(256), 0, b.fp8W, wt.buf, f.scale, o, k, f.bn, f.bk, f.sc)) ||
		!b.check("MatMul", b.d.launch(b.s, "m_split_bf16", grid1(int(blocks64(m, 256))), grid1(256), 0, b.scratch, xs.buf, m)) {
		return false
	}
	if err := b.d.Gemm(b.s, g); err != nil {
		return false
	}
	return b.check("MatMul", b.d.launch(b.s, "fp8_add_quarters", grid1(int(blocks64(int64(n)*int64(o), 256))), grid1(256), 0, os.buf, b.gemmTmp, n, o))
}

// moeFP8 collects a MoE layer's FP8 expert weights while moeTableFor
// walks them: their scale addresses beside the code addresses, one block
// for all.
type moeFP8 struct {
	sptrs    []uint64 // [E][3] float32 scale addresses
	block    [2]int
	fp8, all int // FP8 weights seen, weights seen
}

// moeFP8Table is the FP8 part of a moeTable: the scale addresses and the
// experts' block.
type moeFP8Table struct {
	sptrs  Buffer // u64 [E][3]
	bn, bk int
}

// add records projection j (gate, up, down) of expert ex; it fails on an
// FP8 weight whose shape or block differs from the layer's.
func (m *moeFP8) add(b *Backend, ex, j int, t *Tensor, h, inter int) bool {
	m.all++
	if t.fp8 == nil {
		return true
	}
	want := [2]int{inter, h}
	if j == 2 {
		want = [2]int{h, inter}
	}
	blk := [2]int{t.fp8.bn, t.fp8.bk}
	if len(t.shape) != 2 || t.shape[0] != want[0] || t.shape[1] != want[1] {
		b.fail("MoE: FP8 expert %d weight %s has shape %v, want %v", ex, t.label(), t.shape, want)
		return false
	}
	if m.fp8 > 0 && blk != m.block {
		b.fail("MoE: FP8 expert %d weight %s has block %v, other experts %v", ex, t.label(), blk, m.block)
		return false
	}
	m.block = blk
	m.fp8++
	for len(m.sptrs) < 3*ex+j+1 {
		m.sptrs = append(m.sptrs, 0)
	}
	m.sptrs[3*ex+j] = t.fp8.scale.Ptr
	return true
}

// table uploads the scale addresses of a layer of ne experts: nil when no
// weight is FP8; an error when some are and some are not.
func (m *moeFP8) table(b *Backend, ne int) (*moeFP8Table, bool) {
	if m.fp8 == 0 {
		return nil, true
	}
	if m.fp8 != m.all {
		b.fail("MoE: %d of %d expert weights are FP8: all or none must be", m.fp8, m.all)
		return nil, false
	}
	p := make([]uint64, 3*ne)
	copy(p, m.sptrs)
	buf, err := b.alloc(int64(len(p))*8, "MoE FP8 scale table")
	if !b.check("MoE", err) {
		return nil, false
	}
	if err := Upload(b.d, buf, hostPtrs(p)); !b.check("MoE", err) {
		return nil, false
	}
	return &moeFP8Table{sptrs: buf, bn: m.block[0], bk: m.block[1]}, true
}

// moeFP8 runs the gate/up and down projections of FP8 experts into
// b.moeH and b.moeY (the MoE op's scratch).
func (b *Backend) moeFP8(tab *moeTable, xs, ids Buffer, pairs, h, inter, k int) bool {
	f := tab.fp8
	if !b.check("MoE", b.d.launch(b.s, "fp8_moe_gateup", grid2(pairs, blocks(inter, 8)), grid1(256), h*4,
		b.moeH, xs, ids, tab.ptrs, f.sptrs, h, inter, k, tab.e, f.bn, f.bk)) {
		return false
	}
	return b.check("MoE", b.d.launch(b.s, "fp8_moe_down", grid2(pairs, blocks(h, 8)), grid1(256), inter*4,
		b.moeY, b.moeH, ids, tab.ptrs, f.sptrs, h, inter, tab.e, f.bn, f.bk))
}
