package lora

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/adapter/ktlora"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// fac is one factor tensor of a test adapter: its values are v(i) for
// element i (rounded to dt when dt is BF16 or F16).
type fac struct {
	name       string
	dt         tensor.DType
	rows, cols int64
	shape      []int64 // overrides [rows, cols] when set
	bad        float32 // when not 0, element badAt holds bad instead
	badAt      int
}

// val is the value a test tensor holds at element i (exact in bf16 and f16).
func val(name string, i int) float32 {
	h := 0
	for _, c := range name {
		h = (h*31 + int(c)) % 97
	}
	return float32((h+i)%17-8) / 8
}

func encode(dt tensor.DType, name string, n int) []byte {
	out := make([]byte, n*dt.Size())
	for i := 0; i < n; i++ {
		v := val(name, i)
		switch dt {
		case tensor.F32:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		case tensor.BF16:
			binary.LittleEndian.PutUint16(out[2*i:], tensor.F32ToBF16(v))
		case tensor.F16:
			// v = k/8 with |k| <= 8: exact in half precision.
			binary.LittleEndian.PutUint16(out[2*i:], f16(v))
		default:
			// Bytes of another dtype: whatever, Load refuses it first.
		}
	}
	return out
}

// f16 encodes the few values val returns (0 and ±k/8, k <= 8).
func f16(v float32) uint16 {
	if v == 0 {
		return 0
	}
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	e := int((b>>23)&0xff) - 127 + 15
	return sign | uint16(e)<<10 | uint16((b&0x7fffff)>>13)
}

// f16Special encodes NaN and ±Inf in half precision.
func f16Special(v float32) uint16 {
	switch {
	case math.IsNaN(float64(v)):
		return 0x7e00
	case v > 0:
		return 0x7c00
	}
	return 0xfc00
}

// writeAdapter writes an adapter directory: config (raw JSON) and tensors.
func writeAdapter(t testing.TB, config string, facs []fac) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, f := range facs {
		shape := f.shape
		if shape == nil {
			shape = []int64{f.rows, f.cols}
		}
		n := 1
		for _, d := range shape {
			n *= int(d)
		}
		data := encode(f.dt, f.name, n)
		if f.bad != 0 {
			switch f.dt {
			case tensor.F32:
				binary.LittleEndian.PutUint32(data[4*f.badAt:], math.Float32bits(f.bad))
			case tensor.BF16:
				binary.LittleEndian.PutUint16(data[2*f.badAt:], uint16(math.Float32bits(f.bad)>>16))
			case tensor.F16:
				binary.LittleEndian.PutUint16(data[2*f.badAt:], f16Special(f.bad))
			}
		}
		ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: f.name, DType: f.dt, Shape: shape}, Data: data})
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

const (
	hid   = 8 // hidden size of the test model
	inter = 6 // expert intermediate size
	rank  = 2
)

// qProj is a non-expert LoRA on layer 0's q_proj ([hid, hid]).
func qProj(dt tensor.DType, prefix string) []fac {
	return []fac{
		{name: prefix + "model.layers.0.self_attn.q_proj.lora_A.weight", dt: dt, rows: rank, cols: hid},
		{name: prefix + "model.layers.0.self_attn.q_proj.lora_B.weight", dt: dt, rows: hid, cols: rank},
	}
}

// experts is the whole expert LoRA of one MoE layer with e experts.
func experts(layer, e int, dt tensor.DType) []fac {
	var out []fac
	for x := 0; x < e; x++ {
		for _, k := range ktlora.Kinds {
			rows, cols := int64(rank), int64(hid)
			switch {
			case k.Proj != ktlora.Down && k.Factor == ktlora.B:
				rows, cols = inter, rank
			case k.Proj == ktlora.Down && k.Factor == ktlora.A:
				rows, cols = rank, inter
			case k.Proj == ktlora.Down && k.Factor == ktlora.B:
				rows, cols = hid, rank
			}
			out = append(out, fac{name: ktlora.ExpertKey(layer, x, k), dt: dt, rows: rows, cols: cols})
		}
	}
	return out
}

const cfgR2 = `{"peft_type": "LORA", "r": 2, "lora_alpha": 4, "bias": "none"}`

func TestLoadScaling(t *testing.T) {
	for _, c := range []struct {
		config string
		alpha  float64
		scale  float32
		rs     bool
	}{
		{`{"r": 2}`, 2, 1, false},                                     // alpha defaults to r (SGLang-KT)
		{`{"r": 2, "lora_alpha": 4}`, 4, 2, false},                    // alpha / r
		{`{"r": 4, "lora_alpha": 8}`, 8, 2, false},                    // alpha / r
		{`{"r": 4, "lora_alpha": 8, "use_rslora": true}`, 8, 4, true}, // alpha / sqrt(r)
		{`{"r": 4, "lora_alpha": 8, "use_rslora": false}`, 8, 2, false},
		{`{"r": 2, "lora_alpha": 0.5}`, 0.5, 0.25, false},
	} {
		r := int64(2)
		if strings.Contains(c.config, `"r": 4`) {
			r = 4
		}
		facs := []fac{
			{name: "model.layers.0.self_attn.q_proj.lora_A.weight", dt: tensor.F32, rows: r, cols: hid},
			{name: "model.layers.0.self_attn.q_proj.lora_B.weight", dt: tensor.F32, rows: hid, cols: r},
		}
		a, err := Load("x", writeAdapter(t, c.config, facs), Composite)
		if err != nil {
			t.Fatalf("%s: %v", c.config, err)
		}
		if a.Alpha != c.alpha || a.Scale != c.scale || a.RSLoRA != c.rs || a.Rank != int(r) {
			t.Errorf("%s: rank %d alpha %g scale %g rslora %v, want %d %g %g %v", c.config, a.Rank, a.Alpha, a.Scale, a.RSLoRA, r, c.alpha, c.scale, c.rs)
		}
	}
}

// TestLoadFactors: factors of every float dtype are widened exactly, under
// every key prefix PEFT and kt convert-adapter write.
func TestLoadFactors(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		for _, prefix := range []string{"", "base_model.model.", "base_model.model.model.language_model."} {
			facs := qProj(dt, prefix)
			if prefix == "base_model.model.model.language_model." {
				for i := range facs {
					facs[i].name = strings.Replace(facs[i].name, "model.layers.", "layers.", 1)
				}
			}
			a, err := Load("x", writeAdapter(t, cfgR2, facs), Composite)
			if err != nil {
				t.Fatalf("%s %q: %v", dt, prefix, err)
			}
			p, err := a.Module(0, "self_attn.q_proj", hid, hid)
			if err != nil || p == nil {
				t.Fatalf("%s %q: Module: %v, %v", dt, prefix, p, err)
			}
			for _, m := range []struct {
				got  Matrix
				name string
			}{{p.A, facs[0].name}, {p.B, facs[1].name}} {
				if m.got.Name != m.name || m.got.DType != dt {
					t.Errorf("%s: factor %s (%s), want %s", dt, m.got.Name, m.got.DType, m.name)
				}
				for i, v := range m.got.Data {
					if v != val(m.name, i) {
						t.Fatalf("%s %s[%d] = %g, want %g", dt, m.name, i, v, val(m.name, i))
					}
				}
			}
			if err := a.Unused(); err != nil {
				t.Errorf("%s: Unused after Module: %v", dt, err)
			}
		}
	}
}

// TestSplit: expert keys (SGLang's rule) go to the expert half, shared
// expert and attention keys to the non-expert half.
func TestSplit(t *testing.T) {
	facs := append(qProj(tensor.BF16, "base_model.model."), experts(1, 2, tensor.BF16)...)
	facs = append(facs,
		fac{name: "base_model.model.model.layers.1.mlp.shared_expert.gate_proj.lora_A.weight", dt: tensor.BF16, rows: rank, cols: hid},
		fac{name: "base_model.model.model.layers.1.mlp.shared_expert.gate_proj.lora_B.weight", dt: tensor.BF16, rows: inter, cols: rank})
	a, err := Load("x", writeAdapter(t, cfgR2, facs), Composite)
	if err != nil {
		t.Fatal(err)
	}
	if a.NonExpertModules() != 2 || !a.HasExperts() {
		t.Fatalf("non-expert modules %d (want 2), experts %v", a.NonExpertModules(), a.HasExperts())
	}
	if p, err := a.Module(1, "mlp.shared_expert.gate_proj", inter, hid); err != nil || p == nil {
		t.Fatalf("shared expert: %v %v", p, err)
	}
	if err := a.Unused(); err == nil || !strings.Contains(err.Error(), "layers.0.self_attn.q_proj.lora_A.weight") {
		t.Errorf("Unused with q_proj untaken: %v", err)
	}
	if err := a.CheckExperts([]bool{false, true}, 2, hid, inter); err != nil {
		t.Fatal(err)
	}
	el := a.Experts[1]
	if el == nil || len(a.Experts) != 1 {
		t.Fatalf("experts %v", a.Experts)
	}
	// Stacks are per expert in order: expert 1's gate A follows expert 0's.
	n := rank * hid
	for e := 0; e < 2; e++ {
		name := ktlora.ExpertKey(1, e, ktlora.Kind{Proj: ktlora.Gate, Factor: ktlora.A})
		for i := 0; i < n; i++ {
			if el.GateA[e*n+i] != val(name, i) {
				t.Fatalf("GateA expert %d [%d] = %g, want %g", e, i, el.GateA[e*n+i], val(name, i))
			}
		}
		name = ktlora.ExpertKey(1, e, ktlora.Kind{Proj: ktlora.Down, Factor: ktlora.B})
		if got := el.DownB[e*hid*rank+3]; got != val(name, 3) {
			t.Fatalf("DownB expert %d [3] = %g, want %g", e, got, val(name, 3))
		}
	}
	if len(el.UpB) != 2*inter*rank || len(el.DownA) != 2*rank*inter || el.Rank != rank || el.Experts != 2 {
		t.Errorf("stack sizes: %+v", el)
	}
}

func TestLoadRefusals(t *testing.T) {
	q := qProj(tensor.F32, "")
	for _, c := range []struct {
		name   string
		config string
		facs   []fac
		part   Part
		want   string // "DIR" stands for the adapter directory
	}{
		{"peft type", `{"peft_type": "IA3", "r": 2}`, q, Composite, "lora adapter DIR: DIR/adapter_config.json: peft_type IA3, want LORA"},
		{"no r", `{"lora_alpha": 2}`, q, Composite, "lora adapter DIR: DIR/adapter_config.json: field r must be an integer in [1,4096]"},
		{"r zero", `{"r": 0}`, q, Composite, "field r must be an integer in [1,4096]"},
		{"r huge", `{"r": 5000}`, q, Composite, "field r must be an integer in [1,4096]"},
		{"r string", `{"r": "2"}`, q, Composite, "field r must be an integer in [1,4096]"},
		{"alpha string", `{"r": 2, "lora_alpha": "4"}`, q, Composite, `DIR/adapter_config.json: lora_alpha "4" is not a finite positive number`},
		{"alpha negative", `{"r": 2, "lora_alpha": -1}`, q, Composite, "lora_alpha -1 is not a finite positive number"},
		{"bias", `{"r": 2, "bias": "all"}`, q, Composite, `DIR/adapter_config.json: bias "all" is not supported (want none)`},
		{"config JSON", `{"r": 2`, q, Composite, "lora adapter DIR: DIR/adapter_config.json: invalid JSON"},
		{"dtype", cfgR2, []fac{{name: "model.layers.0.self_attn.q_proj.lora_A.weight", dt: tensor.F64, rows: 2, cols: hid}}, Composite,
			"lora adapter DIR: DIR/adapter_model.safetensors: tensor model.layers.0.self_attn.q_proj.lora_A.weight: dtype F64, want BF16, F16 or F32"},
		{"1-D", cfgR2, []fac{{name: "model.layers.0.self_attn.q_proj.lora_A.weight", dt: tensor.F32, shape: []int64{16}}}, Composite,
			"tensor model.layers.0.self_attn.q_proj.lora_A.weight: shape [16], want 2-D"},
		{"not a factor", cfgR2, []fac{{name: "model.layers.0.self_attn.q_proj.weight", dt: tensor.F32, rows: 2, cols: hid}}, Composite,
			"tensor model.layers.0.self_attn.q_proj.weight: not a LoRA factor (lora_A / lora_B)"},
		{"rank", cfgR2, []fac{{name: "model.layers.0.self_attn.q_proj.lora_B.weight", dt: tensor.F32, rows: hid, cols: 3}}, Composite,
			"tensor model.layers.0.self_attn.q_proj.lora_B.weight: KT expert LoRA rank mismatch: tensor rank 3, adapter_config.json r = 2"},
		{"outside layers", cfgR2, []fac{{name: "base_model.model.lm_head.lora_A.weight", dt: tensor.F32, rows: 2, cols: hid}}, Composite,
			"tensor base_model.model.lm_head.lora_A.weight: LoRA on a module outside the decoder layers (lm_head) is not supported by kt"},
		{"prefix", cfgR2, []fac{{name: "vision.layers.0.attn.qkv.lora_A.weight", dt: tensor.F32, rows: 2, cols: hid}}, Composite,
			`tensor vision.layers.0.attn.qkv.lora_A.weight: unexpected prefix "vision."`},
		{"layer number", cfgR2, []fac{{name: "model.layers.01.self_attn.q_proj.lora_A.weight", dt: tensor.F32, rows: 2, cols: hid}}, Composite,
			"tensor model.layers.01.self_attn.q_proj.lora_A.weight: bad layer number"},
		{"duplicate", cfgR2, []fac{{name: "model.layers.0.self_attn.q_proj.lora_A.weight", dt: tensor.F32, rows: 2, cols: hid},
			{name: "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", dt: tensor.F32, rows: 2, cols: hid}}, Composite,
			"self_attn.q_proj.lora_A.weight: duplicate LoRA factor for layer 0 self_attn.q_proj"},
		{"expert key", cfgR2, []fac{{name: "model.layers.0.mlp.experts.gate_proj.lora_A.weight", dt: tensor.F32, rows: 2, cols: hid}}, ExpertOnly,
			"tensor model.layers.0.mlp.experts.gate_proj.lora_A.weight: expert LoRA key not of the form model.layers.{L}.mlp.experts.{e}.{gate|up|down}_proj.{lora_A|lora_B}.weight"},
		{"duplicate expert", cfgR2, []fac{{name: "model.layers.0.mlp.experts.3.up_proj.lora_A.weight", dt: tensor.F32, rows: 2, cols: hid},
			{name: "base_model.model.model.layers.0.mlp.experts.3.up_proj.lora_A.weight", dt: tensor.F32, rows: 2, cols: hid}}, ExpertOnly,
			"duplicate expert LoRA factor for layer 0 expert 3 up_proj lora_A"},
		{"composite without non-expert", cfgR2, experts(0, 1, tensor.F32), Composite,
			"lora adapter DIR: a merged KT composite adapter must contain non-expert LoRA tensors; use --kt-expert-lora-path for an expert-only adapter"},
		{"expert-only with non-expert", cfgR2, append(experts(0, 1, tensor.F32), q...), ExpertOnly,
			"lora adapter DIR: --kt-expert-lora-path holds 2 non-expert LoRA tensors; pass a merged adapter with --lora-paths instead"},
		{"empty", cfgR2, nil, Static, "lora adapter DIR: DIR/adapter_model.safetensors has no LoRA tensors"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeAdapter(t, c.config, c.facs)
			_, err := Load("x", dir, c.part)
			want := strings.ReplaceAll(c.want, "DIR", dir)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v\nwant %q", err, want)
			}
		})
	}
	t.Run("no config", func(t *testing.T) {
		dir := t.TempDir()
		_, err := Load("x", dir, Composite)
		if want := "lora adapter " + dir + ": open " + filepath.Join(dir, "adapter_config.json"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	})
	t.Run("no weights", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(cfgR2), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load("x", dir, Composite)
		if err == nil || !strings.Contains(err.Error(), "lora adapter "+dir+": ") || !strings.Contains(err.Error(), "adapter_model.safetensors") {
			t.Errorf("error %v", err)
		}
	})
}

// TestLoadRefusesUnsafe: adapters that would poison every request (non-finite
// factors, an overflowing scaling) or that kt would serve wrongly (PEFT
// features it does not implement) are refused at load, naming the cause.
func TestLoadRefusesUnsafe(t *testing.T) {
	poisoned := func(dt tensor.DType, factor int, bad float32, at int) []fac {
		facs := qProj(dt, "base_model.model.")
		facs[factor].bad, facs[factor].badAt = bad, at
		return facs
	}
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	q := qProj(tensor.F32, "")
	for _, c := range []struct {
		name   string
		config string
		facs   []fac
		want   string // "DIR" stands for the adapter directory
	}{
		{"NaN f32", cfgR2, poisoned(tensor.F32, 0, nan, 3), "DIR/adapter_model.safetensors: tensor base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight: element 3 is NaN; LoRA factors must be finite"},
		{"NaN bf16", cfgR2, poisoned(tensor.BF16, 1, nan, 0), "tensor base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight: element 0 is NaN"},
		{"+Inf f16", cfgR2, poisoned(tensor.F16, 1, inf, 15), "lora_B.weight: element 15 is +Inf"},
		{"-Inf expert", cfgR2, append(q, func() []fac {
			e := experts(0, 1, tensor.BF16)
			e[4].bad, e[4].badAt = -inf, 7
			return e
		}()...), "tensor " + ktlora.ExpertKey(0, 0, ktlora.Kinds[4]) + ": element 7 is -Inf"},
		{"alpha 1e308", `{"r": 2, "lora_alpha": 1e308}`, q, "DIR/adapter_config.json: scaling 5e+307 (lora_alpha 1e+308, r 2) is outside (0, 10000]"},
		{"alpha rslora", `{"r": 4, "lora_alpha": 30000, "use_rslora": true}`, qProj4(), "scaling 15000 (lora_alpha 30000, r 4) is outside (0, 10000]"},
		{"alpha tiny", `{"r": 2, "lora_alpha": 1e-320}`, q, "is outside (0, 10000]"},
		{"alpha zero", `{"r": 2, "lora_alpha": 0}`, q, "DIR/adapter_config.json: lora_alpha 0 is not a finite positive number"},
		{"alpha overflows", `{"r": 2, "lora_alpha": 1e999}`, q, "lora_alpha 1e999 is not a finite positive number"},
		{"use_dora", `{"r": 2, "use_dora": true}`, q, "DIR/adapter_config.json: use_dora is set (true): DoRA (weight-decomposed LoRA) is not implemented by kt"},
		{"rank_pattern", `{"r": 2, "rank_pattern": {"q_proj": 4}}`, q, `rank_pattern is set ({"q_proj":4}): per-module LoRA ranks are not implemented by kt`},
		{"alpha_pattern", `{"r": 2, "alpha_pattern": {"q_proj": 32}}`, q, "alpha_pattern is set"},
		{"fan_in_fan_out", `{"r": 2, "fan_in_fan_out": true}`, q, "fan_in_fan_out is set"},
		{"lora_bias", `{"r": 2, "lora_bias": true}`, q, "lora_bias is set"},
		{"layer_replication", `{"r": 2, "layer_replication": [[0, 1]]}`, q, "layer_replication is set"},
		{"modules_to_save", `{"r": 2, "modules_to_save": ["lm_head"]}`, q, `modules_to_save is set (["lm_head"]): fully trained modules are not applied by kt`},
		{"target_parameters", `{"r": 2, "target_parameters": ["mlp.experts.gate_up_proj"]}`, q, "target_parameters is set"},
		{"trainable_token_indices", `{"r": 2, "trainable_token_indices": [5]}`, q, "trainable_token_indices is set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeAdapter(t, c.config, c.facs)
			_, err := Load("x", dir, Composite)
			want := strings.ReplaceAll(c.want, "DIR", dir)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v\nwant %q", err, want)
			}
		})
	}
	// The fields PEFT writes with their defaults load.
	defaults := `{"r": 2, "lora_alpha": 4, "use_dora": false, "rank_pattern": {}, "alpha_pattern": {}, "fan_in_fan_out": false,
		"lora_bias": false, "layer_replication": null, "modules_to_save": null, "target_parameters": null,
		"trainable_token_indices": null, "use_rslora": false, "loftq_config": {}, "megatron_config": null}`
	if _, err := Load("x", writeAdapter(t, defaults, q), Composite); err != nil {
		t.Errorf("PEFT defaults: %v", err)
	}
	if a, err := Load("x", writeAdapter(t, `{"r": 2, "lora_alpha": 20000}`, q), Composite); err != nil || a.Scale != MaxScale {
		t.Errorf("scaling = MaxScale: %v", err)
	}
}

// qProj4 is qProj with rank 4.
func qProj4() []fac {
	return []fac{
		{name: "model.layers.0.self_attn.q_proj.lora_A.weight", dt: tensor.F32, rows: 4, cols: hid},
		{name: "model.layers.0.self_attn.q_proj.lora_B.weight", dt: tensor.F32, rows: hid, cols: 4},
	}
}

func TestModule(t *testing.T) {
	facs := append(qProj(tensor.F32, ""),
		fac{name: "model.layers.1.self_attn.k_proj.lora_A.weight", dt: tensor.F32, rows: rank, cols: hid},
		fac{name: "model.layers.2.embed.lora_A.weight", dt: tensor.F32, rows: rank, cols: hid},
		fac{name: "model.layers.2.embed.lora_B.weight", dt: tensor.F32, rows: hid, cols: rank})
	dir := writeAdapter(t, cfgR2, facs)
	a, err := Load("x", dir, Composite)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		layer   int
		module  string
		out, in int
		want    string // "" : a pair; "nil": none
	}{
		{0, "self_attn.q_proj", hid, hid, ""},
		{0, "self_attn.v_proj", hid, hid, "nil"},
		{5, "self_attn.q_proj", hid, hid, "nil"},
		{0, "self_attn.q_proj", hid, 16, "lora adapter DIR: tensor model.layers.0.self_attn.q_proj.lora_A.weight has shape [2 8], the model's self_attn.q_proj of layer 0 needs [2 16]"},
		{0, "self_attn.q_proj", 4, hid, "lora adapter DIR: tensor model.layers.0.self_attn.q_proj.lora_B.weight has shape [8 2], the model's self_attn.q_proj of layer 0 needs [4 2]"},
		{1, "self_attn.k_proj", hid, hid, "lora adapter DIR: layer 1 self_attn.k_proj has only one LoRA factor (model.layers.1.self_attn.k_proj.lora_A.weight)"},
	} {
		p, err := a.Module(c.layer, c.module, c.out, c.in)
		switch c.want {
		case "":
			if err != nil || p == nil {
				t.Errorf("%d %s: %v %v", c.layer, c.module, p, err)
			}
		case "nil":
			if err != nil || p != nil {
				t.Errorf("%d %s: %v %v, want none", c.layer, c.module, p, err)
			}
		default:
			if want := strings.ReplaceAll(c.want, "DIR", dir); err == nil || err.Error() != want {
				t.Errorf("%d %s: error %v\nwant %s", c.layer, c.module, err, want)
			}
		}
	}
	// Modules no Module call took are named (the model has no "embed" in its layers).
	want := "lora adapter " + dir + ": LoRA tensors for modules this model does not have or kt does not apply LoRA to: model.layers.2.embed.lora_A.weight"
	if err := a.Unused(); err == nil || err.Error() != want {
		t.Errorf("Unused: %v\nwant %s", err, want)
	}
}

func TestUnusedTruncates(t *testing.T) {
	var facs []fac
	for l := 0; l < 6; l++ {
		facs = append(facs, fac{name: "model.layers." + string(rune('0'+l)) + ".self_attn.o_proj.lora_A.weight", dt: tensor.F32, rows: rank, cols: hid})
	}
	a, err := Load("x", writeAdapter(t, cfgR2, facs), Static)
	if err != nil {
		t.Fatal(err)
	}
	err = a.Unused()
	if err == nil || !strings.HasSuffix(err.Error(), "model.layers.3.self_attn.o_proj.lora_A.weight and 2 more") {
		t.Errorf("Unused: %v", err)
	}
}

func TestCheckExperts(t *testing.T) {
	full := experts(0, 2, tensor.BF16)
	for _, c := range []struct {
		name string
		facs []fac
		moe  []bool
		want []string
	}{
		{"missing", full[:len(full)-1], []bool{true}, []string{
			"Missing KT expert LoRA tensor for layer=0 expert=1: model.layers.0.mlp.experts.1.down_proj.lora_B.weight"}},
		{"dense layer", full, []bool{false, true}, []string{
			"expert LoRA for layer 0, which is not a MoE layer of this model (2 layers)",
			"Missing KT expert LoRA tensor for layer=1 expert=0: model.layers.1.mlp.experts.0.gate_proj.lora_A.weight"}},
		{"absent layer", experts(3, 2, tensor.BF16), []bool{false, false}, []string{
			"expert LoRA for layer 3, which is not a MoE layer of this model (2 layers)"}},
		{"extra expert", append(experts(0, 2, tensor.BF16), experts(0, 3, tensor.BF16)[12:]...), []bool{true}, []string{
			"expert LoRA for layer 0 expert 2, the model has 2 experts"}},
		{"shape", append(full[:1:1], append([]fac{{name: full[1].name, dt: tensor.BF16, rows: inter + 1, cols: rank}}, full[2:]...)...), []bool{true}, []string{
			"tensor model.layers.0.mlp.experts.0.gate_proj.lora_B.weight has shape [7 2], the model needs [6 2]"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeAdapter(t, cfgR2, c.facs)
			a, err := Load("", dir, ExpertOnly)
			if err != nil {
				t.Fatal(err)
			}
			err = a.CheckExperts(c.moe, 2, hid, inter)
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v\nwant %q", err, w)
				}
			}
			if err != nil && !strings.HasPrefix(err.Error(), "lora adapter "+dir+": ") {
				t.Errorf("error does not name the adapter: %v", err)
			}
			if a.Experts != nil {
				t.Errorf("Experts kept after an error")
			}
		})
	}
}

func TestOpen(t *testing.T) {
	merged := writeAdapter(t, cfgR2, append(qProj(tensor.BF16, "base_model.model."), experts(0, 1, tensor.BF16)...))
	expertOnly := writeAdapter(t, cfgR2, experts(0, 1, tensor.BF16))

	s, err := Open(Flags{LoRAPaths: []string{"neko=" + merged}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Named == nil || s.Expert != s.Named || s.Static != nil || s.Named.Name != "neko" || s.Empty() {
		t.Fatalf("set %+v", s)
	}
	if got := s.Names(); len(got) != 1 || got[0] != "neko" {
		t.Errorf("Names %v", got)
	}
	if nb := s.NonExpert(); len(nb) != 1 || nb[0].ID != 1 || nb[0].Adapter != s.Named {
		t.Errorf("NonExpert %+v", nb)
	}
	for _, c := range []struct {
		name string
		id   int
		err  string
	}{{"", 0, ""}, {"neko", 1, ""}, {"lora0", 0, "Got LoRA adapter that has never been loaded: lora0"}} {
		id, err := s.Index(c.name)
		if id != c.id || (err == nil) != (c.err == "") || (err != nil && err.Error() != c.err) {
			t.Errorf("Index(%q) = %d, %v; want %d, %q", c.name, id, err, c.id, c.err)
		}
	}
	// A bare directory is named by its base name.
	if s, err := Open(Flags{LoRAPaths: []string{merged}}); err != nil || s.Named.Name != filepath.Base(merged) {
		t.Errorf("bare path: %v %v", s, err)
	}
	// --kt-lora-path: both halves on every row.
	if s, err := Open(Flags{KTLoRAPath: merged}); err != nil || s.Static == nil || s.Expert != s.Static || s.Names() != nil {
		t.Errorf("--kt-lora-path: %+v %v", s, err)
	} else if nb := s.NonExpert(); len(nb) != 1 || nb[0].ID != -1 {
		t.Errorf("--kt-lora-path NonExpert %+v", nb)
	}
	if s, err := Open(Flags{KTExpertLoRAPath: expertOnly}); err != nil || s.Expert == nil || s.NonExpert() != nil {
		t.Errorf("--kt-expert-lora-path: %+v %v", s, err)
	}
	if s, err := Open(Flags{}); err != nil || !s.Empty() {
		t.Errorf("no flags: %+v %v", s, err)
	}
	var nilSet *Set
	if !nilSet.Empty() || nilSet.Names() != nil || nilSet.NonExpert() != nil {
		t.Errorf("nil set not empty")
	}
	if _, err := nilSet.Index("x"); err == nil {
		t.Errorf("nil set resolves an adapter")
	}

	for _, c := range []struct {
		f    Flags
		want string
	}{
		{Flags{LoRAPaths: []string{"a=" + merged, "b=" + merged}}, "--lora-paths: Only one merged KT composite LoRA adapter is supported (got 2); kt serves one adapter"},
		{Flags{LoRAPaths: []string{"a=" + merged}, KTExpertLoRAPath: expertOnly}, "--lora-paths: Only one merged KT composite LoRA adapter is supported; do not also pass --kt-expert-lora-path or --kt-lora-path"},
		{Flags{LoRAPaths: []string{"a=" + merged}, KTLoRAPath: merged}, "do not also pass --kt-expert-lora-path or --kt-lora-path"},
		{Flags{KTLoRAPath: merged, KTExpertLoRAPath: expertOnly}, "--kt-lora-path and --kt-expert-lora-path: give one of them"},
		{Flags{LoRAPaths: []string{"a:b=" + merged}}, `--lora-paths "a:b=` + merged + `": adapter name must be non-empty, without ':' or spaces`},
		{Flags{LoRAPaths: []string{"=" + merged}}, "adapter name must be non-empty"},
		{Flags{LoRAPaths: []string{"a=" + expertOnly}}, "a merged KT composite adapter must contain non-expert LoRA tensors"},
		{Flags{KTExpertLoRAPath: merged}, "--kt-expert-lora-path holds 2 non-expert LoRA tensors"},
		{Flags{LoRAPaths: []string{"a=" + merged}, MaxLoRARank: 1}, "lora adapter " + merged + ": rank 2 exceeds --max-lora-rank 1"},
	} {
		_, err := Open(c.f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v\nwant %q", c.f, err, c.want)
		}
	}
	if _, err := Open(Flags{LoRAPaths: []string{"a=" + merged}, MaxLoRARank: 2}); err != nil {
		t.Errorf("rank = --max-lora-rank: %v", err)
	}
}
