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
//   - fp8_gemm_mma for larger n on sm_80+: 64x64 tiles on the tensor cores
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
// backend, the reference, keeps all 24). docs/notes/fp8.md has the
// measurements.
//
// The MoE op's kernels read bf16 (or f16/f32) experts: an FP8 expert weight
// is dequantised once to bf16 on the device the first time MoE sees it
// (fp8ToBF16), its FP8 bytes freed.

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
	case f.bk%16 == 0 && b.d.Info.Major >= 8:
		return "fp8_gemm_mma"
	}
	return "fp8_matmul_gen"
}

// matmulFP8 is MatMul for an FP8 weight wt [o, k] (checked by MatMul).
func (b *Backend) matmulFP8(os, xs, wt *Tensor, n, o, k int) {
	f := wt.fp8
	var err error
	switch name := b.fp8Kernel(xs, wt, n); name {
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

// fp8ToBF16 replaces an FP8 weight's device data by its bf16
// dequantisation (the MoE op's kernels read bf16 experts): t becomes a
// BF16 tensor; the FP8 codes and scales are freed. It runs once per
// expert weight, at the first MoE call that sees it (before any graph
// capture: the first step runs eagerly).
func (b *Backend) fp8ToBF16(t *Tensor) bool {
	f := t.fp8
	o, k := t.shape[0], t.shape[1]
	buf, err := b.alloc(int64(o)*int64(k)*2, "weight "+t.name+" (bf16 from fp8)")
	if !b.check("MoE", err) {
		return false
	}
	n := int64(o) * int64(k)
	if !b.check("MoE", b.d.launch(b.s, "fp8_dequant_bf16", grid1(int(blocks64(n, 256))), grid1(256), 0, buf, t.buf, f.scale, o, k, f.bn, f.bk, f.sc)) {
		b.free(buf)
		return false
	}
	if !b.check("MoE", b.s.Synchronize()) {
		return false
	}
	b.free(t.buf)
	b.free(f.scale)
	t.buf, t.dt, t.fp8 = buf, tensor.BF16, nil
	return true
}

// SetFP8Kernel forces MatMul's FP8 kernel ("fp8_gemv", "fp8_gemm_mma",
// "fp8_matmul_gen"; "" picks by shape): for tests and benchmarks.
func (b *Backend) SetFP8Kernel(name string) { b.fp8Force = name }
