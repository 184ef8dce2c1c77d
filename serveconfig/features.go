package serveconfig

import (
	"fmt"
	"slices"
	"strings"
)

// Features says which optional features this build and this machine have.
// The serve command fills it from the packages linked in and the hardware
// found; Validate refuses flags that need a feature that is missing.
type Features struct {
	GPUs                       int      // usable GPUs found
	MaxTensorParallel          int      // largest --tensor-parallel-size over GPUs (the GPUs, with NCCL; else 1)
	TensorParallelWhy          string   // why MaxTensorParallel is 1 with several GPUs (NCCL missing)
	CPUExpertMethods           []string // --kt-method values the CPU expert engine implements (none: no engine in this build)
	GPUExperts                 bool     // hot routed experts resident on the GPU
	Deferral                   bool     // --kt-max-deferred-experts-per-token (the CPU expert engine splits its task)
	LayerwisePrefill           bool     // --kt-gpu-prefill-token-threshold
	DynamicExpertUpdate        bool     // --kt-enable-dynamic-expert-update
	ExpertDistributionRecorder bool     // --record-kt-gpu-expert-distribution
	ExpertDistributionModes    []string // --expert-distribution-recorder-mode values implemented
	PlacementStrategies        []string // --kt-expert-placement-strategy values implemented
	LoRA                       bool     // --enable-lora / --lora-paths
	KTLoRA                     bool     // --kt-lora-path / --kt-expert-lora-path
}

// Notice is a startup log line about a flag that was given and accepted
// but has no effect in kt.
type Notice struct {
	Flag    string
	Message string
}

// Validate checks the configuration against the features available. It
// returns the notices to log at startup, or an error listing every flag
// that asks for a missing feature.
func (c *Config) Validate(f Features) ([]Notice, error) {
	var errs []string
	var notes []Notice
	refuse := func(flag, format string, a ...any) {
		errs = append(errs, "--"+flag+": "+fmt.Sprintf(format, a...))
	}
	note := func(flag, msg string) {
		if c.Set[flag] {
			notes = append(notes, Notice{Flag: flag, Message: msg})
		}
	}
	gpu := f.GPUs > 0 && c.Device != "cpu"

	if c.Device == "cuda" && f.GPUs == 0 {
		refuse("device", "cuda asked for but no usable GPU was found (run kt doctor to see why)")
	}
	if n := c.TensorParallelSize; n > 1 {
		// without a GPU in use the ranks are thread groups of the CPU
		// backend (package tp)
		switch {
		case gpu && n > f.GPUs:
			refuse("tensor-parallel-size", "%d needs %d GPUs; %d found (--device cpu runs %d CPU ranks instead)", n, n, f.GPUs, n)
		case gpu && n > max(f.MaxTensorParallel, 1):
			refuse("tensor-parallel-size", "tensor parallelism over %d GPUs needs NCCL: %s", n, orNone([]string{f.TensorParallelWhy}))
		}
	}
	if gpu && c.BaseGPUID+max(c.TensorParallelSize, 1) > f.GPUs {
		refuse("base-gpu-id", "GPU %d asked for but only %d usable GPU(s) found (ids count from 0 among those CUDA_VISIBLE_DEVICES leaves)", c.BaseGPUID+max(c.TensorParallelSize, 1)-1, f.GPUs)
	}
	if !gpu {
		note("base-gpu-id", "no GPU is in use, so no GPU is selected")
		note("mem-fraction-static", "no GPU is in use, so there is no GPU memory to budget; the KV cache is sized by --max-total-tokens")
	}

	if c.RadixEviction != "lru" {
		refuse("radix-eviction-policy", "%q is not implemented in kt; the prefix cache evicts least recently used prefixes (lru)", c.RadixEviction)
	}
	if c.DisableRadixCache {
		note("radix-eviction-policy", "the prefix cache is off (--disable-radix-cache)")
	}

	// KTransformers.
	kt := c.KTWeightPath != ""
	if !kt {
		for _, name := range []string{"kt-method", "kt-cpuinfer", "kt-threadpool-count", "kt-numa-nodes",
			"kt-num-gpu-experts", "kt-gpu-experts-ratio", "kt-max-deferred-experts-per-token",
			"kt-gpu-prefill-token-threshold", "kt-enable-dynamic-expert-update",
			"kt-expert-placement-strategy", "record-kt-gpu-expert-distribution", "init-expert-location"} {
			if c.Set[name] {
				refuse(name, "has no effect without --kt-weight-path (KT CPU experts are off without it)")
			}
		}
	} else {
		if !slices.Contains(f.CPUExpertMethods, c.KTMethod) {
			if len(f.CPUExpertMethods) == 0 {
				refuse("kt-method", "%s: this kt has no CPU expert engine (it needs a cgo build for linux/amd64)", c.KTMethod)
			} else {
				refuse("kt-method", "%s is not implemented yet in kt; this build has %s", c.KTMethod, strings.Join(f.CPUExpertMethods, ", "))
			}
		}
		gpuExperts := c.KTNumGPUExperts > 0 || c.KTGPUExpertsRatioSet && c.KTGPUExpertsRatio > 0
		if gpuExperts {
			switch {
			case !gpu:
				refuse(pick(c.KTGPUExpertsRatioSet, "kt-gpu-experts-ratio", "kt-num-gpu-experts"), "GPU experts need a GPU and none is in use; use --kt-num-gpu-experts 0 to run every routed expert on the CPU")
			case !f.GPUExperts:
				refuse(pick(c.KTGPUExpertsRatioSet, "kt-gpu-experts-ratio", "kt-num-gpu-experts"), "GPU-resident routed experts are not implemented yet in kt; use --kt-num-gpu-experts 0")
			}
		}
		if c.KTMaxDeferredExpertsPerToken > 0 && !f.Deferral {
			refuse("kt-max-deferred-experts-per-token", "expert deferral is not implemented in this build (it splits the CPU expert engine's task: a cgo build for linux/amd64); use 0")
		}
		if c.KTGPUPrefillTokenThreshold > 0 {
			switch {
			case !gpu:
				refuse("kt-gpu-prefill-token-threshold", "layerwise GPU prefill needs a GPU and none is in use")
			case !f.LayerwisePrefill:
				refuse("kt-gpu-prefill-token-threshold", "layerwise GPU prefill is not in this build (it needs the hybrid step: a GPU and the CPU expert engine of a cgo build)")
			}
		}
		if c.KTEnableDynamicExpertUpdate {
			switch {
			case c.KTGPUPrefillTokenThreshold <= 0:
				refuse("kt-enable-dynamic-expert-update", "works only inside layerwise GPU prefill; set --kt-gpu-prefill-token-threshold too")
			case !f.DynamicExpertUpdate:
				refuse("kt-enable-dynamic-expert-update", "dynamic expert update is not in this build (it needs layerwise GPU prefill)")
			case !gpuExperts:
				note("kt-enable-dynamic-expert-update", "no routed expert is on the GPU (--kt-num-gpu-experts / --kt-gpu-experts-ratio), so there are no GPU expert slots to update")
			}
		}
		if c.Set["kt-expert-placement-strategy"] && gpuExperts && !slices.Contains(f.PlacementStrategies, c.KTExpertPlacementStrategy) {
			refuse("kt-expert-placement-strategy", "%s is not implemented yet in kt", c.KTExpertPlacementStrategy)
		}
		if c.Set["kt-expert-placement-strategy"] && !gpuExperts {
			note("kt-expert-placement-strategy", "no routed expert is on the GPU, so there is nothing to place")
		}
		if c.KTExpertPlacementStrategy == "frequency" && c.InitExpertLocation == "trivial" {
			refuse("kt-expert-placement-strategy", "frequency needs expert statistics: give --init-expert-location FILE")
		}
		if c.RecordKTGPUExpertDistribution && !f.ExpertDistributionRecorder {
			refuse("record-kt-gpu-expert-distribution", "the GPU expert distribution recorder is not implemented yet in kt")
		}
	}

	if m := c.ExpertDistributionRecorderMode; m != "" {
		switch {
		case !slices.Contains([]string{"stat", "stat_approx", "per_pass", "per_token"}, m):
			refuse("expert-distribution-recorder-mode", "%q is not one of stat, stat_approx, per_pass, per_token", m)
		case !slices.Contains(f.ExpertDistributionModes, m):
			refuse("expert-distribution-recorder-mode", "%s is not implemented yet in kt (this build records: %s)", m, orNone(f.ExpertDistributionModes))
		}
		if b := c.ExpertDistributionRecorderBufferSize; b == 0 || b < -1 {
			refuse("expert-distribution-recorder-buffer-size", "%d: want a positive number of passes, or -1 for a running sum", b)
		}
	}

	// LoRA.
	if c.EnableLoRA && !f.LoRA {
		refuse("enable-lora", "LoRA serving is not implemented yet in kt")
	}
	for _, name := range []string{"kt-lora-path", "kt-expert-lora-path"} {
		if c.Set[name] && !f.KTLoRA {
			refuse(name, "KT expert LoRA serving is not implemented yet in kt")
		}
	}
	if c.KTExpertLoRAPath != "" || c.KTLoRAPath != "" || (kt && c.EnableLoRA) {
		if c.KTNumGPUExperts > 0 {
			refuse("kt-num-gpu-experts", "KT expert LoRA supports CPU experts only; set --kt-num-gpu-experts 0")
		}
		if c.KTGPUPrefillTokenThreshold > 0 {
			refuse("kt-gpu-prefill-token-threshold", "cannot be used with KT expert LoRA")
		}
		if c.KTEnableDynamicExpertUpdate {
			refuse("kt-enable-dynamic-expert-update", "cannot be used with KT expert LoRA")
		}
		if c.MaxRunningRequests == 1 {
			refuse("max-running-requests", "KT expert LoRA serving requires --max-running-requests >= 2")
		}
	}
	if len(c.LoRAPaths) > 1 {
		refuse("lora-paths", "Only one merged KT composite LoRA adapter is supported (kt serves one adapter)")
	}
	if (c.EnableLoRA || c.KTLoRAPath != "" || c.KTExpertLoRAPath != "") && f.LoRA {
		if c.Set["max-loras-per-batch"] && c.MaxLoRAsPerBatch > 1 && len(c.LoRAPaths) <= 1 {
			note("max-loras-per-batch", "kt serves one adapter; a batch mixes it with base-model requests")
		}
		if len(c.LoRATargetModules) > 0 {
			refuse("lora-target-modules", "not supported: kt applies LoRA to the modules the adapter has")
		}
	}

	note("trust-remote-code", "kt never runs code from a model directory; every architecture is built in")
	note("attention-backend", "kt uses its own attention kernels on each backend; the SGLang kernel name is not used")
	if !gpu {
		note("disable-cuda-graph", "no GPU is in use, so no CUDA graph is captured anyway")
		note("cuda-graph-max-bs", "no GPU is in use, so no CUDA graph is captured")
	}
	note("enable-p2p-check", "kt checks GPU peer access itself when it uses several GPUs")
	note("disable-custom-all-reduce", "kt uses NCCL's all-reduce only")
	note("disable-shared-experts-fusion", "kt always keeps shared experts apart from routed ones")
	note("lora-backend", "kt has its own LoRA kernels; the SGLang kernel name is not used")

	if len(errs) > 0 {
		return notes, fmt.Errorf("kt serve: refused flags:\n  %s", strings.Join(errs, "\n  "))
	}
	return notes, nil
}

func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}

// orNone joins xs, or says "none".
func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}
