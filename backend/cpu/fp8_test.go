package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// TestMatMulFP8 checks the block-scaled FP8 MatMul against a float64
// reference over the dequantised weights (f32(e4m3) * scale), for block
// shapes that do and do not divide O and K, K not a multiple of 16, and
// token counts below and above the kernels' 4- and 64-row blocks: within
// 2e-6 of Σ|x·w| (float32 summation order).
func TestMatMulFP8(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for _, tc := range []struct {
		o, k  int
		block [2]int
	}{
		{7, 33, [2]int{4, 8}},
		{64, 64, [2]int{32, 32}},
		{130, 300, [2]int{128, 128}},
		{21, 256, [2]int{1, 256}},
		{5, 17, [2]int{3, 5}},
	} {
		w := make([]float32, tc.o*tc.k)
		for i := range w {
			w[i] = float32(rng.NormFloat64() / math.Sqrt(float64(tc.k)))
			if i%97 == 0 {
				w[i] *= 20 // outliers: other elements of their block go subnormal
			}
		}
		h, deq, err := backend.QuantizeFP8("w", w, tc.o, tc.k, tc.block)
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range backends(t) {
			wt, err := b.Weight(h)
			if err != nil {
				t.Fatal(err)
			}
			if got := wt.DType(); got != tensor.F8E4M3 {
				t.Fatalf("weight dtype %s", got)
			}
			for _, n := range []int{1, 3, 5, 70} {
				x := make([]float32, n*tc.k)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				xt, _ := b.Alloc(tensor.F32, n, tc.k)
				copy(xt.(*Tensor).F32(), x)
				out, _ := b.Alloc(tensor.F32, n, tc.o)
				b.MatMul(out, xt, wt, n)
				if err := b.Sync(); err != nil {
					t.Fatal(err)
				}
				got := out.(*Tensor).F32()
				for i := 0; i < n; i++ {
					for c := 0; c < tc.o; c++ {
						var ref, mag float64
						for j := 0; j < tc.k; j++ {
							p := float64(x[i*tc.k+j]) * float64(deq[c*tc.k+j])
							ref += p
							mag += math.Abs(p)
						}
						if d := math.Abs(float64(got[i*tc.o+c]) - ref); d > 2e-6*mag+1e-30 {
							t.Fatalf("%s %dx%d block %v n=%d [%d,%d]: %g, want %g (|diff| %g, Σ|xw| %g)",
								name, tc.o, tc.k, tc.block, n, i, c, got[i*tc.o+c], ref, d, mag)
						}
					}
				}
			}
		}
	}
}

// TestFP8Decode checks the AVX-512 decoder against the table for every
// code (NaN codes excepted) and every lane position of a masked tail.
func TestFP8Decode(t *testing.T) {
	if !haveAVX512() {
		t.Skip("no AVX-512 here")
	}
	var q []uint8
	for c := 0; c < 256; c++ {
		if c&0x7f != 0x7f {
			q = append(q, uint8(c))
		}
	}
	for _, k := range []int{len(q), 17, 3} {
		cs := make([]float32, k)
		for i := range cs {
			cs[i] = 0.5 + float32(i)/7
		}
		dst := make([]float32, k+1)
		dst[k] = 42
		fp8DequantSIMD(q[:k], cs, dst[:k])
		for i := 0; i < k; i++ {
			if want := fp8Table[q[i]] * cs[i]; dst[i] != want {
				t.Fatalf("K=%d code %#x: %g, want %g", k, q[i], dst[i], want)
			}
		}
		if dst[k] != 42 {
			t.Fatalf("K=%d: wrote past the row", k)
		}
	}
}

// TestFP8Refused checks the errors for FP8 weights the backend cannot use.
func TestFP8Refused(t *testing.T) {
	b := New(Options{Threads: 1})
	defer b.Close()
	h, _, err := backend.QuantizeFP8("model.embed_tokens.weight", make([]float32, 8*4), 8, 4, [2]int{4, 4})
	if err != nil {
		t.Fatal(err)
	}
	noScale := h
	noScale.Scale = nil
	if _, err := b.Weight(noScale); err == nil || !strings.Contains(err.Error(), "without block scales") {
		t.Errorf("FP8 without scales: %v", err)
	}
	wt, err := b.Weight(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetStep(&backend.Step{Tokens: []int32{1}, Pos: []int32{0}, Seqs: []backend.Seq{{Len: 1}}}); err != nil {
		t.Fatal(err)
	}
	out, _ := b.Alloc(tensor.F32, 1, 4)
	b.Embed(out, wt)
	if err := b.Sync(); err == nil || !strings.Contains(err.Error(), "model.embed_tokens.weight must be a 2-D float tensor") {
		t.Errorf("Embed of an FP8 table: %v", err)
	}
	x, _ := b.Alloc(tensor.F32, 1, 5)
	out8, _ := b.Alloc(tensor.F32, 1, 8)
	b.MatMul(out8, x, wt, 1)
	if err := b.Sync(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("x width %d", 5)) {
		t.Errorf("MatMul width mismatch: %v", err)
	}
}
