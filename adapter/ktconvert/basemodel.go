package ktconvert

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/ktserve/kt/internal/units"
	"github.com/ktserve/kt/modelconfig"
)

// baseModel holds the few base-model config.json fields the adapter is
// checked against. Qwen3.5 nests them under "text_config"; Qwen3-MoE and
// Qwen3-Next keep them at the top level.
type baseModel struct {
	path       string // config.json
	layers     int64
	experts    int64 // 0 when the config names no routed experts
	hidden     int64
	inter      int64
	moeLayers  map[int]bool
	expertsKey string
	interKey   string
	hiddenKey  string
	layersKey  string
}

// maxBaseConfigBytes bounds config.json (real ones are a few KiB).
const maxBaseConfigBytes = 16 << 20

// loadBaseModel reads dir/config.json. ok is false when nameOrPath is not a
// local directory (a hub model id), in which case nothing can be checked.
func loadBaseModel(nameOrPath string) (bm *baseModel, ok bool, err error) {
	dir := nameOrPath
	if strings.HasPrefix(dir, "~/") {
		if home, herr := os.UserHomeDir(); herr == nil {
			dir = filepath.Join(home, dir[2:])
		}
	}
	fi, statErr := os.Stat(dir)
	if statErr != nil || !fi.IsDir() {
		return nil, false, nil
	}
	path := filepath.Join(dir, "config.json")
	f, err := os.Open(path)
	if err != nil {
		return nil, true, fmt.Errorf("base model: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBaseConfigBytes+1))
	if err != nil {
		return nil, true, fmt.Errorf("base model: read %s: %w", path, err)
	}
	if len(data) > maxBaseConfigBytes {
		return nil, true, fmt.Errorf("base model: %s is larger than %d bytes", path, maxBaseConfigBytes)
	}
	if supported(data) {
		// kt serves this family: modelconfig is the one parser of its
		// config.json (and derives which layers are MoE).
		mc, err := modelconfig.Parse(data)
		if err != nil {
			return nil, true, fmt.Errorf("base model: %s: %w", path, err)
		}
		return fromModelConfig(path, mc), true, nil
	}
	// KT SFT also trains families kt does not serve (GLM, ...):
	// read just the fields the check needs.
	bm, err = parseBaseConfig(path, data)
	return bm, true, err
}

// supported reports whether config.json names an architecture modelconfig
// knows.
func supported(data []byte) bool {
	var top struct {
		Architectures []string `json:"architectures"`
	}
	if json.Unmarshal(data, &top) != nil || len(top.Architectures) == 0 {
		return false
	}
	return slices.Contains(modelconfig.SupportedArchitectures(), top.Architectures[0])
}

func fromModelConfig(path string, c *modelconfig.Config) *baseModel {
	prefix := ""
	if c.Architecture == "Qwen3_5MoeForConditionalGeneration" {
		prefix = "text_config."
	}
	bm := &baseModel{
		path: path, layers: int64(c.NumLayers), experts: int64(c.NumExperts), hidden: int64(c.HiddenSize),
		inter: int64(c.MoEIntermediateSize), moeLayers: map[int]bool{},
		layersKey: prefix + "num_hidden_layers", hiddenKey: prefix + "hidden_size",
		interKey: prefix + "moe_intermediate_size",
	}
	if c.NumExperts > 0 {
		bm.expertsKey = prefix + "num_experts"
	}
	for _, l := range c.Layers {
		if l.IsMoE {
			bm.moeLayers[l.Index] = true
		}
	}
	return bm
}

func parseBaseConfig(path string, data []byte) (*baseModel, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("base model: %s: %w", path, err)
	}
	cfg := top
	prefix := ""
	if raw, ok := top["text_config"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, fmt.Errorf("base model: %s: text_config: %w", path, err)
		}
		prefix = "text_config."
	}
	bm := &baseModel{path: path, moeLayers: map[int]bool{}}
	intField := func(names ...string) (int64, string, error) {
		for _, n := range names {
			raw, ok := cfg[n]
			if !ok || string(raw) == "null" {
				continue
			}
			var v int64
			if err := json.Unmarshal(raw, &v); err != nil || v < 0 {
				return 0, prefix + n, fmt.Errorf("base model: %s: field %s%s: want a non-negative integer, got %s", path, prefix, n, truncate(raw))
			}
			return v, prefix + n, nil
		}
		return 0, "", nil
	}
	var err error
	if bm.layers, bm.layersKey, err = intField("num_hidden_layers"); err != nil {
		return nil, err
	} else if bm.layersKey == "" {
		return nil, fmt.Errorf("base model: %s: no %snum_hidden_layers", path, prefix)
	}
	if bm.hidden, bm.hiddenKey, err = intField("hidden_size"); err != nil {
		return nil, err
	} else if bm.hiddenKey == "" {
		return nil, fmt.Errorf("base model: %s: no %shidden_size", path, prefix)
	}
	if bm.experts, bm.expertsKey, err = intField("num_experts", "num_local_experts", "n_routed_experts"); err != nil {
		return nil, err
	}
	if bm.inter, bm.interKey, err = intField("moe_intermediate_size"); err != nil {
		return nil, err
	}
	if bm.interKey == "" && bm.expertsKey != "" {
		// Mixtral-style configs size their experts with intermediate_size.
		if bm.inter, bm.interKey, err = intField("intermediate_size"); err != nil {
			return nil, err
		}
	}
	if bm.layers > 1<<20 {
		return nil, fmt.Errorf("base model: %s: %snum_hidden_layers %d is implausible", path, prefix, bm.layers)
	}

	dense := map[int]bool{}
	if raw, ok := cfg["mlp_only_layers"]; ok && string(raw) != "null" {
		var ls []int
		if err := json.Unmarshal(raw, &ls); err != nil {
			return nil, fmt.Errorf("base model: %s: field %smlp_only_layers: want a list of layer indices, got %s", path, prefix, truncate(raw))
		}
		for _, l := range ls {
			dense[l] = true
		}
	}
	step, _, err := intField("decoder_sparse_step")
	if err != nil {
		return nil, err
	}
	firstDense, _, err := intField("first_k_dense_replace")
	if err != nil {
		return nil, err
	}
	if bm.experts > 0 {
		for l := 0; l < int(bm.layers); l++ {
			if dense[l] || int64(l) < firstDense || (step > 1 && (l+1)%int(step) != 0) {
				continue
			}
			bm.moeLayers[l] = true
		}
	}
	return bm, nil
}

func truncate(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// mismatchError lists every way the adapter disagrees with the base model.
type mismatchError struct {
	config string
	items  []string
}

func (e *mismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "adapter does not match base model %s (%d mismatch", e.config, len(e.items))
	if len(e.items) != 1 {
		b.WriteString("es")
	}
	b.WriteString("):")
	for _, it := range e.items {
		b.WriteString("\n  - ")
		b.WriteString(it)
	}
	return b.String()
}

// checkBase compares the plan with the base model's config and returns a
// *mismatchError listing every mismatch, or nil.
func (p *plan) checkBase(bm *baseModel) error {
	var items []string
	add := func(format string, args ...any) { items = append(items, fmt.Sprintf(format, args...)) }
	if bm.expertsKey == "" {
		add("base model has no routed experts (none of num_experts, num_local_experts, n_routed_experts), but %s holds expert LoRA", "fused_expert_lora.safetensors")
	} else if p.experts != bm.experts {
		add("expert count: adapter has %d experts per layer (%s), base model %s = %d", p.experts, p.example["experts"], bm.expertsKey, bm.experts)
	}
	if p.hidden != bm.hidden {
		add("hidden size: adapter has %d (%s), base model %s = %d", p.hidden, p.example["hidden"], bm.hiddenKey, bm.hidden)
	}
	if bm.interKey == "" {
		if bm.expertsKey != "" {
			add("intermediate size: base model config has no moe_intermediate_size to check the adapter's %d (%s) against", p.inter, p.example["inter"])
		}
	} else if p.inter != bm.inter {
		add("intermediate size: adapter has %d (%s), base model %s = %d", p.inter, p.example["inter"], bm.interKey, bm.inter)
	}
	var beyond, dense []int
	have := map[int]bool{}
	for _, l := range p.layers {
		have[l] = true
		switch {
		case int64(l) >= bm.layers:
			beyond = append(beyond, l)
		case bm.expertsKey != "" && !bm.moeLayers[l]:
			dense = append(dense, l)
		}
	}
	if len(beyond) > 0 {
		add("layers: adapter has expert LoRA for layer(s) %s, base model has %d layers (%s)", units.Ranges(beyond, ", "), bm.layers, bm.layersKey)
	}
	if len(dense) > 0 {
		add("layers: adapter has expert LoRA for layer(s) %s, which are dense (no routed experts) in the base model", units.Ranges(dense, ", "))
	}
	var missing []int
	for l := range bm.moeLayers {
		if !have[l] {
			missing = append(missing, l)
		}
	}
	sort.Ints(missing)
	if len(missing) > 0 {
		add("layers: base model MoE layer(s) %s have no expert LoRA in %s (KT expert LoRA serving needs every MoE layer)", units.Ranges(missing, ", "), "fused_expert_lora.safetensors")
	}
	var nonexpertBeyond []int
	for l := range p.nonexpertLayers {
		if int64(l) >= bm.layers {
			nonexpertBeyond = append(nonexpertBeyond, l)
		}
	}
	sort.Ints(nonexpertBeyond)
	if len(nonexpertBeyond) > 0 {
		add("layers: adapter_model.safetensors has LoRA for layer(s) %s (e.g. %q), base model has %d layers", units.Ranges(nonexpertBeyond, ", "), p.nonexpertLayers[nonexpertBeyond[0]], bm.layers)
	}
	if len(items) == 0 {
		return nil
	}
	return &mismatchError{config: bm.path, items: items}
}
