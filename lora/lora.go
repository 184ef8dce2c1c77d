// Package lora loads LoRA adapters for serving, as SGLang-KT serves them:
// one merged KT composite adapter (--lora-paths NAME=DIR, the output of kt
// convert-adapter) is split at startup by SGLang's rule (peft.IsExpertKey)
// into its expert half, which the CPU expert engine applies to every request
// (static), and its non-expert half (q/k/v/o_proj, Qwen3.5's in_proj_* and
// out_proj, shared-expert and dense MLP gate/up/down_proj), which the model
// applies to the rows of requests that name the adapter
// (model=<served>:<name>). --kt-lora-path DIR makes both halves static;
// --kt-expert-lora-path DIR loads only the expert half.
//
// Factors are kept as the file stores them, widened to float32 (exact for
// bf16); the scaling s = lora_alpha / r (lora_alpha / sqrt(r) when the
// config sets use_rslora) is applied at run time: y = W x + s·B(A x).
//
// Load refuses, naming the cause, adapters that would make every request
// fail or that kt would serve wrongly: a NaN or infinite factor element, a
// scaling outside (0, MaxScale], and PEFT features kt does not implement
// (use_dora, rank_pattern, alpha_pattern and the others unsupportedFields
// lists) rather than ignoring them.
package lora

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/ktserve/kt/adapter/ktlora"
	"github.com/ktserve/kt/adapter/peft"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// Part says which halves of an adapter directory are loaded.
type Part int

const (
	// Composite loads both halves of a merged adapter (--lora-paths): it
	// must hold non-expert tensors (SGLang-KT's rule).
	Composite Part = iota
	// ExpertOnly loads the expert half (--kt-expert-lora-path); non-expert
	// tensors are refused.
	ExpertOnly
	// Static loads both halves, applied to every request (--kt-lora-path).
	Static
)

// Matrix is one LoRA factor widened to float32, row-major [Rows, Cols]
// (PEFT layout: A is [r, in], B is [out, r]).
type Matrix struct {
	Name       string // tensor key in the adapter file, for errors
	DType      tensor.DType
	Rows, Cols int
	Data       []float32
}

// Pair is the LoRA of one linear module: delta = Scale·B(A x).
type Pair struct {
	A, B Matrix
}

// ExpertLayer is one MoE layer's expert LoRA, stacked per expert in KT's
// fused shapes: gate/up A [E][r][H], B [E][I][r]; down A [E][r][I], B [E][H][r].
type ExpertLayer struct {
	Experts, Rank, Hidden, Inter         int
	GateA, GateB, UpA, UpB, DownA, DownB []float32
}

// Adapter is a loaded adapter.
type Adapter struct {
	Name  string // the request name (--lora-paths NAME=...); "" when static
	Dir   string
	Part  Part
	Rank  int
	Alpha float64
	// Scale is lora_alpha / r (lora_alpha / sqrt(r) with use_rslora).
	Scale   float32
	RSLoRA  bool
	modules map[string]*Pair // "layer.module" -> factors
	mu      sync.Mutex       // guards used (tensor-parallel ranks bind modules concurrently)
	used    map[string]bool
	// Experts holds the expert LoRA by layer (nil map when there is none).
	Experts map[int]*ExpertLayer
	expert  map[int]map[int]map[ktlora.Kind]Matrix // layer -> expert -> kind, until Check
}

// NonExpertModules is the number of non-expert modules the adapter has.
func (a *Adapter) NonExpertModules() int { return len(a.modules) }

// HasExperts reports whether the adapter has expert LoRA tensors.
func (a *Adapter) HasExperts() bool { return len(a.expert) > 0 || len(a.Experts) > 0 }

// MaxScale bounds the LoRA scaling lora_alpha / r an adapter may have: real
// adapters use 0.25 to 16, and a scaling far beyond makes every activation
// of the adapted modules overflow.
const MaxScale = 1e4

// unsupportedFields are adapter_config.json fields that change what the
// adapter computes in ways kt does not implement; an adapter that sets one
// is refused rather than served wrongly.
var unsupportedFields = []struct{ field, why string }{
	{"use_dora", "DoRA (weight-decomposed LoRA) is not implemented by kt"},
	{"rank_pattern", "per-module LoRA ranks are not implemented by kt"},
	{"alpha_pattern", "per-module lora_alpha is not implemented by kt"},
	{"fan_in_fan_out", "transposed (Conv1D) LoRA factors are not implemented by kt"},
	{"lora_bias", "a bias on lora_B is not implemented by kt"},
	{"layer_replication", "replicated layers are not implemented by kt"},
	{"modules_to_save", "fully trained modules are not applied by kt"},
	{"target_parameters", "LoRA on parameters (not modules) is not implemented by kt"},
	{"trainable_token_indices", "trainable token embeddings are not applied by kt"},
}

// inUse reports whether a config value turns a feature on: anything but
// null, false, "", [] and {}.
func inUse(v any) bool {
	switch t := v.(type) {
	case nil:
		return false
	case bool:
		return t
	case string:
		return t != ""
	case []any:
		return len(t) > 0
	case map[string]any:
		return len(t) > 0
	}
	return true
}

// brief renders a config value for an error message, at most 80 bytes.
func brief(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}

// Load reads DIR/adapter_config.json and DIR/adapter_model.safetensors. It
// refuses adapters kt would serve wrongly: a scaling outside (0, MaxScale],
// config fields that change the computation in ways kt does not implement,
// and factors with a NaN or infinite value.
func Load(name, dir string, part Part) (*Adapter, error) {
	cfgPath := filepath.Join(dir, peft.ConfigFile)
	cfg, err := peft.ReadConfig(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("lora adapter %s: %w", dir, err)
	}
	a := &Adapter{Name: name, Dir: dir, Part: part, modules: map[string]*Pair{}, used: map[string]bool{}}
	if v, ok := cfg.Get("peft_type"); ok && v != "LORA" && v != nil {
		return nil, fmt.Errorf("lora adapter %s: %s: peft_type %v, want LORA", dir, cfgPath, v)
	}
	r, ok := cfg.Int("r")
	if !ok || r < 1 || r > 4096 {
		return nil, fmt.Errorf("lora adapter %s: %s: field r must be an integer in [1,4096]", dir, cfgPath)
	}
	a.Rank = int(r)
	a.Alpha = float64(r) // SGLang-KT: alpha defaults to r
	if v, ok := cfg.Get("lora_alpha"); ok {
		n, isNum := v.(json.Number)
		f, err := n.Float64()
		if !isNum || err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
			return nil, fmt.Errorf("lora adapter %s: %s: lora_alpha %s is not a finite positive number", dir, cfgPath, brief(v))
		}
		a.Alpha = f
	}
	scale := a.Alpha / float64(a.Rank)
	if v, ok := cfg.Get("use_rslora"); ok && v == true {
		a.RSLoRA = true
		scale = a.Alpha / math.Sqrt(float64(a.Rank))
	}
	if !(float32(scale) > 0 && scale <= MaxScale) {
		return nil, fmt.Errorf("lora adapter %s: %s: scaling %g (lora_alpha %g, r %d) is outside (0, %g]; such an adapter overflows every activation", dir, cfgPath, scale, a.Alpha, a.Rank, float64(MaxScale))
	}
	a.Scale = float32(scale)
	if v, ok := cfg.Get("bias"); ok && v != "none" && v != nil {
		return nil, fmt.Errorf("lora adapter %s: %s: bias %q is not supported (want none)", dir, cfgPath, v)
	}
	for _, u := range unsupportedFields {
		if v, ok := cfg.Get(u.field); ok && inUse(v) {
			return nil, fmt.Errorf("lora adapter %s: %s: %s is set (%s): %s", dir, cfgPath, u.field, brief(v), u.why)
		}
	}
	path := filepath.Join(dir, peft.ModelFile)
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, fmt.Errorf("lora adapter %s: %w", dir, err)
	}
	defer f.Close()
	nonExpert := 0
	for _, ti := range f.Tensors() {
		key := ti.Name
		if err := a.add(f, ti, key, &nonExpert); err != nil {
			return nil, fmt.Errorf("lora adapter %s: %s: %w", dir, path, err)
		}
	}
	switch part {
	case Composite:
		if nonExpert == 0 {
			return nil, fmt.Errorf("lora adapter %s: a merged KT composite adapter must contain non-expert LoRA tensors; use --kt-expert-lora-path for an expert-only adapter", dir)
		}
	case ExpertOnly:
		if nonExpert > 0 {
			return nil, fmt.Errorf("lora adapter %s: --kt-expert-lora-path holds %d non-expert LoRA tensors; pass a merged adapter with --lora-paths instead", dir, nonExpert)
		}
	}
	if nonExpert == 0 && len(a.expert) == 0 {
		return nil, fmt.Errorf("lora adapter %s: %s has no LoRA tensors", dir, path)
	}
	return a, nil
}

func (a *Adapter) add(f *safetensors.File, ti safetensors.TensorInfo, key string, nonExpert *int) error {
	if ti.DType != tensor.BF16 && ti.DType != tensor.F32 && ti.DType != tensor.F16 {
		return fmt.Errorf("tensor %s: dtype %s, want BF16, F16 or F32", key, ti.DType)
	}
	if len(ti.Shape) != 2 {
		return fmt.Errorf("tensor %s: shape %v, want 2-D", key, ti.Shape)
	}
	rank, ok := peft.TensorRank(key, ti.Shape)
	if !ok {
		return fmt.Errorf("tensor %s: not a LoRA factor (lora_A / lora_B)", key)
	}
	if rank != int64(a.Rank) {
		return fmt.Errorf("tensor %s: KT expert LoRA rank mismatch: tensor rank %d, adapter_config.json r = %d", key, rank, a.Rank)
	}
	if ti.Shape[0] > 1<<20 || ti.Shape[1] > 1<<20 {
		return fmt.Errorf("tensor %s: shape %v too large", key, ti.Shape)
	}
	t, err := f.Tensor(key)
	if err != nil {
		return err
	}
	v, err := t.ToF32()
	if err != nil {
		return fmt.Errorf("tensor %s: %w", key, err)
	}
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("tensor %s: element %d is %v; LoRA factors must be finite", key, i, x)
		}
	}
	m := Matrix{Name: key, DType: ti.DType, Rows: int(ti.Shape[0]), Cols: int(ti.Shape[1]), Data: v}
	if peft.IsExpertKey(peft.CleanKey(key)) {
		layer, e, kind, ok := ktlora.ParseExpertKey(key)
		if !ok {
			return fmt.Errorf("tensor %s: expert LoRA key not of the form model.layers.{L}.mlp.experts.{e}.{gate|up|down}_proj.{lora_A|lora_B}.weight", key)
		}
		if a.expert == nil {
			a.expert = map[int]map[int]map[ktlora.Kind]Matrix{}
		}
		if a.expert[layer] == nil {
			a.expert[layer] = map[int]map[ktlora.Kind]Matrix{}
		}
		if a.expert[layer][e] == nil {
			a.expert[layer][e] = map[ktlora.Kind]Matrix{}
		}
		if _, dup := a.expert[layer][e][kind]; dup {
			return fmt.Errorf("tensor %s: duplicate expert LoRA factor for layer %d expert %d %s %s", key, layer, e, kind.Proj, kind.Factor)
		}
		a.expert[layer][e][kind] = m
		return nil
	}
	*nonExpert++
	layer, module, factor, err := parseModuleKey(key)
	if err != nil {
		return err
	}
	id := strconv.Itoa(layer) + "." + module
	p := a.modules[id]
	if p == nil {
		p = &Pair{}
		a.modules[id] = p
	}
	dst := &p.A
	if factor == "B" {
		dst = &p.B
	}
	if dst.Data != nil {
		return fmt.Errorf("tensor %s: duplicate LoRA factor for layer %d %s", key, layer, module)
	}
	*dst = m
	return nil
}

// parseModuleKey splits a non-expert key
// "[base_model.model.][model.][language_model.]layers.L.MODULE.lora_{A|B}[.default].weight".
func parseModuleKey(key string) (layer int, module, factor string, err error) {
	k := peft.CleanKey(key)
	i := strings.Index(k, "layers.")
	if i < 0 {
		return 0, "", "", fmt.Errorf("tensor %s: LoRA on a module outside the decoder layers (%s) is not supported by kt", key, peft.LastComponent(strings.Split(k, ".lora_")[0]))
	}
	head := k[:i]
	if head != "" && head != "model." && head != "model.language_model." && head != "language_model.model." && head != "language_model." {
		return 0, "", "", fmt.Errorf("tensor %s: unexpected prefix %q", key, head)
	}
	rest := k[i+len("layers."):]
	num, rest, ok := strings.Cut(rest, ".")
	if !ok || num == "" || strings.TrimLeft(num, "0123456789") != "" || (len(num) > 1 && num[0] == '0') || len(num) > 6 {
		return 0, "", "", fmt.Errorf("tensor %s: bad layer number", key)
	}
	layer, _ = strconv.Atoi(num)
	mod, tail, ok := strings.Cut(rest, ".lora_")
	if !ok || mod == "" {
		return 0, "", "", fmt.Errorf("tensor %s: not a LoRA factor key", key)
	}
	switch tail {
	case "A.weight", "A.default.weight":
		factor = "A"
	case "B.weight", "B.default.weight":
		factor = "B"
	default:
		return 0, "", "", fmt.Errorf("tensor %s: not a LoRA factor key (lora_A / lora_B .weight)", key)
	}
	return layer, mod, factor, nil
}

// Module returns the LoRA of the module (e.g. "self_attn.q_proj",
// "linear_attn.in_proj_qkv", "mlp.shared_expert.gate_proj") of layer, checked
// against the module's shape [out, in]; nil when the adapter has none. A
// module taken is marked used (Unused lists the others).
func (a *Adapter) Module(layer int, module string, out, in int) (*Pair, error) {
	id := strconv.Itoa(layer) + "." + module
	p := a.modules[id]
	if p == nil {
		return nil, nil
	}
	a.mu.Lock()
	a.used[id] = true
	a.mu.Unlock()
	if p.A.Data == nil || p.B.Data == nil {
		have := p.A.Name + p.B.Name
		return nil, fmt.Errorf("lora adapter %s: layer %d %s has only one LoRA factor (%s)", a.Dir, layer, module, have)
	}
	if p.A.Rows != a.Rank || p.A.Cols != in {
		return nil, fmt.Errorf("lora adapter %s: tensor %s has shape [%d %d], the model's %s of layer %d needs [%d %d]", a.Dir, p.A.Name, p.A.Rows, p.A.Cols, module, layer, a.Rank, in)
	}
	if p.B.Cols != a.Rank || p.B.Rows != out {
		return nil, fmt.Errorf("lora adapter %s: tensor %s has shape [%d %d], the model's %s of layer %d needs [%d %d]", a.Dir, p.B.Name, p.B.Rows, p.B.Cols, module, layer, out, a.Rank)
	}
	return p, nil
}

// Unused returns an error naming the non-expert modules no model module took:
// target modules kt does not apply LoRA to, or layers the model lacks.
func (a *Adapter) Unused() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var left []string
	for id, p := range a.modules {
		if !a.used[id] {
			n := p.A.Name
			if n == "" {
				n = p.B.Name
			}
			left = append(left, n)
		}
	}
	if len(left) == 0 {
		return nil
	}
	sort.Strings(left)
	more := ""
	if len(left) > 4 {
		more = fmt.Sprintf(" and %d more", len(left)-4)
		left = left[:4]
	}
	return fmt.Errorf("lora adapter %s: LoRA tensors for modules this model does not have or kt does not apply LoRA to: %s%s", a.Dir, strings.Join(left, ", "), more)
}

// CheckExperts validates the expert LoRA against the model (its MoE layers,
// expert count, hidden and moe intermediate sizes) and stacks it per layer
// into Experts. Every MoE layer needs all six factors of every expert
// (SGLang-KT: "Missing KT expert LoRA tensor for layer=..."); expert LoRA
// for a dense layer or a layer the model lacks is an error.
func (a *Adapter) CheckExperts(moeLayers []bool, experts, hidden, inter int) error {
	if len(a.expert) == 0 {
		return nil
	}
	r := a.Rank
	var errs []error
	for l := range a.expert {
		if l >= len(moeLayers) || !moeLayers[l] {
			errs = append(errs, fmt.Errorf("expert LoRA for layer %d, which is not a MoE layer of this model (%d layers)", l, len(moeLayers)))
		}
	}
	a.Experts = map[int]*ExpertLayer{}
	for l, isMoE := range moeLayers {
		if !isMoE {
			continue
		}
		byExp := a.expert[l]
		el := &ExpertLayer{Experts: experts, Rank: r, Hidden: hidden, Inter: inter}
		stacks := map[ktlora.Kind]*[]float32{
			{Proj: ktlora.Gate, Factor: ktlora.A}: &el.GateA, {Proj: ktlora.Gate, Factor: ktlora.B}: &el.GateB,
			{Proj: ktlora.Up, Factor: ktlora.A}: &el.UpA, {Proj: ktlora.Up, Factor: ktlora.B}: &el.UpB,
			{Proj: ktlora.Down, Factor: ktlora.A}: &el.DownA, {Proj: ktlora.Down, Factor: ktlora.B}: &el.DownB,
		}
		for _, k := range ktlora.Kinds {
			rows, cols := r, hidden
			switch {
			case k.Proj != ktlora.Down && k.Factor == ktlora.B:
				rows, cols = inter, r
			case k.Proj == ktlora.Down && k.Factor == ktlora.A:
				rows, cols = r, inter
			case k.Proj == ktlora.Down && k.Factor == ktlora.B:
				rows, cols = hidden, r
			}
			st := make([]float32, 0, experts*rows*cols)
			for e := 0; e < experts; e++ {
				m, ok := byExp[e][k]
				if !ok {
					errs = append(errs, fmt.Errorf("Missing KT expert LoRA tensor for layer=%d expert=%d: %s", l, e, ktlora.ExpertKey(l, e, k)))
					break
				}
				if m.Rows != rows || m.Cols != cols {
					errs = append(errs, fmt.Errorf("tensor %s has shape [%d %d], the model needs [%d %d]", m.Name, m.Rows, m.Cols, rows, cols))
					break
				}
				st = append(st, m.Data...)
			}
			*stacks[k] = st
		}
		for e := range byExp {
			if e < 0 || e >= experts {
				errs = append(errs, fmt.Errorf("expert LoRA for layer %d expert %d, the model has %d experts", l, e, experts))
			}
		}
		a.Experts[l] = el
		if len(errs) > 8 {
			break
		}
	}
	a.expert = nil
	if len(errs) > 0 {
		if len(errs) > 8 {
			errs = append(errs[:8], errors.New("..."))
		}
		a.Experts = nil
		return fmt.Errorf("lora adapter %s: %w", a.Dir, errors.Join(errs...))
	}
	return nil
}

// Set is what one server serves: the static expert LoRA (and, with
// --kt-lora-path, static non-expert LoRA) plus at most one named adapter.
type Set struct {
	// Named is the --lora-paths adapter requests select with
	// model=<served>:<Name>; nil when none.
	Named *Adapter
	// Static is a --kt-lora-path adapter applied to every request; nil when none.
	Static *Adapter
	// Expert is the adapter whose expert half the CPU expert engine runs
	// for every request (Named's or Static's, or a --kt-expert-lora-path one).
	Expert *Adapter
}

// Names lists the adapter names requests may use.
func (s *Set) Names() []string {
	if s == nil || s.Named == nil {
		return nil
	}
	return []string{s.Named.Name}
}

// Paths lists the directories of Names' adapters, in the same order.
func (s *Set) Paths() []string {
	if s == nil || s.Named == nil {
		return nil
	}
	return []string{s.Named.Dir}
}

// Index returns the adapter id of a request's adapter name (1 for Named,
// 0 for the base model "") or an error in SGLang's words.
func (s *Set) Index(name string) (int, error) {
	if name == "" {
		return 0, nil
	}
	if s != nil && s.Named != nil && s.Named.Name == name {
		return 1, nil
	}
	return 0, fmt.Errorf("Got LoRA adapter that has never been loaded: %s", name)
}

// Flags are the serving flags that choose adapters.
type Flags struct {
	LoRAPaths        []string // NAME=DIR (or DIR, named by its base name)
	KTLoRAPath       string
	KTExpertLoRAPath string
	MaxLoRARank      int // 0 = no limit
}

// Open loads the adapters the flags name, with SGLang-KT's limits: one
// merged composite adapter and nothing else, no --kt-expert-lora-path
// beside it; --kt-lora-path alone.
func Open(f Flags) (*Set, error) {
	s := &Set{}
	if len(f.LoRAPaths) > 1 {
		return nil, fmt.Errorf("--lora-paths: Only one merged KT composite LoRA adapter is supported (got %d); kt serves one adapter", len(f.LoRAPaths))
	}
	if len(f.LoRAPaths) == 1 {
		if f.KTExpertLoRAPath != "" || f.KTLoRAPath != "" {
			return nil, errors.New("--lora-paths: Only one merged KT composite LoRA adapter is supported; do not also pass --kt-expert-lora-path or --kt-lora-path")
		}
		name, dir, ok := strings.Cut(f.LoRAPaths[0], "=")
		if !ok {
			dir = name
			name = filepath.Base(filepath.Clean(dir))
		}
		if name == "" || strings.ContainsAny(name, ": ") {
			return nil, fmt.Errorf("--lora-paths %q: adapter name must be non-empty, without ':' or spaces", f.LoRAPaths[0])
		}
		a, err := Load(name, dir, Composite)
		if err != nil {
			return nil, err
		}
		s.Named = a
		if a.HasExperts() {
			s.Expert = a
		}
	}
	if f.KTLoRAPath != "" {
		if f.KTExpertLoRAPath != "" {
			return nil, errors.New("--kt-lora-path and --kt-expert-lora-path: give one of them")
		}
		a, err := Load("", f.KTLoRAPath, Static)
		if err != nil {
			return nil, err
		}
		s.Static = a
		if a.HasExperts() {
			s.Expert = a
		}
	}
	if f.KTExpertLoRAPath != "" {
		a, err := Load("", f.KTExpertLoRAPath, ExpertOnly)
		if err != nil {
			return nil, err
		}
		s.Expert = a
	}
	for _, a := range []*Adapter{s.Named, s.Static, s.Expert} {
		if a != nil && f.MaxLoRARank > 0 && a.Rank > f.MaxLoRARank {
			return nil, fmt.Errorf("lora adapter %s: rank %d exceeds --max-lora-rank %d", a.Dir, a.Rank, f.MaxLoRARank)
		}
	}
	return s, nil
}

// Empty reports whether the set applies nothing.
func (s *Set) Empty() bool { return s == nil || (s.Named == nil && s.Static == nil && s.Expert == nil) }

// NonExpert returns the adapters whose non-expert half the model applies,
// with the adapter id whose rows get it (-1: every row).
func (s *Set) NonExpert() []Bound {
	if s == nil {
		return nil
	}
	var out []Bound
	if s.Static != nil {
		out = append(out, Bound{Adapter: s.Static, ID: -1})
	}
	if s.Named != nil {
		out = append(out, Bound{Adapter: s.Named, ID: 1})
	}
	return slices.Clip(out)
}

// Bound is an adapter with the rows it applies to: ID -1 every row, else
// the rows of sequences whose adapter id equals ID.
type Bound struct {
	Adapter *Adapter
	ID      int
}
