//go:build cgo

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/tensor"
)

// fp8Pair quantises a random [o, k] weight with blocks block and hands it to
// both backends.
func (p *opPair) fp8Weight(t testing.TB, o, k int, block [2]int) (backend.Tensor, backend.Tensor) {
	t.Helper()
	w := p.randF32(o*k, 1/math.Sqrt(float64(k)))
	for i := 0; i < len(w); i += 101 {
		w[i] *= 30 // outliers: the rest of their block goes subnormal
	}
	h, _, err := backend.QuantizeFP8(fmt.Sprintf("w%dx%d", o, k), w, o, k, block)
	if err != nil {
		t.Fatal(err)
	}
	g, err := p.g.Weight(h)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.c.Weight(h)
	if err != nil {
		t.Fatal(err)
	}
	return g, c
}

// TestFP8MatMul checks every FP8 MatMul kernel against the CPU backend's
// (dequantise-then-float32) MatMul on the same weights, for 128x128 and
// 32x32 blocks, block sizes that do not divide O or K, K not a multiple
// of 16: the float32-activation kernels (fp8_gemv, fp8_matmul_gen) within
// 1e-5 relative L2, the tensor-core kernels (fp8_gemm_mma: activations as
// two bf16 halves; fp8_split_gemm: weights too) within 1e-4. The measured errors are logged.
func TestFP8MatMul(t *testing.T) {
	p := newOpPair(t)
	for _, sh := range []struct {
		o, k  int
		block [2]int
	}{
		{2048, 4096, [2]int{128, 128}}, // Qwen3-30B-A3B o_proj
		{4096 + 64, 2048 + 96, [2]int{128, 128}},
		{200, 160, [2]int{32, 32}},
		{37, 300, [2]int{128, 128}},
		{33, 45, [2]int{5, 7}}, // only the general kernel
	} {
		wg, wc := p.fp8Weight(t, sh.o, sh.k, sh.block)
		for _, n := range []int{1, 4, 8, 33, 300} {
			x := p.randF32(n*sh.k, 1)
			xg, xc := p.act(t, x, n, sh.k)
			og, oc := p.act(t, nil, n, sh.o)
			p.c.MatMul(oc, xc, wc, n)
			for _, kern := range []string{"", "fp8_gemv", "fp8_split_gemm", "fp8_gemm_mma", "fp8_matmul_gen"} {
				xt, wt := xg.(*Tensor), wg.(*Tensor)
				ok := kern == "" || kern == "fp8_matmul_gen" ||
					(kern == "fp8_gemv" && n <= fp8GemvRows && sh.k%16 == 0 && sh.block[1]%16 == 0) ||
					(kern == "fp8_gemm_mma" && sh.block[1]%16 == 0 && p.g.d.Info.Major >= 8) ||
					(kern == "fp8_split_gemm" && n > fp8GemvRows)
				if !ok {
					continue
				}
				p.g.fp8Force = kern
				used := p.g.fp8Kernel(xt, wt, n)
				p.g.MatMul(og, xg, wg, n)
				p.g.fp8Force = ""
				if err := p.g.Sync(); err != nil {
					t.Fatal(err)
				}
				if err := p.c.Sync(); err != nil {
					t.Fatal(err)
				}
				got := make([]float32, n*sh.o)
				if err := p.g.Read(got, og, n); err != nil {
					t.Fatal(err)
				}
				want := oc.(*cpu.Tensor).F32()[:n*sh.o]
				var num, den, maxd float64
				for i := range got {
					d := float64(got[i]) - float64(want[i])
					num += d * d
					den += float64(want[i]) * float64(want[i])
					maxd = math.Max(maxd, math.Abs(d))
				}
				rel := math.Sqrt(num / den)
				tol := 1e-5
				if used == "fp8_gemm_mma" || used == "fp8_split_gemm" {
					tol = 1e-4 // activations (and split: weights) as two bf16 halves
				}
				t.Logf("RESULT fp8 %dx%d block %v n=%d %s: rel L2 %.3g, max |diff| %.3g", sh.o, sh.k, sh.block, n, used, rel, maxd)
				if !(rel <= tol) {
					t.Errorf("%dx%d block %v n=%d %s: rel L2 error %.3g > %g", sh.o, sh.k, sh.block, n, used, rel, tol)
				}
			}
		}
	}
}

// TestFP8Weight checks what stays on the device: one byte per element and
// the float32 scales (no bf16 copy), and the refusal of an FP8 tensor
// without scales.
func TestFP8Weight(t *testing.T) {
	p := newOpPair(t)
	wg, _ := p.fp8Weight(t, 300, 256, [2]int{128, 128})
	g := wg.(*Tensor)
	if g.dt != tensor.F8E4M3 || g.buf.Size < 300*256 || g.buf.Size > 300*256+PoolAlign || g.fp8.scale.Size < 3*2*4 {
		t.Errorf("FP8 weight on the device: %s, %d bytes, scales %d bytes", g.dt, g.buf.Size, g.fp8.scale.Size)
	}
	h := backend.Host{Name: "w", DType: tensor.F8E4M3, Shape: []int{2, 2}, Data: make([]byte, 4)}
	if _, err := p.g.Weight(h); err == nil {
		t.Error("FP8 weight without scales accepted")
	}
}

// TestFP8MoE checks the MoE op over block-scaled FP8 experts against the
// CPU op (each weight element f32(e4m3)·scale on both) within 1e-5
// relative L2, as the bf16/f32 MoE of TestBackendOps: Qwen3-30B shapes with
// [128,128] blocks, the fixtures' shapes (partial 128-blocks, [32,32]), and
// blocks that divide nothing; a skipped pair (-1), many tokens and one.
// The codes must stay FP8 on the device after the MoE call (no bf16 copy:
// rounding the dequantised experts to bf16 moved qwen3moe-fp8-a's
// logprobs by 3.0).
func TestFP8MoE(t *testing.T) {
	p := newOpPair(t)
	for _, c := range []struct {
		e, h, inter, k, n int
		block             [2]int
	}{
		{16, 2048, 768, 8, 37, [2]int{128, 128}},
		{8, 160, 80, 2, 9, [2]int{128, 128}},
		{8, 64, 32, 2, 9, [2]int{32, 32}},
		{4, 48, 40, 3, 5, [2]int{8, 16}},
	} {
		var ex [2]backend.Experts
		ex[0] = backend.Experts{Hidden: c.h, Inter: c.inter}
		ex[1] = ex[0]
		for e := 0; e < c.e; e++ {
			for j := 0; j < 3; j++ {
				o, k := c.inter, c.h
				if j == 2 {
					o, k = c.h, c.inter
				}
				g, cw := p.fp8Weight(t, o, k, c.block)
				dst := [2][]*[]backend.Tensor{{&ex[0].Gate, &ex[0].Up, &ex[0].Down}, {&ex[1].Gate, &ex[1].Up, &ex[1].Down}}
				*dst[0][j] = append(*dst[0][j], g)
				*dst[1][j] = append(*dst[1][j], cw)
			}
		}
		name := fmt.Sprintf("FP8 MoE E=%d H=%d I=%d k=%d block %v", c.e, c.h, c.inter, c.k, c.block)
		ids := make([]int32, c.n*c.k)
		wts := make([]float32, c.n*c.k)
		for i := range ids {
			ids[i] = int32(p.rng.IntN(c.e))
			wts[i] = float32(p.rng.Float64())
		}
		ids[1] = -1
		gx, cx := p.act(t, p.randF32(c.n*c.h, 1), c.n, c.h)
		gw, cw := p.act(t, wts, c.n, c.k)
		gi, ci := p.ids(t, c.n, c.k)
		copy(ci.(*cpu.Tensor).I32(), ids)
		if err := p.g.write(gi, ids); err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{c.n, 1} {
			gout, cout := p.act(t, nil, c.n, c.h)
			p.g.MoE(gout, gx, &ex[0], gw, gi, n)
			p.c.MoE(cout, cx, &ex[1], cw, ci, n)
			p.compare(t, fmt.Sprintf("%s, %d tokens", name, n), gout, cout, n, 1e-5)
		}
		if g := ex[0].Down[0].(*Tensor); g.dt != tensor.F8E4M3 || g.fp8 == nil {
			t.Errorf("%s: expert weight is %s on the device after MoE, want F8_E4M3", name, g.dt)
		}
	}
}

// BenchmarkFP8MatMul times MatMul with an FP8 weight at decode and prefill
// row counts (n <= 8: fp8_gemv and fp8_split_gemm; larger: fp8_split_gemm
// and fp8_gemm_mma; "(default)" marks the one MatMul picks) beside, in the
// same run, cuBLASLt's bf16 GEMM of the same
// shape (bf16 activations, float32 output) and a device-to-device copy of
// the FP8 weight's bytes. The MB/s column is weight bytes (FP8: o·k; the
// bf16 GEMM: 2·o·k) over time.
func BenchmarkFP8MatMul(b *testing.B) {
	d := testDevice(b)
	g, err := NewBackendOn(d)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	p := &opPair{g: g, c: cpu.New(cpu.Options{Threads: 1})}
	defer p.c.Close()
	p.rng = rand.New(rand.NewPCG(7, 11))
	for _, sh := range [][2]int{{4096, 2048}, {2048, 4096}, {6144, 4096}} {
		o, k := sh[0], sh[1]
		wg, _ := p.fp8Weight(b, o, k, [2]int{128, 128})
		wb := upload(b, d, randBF16(p.rng, o*k, 0.02))
		for _, n := range []int{1, 8, 64, 512} {
			x, err := g.Alloc(tensor.F32, n, k)
			if err != nil {
				b.Fatal(err)
			}
			out, err := g.Alloc(tensor.F32, n, o)
			if err != nil {
				b.Fatal(err)
			}
			name := fmt.Sprintf("%dx%d/n=%d", o, k, n)
			kerns := []string{"fp8_gemv", "fp8_split_gemm"}
			if n > fp8GemvRows {
				kerns = []string{"fp8_split_gemm", "fp8_gemm_mma"}
			}
			def := g.fp8Kernel(x.(*Tensor), wg.(*Tensor), n)
			for _, kern := range kerns {
				tag := ""
				if kern == def {
					tag = "(default)"
				}
				b.Run(name+"/fp8-"+kern+tag, func(b *testing.B) {
					g.fp8Force = kern
					defer func() { g.fp8Force = "" }()
					gpuTime(b, d, g.s, float64(o*k), func(int) error { g.MatMul(out, x, wg, n); return g.err })
				})
			}
			xb := upload(b, d, randBF16(p.rng, n*k, 1))
			ga := GemmArgs{M: n, N: o, K: k, A: xb, B: wb, D: out.(*Tensor).buf, AType: tensor.BF16, BType: tensor.BF16, DType: tensor.F32}
			if err := d.GemmSupported(ga); err == nil {
				b.Run(name+"/cublaslt-bf16", func(b *testing.B) {
					gpuTime(b, d, g.s, float64(2*o*k), func(int) error { return d.Gemm(g.s, ga) })
				})
			}
		}
		src := wg.(*Tensor).buf
		dst := upload(b, d, make([]byte, o*k))
		b.Run(fmt.Sprintf("%dx%d/copy-fp8-bytes", o, k), func(b *testing.B) {
			gpuTime(b, d, g.s, float64(o*k), func(int) error { return g.s.CopyDtoD(dst, src, int64(o*k)) })
		})
	}
}
