//go:build linux && amd64 && cgo

package ktformat

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/tensor"
)

// Converting with QuantizeLayer and loading with NewLayerQuant must give the
// same layer as quantizing at load time, bit for bit.
func TestQuantRoundTrip(t *testing.T) {
	for _, m := range []cpuexperts.Method{cpuexperts.AMXINT8, cpuexperts.AMXINT4} {
		for _, pools := range []int{1, 2} {
			spec := small
			spec.Method = m
			src := &cpuexperts.RandomSource{Spec: spec, DType: tensor.BF16, Seed: 21}
			dir := t.TempDir()
			if err := QuantizeLayer(src, spec, pools, 3, filepath.Join(dir, "layer-3.safetensors"), nil); err != nil {
				t.Fatal(err)
			}
			ok, err := CheckQuantShardLayout(filepath.Join(dir, "layer-3.safetensors"), m, pools, 3, LayoutRows)
			if !ok || err != nil {
				t.Fatalf("fresh shard not accepted: %v %v", ok, err)
			}
			if _, err := CheckQuantShardLayout(filepath.Join(dir, "layer-3.safetensors"), m, pools+1, 3, LayoutRows); err == nil {
				t.Error("shard for another pool count accepted for resume")
			}
			man := QuantManifest{Method: m, Bits: map[cpuexperts.Method]int{cpuexperts.AMXINT8: 8, cpuexperts.AMXINT4: 4}[m], ThreadpoolCnt: pools,
				Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate, Layers: []int{3}}
			if err := WriteQuantManifest(dir, man); err != nil {
				t.Fatal(err)
			}
			qd, err := OpenQuantDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			e := newEngine(t, spec, pools, 2, 8, 4)
			lq, err := e.NewLayerQuant(spec, qd.Layer(3))
			if err != nil {
				t.Fatal(err)
			}
			lf, err := e.NewLayer(spec, src)
			if err != nil {
				t.Fatal(err)
			}
			x, ids, w := cpuexperts.RandomBatch(4, 8, 4, spec.Hidden, spec.Experts)
			a, b := make([]float32, 8*spec.Hidden), make([]float32, 8*spec.Hidden)
			if err := lq.Forward(&cpuexperts.Batch{Tokens: 8, TopK: 4, X: x, IDs: ids, Weights: w, Out: a}); err != nil {
				t.Fatal(err)
			}
			if err := lf.Forward(&cpuexperts.Batch{Tokens: 8, TopK: 4, X: x, IDs: ids, Weights: w, Out: b}); err != nil {
				t.Fatal(err)
			}
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("%s pools %d: out[%d] from file %g, quantized at load %g", m, pools, i, a[i], b[i])
				}
			}
			lq.Close()
			lf.Close()
			// an engine with another pool count refuses the files
			e2 := newEngine(t, spec, 3-pools, 2, 8, 4)
			if _, err := e2.NewLayerQuant(spec, qd.Layer(3)); err == nil || !strings.Contains(err.Error(), "thread pools") {
				t.Errorf("pool count mismatch: err = %v", err)
			}
			qd.Close()
		}
	}
}
