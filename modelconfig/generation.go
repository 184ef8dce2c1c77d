package modelconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// GenerationConfig holds generation_config.json: stop tokens and the
// model's default sampling settings. Pointer fields are nil when the file
// does not set them.
type GenerationConfig struct {
	BOSTokenID        *int
	PadTokenID        *int
	EOSTokenIDs       []int
	DoSample          *bool
	Temperature       *float64
	TopP              *float64
	TopK              *int
	MinP              *float64
	RepetitionPenalty *float64
	MaxNewTokens      *int
}

// LoadGeneration reads dir/generation_config.json. A missing file is not an
// error: it returns an empty GenerationConfig and ok=false.
func LoadGeneration(dir string) (g *GenerationConfig, ok bool, err error) {
	p := filepath.Join(dir, "generation_config.json")
	b, err := readSmall(p)
	if errors.Is(err, fs.ErrNotExist) {
		return &GenerationConfig{}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	g, err = ParseGeneration(b)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", p, err)
	}
	return g, true, nil
}

// ParseGeneration parses the contents of a generation_config.json.
func ParseGeneration(data []byte) (*GenerationConfig, error) {
	var errs []error
	o, err := newObject("", data, &errs)
	if err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	g := &GenerationConfig{
		BOSTokenID:  optIntPtr(o, "bos_token_id"),
		PadTokenID:  optIntPtr(o, "pad_token_id"),
		EOSTokenIDs: o.optIntOrInts("eos_token_id"),
		TopK:        optIntPtr(o, "top_k"),
	}
	if o.has("max_new_tokens") {
		g.MaxNewTokens = optIntPtr(o, "max_new_tokens")
	}
	if o.has("do_sample") {
		v := o.optBool("do_sample", false)
		g.DoSample = &v
	}
	fl := func(name string, lo, hi float64) *float64 {
		if !o.has(name) {
			return nil
		}
		v := o.optFloat(name, 0)
		if v < lo || v > hi {
			o.fail(name, "%g is outside [%g, %g]", v, lo, hi)
		}
		return &v
	}
	g.Temperature = fl("temperature", 0, 100)
	g.TopP = fl("top_p", 0, 1)
	g.MinP = fl("min_p", 0, 1)
	g.RepetitionPenalty = fl("repetition_penalty", 0, 100)
	if g.TopK != nil && *g.TopK < 0 {
		o.fail("top_k", "must not be negative, is %d", *g.TopK)
	}
	for _, id := range g.EOSTokenIDs {
		if id < 0 {
			o.fail("eos_token_id", "%d is negative", id)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return g, nil
}

// StopTokenIDs merges the EOS ids of the model config and the generation
// config (deduplicated, generation config first), as servers do.
func StopTokenIDs(c *Config, g *GenerationConfig) []int {
	var out []int
	seen := map[int]bool{}
	add := func(ids []int) {
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	if g != nil {
		add(g.EOSTokenIDs)
	}
	if c != nil {
		add(c.EOSTokenIDs)
	}
	return out
}
