//go:build linux && amd64 && cgo

package qwen3next

import (
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/lora"
)

// loraGPUTol bounds |logit difference| against the float32 transformers
// reference on the GPU: its split-bf16 GEMMs and summation orders differ
// from the CPU backend's.
const loraGPUTol = 2e-2

// TestNonExpertLoRAOnGPU is TestNonExpertLoRAMatchesReference with the
// whole model on the GPU: the adapter's non-expert half runs as two MatMuls
// and the CUDA LoRAAdd per row, so one step mixes a sequence with the
// adapter and one without. It skips without a GPU.
func TestNonExpertLoRAOnGPU(t *testing.T) {
	gpu := openTestGPU(t)
	ref := readLoRARef(t)
	set, err := lora.Open(lora.Flags{LoRAPaths: []string{"neko=" + filepath.Join(loraFixture, "merged")}})
	if err != nil {
		t.Fatal(err)
	}
	set.Expert = nil // the GPU's MoE op refuses expert LoRA (SGLang-KT: CPU experts only)
	r, err := Load(fixtureDir("qwen35moe-b"), arch.Options{MaxSeqs: 4, MaxTotalTokens: 512, MaxBatchTokens: 64, PageSize: 16, Backend: gpu, Experts: "backend", LoRA: set})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	checkNonExpertMixed(t, r, ref, "GPU ", loraGPUTol)
}
