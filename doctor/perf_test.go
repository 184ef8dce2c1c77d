//go:build linux && amd64 && cgo

package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/sysinfo"
	"github.com/ktserve/kt/tensor"
)

// TestPerfChecks: without --measure no perf line appears; with it, the read
// bandwidth is measured, the AMX tile rate where the CPU has AMX (and not
// otherwise), and with a model the routed-expert bytes per token of each
// format (worked out here from the config) and the decode rate they allow.
func TestPerfChecks(t *testing.T) {
	model := filepath.Join(fixtures, "qwen3next-b")
	env := &Env{Sys: sysinfo.Detect(), ModelPath: model}
	if rs := runSections(env, "perf"); len(rs) != 0 {
		t.Fatalf("perf results without --measure: %+v", rs)
	}
	env = &Env{Sys: sysinfo.Detect(), ModelPath: model, Measure: true}
	rs := runSections(env, "perf")
	read := find(t, rs, "perf.read")
	gbps, _ := read.Data["read_gbps"].(float64)
	if read.Status != Pass || gbps <= 0 {
		t.Fatalf("perf.read: %s %s %v", read.Status, read.Detail, read.Data)
	}
	hasAMX := false
	for _, r := range rs {
		hasAMX = hasAMX || r.Name == "perf.amx"
	}
	if hasAMX != cpuexperts.DetectFeatures().AMX {
		t.Errorf("perf.amx reported %v on a CPU with AMX %v", hasAMX, cpuexperts.DetectFeatures().AMX)
	}
	c, err := modelconfig.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	dec := find(t, rs, "perf.decode")
	H, I := float64(c.HiddenSize), float64(c.MoEIntermediateSize)
	// the int methods read a scale and a correction (4 bytes each) per row of k weights
	for meth, perWeight := range map[cpuexperts.Method]func(k float64) float64{
		cpuexperts.AMXBF16: func(float64) float64 { return 2 },
		cpuexperts.AMXINT8: func(k float64) float64 { return 1 + 8/k },
		cpuexperts.AMXINT4: func(k float64) float64 { return 0.5 + 8/k },
	} {
		want := float64(c.NumMoELayers()*c.TopK) * (2*H*I*perWeight(H) + H*I*perWeight(I))
		got, _ := dec.Data[string(meth)].(map[string]any)
		b, _ := got["bytes_per_token"].(float64)
		tps, _ := got["tokens_per_s"].(float64)
		if b != want || tps != gbps*1e9/want {
			t.Errorf("%s: %v bytes per token, %v tok/s; want %v, %v", meth, b, tps, want, gbps*1e9/want)
		}
	}
}

// TestPerfDecodeUnservedArchitecture: with --measure, a GLM-4.5-style MoE
// checkpoint kt does not serve still gets its decode bound, from the
// routed experts its checkpoint holds in the decoder layers (an MTP layer
// past num_hidden_layers left out).
func TestPerfDecodeUnservedArchitecture(t *testing.T) {
	const H, I, E = 64, 32, 4
	dir := t.TempDir()
	cfg := `{"architectures":["Glm4MoeForCausalLM"],"hidden_size":64,"moe_intermediate_size":32,"n_routed_experts":4,
"num_experts_per_tok":2,"num_hidden_layers":3,"first_k_dense_replace":1}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var specs []safetensors.Spec
	for _, l := range []int{1, 2, 3} { // layer 3: the MTP module
		for e := 0; e < E; e++ {
			p := fmt.Sprintf("model.layers.%d.mlp.experts.%d.", l, e)
			specs = append(specs, safetensors.Spec{Name: p + "gate_proj.weight", DType: tensor.BF16, Shape: []int64{I, H}},
				safetensors.Spec{Name: p + "up_proj.weight", DType: tensor.BF16, Shape: []int64{I, H}},
				safetensors.Spec{Name: p + "down_proj.weight", DType: tensor.BF16, Shape: []int64{H, I}})
		}
	}
	w, err := safetensors.Create(filepath.Join(dir, "model.safetensors"), specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if err := w.WriteTensor(s.Name, make([]byte, 2*s.Shape[0]*s.Shape[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	env := &Env{Sys: sysinfo.Detect(), ModelPath: dir, Measure: true}
	rs := runSections(env, "perf")
	dec := find(t, rs, "perf.decode")
	for _, meth := range decodeMethods {
		want := float64(meth.ExpertBytesEstimate(H, I) * 2 * 2) // top-2 of 2 decoder layers
		got, _ := dec.Data[string(meth)].(map[string]any)
		if b, _ := got["bytes_per_token"].(float64); b != want {
			t.Errorf("%s: %v bytes per token, want %v (%s)", meth, b, want, dec.Detail)
		}
	}
}
