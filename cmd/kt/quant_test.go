//go:build linux && amd64 && cgo

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch/qwen3moe"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/moe/expertsource"
	"github.com/ktserve/kt/moe/ktformat"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// writeTinyMoE writes a 2-layer Qwen3-MoE checkpoint holding only routed experts.
func writeTinyMoE(t *testing.T, dir string) cpuexperts.LayerSpec {
	t.Helper()
	spec := cpuexperts.LayerSpec{Experts: 4, Hidden: 128, Intermediate: 256}
	cfg := `{"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe","vocab_size":1000,"hidden_size":128,
"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,"intermediate_size":256,
"max_position_embeddings":512,"rms_norm_eps":1e-6,"hidden_act":"silu","num_experts":4,"num_experts_per_tok":2,
"norm_topk_prob":true,"moe_intermediate_size":256,"decoder_sparse_step":1,"mlp_only_layers":[],"rope_theta":10000}`
	writeExpertCheckpoint(t, dir, cfg, "model.", expertsource.NamingProj, spec, []int{0, 1}, nil, func(l int) cpuexperts.Source {
		return &cpuexperts.RandomSource{Spec: spec, DType: tensor.BF16, Seed: uint64(l + 1)}
	})
	return spec
}

// writeExpertCheckpoint writes config.json and one safetensors file holding
// the routed experts of the given layers under prefix and naming, each
// layer's from src(l) (fp8 matrices with their block scales as
// .weight_scale_inv f32 tensors), and the extra tensors named (bf16 [1]).
func writeExpertCheckpoint(t *testing.T, dir, cfg, prefix string, naming expertsource.ExpertNaming, spec cpuexperts.LayerSpec, layers []int,
	extra []string, src func(l int) cpuexperts.Source) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var specs []safetensors.Spec
	var data [][]byte
	for _, l := range layers {
		s := src(l)
		if naming == expertsource.NamingFused {
			specs, data = appendFused(t, specs, data, prefix, l, spec, s)
			continue
		}
		for e := 0; e < spec.Experts; e++ {
			for p := cpuexperts.Gate; p <= cpuexperts.Down; p++ {
				m, err := s.Matrix(e, p)
				if err != nil {
					t.Fatal(err)
				}
				name := naming.Name(prefix, l, e, p)
				specs = append(specs, safetensors.Spec{Name: name, DType: m.DType, Shape: []int64{int64(m.Rows), int64(m.Cols)}})
				data = append(data, m.Data)
				if m.DType == tensor.F8E4M3 {
					br, bc := (m.Rows+127)/128, (m.Cols+127)/128
					specs = append(specs, safetensors.Spec{Name: strings.TrimSuffix(name, ".weight") + ".weight_scale_inv", DType: tensor.F32, Shape: []int64{int64(br), int64(bc)}})
					b := make([]byte, 0, 4*len(m.BlockScale))
					for _, v := range m.BlockScale {
						b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
					}
					data = append(data, b)
				}
			}
		}
	}
	for _, n := range extra {
		specs = append(specs, safetensors.Spec{Name: n, DType: tensor.BF16, Shape: []int64{1}})
		data = append(data, []byte{0, 0})
	}
	w, err := safetensors.Create(filepath.Join(dir, "model.safetensors"), specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range data {
		if _, err := w.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// appendFused adds layer l's experts from s as transformers 5 saves them:
// gate_up_proj [E, 2I, H] (each expert's gate rows, then its up rows) and
// down_proj [E, H, I], fp8 ones with their block scales stacked alike
// (..._scale_inv [E, rows/128, cols/128]).
func appendFused(t *testing.T, specs []safetensors.Spec, data [][]byte, prefix string, l int, spec cpuexperts.LayerSpec, s cpuexperts.Source) ([]safetensors.Spec, [][]byte) {
	t.Helper()
	for _, ps := range [][]cpuexperts.Proj{{cpuexperts.Gate, cpuexperts.Up}, {cpuexperts.Down}} {
		var w, sc []byte
		var dt tensor.DType
		rows, cols := 0, 0
		for e := 0; e < spec.Experts; e++ {
			rows = 0
			for _, p := range ps {
				m, err := s.Matrix(e, p)
				if err != nil {
					t.Fatal(err)
				}
				w = append(w, m.Data...)
				for _, v := range m.BlockScale {
					sc = binary.LittleEndian.AppendUint32(sc, math.Float32bits(v))
				}
				dt, rows, cols = m.DType, rows+m.Rows, m.Cols
			}
		}
		name := expertsource.NamingFused.Name(prefix, l, 0, ps[0])
		specs = append(specs, safetensors.Spec{Name: name, DType: dt, Shape: []int64{int64(spec.Experts), int64(rows), int64(cols)}})
		data = append(data, w)
		if dt == tensor.F8E4M3 {
			specs = append(specs, safetensors.Spec{Name: name + "_scale_inv", DType: tensor.F32, Shape: []int64{int64(spec.Experts), int64(rows / 128), int64((cols + 127) / 128)}})
			data = append(data, sc)
		}
	}
	return specs, data
}

func TestQuantCommand(t *testing.T) {
	model, out := t.TempDir(), t.TempDir()
	spec := writeTinyMoE(t, model)
	var so, se bytes.Buffer
	o := quantOpts{output: out, method: "int8", pools: 2}
	if err := runQuant(model, o, &so, &se); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(se.String(), "100.0%") {
		t.Errorf("no progress bar reaching 100%%: %q", se.String())
	}
	// resume: a second run finds both layers done and rewrites nothing
	st, _ := os.Stat(filepath.Join(out, "model-00001-of-00002.safetensors"))
	se.Reset()
	if err := runQuant(model, o, &so, &se); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(se.String(), "done before") {
		t.Errorf("resume did not skip finished layers: %q", se.String())
	}
	st2, _ := os.Stat(filepath.Join(out, "model-00001-of-00002.safetensors"))
	if !st.ModTime().Equal(st2.ModTime()) {
		t.Error("finished shard rewritten on resume")
	}
	// other settings into the same directory are refused
	if err := runQuant(model, quantOpts{output: out, method: "int8", pools: 1}, &so, &se); err == nil {
		t.Error("pool count change over an existing output accepted")
	}
	// the loader reads the layout and matches quantizing at load time
	qd, err := ktformat.OpenQuantDir(out)
	if err != nil {
		t.Fatal(err)
	}
	defer qd.Close()
	checkQuantMatchesLoad(t, spec, qd, "converted weights")
}

// TestQuantLayoutKT: --layout kt output loads (through the KT reader) and
// gives the same layer as quantizing at load (AMXINT8: bit for bit); a run
// with the other layout over it is refused.
func TestQuantLayoutKT(t *testing.T) {
	model, out := t.TempDir(), t.TempDir()
	spec := writeTinyMoE(t, model)
	var so, se bytes.Buffer
	if err := runQuant(model, quantOpts{output: out, method: "int8", pools: 2, layout: "kt", noProg: true}, &so, &se); err != nil {
		t.Fatal(err)
	}
	if err := runQuant(model, quantOpts{output: out, method: "int8", pools: 2, layout: "rows", noProg: true}, &so, &se); err == nil {
		t.Error("rows layout over a kt-layout output accepted")
	}
	if err := runQuant(model, quantOpts{output: t.TempDir(), method: "int8", pools: 2, layout: "gguf"}, &so, &se); err == nil {
		t.Error("unknown layout accepted")
	}
	qd, err := ktformat.OpenQuantDir(out)
	if err != nil {
		t.Fatal(err)
	}
	defer qd.Close()
	if qd.Manifest.Layout != ktformat.LayoutKT {
		t.Fatalf("manifest layout %q", qd.Manifest.Layout)
	}
	// KT's own reader (no manifest) sees the same directory as a KT one
	kd, err := ktformat.OpenKTDir(out, spec.Hidden, spec.Intermediate)
	if err != nil {
		t.Fatal(err)
	}
	kd.Close()
	checkQuantMatchesLoad(t, spec, qd, "kt-layout weights")
}

// TestServeKTDir serves a synthetic model from a KTransformers-layout
// directory without kt's manifest (what KT's own converter leaves: kt quant
// --layout kt writes the same bytes, see
// cpuexperts.TestQuantizeLayerKTMatchesKT) and gets exactly the tokens of
// kt's own AMXINT8 files; directories that do not fit are refused at startup.
func TestServeKTDir(t *testing.T) {
	dir := t.TempDir()
	if err := qwen3moe.WriteSynthetic(dir, ktTestShape, 5); err != nil {
		t.Fatal(err)
	}
	rows, ktdir := filepath.Join(t.TempDir(), "rows"), filepath.Join(t.TempDir(), "kt")
	for _, c := range []struct{ out, layout string }{{rows, "rows"}, {ktdir, "kt"}} {
		if err := runQuant(dir, quantOpts{output: c.out, method: "int8", pools: 1, layout: c.layout, noProg: true}, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(ktdir, ktformat.QuantManifestName)); err != nil {
		t.Fatal(err)
	}
	common := []string{"--model-path", dir, "--skip-tokenizer-init", "--max-running-requests", "2", "--max-total-tokens", "256",
		"--chunked-prefill-size", "8", "--kt-cpuinfer", "2", "--kt-num-gpu-experts", "0", "--kt-max-deferred-experts-per-token", "0", "--kt-method", "AMXINT8"}
	url, _ := startServeLogs(t, append(common, "--kt-weight-path", rows)...)
	want := generateIDs(t, url)
	url, logs := startServeLogs(t, append(common, "--kt-weight-path", ktdir)...)
	if got := generateIDs(t, url); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("from KT's layout: %v\nfrom kt's: %v", got, want)
	}
	if !strings.Contains(logs(), "KTransformers' converted weights in "+ktdir) {
		t.Errorf("startup log does not name the KT directory:\n%s", logs())
	}
	// a missing layer, and the wrong method, are refused at startup
	shards, _ := filepath.Glob(filepath.Join(ktdir, "*.safetensors"))
	if err := os.Remove(shards[1]); err != nil {
		t.Fatal(err)
	}
	err := runServe(context.Background(), append(append([]string{"--port", "0"}, common...), "--kt-weight-path", ktdir), io.Discard, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "has no experts for MoE layer 1") {
		t.Errorf("missing layer: %v", err)
	}
	c2 := append([]string{"--port", "0"}, common[:len(common)-2]...)
	err = runServe(context.Background(), append(c2, "--kt-method", "AMXBF16", "--kt-weight-path", ktdir), io.Discard, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "holds AMXINT8 weights") {
		t.Errorf("method mismatch: %v", err)
	}
}

// checkQuantMatchesLoad runs both layers of the tiny model from the converted
// directory qd and from the same seeded bf16 weights quantized at load (AMXINT8)
// and requires bit-identical outputs; what names the converted weights in errors.
func checkQuantMatchesLoad(t *testing.T, spec cpuexperts.LayerSpec, qd *ktformat.QuantDir, what string) {
	t.Helper()
	checkQuantLayers(t, spec, qd, what, []int{0, 1}, func(l int) cpuexperts.Source {
		return &cpuexperts.RandomSource{Spec: spec, DType: tensor.BF16, Seed: uint64(l + 1)}
	})
}

// checkQuantLayers holds each converted layer to the same layer quantized
// at load from src(l) (AMXINT8, two pools): the outputs must be identical.
func checkQuantLayers(t *testing.T, spec cpuexperts.LayerSpec, qd *ktformat.QuantDir, what string, layers []int, src func(l int) cpuexperts.Source) {
	t.Helper()
	spec.Method = cpuexperts.AMXINT8
	e, err := cpuexperts.NewEngine(cpuexperts.Config{Threads: 2, Pools: 2, MaxTokens: 4, TopK: 2, Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, l := range layers {
		lq, err := e.NewLayerQuant(spec, qd.Layer(l))
		if err != nil {
			t.Fatal(err)
		}
		lf, err := e.NewLayer(spec, src(l))
		if err != nil {
			t.Fatal(err)
		}
		x, ids, w := cpuexperts.RandomBatch(5, 4, 2, spec.Hidden, spec.Experts)
		a, b := make([]float32, 4*spec.Hidden), make([]float32, 4*spec.Hidden)
		for _, c := range []struct {
			l   *cpuexperts.Layer
			out []float32
		}{{lq, a}, {lf, b}} {
			if err := c.l.Forward(&cpuexperts.Batch{Tokens: 4, TopK: 2, X: x, IDs: ids, Weights: w, Out: c.out}); err != nil {
				t.Fatal(err)
			}
		}
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("layer %d: %s give a different output than quantizing at load", l, what)
		}
		lq.Close()
		lf.Close()
	}
}

// TestQuantOtherArchitectures converts checkpoints of architectures kt does
// not serve (yet): a GLM-4.5-style fp8 one (a dense first layer, shared
// experts beside the routed ones, a multi-token prediction layer past
// num_hidden_layers) and a Mixtral-style bf16 one (w1/w3/w2 names). The
// converted layers equal quantizing the same weights at load; a config whose
// expert count disagrees with the checkpoint is refused.
func TestQuantOtherArchitectures(t *testing.T) {
	spec := cpuexperts.LayerSpec{Experts: 8, Hidden: 256, Intermediate: 256}
	fp8 := func(l int) cpuexperts.Source {
		return &cpuexperts.SyntheticSource{Spec: spec, DType: tensor.F8E4M3, Seed: uint64(l + 11)}
	}
	bf16 := func(l int) cpuexperts.Source {
		return &cpuexperts.RandomSource{Spec: spec, DType: tensor.BF16, Seed: uint64(l + 21)}
	}
	ds := `{"architectures":["Glm4MoeForCausalLM"],"hidden_size":256,"intermediate_size":1024,"moe_intermediate_size":256,
"n_routed_experts":8,"n_shared_experts":1,"num_experts_per_tok":2,"num_hidden_layers":3,"first_k_dense_replace":1}`
	q35 := `{"architectures":["Qwen3_5MoeForConditionalGeneration"],"text_config":{"hidden_size":256,"moe_intermediate_size":256,
"num_experts":8,"num_experts_per_tok":2,"num_hidden_layers":2}}`
	mix := `{"architectures":["MixtralForCausalLM"],"hidden_size":256,"intermediate_size":256,"num_local_experts":8,"num_experts_per_tok":2,"num_hidden_layers":2}`
	cases := []struct {
		name, cfg string
		prefix    string // "" = "model."
		naming    expertsource.ExpertNaming
		written   []int // layers holding experts
		want      []int // layers converted
		extra     []string
		src       func(int) cpuexperts.Source
		log       string
	}{
		{name: "glm-4.5 fp8", cfg: ds, naming: expertsource.NamingProj, written: []int{1, 2, 3}, want: []int{1, 2},
			extra: []string{"model.layers.0.mlp.gate_proj.weight", "model.layers.1.mlp.shared_experts.gate_proj.weight"}, src: fp8,
			log: "layers [3] are past num_hidden_layers 3"},
		{name: "mixtral bf16", cfg: mix, naming: expertsource.NamingW123, written: []int{0, 1}, want: []int{0, 1}, src: bf16},
		{name: "transformers 5 fused bf16", cfg: q35, prefix: "model.language_model.", naming: expertsource.NamingFused, written: []int{0, 1}, want: []int{0, 1}, src: bf16},
		{name: "transformers 5 fused fp8", cfg: q35, prefix: "model.language_model.", naming: expertsource.NamingFused, written: []int{0, 1}, want: []int{0, 1}, src: fp8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			model, out := t.TempDir(), t.TempDir()
			prefix := c.prefix
			if prefix == "" {
				prefix = "model."
			}
			writeExpertCheckpoint(t, model, c.cfg, prefix, c.naming, spec, c.written, c.extra, c.src)
			var so, se bytes.Buffer
			if err := runQuant(model, quantOpts{output: out, method: "int8", pools: 2, noProg: true}, &so, &se); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(se.String(), c.log) {
				t.Errorf("log %q, want %q", se.String(), c.log)
			}
			qd, err := ktformat.OpenQuantDir(out)
			if err != nil {
				t.Fatal(err)
			}
			defer qd.Close()
			if !slices.Equal(qd.Manifest.Layers, c.want) {
				t.Fatalf("converted layers %v, want %v", qd.Manifest.Layers, c.want)
			}
			checkQuantLayers(t, spec, qd, c.name+" weights", c.want, c.src)
		})
	}
	model := t.TempDir()
	writeExpertCheckpoint(t, model, strings.Replace(mix, `"num_local_experts":8`, `"num_local_experts":16`, 1), "model.", expertsource.NamingW123, spec, []int{0}, nil, bf16)
	if err := runQuant(model, quantOpts{output: t.TempDir(), method: "int4", noProg: true, pools: 1}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "config.json states 16 routed experts per layer, the checkpoint holds 8") {
		t.Errorf("expert count mismatch: %v", err)
	}
}

// TestInspectUnservedArchitecture runs kt inspect on a GLM-4.5-style
// fp8 checkpoint (an architecture kt does not serve): it describes the
// routed experts (decoder layers only, the MTP layer named), their size per
// method and per decoded token, and exits with an error naming the
// architecture; --json carries the same.
func TestInspectUnservedArchitecture(t *testing.T) {
	spec := cpuexperts.LayerSpec{Experts: 8, Hidden: 256, Intermediate: 256}
	ds := `{"architectures":["Glm4MoeForCausalLM"],"hidden_size":256,"intermediate_size":1024,"moe_intermediate_size":256,
"n_routed_experts":8,"n_shared_experts":1,"num_experts_per_tok":2,"num_hidden_layers":3,"first_k_dense_replace":1}`
	model := t.TempDir()
	writeExpertCheckpoint(t, model, ds, "model.", expertsource.NamingProj, spec, []int{1, 2, 3}, nil, func(l int) cpuexperts.Source {
		return &cpuexperts.SyntheticSource{Spec: spec, DType: tensor.F8E4M3, Seed: uint64(l + 11)}
	})
	out, err := runCLI(t, "inspect", "--model-path", model)
	t.Logf("kt inspect:\n%s", out)
	if err == nil || !strings.Contains(err.Error(), "kt does not serve Glm4MoeForCausalLM yet") {
		t.Fatalf("inspect: %v, want kt does not serve Glm4MoeForCausalLM yet\n%s", err, out)
	}
	for _, want := range []string{"Glm4MoeForCausalLM: kt does not serve it yet", `2 MoE layers under "model."`,
		"8 experts of 256 x 256, top-2", "layers [3] are past num_hidden_layers 3", "AMXINT4", "kt quant " + model} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	out, _ = runCLI(t, "inspect", "--json", "--model-path", model)
	var j struct {
		Layers  []int `json:"moe_layers"`
		Methods []struct {
			Method   string
			PerToken int64 `json:"bytes_per_token"`
		} `json:"methods"`
	}
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &j); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if !slices.Equal(j.Layers, []int{1, 2}) || len(j.Methods) != 3 {
		t.Fatalf("json: layers %v, %d methods; want [1 2], 3\n%s", j.Layers, len(j.Methods), out)
	}
	for _, m := range j.Methods {
		per := cpuexperts.Method(m.Method).ExpertBytesEstimate(256, 256)
		if m.PerToken != per*2*2 {
			t.Errorf("%s: %d bytes per token, want %d (2 experts x 2 layers)", m.Method, m.PerToken, per*4)
		}
	}
}
