//go:build cgo

package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// BenchmarkBackendDecodeAttention times Backend.Attention on decode steps
// (B sequences, one new token each, at position ctx-1 over the float32
// paged KV cache) for the Qwen3-30B (32/4 heads × 128) and Qwen3.5
// (16/2 × 256) shapes, captured 10× per graph (gpu-us/op is per graph of
// 10): the split-K kernels (kernels/attnf32.cu) and, up to 8192 positions,
// the general one-block-per-(row, head) kernel they replace, beside a
// device-to-device copy of the same K+V bytes (GB/s counts the K and V
// bytes attention reads; the copy reads half and writes half).
func BenchmarkBackendDecodeAttention(b *testing.B) {
	p := newOpPair(b)
	g := p.g
	const reps, ps = 10, 16
	for _, c := range []struct {
		name          string
		B, ctx        int
		heads, kvh, d int
	}{
		{"qwen3moe_B1_ctx1001", 1, 1001, 32, 4, 128},
		{"qwen3moe_B1_ctx8192", 1, 8192, 32, 4, 128},
		{"qwen3moe_B1_ctx65536", 1, 65536, 32, 4, 128},
		{"qwen3moe_B8_ctx8192", 8, 8192, 32, 4, 128},
		{"qwen35_B1_ctx1001", 1, 1001, 16, 2, 256},
		{"qwen35_B1_ctx8192", 1, 8192, 16, 2, 256},
		{"qwen35_B1_ctx65536", 1, 65536, 16, 2, 256},
		{"qwen35_B8_ctx8192", 8, 8192, 16, 2, 256},
	} {
		per := (c.ctx + ps - 1) / ps
		kv, err := g.AllocKV(c.B*per, ps, c.kvh, c.d)
		if err != nil {
			b.Fatal(err)
		}
		st := &backend.Step{}
		for s := 0; s < c.B; s++ {
			pages := make([]int32, per)
			for i := range pages {
				pages[i] = int32(s*per + i)
			}
			st.Tokens = append(st.Tokens, 1)
			st.Pos = append(st.Pos, int32(c.ctx-1))
			st.Seqs = append(st.Seqs, backend.Seq{Slot: s, Start: s, Len: 1, Pos: c.ctx - 1, Pages: pages})
			st.OutRows = append(st.OutRows, int32(s))
		}
		if err := g.SetStep(st); err != nil {
			b.Fatal(err)
		}
		qw, kw := c.heads*c.d, c.kvh*c.d
		q, _ := g.Alloc(tensor.F32, c.B, qw)
		k, _ := g.Alloc(tensor.F32, c.B, kw)
		v, _ := g.Alloc(tensor.F32, c.B, kw)
		out, err := g.Alloc(tensor.F32, c.B, qw)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.write(q, p.randF32(c.B*qw, 1)); err != nil {
			b.Fatal(err)
		}
		a := backend.Attn{Heads: c.heads, KVHeads: c.kvh, HeadDim: c.d, Scale: float32(1 / math.Sqrt(float64(c.d)))}
		bytes := int64(c.B) * int64(c.ctx) * int64(kw) * 4 * 2
		modes := []bool{false}
		if c.ctx <= 8192 {
			modes = append(modes, true)
		}
		for _, general := range modes {
			g.generalOnly = general
			name := "split"
			if general {
				name = "general"
			}
			graphTime(b, g, fmt.Sprintf("%s/%s-x%d", c.name, name, reps), reps, bytes, func() { g.Attention(out, q, k, v, kv, &a, c.B) })
		}
		g.generalOnly = false
		half := bytes / 2
		src, err := g.alloc(half, "copy bound src")
		if err != nil {
			b.Fatal(err)
		}
		dst, err := g.alloc(half, "copy bound dst")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%s/copy-bound-%.1fMB", c.name, float64(bytes)/1e6), func(b *testing.B) {
			gpuTime(b, g.d, g.s, float64(bytes), func(int) error { return g.s.CopyDtoD(dst, src, half) })
		})
		for _, t := range []backend.Tensor{q, k, v, out, kv.K, kv.V} {
			g.free(t.(*Tensor).buf)
		}
		g.free(src)
		g.free(dst)
	}
}
