// Package peft reads and writes the pieces of a PEFT LoRA adapter directory
// (adapter_config.json + adapter_model.safetensors) that kt needs: tensor key
// clean-up, target-module inference and ordering, the LoRA rank a tensor
// carries, and the expert / non-expert split rule SGLang applies to a merged
// KT adapter at startup.
package peft

import (
	"sort"
	"strings"
)

// File names inside a PEFT adapter directory.
const (
	ConfigFile = "adapter_config.json"
	ModelFile  = "adapter_model.safetensors"
)

// TargetModuleOrder is the order in which known module names appear in a
// written adapter_config.json "target_modules" list; other names follow,
// sorted. It matches KTransformers' convert_kt_to_sglang_adapter.py.
var TargetModuleOrder = []string{
	"q_proj", "k_proj", "v_proj", "o_proj",
	"gate_proj", "up_proj", "down_proj",
	"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
	"out_proj",
	"embed_tokens", "lm_head",
}

// CleanKey removes the PEFT wrapper prefix "base_model.model." and any
// ".orig_module" segment from a tensor key, as the SGLang / KT converters do
// (every occurrence, like Python's str.replace).
func CleanKey(key string) string {
	key = strings.ReplaceAll(key, "base_model.model.", "")
	return strings.ReplaceAll(key, ".orig_module", "")
}

// TargetModule infers the PEFT target module a LoRA tensor key belongs to:
// the last path component before ".lora_", or embed_tokens / lm_head for
// embedding LoRA tensors. ok is false for keys that name no LoRA tensor.
func TargetModule(key string) (module string, ok bool) {
	if strings.Contains(key, "lora_embedding_A") || strings.Contains(key, "lora_embedding_B") {
		if strings.Contains(key, "embed_tokens") {
			return "embed_tokens", true
		}
		if strings.Contains(key, "lm_head") || strings.Contains(key, "unembed_tokens") {
			return "lm_head", true
		}
	}
	prefix, _, found := strings.Cut(key, ".lora_")
	if !found {
		return "", false
	}
	if i := strings.LastIndexByte(prefix, '.'); i >= 0 {
		return prefix[i+1:], true
	}
	return prefix, true
}

// OrderTargetModules returns the distinct names of modules in
// TargetModuleOrder order, followed by the remaining names sorted.
func OrderTargetModules(modules map[string]bool) []string {
	out := make([]string, 0, len(modules))
	known := make(map[string]bool, len(TargetModuleOrder))
	for _, m := range TargetModuleOrder {
		known[m] = true
		if modules[m] {
			out = append(out, m)
		}
	}
	var rest []string
	for m := range modules {
		if !known[m] {
			rest = append(rest, m)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// LastComponent returns the part of a dotted module path after its last dot
// ("model.layers.0.self_attn.q_proj" -> "q_proj"), as PEFT target_modules
// entries are reduced when merged.
func LastComponent(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// TensorRank returns the LoRA rank a tensor carries according to its key and
// shape: dimension 0 of lora_A / lora_embedding_A, dimension 1 of lora_B /
// lora_embedding_B (PEFT stores A as [r, in] and B as [out, r]). ok is false
// for keys that are not 2-D LoRA factor tensors.
func TensorRank(key string, shape []int64) (rank int64, ok bool) {
	if len(shape) != 2 {
		return 0, false
	}
	switch {
	case strings.Contains(key, ".lora_A.") || strings.Contains(key, ".lora_embedding_A"):
		return shape[0], true
	case strings.Contains(key, ".lora_B.") || strings.Contains(key, ".lora_embedding_B"):
		return shape[1], true
	}
	return 0, false
}

// IsExpertKey reports whether SGLang's KT composite-adapter split sends a
// tensor to the CPU expert path: its key contains ".mlp.experts." and one of
// ".gate_proj.", ".up_proj.", ".down_proj.". Shared-expert keys
// (".mlp.shared_expert.") stay non-expert.
func IsExpertKey(key string) bool {
	if !strings.Contains(key, ".mlp.experts.") {
		return false
	}
	return strings.Contains(key, ".gate_proj.") || strings.Contains(key, ".up_proj.") || strings.Contains(key, ".down_proj.")
}
