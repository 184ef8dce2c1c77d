package qwen3moe

import (
	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/modelconfig"
)

// Config is the parsed config.json (modelconfig's, with the derived
// per-layer facts).
type Config = modelconfig.Config

// ReadConfig reads dir/config.json with modelconfig and checks that this
// model definition can run it; errors name the file and the field.
func ReadConfig(dir string) (*Config, error) { return runbase.ReadConfig(dir, modelconfig.Qwen3Moe) }

// ParseConfig parses a config.json body like ReadConfig.
func ParseConfig(data []byte) (*Config, error) {
	return runbase.ParseConfig(data, modelconfig.Qwen3Moe)
}
