package backend

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ktserve/kt/tensor"
)

// dequant returns h's values (FP8: f32(e4m3)·scale; BF16/F32 as stored).
func dequant(t *testing.T, h Host) []float32 {
	t.Helper()
	if err := h.Check(); err != nil {
		t.Fatal(err)
	}
	o, k := h.Shape[0], h.Shape[1]
	out := make([]float32, o*k)
	for i := range out {
		switch h.DType {
		case tensor.F32:
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(h.Data[4*i:]))
		case tensor.F8E4M3:
			sc := (k + h.Block[1] - 1) / h.Block[1]
			j := (i/k/h.Block[0])*sc + (i%k)/h.Block[1]
			out[i] = tensor.F8E4M3ToF32(h.Data[i]) * math.Float32frombits(binary.LittleEndian.Uint32(h.Scale.Data[4*j:]))
		}
	}
	return out
}

// TestGatherRows gathers row parts of FP8 weights, block-aligned and not,
// and checks every value equals the source's (bit for bit) and which
// block the result keeps.
func TestGatherRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const o, k = 100, 70
	w := make([]float32, o*k)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	for _, tc := range []struct {
		block [2]int
		parts [][2]int
		keep  bool // keeps the source block
	}{
		{[2]int{32, 32}, [][2]int{{32, 32}, {0, 32}}, true},
		{[2]int{32, 32}, [][2]int{{64, 36}}, true},           // to the last row: partial block
		{[2]int{32, 32}, [][2]int{{64, 36}, {0, 32}}, false}, // a partial block not last
		{[2]int{32, 32}, [][2]int{{16, 16}, {48, 16}}, false},
		{[2]int{8, 16}, [][2]int{{0, 8}, {16, 8}, {8, 8}}, true},
		{[2]int{128, 128}, [][2]int{{0, 64}, {64, 36}}, false}, // Qwen3.5 q/gate halves of one block
		{[2]int{5, 7}, [][2]int{{3, 1}, {99, 1}, {0, 100}}, false},
	} {
		h, deq, err := QuantizeFP8("w", w, o, k, tc.block)
		if err != nil {
			t.Fatal(err)
		}
		g, err := GatherRows(h, "w[part]", tc.parts)
		if err != nil {
			t.Fatalf("block %v parts %v: %v", tc.block, tc.parts, err)
		}
		if kept := g.Block == tc.block; kept != tc.keep {
			t.Errorf("block %v parts %v: result block %v", tc.block, tc.parts, g.Block)
		}
		got := dequant(t, g)
		r := 0
		for _, p := range tc.parts {
			for i := p[0]; i < p[0]+p[1]; i++ {
				for c := 0; c < k; c++ {
					if got[r*k+c] != deq[i*k+c] {
						t.Fatalf("block %v parts %v: row %d (source %d) col %d = %g, want %g", tc.block, tc.parts, r, i, c, got[r*k+c], deq[i*k+c])
					}
				}
				r++
			}
		}
	}
	// plain weights: rows copied; bad parts named
	f := Host{Name: "f", DType: tensor.F32, Shape: []int{3, 2}, Data: make([]byte, 24)}
	f.Data[8] = 1
	g, err := GatherRows(f, "f[1]", [][2]int{{1, 1}})
	if err != nil || g.Data[0] != 1 || len(g.Data) != 8 || g.Scale != nil {
		t.Errorf("F32 rows: %v %v", g, err)
	}
	if _, err := GatherRows(f, "x", [][2]int{{2, 2}}); err == nil || !strings.Contains(err.Error(), "tensor f") {
		t.Errorf("rows past the end: %v", err)
	}
}

// TestExpertRows slices gate, up and down rows of fused 3-D FP8 experts
// ([E, 2I, H] with [E, ceil(2I/bn), ceil(H/bk)] scales), with I a multiple
// of bn (views) and not (copied per-row scales), against the source.
func TestExpertRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		e, i, h int
		block   [2]int
	}{
		{3, 64, 48, [2]int{32, 32}},
		{2, 40, 48, [2]int{32, 16}}, // gate/up split inside a row block
		{2, 80, 160, [2]int{128, 128}},
	} {
		o := 2 * tc.i
		var data, scale []byte
		var deqs [][]float32
		for e := 0; e < tc.e; e++ {
			w := make([]float32, o*tc.h)
			for j := range w {
				w[j] = float32(rng.NormFloat64())
			}
			h, deq, err := QuantizeFP8("x", w, o, tc.h, tc.block)
			if err != nil {
				t.Fatal(err)
			}
			data = append(data, h.Data...)
			scale = append(scale, h.Scale.Data...)
			deqs = append(deqs, deq)
		}
		ss := FP8ScaleShape(o, tc.h, tc.block)
		fused := Host{Name: "gate_up_proj", DType: tensor.F8E4M3, Shape: []int{tc.e, o, tc.h}, Data: data, Block: tc.block,
			Scale: &Host{Name: "gate_up_proj_scale_inv", DType: tensor.F32, Shape: []int{tc.e, ss[0], ss[1]}, Data: scale}}
		for e := 0; e < tc.e; e++ {
			for part, first := range []int{0, tc.i} {
				g, err := ExpertRows(fused, "gate_up_proj[e]", e, first, tc.i)
				if err != nil {
					t.Fatalf("%v expert %d part %d: %v", tc, e, part, err)
				}
				got := dequant(t, g)
				for j, v := range got {
					if want := deqs[e][first*tc.h+j]; v != want {
						t.Fatalf("%v expert %d part %d element %d = %g, want %g", tc, e, part, j, v, want)
					}
				}
			}
		}
		if _, err := ExpertRows(fused, "x", tc.e, 0, 1); err == nil {
			t.Error("expert past the end accepted")
		}
		bad := fused
		bad.Scale = &Host{Name: "s", DType: tensor.F32, Shape: []int{1}, Data: make([]byte, 4)}
		if _, err := ExpertRows(bad, "x", 0, 0, 1); err == nil || !strings.Contains(err.Error(), "gate_up_proj") {
			t.Errorf("short scale: %v", err)
		}
	}
}
