package backend

import (
	"math"
	"strings"
	"testing"

	"github.com/ktserve/kt/tensor"
)

func TestF32ToE4M3(t *testing.T) {
	// every finite code round-trips, both signs
	for c := 0; c < 256; c++ {
		if c&0x7f == 0x7f {
			continue
		}
		v := tensor.F8E4M3ToF32(uint8(c))
		if got := F32ToE4M3(v); tensor.F8E4M3ToF32(got) != v {
			t.Errorf("code %#x (%g) -> %#x (%g)", c, v, got, tensor.F8E4M3ToF32(got))
		}
	}
	for _, tc := range []struct {
		in   float32
		want uint8
	}{
		{1000, 0x7e}, {-1000, 0xfe}, {448, 0x7e}, {float32(math.NaN()), 0x7f},
		{1.0625, 0x38}, // halfway between 1 (0x38, even) and 1.125 (0x39)
		{1.1875, 0x3a}, // halfway between 1.125 (0x39) and 1.25 (0x3a, even)
		{1.07, 0x39}, {0.0009765625, 0x00}, {0.001953125, 0x01},
	} {
		if got := F32ToE4M3(tc.in); got != tc.want {
			t.Errorf("F32ToE4M3(%g) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
}

func TestQuantizeFP8(t *testing.T) {
	const o, k = 5, 37
	w := make([]float32, o*k)
	for i := range w {
		w[i] = float32(math.Sin(float64(i)*0.7)) * float32(1+i%5)
	}
	w[3] = 0
	h, deq, err := QuantizeFP8("w", w, o, k, [2]int{2, 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Check(); err != nil {
		t.Fatal(err)
	}
	if h.Scale.Shape[0] != 3 || h.Scale.Shape[1] != 3 {
		t.Fatalf("scale shape %v, want [3 3]", h.Scale.Shape)
	}
	for i := range w {
		// E4M3 keeps 3 mantissa bits: relative error <= 2^-4 above the
		// block's subnormal range
		if d := math.Abs(float64(deq[i] - w[i])); d > math.Abs(float64(w[i]))/16+1e-3 {
			t.Errorf("element %d: %g quantised to %g", i, w[i], deq[i])
		}
	}
	if _, _, err := QuantizeFP8("w", w, o, k, [2]int{0, 16}); err == nil {
		t.Error("block 0 accepted")
	}
}

func TestCheckFP8(t *testing.T) {
	ok := func() Host {
		return Host{Name: "w", DType: tensor.F8E4M3, Shape: []int{3, 5}, Data: make([]byte, 15), Block: [2]int{2, 4},
			Scale: &Host{Name: "w_scale_inv", DType: tensor.F32, Shape: []int{2, 2}, Data: make([]byte, 16)}}
	}
	for _, tc := range []struct {
		name string
		mod  func(h *Host)
		want string
	}{
		{"ok", func(h *Host) {}, ""},
		{"1-D scale", func(h *Host) { h.Scale.Shape = []int{4} }, ""},
		{"bf16 scale", func(h *Host) { h.Scale.DType, h.Scale.Data = tensor.BF16, make([]byte, 8) }, ""},
		{"no scale", func(h *Host) { h.Scale = nil }, "tensor w: F8_E4M3 weight without block scales"},
		{"scale on bf16", func(h *Host) { h.DType, h.Data = tensor.BF16, make([]byte, 30) }, "tensor w: block scales given for a BF16 tensor"},
		{"3-D", func(h *Host) { h.Shape = []int{3, 5, 1} }, "F8_E4M3 weight has shape [3 5 1], want 2-D"},
		{"block 0", func(h *Host) { h.Block = [2]int{0, 4} }, "FP8 block size [0 4]"},
		{"scale shape", func(h *Host) { h.Scale.Shape = []int{2, 3} }, "scale w_scale_inv has shape [2 3], want [2 2] for weight [3 5] in blocks [2 4]"},
		{"scale int", func(h *Host) { h.Scale.DType = tensor.I32 }, "scale w_scale_inv is I32"},
		{"scale short", func(h *Host) { h.Scale.Data = h.Scale.Data[:12] }, "tensor w_scale_inv: F32 [2 2] needs 16 bytes, have 12"},
		{"data short", func(h *Host) { h.Data = h.Data[:14] }, "tensor w: F8_E4M3 [3 5] needs 15 bytes, have 14"},
	} {
		h := ok()
		tc.mod(&h)
		err := h.Check()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := CheckMatMulWeight(Arg{Name: "w", DType: tensor.F8E4M3, Shape: []int{2, 2}}); err == nil || !strings.Contains(err.Error(), "without block scales") {
		t.Errorf("FP8 arg without block: %v", err)
	}
	if err := CheckMatMulWeight(Arg{Name: "w", DType: tensor.F8E4M3, Shape: []int{2, 2}, Block: [2]int{128, 128}}); err != nil {
		t.Error(err)
	}
	if err := CheckMatMulWeight(Arg{Name: "w", DType: tensor.I32, Shape: []int{2, 2}}); err == nil {
		t.Error("I32 weight accepted")
	}
}
