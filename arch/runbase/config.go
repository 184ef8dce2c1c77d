package runbase

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/modelconfig"
)

// ReadConfig reads dir/config.json with modelconfig and checks that a model
// definition serving families can run it (see Supported).
func ReadConfig(dir string, families ...modelconfig.Family) (*modelconfig.Config, error) {
	c, err := modelconfig.Load(dir)
	if err != nil {
		return nil, err
	}
	if err := Supported(c, families...); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	return c, nil
}

// ParseConfig parses a config.json body with modelconfig and checks it
// with Supported.
func ParseConfig(data []byte, families ...modelconfig.Family) (*modelconfig.Config, error) {
	c, err := modelconfig.Parse(data)
	if err != nil {
		return nil, err
	}
	if err := Supported(c, families...); err != nil {
		return nil, err
	}
	return c, nil
}

// Supported reports, all at once and named by field, what modelconfig
// accepts but the model definitions do not run: a family other than
// families, an activation other than silu, attention biases, scaled
// rotary types (but DeepSeek-V3's YaRN), and (Qwen3-Next, Qwen3.5)
// attention without its output gate.
func Supported(c *modelconfig.Config, families ...modelconfig.Family) error {
	var errs []error
	if !slices.Contains(families, c.Family) {
		errs = append(errs, fmt.Errorf("architectures: %s (%s) is not served by this model definition", c.Architecture, c.Family))
	}
	if c.HiddenAct != "silu" {
		errs = append(errs, fmt.Errorf("hidden_act: %q is not supported (silu only)", c.HiddenAct))
	}
	if c.AttentionBias {
		errs = append(errs, errors.New("attention_bias: true is not supported"))
	}
	// DeepSeek-V3's YaRN is checked by modelconfig and computed by its family
	if t := c.Rope.Type; t != "default" && !(c.Family == modelconfig.DeepseekV3 && t == "yarn") {
		errs = append(errs, fmt.Errorf("rope_parameters.rope_type: rope type %q is not supported (only default rotary)", t))
	}
	if (c.Family == modelconfig.Qwen3Next || c.Family == modelconfig.Qwen35Moe) && !c.AttnOutputGate {
		errs = append(errs, errors.New("attn_output_gate: false is not supported"))
	}
	return errors.Join(errs...)
}

// NewInfo describes the model of config c in dir for the engine: the stop
// tokens are generation_config.json's eos_token_id when it names any, else
// config.json's.
func NewInfo(dir string, c *modelconfig.Config) model.Info {
	ids := c.EOSTokenIDs
	if g, ok, err := modelconfig.LoadGeneration(dir); err == nil && ok && len(g.EOSTokenIDs) > 0 {
		ids = g.EOSTokenIDs
	}
	var eos []int32
	for _, id := range ids {
		eos = append(eos, int32(id))
	}
	return model.Info{Architecture: c.Architecture, VocabSize: c.VocabSize, ContextLen: c.MaxPositionEmbeddings, EOSTokenIDs: eos}
}
