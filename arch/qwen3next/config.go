package qwen3next

import (
	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/modelconfig"
)

// Architectures this package serves (HF "architectures" strings).
const (
	ArchNext       = "Qwen3NextForCausalLM"
	ArchQwen35     = "Qwen3_5MoeForConditionalGeneration"
	ArchQwen35Text = "Qwen3_5MoeForCausalLM"
)

// Config is the parsed config.json (modelconfig's, with the derived
// per-layer facts; Qwen3.5's text_config flattened).
type Config = modelconfig.Config

// ReadConfig reads dir/config.json with modelconfig and checks that this
// model definition can run it; errors name the file and the field.
func ReadConfig(dir string) (*Config, error) {
	return runbase.ReadConfig(dir, modelconfig.Qwen3Next, modelconfig.Qwen35Moe)
}

// ParseConfig parses a config.json body like ReadConfig.
func ParseConfig(data []byte) (*Config, error) {
	return runbase.ParseConfig(data, modelconfig.Qwen3Next, modelconfig.Qwen35Moe)
}
