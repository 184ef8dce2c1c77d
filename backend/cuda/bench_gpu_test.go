//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/tensor"
)

// gpuTime runs fn b.N times between two events (after warm-up) and reports
// the GPU time per op in microseconds, plus GB/s for bytes moved per op.
func gpuTime(b *testing.B, d *Device, s *Stream, bytes float64, fn func(i int) error) {
	b.Helper()
	for i := 0; i < 3; i++ {
		if err := fn(i); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Synchronize(); err != nil {
		b.Fatal(err)
	}
	e0, err := d.NewEvent(true)
	if err != nil {
		b.Fatal(err)
	}
	defer e0.Destroy()
	e1, err := d.NewEvent(true)
	if err != nil {
		b.Fatal(err)
	}
	defer e1.Destroy()
	b.ResetTimer()
	if err := e0.Record(s); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		if err := fn(i); err != nil {
			b.Fatal(err)
		}
	}
	if err := e1.Record(s); err != nil {
		b.Fatal(err)
	}
	if err := e1.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	ms, err := e1.Elapsed(e0)
	if err != nil {
		b.Fatal(err)
	}
	us := float64(ms) * 1000 / float64(b.N)
	b.ReportMetric(us, "gpu-us/op")
	if bytes > 0 {
		b.ReportMetric(bytes/(us*1e-6)/1e9, "GB/s")
	}
}

// fillRandom fills buf with random bf16 values.
func fillRandom(d *Device, s *Stream, rng *rand.Rand, buf Buffer) error {
	const chunk = 16 << 20
	host := randBF16(rng, chunk/2, 1)
	for off := int64(0); off < buf.Size; off += chunk {
		n := min(int64(chunk), buf.Size-off)
		if err := Upload(d, buf.Slice(off, n), host[:n/2]); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkGemmBF16 is cuBLASLt's dense bf16 GEMM at a large square size:
// the matrix-unit ceiling of the device.
func BenchmarkGemmBF16(b *testing.B) {
	d := testDevice(b)
	s := testStream(b, d)
	for _, n := range []int{4096, 8192} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			a := upload(b, d, randBF16(rng, n*n, 1))
			w := upload(b, d, randBF16(rng, n*n, 1))
			out := poisoned(b, d, int64(n*n*2))
			gpuTime(b, d, s, 0, func(int) error {
				return d.Gemm(s, GemmArgs{M: n, N: n, K: n, A: a, B: w, D: out, AType: tensor.BF16, BType: tensor.BF16, DType: tensor.BF16})
			})
			b.ReportMetric(2*float64(n)*float64(n)*float64(n)/(b.Elapsed().Seconds()/float64(b.N))/1e12, "wall-TFLOP/s")
		})
	}
}

// BenchmarkPick times m_pick on rows of random logits (σ 3) at the Qwen3
// and Qwen3.5 vocabularies: greedy, a plain tempered draw, top-p, top-k
// and all filters, for one row, 16 (the most m_pick takes, a cluster per
// row) and 32 (m_pick_rows). GB/s counts one read of the rows.
func BenchmarkPick(b *testing.B) {
	d := testDevice(b)
	s := testStream(b, d)
	draws := []struct {
		name string
		d    model.Draw
	}{
		{"greedy", model.Draw{}},
		{"t1", model.Draw{Temperature: 1, U: 0.4}},
		{"t0.7_topp0.9", model.Draw{Temperature: 0.7, TopP: 0.9, U: 0.4}},
		{"t0.7_topk50", model.Draw{Temperature: 0.7, TopK: 50, U: 0.4}},
		{"t0.6_topk40_topp0.95_minp0.05", model.Draw{Temperature: 0.6, TopK: 40, TopP: 0.95, MinP: 0.05, U: 0.4}},
		{"t0.7_topk20_topp0.8", model.Draw{Temperature: 0.7, TopK: 20, TopP: 0.8, U: 0.4}}, // Qwen3's recommended settings
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for _, V := range []int{151936, 248320} {
		for _, B := range []int{1, 16, 32} {
			logits := make([]float32, B*V)
			for i := range logits {
				logits[i] = float32(rng.NormFloat64() * 3)
			}
			lb, out := upload(b, d, logits), poisoned(b, d, int64(B*8))
			for _, dr := range draws {
				ps := make([]PickParams, B)
				for i := range ps {
					ps[i] = pickParams(dr.d)
				}
				pb := upload(b, d, ps)
				b.Run(fmt.Sprintf("V=%d/B=%d/%s", V, B, dr.name), func(b *testing.B) {
					gpuTime(b, d, s, float64(B*V*4), func(int) error { return d.launchPick(s, B, out, lb, V, pb) })
				})
			}
		}
	}
}

// gemvBenchShapes are the decode-step products of the 8-layer Qwen3.5-35B
// checkpoint at one row: the Gated DeltaNet in-projection group's sizes
// summed, out_proj, the router, the shared expert's gate/up and down, the
// lm head.
var gemvBenchShapes = []struct {
	name string
	O, K int
}{
	{"inproj_12352x2048", 12352, 2048},
	{"outproj_2048x4096", 2048, 4096},
	{"router_256x2048", 256, 2048},
	{"shared_gateup_1024x2048", 1024, 2048},
	{"shared_down_2048x512", 2048, 512},
	{"lmhead_248320x2048", 248320, 2048},
}

// BenchmarkGEMV times the decode GEMV kernels (m_gemv_bf16 and the 16-warp
// m_gemv_bf16_wide) on one activation row at the shapes above; GB/s counts
// the weight bytes. Run beside BenchmarkGEMVCopyBound, whose GB/s is a copy
// of the same bytes (read and written, so counted twice) in the same call.
// Needs a GPU.
func BenchmarkGEMV(b *testing.B) {
	d := testDevice(b)
	s := testStream(b, d)
	rng := rand.New(rand.NewPCG(3, 5))
	for _, c := range gemvBenchShapes {
		wbytes := int64(c.O) * int64(c.K) * 2
		w, err := d.Alloc(wbytes, "gemv weights")
		if err != nil {
			b.Fatal(err)
		}
		if err := fillRandom(d, s, rng, w); err != nil {
			b.Fatal(err)
		}
		xv := make([]float32, c.K)
		for i := range xv {
			xv[i] = float32(rng.NormFloat64())
		}
		x := upload(b, d, xv)
		out, err := d.Alloc(int64(c.O)*4, "gemv out")
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range []struct {
			name    string
			threads int
		}{{"m_gemv_bf16", 256}, {"m_gemv_bf16_wide", 512}} {
			b.Run(fmt.Sprintf("%s/%s", c.name, k.name), func(b *testing.B) {
				gpuTime(b, d, s, float64(wbytes), func(int) error {
					return d.launch(s, k.name, grid1(blocks(c.O, 16)), grid1(k.threads), 0, out, x, w, 1, c.O, c.K)
				})
			})
		}
		d.Free(w)
		d.Free(out) // x is freed by upload's cleanup
	}
}

// BenchmarkGEMVCopyBound copies each of BenchmarkGEMV's weight sizes once
// (device to device): the memory's rate for the same bytes in the same call.
func BenchmarkGEMVCopyBound(b *testing.B) {
	d := testDevice(b)
	s := testStream(b, d)
	for _, c := range gemvBenchShapes {
		b.Run(c.name, func(b *testing.B) { copyBound(b, d, s, int64(c.O)*int64(c.K)*2) })
	}
}

// copyBound times a device-to-device copy of n bytes; its GB/s counts them
// read and written.
func copyBound(b *testing.B, d *Device, s *Stream, n int64) {
	src, err := d.Alloc(n, "copy src")
	if err != nil {
		b.Fatal(err)
	}
	defer d.Free(src)
	dst, err := d.Alloc(n, "copy dst")
	if err != nil {
		b.Fatal(err)
	}
	defer d.Free(dst)
	gpuTime(b, d, s, float64(2*n), func(int) error { return s.CopyDtoD(dst, src, n) })
}

// BenchmarkLaunchChain times a replayed graph of 100 dependent small
// kernels (adds of n float32 values, the size of a decode step's
// elementwise work) with programmatic dependent launch off and on (where the GPU has
// it): gpu-us/op is per graph of 100 kernels, so the difference divided by
// 100 is the launch gap that early launch hides per kernel.
func BenchmarkLaunchChain(b *testing.B) {
	d := testDevice(b)
	s := testStream(b, d)
	const steps = 100
	for _, n := range []int{2048, 1 << 20} {
		zero := make([]float32, n)
		x0, x1, one := upload(b, d, zero), upload(b, d, zero), upload(b, d, zero)
		for _, early := range []bool{false, true} {
			if early && !d.EarlyLaunch() {
				continue
			}
			b.Run(fmt.Sprintf("n=%d/early=%v", n, early), func(b *testing.B) {
				setEarlyLaunch(b, d, early)
				g, err := s.Capture(func() error { return launchChain(d, s, x0, x1, one, n, steps) })
				if err != nil {
					b.Fatal(err)
				}
				defer g.Destroy()
				gpuTime(b, d, s, 0, func(int) error { return g.Launch(s) })
			})
		}
	}
}

// BenchmarkHandOff times the hybrid step's hand-off traffic per MoE layer
// in a replayed graph of 16 layers, each a producer kernel (an add over the
// transfer's bytes of float32) followed by a transfer of 8 KiB (one token's
// f32 row of hidden 2048), 256 KiB (32 tokens) or 8 MiB (1024 tokens) and
// the next kernel: device to pinned host memory by a copy-engine transfer
// (dtoh-copy) or by KernelCopy through the buffer's device address
// (dtoh-kernel), and back (htod-copy, htod-kernel); kernels-only has no
// transfer. gpu-us/op is 16 layers; the differences are what each form
// costs on the critical path.
func BenchmarkHandOff(b *testing.B) {
	d := testDevice(b)
	s := testStream(b, d)
	const layers = 16
	for _, bytes := range []int64{8 << 10, 256 << 10, 8 << 20} {
		n := int(bytes / 4)
		zero := make([]float32, n)
		x, y, one := upload(b, d, zero), upload(b, d, zero), upload(b, d, zero)
		host, err := d.AllocHost(bytes)
		if err != nil {
			b.Fatal(err)
		}
		hp, err := host.DevicePtr()
		if err != nil {
			b.Fatal(err)
		}
		add := func(out, a Buffer) error { return addF32(d, s, out, a, one, n) }
		forms := []struct {
			name string
			fn   func() error
		}{
			{"kernels-only", func() error { return errors.Join(add(x, x), add(y, x)) }},
			{"dtoh-copy", func() error { return errors.Join(add(x, x), s.CopyDtoH(host, 0, x, bytes), add(y, x)) }},
			{"dtoh-kernel", func() error {
				return errors.Join(add(x, x), d.KernelCopy(s, WordCopy{Dst: hp, Src: x.Ptr, N: bytes}), add(y, x))
			}},
			{"htod-copy", func() error { return errors.Join(add(x, x), s.CopyHtoD(y, host, 0, bytes), add(y, y)) }},
			{"htod-kernel", func() error {
				return errors.Join(add(x, x), d.KernelCopy(s, WordCopy{Dst: y.Ptr, Src: hp, N: bytes}), add(y, y))
			}},
		}
		for _, f := range forms {
			b.Run(fmt.Sprintf("%dKiB/%s", bytes>>10, f.name), func(b *testing.B) {
				g, err := s.Capture(func() error {
					for range layers {
						if err := f.fn(); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				defer g.Destroy()
				gpuTime(b, d, s, float64(layers*bytes), func(int) error { return g.Launch(s) })
			})
		}
		host.Free()
	}
}
