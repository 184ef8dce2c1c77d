//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
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

type attnBenchCase struct {
	name        string
	B, len      int
	hq, hkv, hd int
}

var attnBenchCases = []attnBenchCase{
	{"qwen3moe_B1_len65536", 1, 65536, 32, 4, 128},
	{"qwen3moe_B8_len8192", 8, 8192, 32, 4, 128},
	{"qwen3moe_B32_len4096", 32, 4096, 32, 4, 128},
	{"qwen35_B1_len65536", 1, 65536, 16, 2, 256},
	{"qwen35_B8_len8192", 8, 8192, 16, 2, 256},
	{"qwen35_B32_len4096", 32, 4096, 16, 2, 256},
}

// BenchmarkDecodeAttention times paged decode attention; the copy bound is
// BenchmarkDecodeAttentionCopyBound on the same byte count. GB/s counts
// the K and V bytes attention must read.
func BenchmarkDecodeAttention(b *testing.B) {
	d := testDevice(b)
	s := testStream(b, d)
	for _, c := range attnBenchCases {
		b.Run(c.name, func(b *testing.B) {
			const page = 16
			pagesPer := c.len / page
			cache, err := d.NewKVCache(c.B*pagesPer, page, c.hkv, c.hd)
			if err != nil {
				b.Fatal(err)
			}
			defer cache.Free(d)
			rng := rand.New(rand.NewPCG(1, 2))
			if err := fillRandom(d, s, rng, cache.K); err != nil {
				b.Fatal(err)
			}
			if err := fillRandom(d, s, rng, cache.V); err != nil {
				b.Fatal(err)
			}
			perm := rng.Perm(c.B * pagesPer)
			bt := make([]int32, len(perm))
			for i, p := range perm {
				bt[i] = int32(p)
			}
			lens := make([]int32, c.B)
			for i := range lens {
				lens[i] = int32(c.len)
			}
			splits := d.DecodeSplits(c.B, c.hkv, c.len)
			ws := upload(b, d, make([]byte, DecodeWorkspaceBytes(c.B, c.hq, c.hd, splits)))
			q := upload(b, d, randBF16(rng, c.B*c.hq*c.hd, 1))
			out := poisoned(b, d, int64(c.B*c.hq*c.hd*2))
			args := DecodeArgs{Out: out, Q: q, QStride: int64(c.hq * c.hd), Cache: cache, BlockTable: upload(b, d, bt), MaxPages: pagesPer,
				SeqLens: upload(b, d, lens), B: c.B, QHeads: c.hq, Scale: 0.08, Splits: splits, Work: &AttnWorkspace{ws}}
			bytes := float64(c.B) * float64(c.len) * float64(c.hkv*c.hd) * 2 * 2
			gpuTime(b, d, s, bytes, func(int) error { return d.AttentionDecode(s, args) })
			b.ReportMetric(float64(splits), "splits")
		})
	}
}

// BenchmarkDecodeAttentionCopyBound copies, device to device, as many bytes
// as the matching decode attention case reads; GB/s counts bytes read plus
// bytes written, so the two GB/s figures compare directly.
func BenchmarkDecodeAttentionCopyBound(b *testing.B) {
	d := testDevice(b)
	s := testStream(b, d)
	for _, c := range attnBenchCases {
		b.Run(c.name, func(b *testing.B) {
			copyBound(b, d, s, int64(c.B)*int64(c.len)*int64(c.hkv*c.hd)*2) // K+V bytes, halved: copy reads n and writes n
		})
	}
}

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

type expertBenchCase struct {
	name    string
	T, k, E int
	N, K    int // one expert GEMM: [rows, K] x [N, K]^T
}

var expertBenchCases = []expertBenchCase{
	{"qwen3moe_gateup_T1", 1, 8, 128, 1536, 2048},
	{"qwen3moe_gateup_T8", 8, 8, 128, 1536, 2048},
	{"qwen3moe_down_T8", 8, 8, 128, 2048, 768},
	{"qwen35_gateup_T1", 1, 8, 256, 1024, 2048},
	{"qwen35_gateup_T16", 16, 8, 256, 1024, 2048},
}

// expertBenchSetup routes T tokens to k random experts, 16 routings in
// rotation (so weights are not served from L2), and returns the routed
// workspaces for each.
type expertBench struct {
	W        Buffer
	in       Buffer
	routings [][]int32 // per rotation: ids [T*k]
	aligned  []*MoEWorkspace
	out      Buffer
	wbytes   float64 // distinct expert weight bytes per routing (avg)
}

func newExpertBench(b *testing.B, d *Device, s *Stream, c expertBenchCase) *expertBench {
	rng := rand.New(rand.NewPCG(3, 4))
	eb := &expertBench{}
	var err error
	if eb.W, err = d.Alloc(int64(c.E)*int64(c.N)*int64(c.K)*2, "bench experts"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Free(eb.W) })
	if err := fillRandom(d, s, rng, eb.W); err != nil {
		b.Fatal(err)
	}
	ex := &Experts{W13: eb.W, W2: eb.W, E: c.E, H: c.K, I: c.N / 2}
	x := upload(b, d, randBF16(rng, c.T*c.K, 1))
	var total float64
	for r := 0; r < 16; r++ {
		ids := make([]int32, c.T*c.k)
		used := map[int32]bool{}
		for t := 0; t < c.T; t++ {
			p := rng.Perm(c.E)
			for j := 0; j < c.k; j++ {
				ids[t*c.k+j] = int32(p[j])
				used[int32(p[j])] = true
			}
		}
		total += float64(len(used)) * float64(c.N) * float64(c.K) * 2
		eb.routings = append(eb.routings, ids)
		ws, err := d.NewMoEWorkspace(c.T, c.k, &Experts{E: c.E, H: max(c.K, c.N), I: max(c.K, c.N)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ws.Free(d) })
		// Align and gather once; the benchmark times the GEMM alone.
		if err := d.launch(s, "moe_align", grid1(1), grid1(1024), 0, ws.sorted, ws.blockExpert, ws.pos, ws.counts, upload(b, d, ids), Buffer{},
			c.T*c.k, c.E, moeBM, ws.Cap); err != nil {
			b.Fatal(err)
		}
		if err := d.launch(s, "moe_gather_bf16", grid1(ws.Cap), grid1(128), 0, ws.xs, x, ws.sorted, ws.counts, c.E, moeBM, c.K, c.k); err != nil {
			b.Fatal(err)
		}
		eb.aligned = append(eb.aligned, ws)
	}
	_ = ex
	eb.wbytes = total / 16
	eb.out = poisoned(b, d, int64(eb.aligned[0].Cap)*int64(c.N)*2)
	return eb
}

// BenchmarkExpertGEMM times the grouped expert kernel (moe_gemm_bf16) for
// T decode tokens routed to k of E experts; GB/s counts the distinct
// expert weight bytes read. BenchmarkExpertGEMMCuBLAS runs the same
// routed rows through cuBLASLt, one GEMM per expert with its rows.
func BenchmarkExpertGEMM(b *testing.B) {
	d := testDevice(b)
	s := testStream(b, d)
	for _, c := range expertBenchCases {
		b.Run(c.name, func(b *testing.B) {
			eb := newExpertBench(b, d, s, c)
			gpuTime(b, d, s, eb.wbytes, func(i int) error {
				ws := eb.aligned[i%16]
				return d.launch(s, "moe_gemm_bf16", grid2(ws.Cap/moeBM, (c.N+63)/64), grid1(256), 0,
					eb.out, ws.xs, eb.W, ws.blockExpert, ws.counts, c.E, c.N, c.K)
			})
		})
	}
}

// BenchmarkExpertGEMMCuBLAS: cuBLASLt GEMMs of the same shapes (rows per
// expert × N × K, one call per routed expert) over the same routings.
func BenchmarkExpertGEMMCuBLAS(b *testing.B) {
	d := testDevice(b)
	s := testStream(b, d)
	for _, c := range expertBenchCases {
		b.Run(c.name, func(b *testing.B) {
			eb := newExpertBench(b, d, s, c)
			type call struct{ e, start, n int }
			plans := make([][]call, 16)
			for r, ids := range eb.routings {
				cnt := map[int]int{}
				for _, e := range ids {
					cnt[int(e)]++
				}
				es := make([]int, 0, len(cnt))
				for e := range cnt {
					es = append(es, e)
				}
				sort.Ints(es)
				start := 0
				for _, e := range es {
					plans[r] = append(plans[r], call{e, start, cnt[e]})
					start += (cnt[e] + moeBM - 1) / moeBM * moeBM
				}
			}
			wsz := int64(c.N) * int64(c.K) * 2
			gpuTime(b, d, s, eb.wbytes, func(i int) error {
				ws := eb.aligned[i%16]
				for _, p := range plans[i%16] {
					err := d.Gemm(s, GemmArgs{M: p.n, N: c.N, K: c.K,
						A:     ws.xs.Slice(int64(p.start)*int64(c.K)*2, int64(p.n)*int64(c.K)*2),
						B:     eb.W.Slice(int64(p.e)*wsz, wsz),
						D:     eb.out.Slice(int64(p.start)*int64(c.N)*2, int64(p.n)*int64(c.N)*2),
						AType: tensor.BF16, BType: tensor.BF16, DType: tensor.BF16})
					if err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
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
					gpuTime(b, d, s, float64(B*V*4), func(int) error { return d.Pick(s, out, lb, pb, B, V) })
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
// kernels (adds of n bf16 values, the size of a decode step's elementwise
// work) with programmatic dependent launch off and on (where the GPU has
// it): gpu-us/op is per graph of 100 kernels, so the difference divided by
// 100 is the launch gap that early launch hides per kernel.
func BenchmarkLaunchChain(b *testing.B) {
	d := testDevice(b)
	s := testStream(b, d)
	const steps = 100
	for _, n := range []int{2048, 1 << 20} {
		zero := make([]uint16, n)
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
// transfer's bytes of bf16) followed by a transfer of 8 KiB (one token's
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
		n := int(bytes / 2)
		zero := make([]uint16, n)
		x, y, one := upload(b, d, zero), upload(b, d, zero), upload(b, d, zero)
		host, err := d.AllocHost(bytes)
		if err != nil {
			b.Fatal(err)
		}
		hp, err := host.DevicePtr()
		if err != nil {
			b.Fatal(err)
		}
		add := func(out, a Buffer) error { return d.Add(s, out, a, one, n) }
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
