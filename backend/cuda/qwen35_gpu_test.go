//go:build cgo

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// q35 is one Qwen3.5-35B-A3B-shaped decode layer of each kind (hidden
// 2048; linear attention: 16 key / 32 value heads of 128, conv 4; full
// attention: 16/2 heads of 256 with an output gate; 256 experts top-8 of
// 512 plus a gated shared expert of 512) and the lm head (248320 rows),
// for one sequence decoding at position 1000. The weights are random;
// the states and caches hold whatever the pool held (timing only).
type q35 struct {
	g                                       *Backend
	x, h, tmp, tmp2                         backend.Tensor
	mixed, conv, z, core, ga, gb, gg, gbeta backend.Tensor
	q, gate, k, v, att                      backend.Tensor
	rl, rw, ri, seG, seU, seS, logits       backend.Tensor
	norm, wqkv, wz, wa, wb, convW, aLog     backend.Tensor
	dtBias, gnorm, outProj                  backend.Tensor
	wq, wgate, wk, wv, wo, qn, router       backend.Tensor
	seGate, seUp, seDown, seScale, lmHead   backend.Tensor
	ex                                      backend.Experts
	st                                      backend.LinearState
	kv                                      *backend.KVCache
	rope                                    backend.Rope
	attn                                    backend.Attn
	linBytes, fullBytes, moeBytes, lmBytes  int64
}

const (
	q35H, q35Kh, q35Vh, q35Kd, q35Vd  = 2048, 16, 32, 128, 128
	q35Heads, q35KVH, q35HD           = 16, 2, 256
	q35E, q35K, q35I, q35SI, q35Vocab = 256, 8, 512, 512, 248320
	q35ConvCh                         = 2*q35Kh*q35Kd + q35Vh*q35Vd
	q35Pos                            = 1000
)

func newQ35(b *testing.B) *q35 {
	p := newOpPair(b)
	g := p.g
	L := &q35{g: g}
	// one block of random bf16 bytes; every weight is a slice of it
	// (uploaded as its own buffer)
	blk := make([]byte, 2*q35ConvCh*q35H)
	for i := 0; i < len(blk); i += 2 {
		binary.LittleEndian.PutUint16(blk[i:], tensor.F32ToBF16(float32(p.rng.NormFloat64()*0.03)))
	}
	var bytes int64
	w := func(o, i int) backend.Tensor {
		n := 2 * o * i
		data := blk[:min(n, len(blk))]
		if n > len(blk) {
			data = make([]byte, n)
			for j := 0; j < n; j += len(blk) {
				copy(data[j:], blk)
			}
		}
		x, err := g.Weight(backend.Host{Name: "w", DType: tensor.BF16, Shape: []int{o, i}, Data: data})
		if err != nil {
			b.Fatal(err)
		}
		bytes += int64(n)
		return x
	}
	f32w := func(v []float32, shape ...int) backend.Tensor {
		data := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
		}
		x, err := g.Weight(backend.Host{Name: "f", DType: tensor.F32, Shape: shape, Data: data})
		if err != nil {
			b.Fatal(err)
		}
		return x
	}
	act := func(dt tensor.DType, cols int) backend.Tensor {
		x, err := g.Alloc(dt, 1, cols)
		if err != nil {
			b.Fatal(err)
		}
		return x
	}
	L.norm = w(1, q35H)
	bytes = 0
	L.wqkv, L.wz, L.wa, L.wb, L.outProj = w(q35ConvCh, q35H), w(q35Vh*q35Vd, q35H), w(q35Vh, q35H), w(q35Vh, q35H), w(q35H, q35Vh*q35Vd)
	L.linBytes = bytes
	L.convW = f32w(p.randF32(q35ConvCh*4, 0.3), q35ConvCh, 4)
	neg := p.randF32(q35Vh, 1)
	for i := range neg {
		neg[i] = -float32(math.Abs(float64(neg[i])))
	}
	L.aLog, L.dtBias, L.gnorm = f32w(neg, q35Vh), f32w(p.randF32(q35Vh, 1), q35Vh), f32w(p.randF32(q35Vd, 1), q35Vd)
	bytes = 0
	L.wq, L.wgate, L.wk, L.wv, L.wo = w(q35Heads*q35HD, q35H), w(q35Heads*q35HD, q35H), w(q35KVH*q35HD, q35H), w(q35KVH*q35HD, q35H), w(q35H, q35Heads*q35HD)
	L.fullBytes = bytes
	L.qn = w(1, q35HD)
	bytes = 0
	L.router, L.seGate, L.seUp, L.seDown, L.seScale = w(q35E, q35H), w(q35SI, q35H), w(q35SI, q35H), w(q35H, q35SI), w(1, q35H)
	L.ex = backend.Experts{Hidden: q35H, Inter: q35I}
	shared := bytes
	for e := 0; e < q35E; e++ {
		L.ex.Gate, L.ex.Up, L.ex.Down = append(L.ex.Gate, w(q35I, q35H)), append(L.ex.Up, w(q35I, q35H)), append(L.ex.Down, w(q35H, q35I))
	}
	L.moeBytes = shared + q35K*3*2*q35I*q35H
	bytes = 0
	L.lmHead = w(q35Vocab, q35H)
	L.lmBytes = bytes
	L.x, L.h, L.tmp, L.tmp2 = act(tensor.F32, q35H), act(tensor.F32, q35H), act(tensor.F32, q35H), act(tensor.F32, q35H)
	L.mixed, L.conv, L.z, L.core = act(tensor.F32, q35ConvCh), act(tensor.F32, q35ConvCh), act(tensor.F32, q35Vh*q35Vd), act(tensor.F32, q35Vh*q35Vd)
	L.ga, L.gb, L.gg, L.gbeta = act(tensor.F32, q35Vh), act(tensor.F32, q35Vh), act(tensor.F32, q35Vh), act(tensor.F32, q35Vh)
	L.q, L.gate, L.att = act(tensor.F32, q35Heads*q35HD), act(tensor.F32, q35Heads*q35HD), act(tensor.F32, q35Heads*q35HD)
	L.k, L.v = act(tensor.F32, q35KVH*q35HD), act(tensor.F32, q35KVH*q35HD)
	L.rl, L.rw, L.ri = act(tensor.F32, q35E), act(tensor.F32, q35K), act(tensor.I32, q35K)
	L.seG, L.seU, L.seS, L.logits = act(tensor.F32, q35SI), act(tensor.F32, q35SI), act(tensor.F32, 1), act(tensor.F32, q35Vocab)
	var err error
	if L.st, err = g.AllocLinearState(backend.LinearShape{Layers: 1, ConvKernel: 4,
		Delta: backend.DeltaShape{KHeads: q35Kh, VHeads: q35Vh, KDim: q35Kd, VDim: q35Vd}}, 1); err != nil {
		b.Fatal(err)
	}
	if L.kv, err = g.AllocKV(64, 16, q35KVH, q35HD); err != nil {
		b.Fatal(err)
	}
	L.rope = backend.Rope{HeadDim: q35HD, RotaryDim: q35HD / 4, Theta: 1e7}
	L.attn = backend.Attn{Heads: q35Heads, KVHeads: q35KVH, HeadDim: q35HD, Scale: float32(1 / math.Sqrt(q35HD))}
	if err := g.SetStep(testStep([3]int{0, q35Pos, 1})); err != nil {
		b.Fatal(err)
	}
	if err := g.write(L.x, p.randF32(q35H, 1)); err != nil {
		b.Fatal(err)
	}
	return L
}

func (L *q35) linear() {
	g := L.g
	g.RMSNorm(L.h, L.x, L.norm, 1e-6, 1)
	g.MatMul(L.mixed, L.h, L.wqkv, 1)
	g.MatMul(L.z, L.h, L.wz, 1)
	g.MatMul(L.gb, L.h, L.wb, 1)
	g.MatMul(L.ga, L.h, L.wa, 1)
	g.CausalConv1D(L.conv, L.mixed, L.convW, L.st, 0, 1)
	g.DeltaGates(L.gg, L.gbeta, L.ga, L.gb, L.aLog, L.dtBias, 1)
	g.GatedDeltaRule(L.core, L.conv, L.gg, L.gbeta, L.st, 0, 1)
	g.GatedRMSNorm(L.core, L.core, L.z, L.gnorm, 1e-6, q35Vh)
	g.MatMul(L.tmp, L.core, L.outProj, 1)
	g.Add(L.x, L.x, L.tmp, 1)
}

func (L *q35) full() {
	g := L.g
	g.RMSNorm(L.h, L.x, L.norm, 1e-6, 1)
	g.MatMul(L.q, L.h, L.wq, 1)
	g.MatMul(L.gate, L.h, L.wgate, 1)
	g.MatMul(L.k, L.h, L.wk, 1)
	g.MatMul(L.v, L.h, L.wv, 1)
	g.RMSNorm(L.q, L.q, L.qn, 1e-6, q35Heads)
	g.RMSNorm(L.k, L.k, L.qn, 1e-6, q35KVH)
	g.Rope(L.q, &L.rope, q35Heads, 1)
	g.Rope(L.k, &L.rope, q35KVH, 1)
	g.Attention(L.att, L.q, L.k, L.v, L.kv, &L.attn, 1)
	g.SigmoidGate(L.att, L.att, L.gate, 1)
	g.MatMul(L.tmp, L.att, L.wo, 1)
	g.Add(L.x, L.x, L.tmp, 1)
}

// moe is the MoE half of a layer: the GPU part of the hybrid step (router,
// shared expert) plus the routed experts when routed is set.
func (L *q35) moe(routed bool) {
	g := L.g
	g.RMSNorm(L.h, L.x, L.norm, 1e-6, 1)
	g.MatMul(L.rl, L.h, L.router, 1)
	g.RouterTopK(L.rw, L.ri, L.rl, q35K, true, 1)
	if routed {
		g.MoE(L.tmp, L.h, &L.ex, L.rw, L.ri, 1)
	}
	g.MatMul(L.seG, L.h, L.seGate, 1)
	g.MatMul(L.seU, L.h, L.seUp, 1)
	g.SiLUMul(L.seG, L.seG, L.seU, 1)
	g.MatMul(L.tmp2, L.seG, L.seDown, 1)
	g.MatMul(L.seS, L.h, L.seScale, 1)
	g.SigmoidGate(L.tmp2, L.tmp2, L.seS, 1)
	if routed {
		g.Add(L.tmp, L.tmp, L.tmp2, 1)
		g.Add(L.x, L.x, L.tmp, 1)
	} else {
		g.Add(L.x, L.x, L.tmp2, 1)
	}
}

// graphTime captures fn reps times in one CUDA graph and reports the GPU
// time of one replay (reps calls) in µs and, for bytes > 0 per call, GB/s.
func graphTime(b *testing.B, g *Backend, name string, reps int, bytes int64, fn func()) {
	fn()
	if err := g.Sync(); err != nil {
		b.Fatal(err)
	}
	graph, err := g.Capture(func() {
		for range reps {
			fn()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer graph.Destroy()
	b.Run(name, func(b *testing.B) {
		gpuTime(b, g.d, g.s, float64(bytes)*float64(reps), func(int) error { g.Replay(graph); return g.err })
	})
}

// BenchmarkQwen35DecodeLayer times, at batch 1 (position 1000), one
// Qwen3.5-35B-A3B-shaped linear-attention layer, one full-attention layer,
// the MoE half (router + shared expert: the hybrid step's GPU part; and
// with the 8 routed experts) and the lm head, each as a replayed CUDA graph
// of 20 copies (gpu-us/op is per graph of 20), beside a device-to-device
// copy of the same weight bytes (the bound); then the ops of each layer
// one by one (×50 per graph).
func BenchmarkQwen35DecodeLayer(b *testing.B) {
	L := newQ35(b)
	g := L.g
	parts := []struct {
		name  string
		bytes int64
		fn    func()
	}{
		{"linear-attn", L.linBytes, L.linear},
		{"full-attn", L.fullBytes, L.full},
		{"router+shared", L.moeBytes - q35K*3*2*q35I*q35H, func() { L.moe(false) }},
		{"router+shared+8experts", L.moeBytes, func() { L.moe(true) }},
		{"lm-head", L.lmBytes, func() { g.MatMul(L.logits, L.x, L.lmHead, 1) }},
	}
	for _, pt := range parts {
		graphTime(b, g, pt.name+"/x20", 20, pt.bytes, pt.fn)
		half := pt.bytes / 2
		src, err := g.alloc(half, "copy bound src")
		if err != nil {
			b.Fatal(err)
		}
		dst, err := g.alloc(half, "copy bound dst")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%s/copy-bound-%.1fMB", pt.name, float64(pt.bytes)/1e6), func(b *testing.B) {
			gpuTime(b, g.d, g.s, float64(pt.bytes), func(int) error { return g.s.CopyDtoD(dst, src, half) })
		})
		g.free(src)
		g.free(dst)
	}
	// op by op
	ops := []struct {
		name string
		fn   func()
	}{
		{"rmsnorm", func() { g.RMSNorm(L.h, L.x, L.norm, 1e-6, 1) }},
		{"matmul-qkv-8192x2048", func() { g.MatMul(L.mixed, L.h, L.wqkv, 1) }},
		{"matmul-z-4096x2048", func() { g.MatMul(L.z, L.h, L.wz, 1) }},
		{"matmul-b-32x2048", func() { g.MatMul(L.gb, L.h, L.wb, 1) }},
		{"conv1d", func() { g.CausalConv1D(L.conv, L.mixed, L.convW, L.st, 0, 1) }},
		{"delta-gates", func() { g.DeltaGates(L.gg, L.gbeta, L.ga, L.gb, L.aLog, L.dtBias, 1) }},
		{"gated-delta-rule", func() { g.GatedDeltaRule(L.core, L.conv, L.gg, L.gbeta, L.st, 0, 1) }},
		{"gated-rmsnorm", func() { g.GatedRMSNorm(L.core, L.core, L.z, L.gnorm, 1e-6, q35Vh) }},
		{"matmul-out-2048x4096", func() { g.MatMul(L.tmp, L.core, L.outProj, 1) }},
		{"add", func() { g.Add(L.x, L.x, L.tmp, 1) }},
		{"matmul-q-4096x2048", func() { g.MatMul(L.q, L.h, L.wq, 1) }},
		{"matmul-k-512x2048", func() { g.MatMul(L.k, L.h, L.wk, 1) }},
		{"qk-norm", func() { g.RMSNorm(L.q, L.q, L.qn, 1e-6, q35Heads) }},
		{"rope-q", func() { g.Rope(L.q, &L.rope, q35Heads, 1) }},
		{"attention-pos1000", func() { g.Attention(L.att, L.q, L.k, L.v, L.kv, &L.attn, 1) }},
		{"sigmoid-gate", func() { g.SigmoidGate(L.att, L.att, L.gate, 1) }},
		{"matmul-router-256x2048", func() { g.MatMul(L.rl, L.h, L.router, 1) }},
		{"router-topk", func() { g.RouterTopK(L.rw, L.ri, L.rl, q35K, true, 1) }},
		{"moe-8-experts", func() { g.MoE(L.tmp, L.h, &L.ex, L.rw, L.ri, 1) }},
		{"matmul-shared-down-2048x512", func() { g.MatMul(L.tmp2, L.seG, L.seDown, 1) }},
		{"matmul-sescale-1x2048", func() { g.MatMul(L.seS, L.h, L.seScale, 1) }},
	}
	for _, op := range ops {
		graphTime(b, g, "op/"+op.name+"-x50", 50, 0, op.fn)
	}
}
