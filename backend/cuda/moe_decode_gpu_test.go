//go:build cgo

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// moeDecodeCase is a decode MoE layer's shape: E bf16 experts of hidden H
// and intermediate I, top-k.
type moeDecodeCase struct {
	name       string
	E, H, I, k int
}

var moeDecodeCases = []moeDecodeCase{
	{"qwen3-30b", 128, 2048, 768, 8},
	{"qwen3.5", 256, 2048, 512, 8},
}

// moeDecode is a layer of c's shape on the GPU with routings random
// routings of B tokens each (top-k distinct experts per token, softmax
// weights), so that rotating over them reads experts from memory rather
// than from L2.
type moeDecode struct {
	g        *Backend
	ex       backend.Experts
	x, out   backend.Tensor
	ids, wts []backend.Tensor
	bytes    float64 // mean distinct expert weight bytes per routing
}

func newMoEDecode(tb testing.TB, c moeDecodeCase, B, routings int) *moeDecode {
	tb.Helper()
	d := testDevice(tb)
	g, err := NewBackendOn(d)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Close() })
	rng := rand.New(rand.NewPCG(uint64(c.E), uint64(B)))
	// one random bf16 block; expert e's matrices start e·64 values into it,
	// so every expert holds other values
	blk := make([]byte, 2*(c.I*c.H+c.E*64))
	for i := 0; i < len(blk); i += 2 {
		v := tensor.F32ToBF16(float32(rng.NormFloat64() * 0.03))
		blk[i], blk[i+1] = byte(v), byte(v>>8)
	}
	w := func(e, o, i int) backend.Tensor {
		t, err := g.Weight(backend.Host{Name: "expert", DType: tensor.BF16, Shape: []int{o, i}, Data: blk[2*e*64 : 2*(e*64+o*i)]})
		if err != nil {
			tb.Fatal(err)
		}
		return t
	}
	m := &moeDecode{g: g, ex: backend.Experts{Hidden: c.H, Inter: c.I}}
	for e := 0; e < c.E; e++ {
		m.ex.Gate = append(m.ex.Gate, w(e, c.I, c.H))
		m.ex.Up = append(m.ex.Up, w((e+1)%c.E, c.I, c.H))
		m.ex.Down = append(m.ex.Down, w((e+2)%c.E, c.H, c.I))
	}
	alloc := func(dt tensor.DType, cols int) backend.Tensor {
		t, err := g.Alloc(dt, B, cols)
		if err != nil {
			tb.Fatal(err)
		}
		return t
	}
	m.x, m.out = alloc(tensor.F32, c.H), alloc(tensor.F32, c.H)
	xv := make([]float32, B*c.H)
	for i := range xv {
		xv[i] = float32(rng.NormFloat64())
	}
	if err := g.write(m.x, xv); err != nil {
		tb.Fatal(err)
	}
	var total float64
	for r := 0; r < routings; r++ {
		ids, wts := make([]int32, B*c.k), make([]float32, B*c.k)
		used := map[int]bool{}
		for t := 0; t < B; t++ {
			var sum float64
			for j, e := range rng.Perm(c.E)[:c.k] {
				ids[t*c.k+j], used[e] = int32(e), true
				v := math.Exp(rng.NormFloat64())
				wts[t*c.k+j] = float32(v)
				sum += v
			}
			for j := 0; j < c.k; j++ {
				wts[t*c.k+j] /= float32(sum)
			}
		}
		total += float64(len(used)) * 3 * float64(c.H) * float64(c.I) * 2
		it, wt := alloc(tensor.I32, c.k), alloc(tensor.F32, c.k)
		if err := g.write(it, ids); err != nil {
			tb.Fatal(err)
		}
		if err := g.write(wt, wts); err != nil {
			tb.Fatal(err)
		}
		m.ids, m.wts = append(m.ids, it), append(m.wts, wt)
	}
	m.bytes = total / float64(routings)
	return m
}

// run queues the layer on routing r for B tokens.
func (m *moeDecode) run(r, B int) { m.g.MoE(m.out, m.x, &m.ex, m.wts[r], m.ids[r], B) }

// BenchmarkMoEDecode times the MoE op of a decode step (1 and 4 tokens,
// top-8 of bf16 experts): 16 routings captured in one graph and replayed,
// so gpu-us/op is 16 layers and GB/s counts the distinct expert bytes they
// read. The copy bound of the same bytes runs beside it (its GB/s counts
// them read and written).
func BenchmarkMoEDecode(b *testing.B) {
	const routings = 16
	for _, c := range moeDecodeCases {
		for _, B := range []int{1, 4} {
			m := newMoEDecode(b, c, B, routings)
			b.Run(fmt.Sprintf("%s/B=%d/moe", c.name, B), func(b *testing.B) {
				for r := range routings { // eagerly first: buffers exist before the capture
					m.run(r, B)
				}
				if err := m.g.Sync(); err != nil {
					b.Fatal(err)
				}
				graph, err := m.g.Capture(func() {
					for r := range routings {
						m.run(r, B)
					}
				})
				if err != nil {
					b.Fatal(err)
				}
				defer graph.Destroy()
				gpuTime(b, m.g.d, m.g.s, m.bytes*routings, func(int) error {
					m.g.Replay(graph)
					return nil
				})
				if err := m.g.Sync(); err != nil {
					b.Fatal(err)
				}
			})
			b.Run(fmt.Sprintf("%s/B=%d/copy-bound", c.name, B), func(b *testing.B) {
				copyBound(b, m.g.d, m.g.s, int64(m.bytes*routings/2))
			})
		}
	}
}
