// Package all links every model definition into the binary: import it for
// its side effect of registering them with package arch.
package all

import (
	_ "github.com/ktserve/kt/arch/deepseekv3" // DeepseekV3ForCausalLM
	_ "github.com/ktserve/kt/arch/qwen3moe"   // Qwen3MoeForCausalLM
	_ "github.com/ktserve/kt/arch/qwen3next"  // Qwen3NextForCausalLM, Qwen3_5MoeForConditionalGeneration, Qwen3_5MoeForCausalLM
)
