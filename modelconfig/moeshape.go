package modelconfig

import (
	"errors"
	"fmt"
	"path/filepath"
)

// MoEShape is the routed-expert shape of an MoE model's layers as any
// Hugging Face config.json states it, whatever the architecture: what the
// CPU expert engine needs to size one layer. Unlike Parse it does not ask
// whether kt can run the model, so kt bench can measure the layers of
// models whose attention kt does not implement yet (GLM, MiniMax) and
// measure any layer shape without a checkpoint.
type MoEShape struct {
	Architecture string // architectures[0], "" when absent
	Experts      int    // routed experts per layer
	Hidden       int    // hidden_size
	Intermediate int    // one routed expert's intermediate size
	TopK         int    // experts per token
	Layers       int    // num_hidden_layers, 0 where the config does not state it
	// Int4Group is the group size of compressed-tensors pack-quantized
	// INT4 experts (Kimi-K2-Thinking's quantization_config); 0: none.
	Int4Group int
}

// Field names of the routed-expert count, intermediate size and top-k
// across the families, in the order they are tried: DeepSeek, Kimi and GLM
// (n_routed_experts), Qwen (num_experts), Mixtral, MiniMax and gpt-oss
// (num_local_experts), ERNIE (moe_num_experts).
var (
	expertFields = []string{"n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts"}
	topKFields   = []string{"num_experts_per_tok", "experts_per_token", "moe_k"}
)

// nestedTextFields are the objects a multimodal config keeps its language
// model's fields in (Qwen3.5 and Kimi: text_config; DeepSeek-VL2:
// language_config).
var nestedTextFields = []string{"text_config", "language_config"}

// ParseMoEShape reads the routed-expert shape from the contents of a
// config.json. The intermediate size is moe_intermediate_size, or
// intermediate_size where the model states none (Mixtral-style configs,
// whose every feed-forward block is the experts). A config without any
// routed-expert count is refused as not an MoE model; every missing or
// inconsistent field is reported, named by its JSON path.
func ParseMoEShape(data []byte) (MoEShape, error) {
	var errs []error
	top, err := newObject("", data, &errs)
	if err != nil {
		return MoEShape{}, fmt.Errorf("not a JSON object: %w", err)
	}
	var s MoEShape
	if a := top.optStrings("architectures"); len(a) > 0 {
		s.Architecture = a[0]
	}
	t := top
	for _, name := range nestedTextFields {
		if n, ok := top.sub(name); ok && firstField(n, expertFields) != "" {
			t = n
			break
		}
	}
	if len(errs) > 0 {
		return MoEShape{}, errors.Join(errs...)
	}
	ef := firstField(t, expertFields)
	if ef == "" {
		return MoEShape{}, fmt.Errorf("not an MoE model: %sconfig has none of %v", t.path, expertFields)
	}
	s.Experts = t.intField(ef)
	s.Hidden = t.intField("hidden_size")
	if t.has("moe_intermediate_size") {
		s.Intermediate = t.intField("moe_intermediate_size")
	} else {
		s.Intermediate = t.intField("intermediate_size")
	}
	if kf := firstField(t, topKFields); kf != "" {
		s.TopK = t.intField(kf)
	} else {
		t.fail(topKFields[0], "missing (nor any of %v)", topKFields[1:])
	}
	s.Layers = t.optInt("num_hidden_layers", 0)
	for _, o := range []object{top, t} {
		if q, ok := o.sub("quantization_config"); ok && q.optString("quant_method", "") == "compressed-tensors" {
			s.Int4Group = parsePackedInt4(q)
			break
		}
	}
	if s.Layers < 0 {
		t.fail("num_hidden_layers", "must not be negative, is %d", s.Layers)
	}
	if len(errs) == 0 {
		if s.Experts > maxExperts {
			t.fail(ef, "%d is more than %d", s.Experts, maxExperts)
		}
		if s.TopK > s.Experts {
			t.fail("num_experts_per_tok", "%d is more than the %d routed experts", s.TopK, s.Experts)
		}
	}
	if len(errs) > 0 {
		return MoEShape{}, errors.Join(errs...)
	}
	return s, nil
}

// LoadMoEShape reads the routed-expert shape from dir/config.json.
func LoadMoEShape(dir string) (MoEShape, error) {
	p := filepath.Join(dir, "config.json")
	b, err := readSmall(p)
	if err != nil {
		return MoEShape{}, err
	}
	s, err := ParseMoEShape(b)
	if err != nil {
		return MoEShape{}, fmt.Errorf("%s: %w", p, err)
	}
	return s, nil
}

// firstField is the first of names that o holds (not null), or "".
func firstField(o object, names []string) string {
	for _, n := range names {
		if o.has(n) {
			return n
		}
	}
	return ""
}
