//go:build linux && amd64 && cgo

package hybrid

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/moe/expertsource"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// fp8Weights is a layer of E experts quantized to block-scaled FP8 as FP8
// checkpoints are (backend.QuantizeFP8, 128 x 128 blocks), and the same
// weights dequantized, as F32 hosts.
func fp8Weights(t *testing.T, E, H, I int) (fp8, deq *Weights) {
	t.Helper()
	fp8 = &Weights{HostGate: make([]backend.Host, E), HostUp: make([]backend.Host, E), HostDown: make([]backend.Host, E)}
	deq = &Weights{HostGate: make([]backend.Host, E), HostUp: make([]backend.Host, E), HostDown: make([]backend.Host, E)}
	rng := rand.New(rand.NewPCG(3, 4))
	for e := range E {
		for j, dst := range [][2]*backend.Host{{&fp8.HostGate[e], &deq.HostGate[e]}, {&fp8.HostUp[e], &deq.HostUp[e]}, {&fp8.HostDown[e], &deq.HostDown[e]}} {
			o, k := I, H
			if j == 2 {
				o, k = H, I
			}
			w := make([]float32, o*k)
			for i := range w {
				w[i] = float32(rng.NormFloat64() / math.Sqrt(float64(k)))
			}
			h, d, err := backend.QuantizeFP8(fmt.Sprintf("e%d.%d", e, j), w, o, k, [2]int{128, 128})
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 4*len(d))
			for i, v := range d {
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
			}
			*dst[0] = h
			*dst[1] = backend.Host{Name: h.Name, DType: tensor.F32, Shape: []int{o, k}, Data: b}
		}
	}
	return fp8, deq
}

// perRowScales re-expresses a 128 x 128 block-scaled FP8 host in [1, 128]
// blocks (one scale row per weight row), as a row slice of fused experts
// off the block boundaries carries them.
func perRowScales(t *testing.T, h backend.Host) backend.Host {
	t.Helper()
	sc, err := safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: h.Scale.Name, DType: h.Scale.DType}, Data: h.Scale.Data}.ToF32()
	if err != nil {
		t.Fatal(err)
	}
	o, k := h.Shape[0], h.Shape[1]
	nb := (k + 127) / 128
	b := make([]byte, 0, 4*o*nb)
	for r := range o {
		for c := range nb {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(sc[(r/128)*nb+c]))
		}
	}
	h.Block = [2]int{1, 128}
	h.Scale = &backend.Host{Name: h.Scale.Name, DType: tensor.F32, Shape: []int{o, nb}, Data: b}
	return h
}

// TestHostMatrixFP8: the CPU expert engine reads a block-scaled FP8
// checkpoint's experts with their scales: a converting method gives bit for bit the layer
// of the dequantized weights, whether the scales come in 128 x 128 blocks
// or one row at a time; the in-place FP8 method takes 128 x 128 blocks and
// matches the float64 reference of the dequantized weights.
func TestHostMatrixFP8(t *testing.T) {
	const E, H, I, k, tokens = 4, 256, 256, 2, 40
	fp8, deq := fp8Weights(t, E, H, I)
	rows := &Weights{HostGate: make([]backend.Host, E), HostUp: make([]backend.Host, E), HostDown: make([]backend.Host, E)}
	for e := range E {
		rows.HostGate[e], rows.HostUp[e], rows.HostDown[e] = perRowScales(t, fp8.HostGate[e]), perRowScales(t, fp8.HostUp[e]), perRowScales(t, fp8.HostDown[e])
	}
	x, ids, wts := cpuexperts.RandomBatch(9, tokens, k, H, E)
	run := func(m cpuexperts.Method, w *Weights) []float32 {
		t.Helper()
		eng, err := cpuexperts.NewEngine(cpuexperts.Config{Threads: 2, MaxTokens: tokens, TopK: k, Experts: E, Hidden: H, Intermediate: I})
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		l, err := eng.NewLayer(cpuexperts.LayerSpec{Method: m, Experts: E, Hidden: H, Intermediate: I}, hostSource{w})
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		defer l.Close()
		out := make([]float32, tokens*H)
		if err := l.Forward(&cpuexperts.Batch{Tokens: tokens, TopK: k, X: x, IDs: ids, Weights: wts, Out: out}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := run(cpuexperts.AMXINT8, deq)
	for name, w := range map[string]*Weights{"128x128 blocks": fp8, "per-row scales": rows} {
		if got := run(cpuexperts.AMXINT8, w); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("AMXINT8 from FP8 (%s) differs from the dequantized weights", name)
		}
	}
	ref, err := cpuexperts.Reference(hostSource{deq}, cpuexperts.LayerSpec{Method: cpuexperts.BF16, Experts: E, Hidden: H, Intermediate: I}, x, tokens, k, ids, wts, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := run(cpuexperts.FP8, fp8)
	var num, den float64
	for i := range ref {
		d := float64(got[i] - ref[i])
		num, den = num+d*d, den+float64(ref[i])*float64(ref[i])
	}
	if rel := math.Sqrt(num / den); !(rel < 1e-2) {
		t.Errorf("FP8 in place: relative error %.3g against the reference", rel)
	}
	if _, err := expertsource.HostMatrix(backend.Host{Name: "w", DType: tensor.F8E4M3, Shape: []int{2, 2}, Data: make([]byte, 4),
		Scale: &backend.Host{Name: "s", DType: tensor.I32, Shape: []int{1, 1}, Data: make([]byte, 4)}, Block: [2]int{128, 128}}); err == nil {
		t.Error("integer scales accepted")
	}
}
