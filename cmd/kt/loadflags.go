package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ktserve/kt/arch"
)

// loadFlags are the flags that say where and how the offline commands
// (kt generate, kt eval) load a model: the checkpoint, the device, the
// routed experts' CPU engine (--kt-method ...) and the hybrid step's GPU
// experts, as kt serve names them.
type loadFlags struct {
	modelPath     string
	tokenizerPath string
	threads       int
	experts       string
	ktMethod      string
	ktWeightPath  string
	ktCPUInfer    int
	ktPools       int
	ktNUMANodes   []int
	// GPU experts of the hybrid step
	ktNumGPUExperts   int
	ktPrefillThresh   int
	ktDynamicUpdate   bool
	ktGPUExpertsRatio float64
	ktPlacement       string
	initExpertLoc     string
	ktDeferred        int // --kt-max-deferred-experts-per-token
	device            string
	baseGPUID         int
	tpSize            int // --tensor-parallel-size
	memFraction       float64
	noGraph           bool
}

// register defines the flags on fl.
func (f *loadFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.modelPath, "model-path", "", "checkpoint directory (config.json + *.safetensors)")
	fl.StringVar(&f.tokenizerPath, "tokenizer-path", "", "directory with tokenizer.json or tiktoken.model (default: --model-path)")
	fl.IntVar(&f.threads, "threads", 0, "CPU threads (0 = all cores)")
	fl.StringVar(&f.experts, "experts", "auto", "routed experts on the CPU: auto (CPU expert engine when it fits), backend (reference op), or a method (BF16, AMXINT8, ...)")
	fl.StringVar(&f.ktMethod, "kt-method", "", "CPU expert method, as kt serve's flag (same as --experts METHOD)")
	fl.StringVar(&f.ktWeightPath, "kt-weight-path", "", "CPU expert weights: the model directory, a kt quant output, or a KTransformers-converted AMXINT8/AMXINT4 directory (needs --kt-method)")
	fl.IntVar(&f.ktCPUInfer, "kt-cpuinfer", 0, "CPU expert engine threads (0 = --threads)")
	fl.IntVar(&f.ktPools, "kt-threadpool-count", 0, "CPU expert thread pools, one per NUMA node (0 = as the kt quant output was converted, else 1)")
	fl.IntSliceVar(&f.ktNUMANodes, "kt-numa-nodes", nil, "NUMA node of each CPU expert thread pool (comma-separated)")
	fl.IntVar(&f.ktNumGPUExperts, "kt-num-gpu-experts", -1, "routed experts per MoE layer kept on the GPU in the hybrid step (--device cuda --kt-method M)")
	fl.Float64Var(&f.ktGPUExpertsRatio, "kt-gpu-experts-ratio", 0, "fraction of all routed experts kept on the GPU; overrides --kt-num-gpu-experts")
	fl.StringVar(&f.ktPlacement, "kt-expert-placement-strategy", "uniform", "GPU expert placement: "+strings.Join(placementStrategies, ", "))
	fl.StringVar(&f.initExpertLoc, "init-expert-location", "trivial", "expert statistics (SGLang's torch.save file, FILE.pt) for --kt-expert-placement-strategy frequency")
	fl.IntVar(&f.ktPrefillThresh, "kt-gpu-prefill-token-threshold", 0, "hybrid step: forward passes of at least this many tokens run every routed expert on the GPU, layer by layer (0 off; as kt serve's flag)")
	fl.BoolVar(&f.ktDynamicUpdate, "kt-enable-dynamic-expert-update", false, "hybrid step: after a layerwise prefill, refill each layer's GPU expert slots with the batch's most picked experts (needs --kt-gpu-prefill-token-threshold)")
	fl.IntVar(&f.ktDeferred, "kt-max-deferred-experts-per-token", 0, "routed experts per token whose CPU work may finish during the next MoE layer (0 off, 1-4 recommended; CPU experts only)")
	fl.StringVar(&f.device, "device", "auto", "where the model runs: auto (the GPU when one is usable and the model fits), cuda, cpu")
	fl.IntVar(&f.baseGPUID, "base-gpu-id", 0, "GPU to use (the first of --tensor-parallel-size), among those CUDA_VISIBLE_DEVICES leaves")
	registerTP(fl, &f.tpSize, "ranks to split attention, dense layers and the vocabulary over: GPUs from --base-gpu-id (NCCL), or CPU thread groups with --device cpu")
	fl.Float64Var(&f.memFraction, "mem-fraction-static", 0, "fraction of GPU memory for weights, KV cache and activations (0: default 0.88)")
	fl.BoolVar(&f.noGraph, "disable-cuda-graph", false, "run GPU decode steps op by op instead of replaying a captured CUDA graph")
}

// options checks the flags, before anything is loaded, and returns the
// arch.Options they give; the caller sets the sequence and token budgets
// and Notify. Errors name the flags.
func (f *loadFlags) options(cmd *cobra.Command) (arch.Options, error) {
	var o arch.Options
	if f.modelPath == "" {
		return o, errors.New("--model-path is required")
	}
	if !slices.Contains(arch.Devices, f.device) {
		return o, fmt.Errorf("--device %q: want one of %s", f.device, strings.Join(arch.Devices, ", "))
	}
	if f.tpSize < 1 {
		return o, fmt.Errorf("--tensor-parallel-size %d: want at least 1", f.tpSize)
	}
	if f.baseGPUID < 0 {
		return o, fmt.Errorf("--base-gpu-id %d: want at least 0", f.baseGPUID)
	}
	if f.memFraction < 0 || f.memFraction > 1 {
		return o, fmt.Errorf("--mem-fraction-static %v outside (0, 1]", f.memFraction)
	}
	experts := f.experts
	switch {
	case f.ktMethod != "" && cmd.Flags().Changed("experts") && !strings.EqualFold(f.ktMethod, f.experts):
		return o, fmt.Errorf("--kt-method %s and --experts %s disagree; give one", f.ktMethod, f.experts)
	case f.ktMethod != "":
		experts = f.ktMethod
	case f.ktWeightPath != "":
		return o, errors.New("--kt-weight-path needs --kt-method (BF16, AMXINT8, ...)")
	}
	if f.ktCPUInfer < 0 || f.ktPools < 0 {
		return o, errors.New("--kt-cpuinfer and --kt-threadpool-count must not be negative")
	}
	gpuExperts := gpuExpertRequest(f.ktNumGPUExperts, f.ktGPUExpertsRatio, cmd.Flags().Changed("kt-gpu-experts-ratio"), f.ktPlacement, f.initExpertLoc)
	if gpuExperts.Active() && (f.device == "cpu" || experts == "auto" || experts == "backend") {
		return o, errors.New("GPU experts (--kt-num-gpu-experts, --kt-gpu-experts-ratio) belong to the hybrid step: give --device cuda (or auto) and --kt-method")
	}
	if err := deferralAllowed(f.ktDeferred, f.device, experts); err != nil {
		return o, err
	}
	if err := layerwiseAllowed(f.ktPrefillThresh, f.ktDynamicUpdate, f.device, experts); err != nil {
		return o, err
	}
	return arch.Options{Threads: f.threads, Experts: experts,
		ExpertWeightPath: f.ktWeightPath, ExpertThreads: f.ktCPUInfer, ExpertPools: f.ktPools, ExpertNUMANodes: f.ktNUMANodes,
		GPUExperts: gpuExperts, ExpertDeferral: f.ktDeferred, GPUPrefillThreshold: f.ktPrefillThresh, DynamicExpertUpdate: f.ktDynamicUpdate,
		Device: f.device, BaseGPUID: f.baseGPUID, MemFractionStatic: f.memFraction, DisableCUDAGraph: f.noGraph,
		TensorParallel: f.tpSize}, nil
}

// registerTP defines --tensor-parallel-size and its alias --tp-size on fl,
// both setting n, with use as the help text.
func registerTP(fl *pflag.FlagSet, n *int, use string) {
	fl.IntVar(n, "tensor-parallel-size", 1, use)
	fl.IntVar(n, "tp-size", 1, "alias of --tensor-parallel-size")
}

// tokenizerDir is --tokenizer-path, else --model-path.
func (f *loadFlags) tokenizerDir() string {
	if f.tokenizerPath != "" {
		return f.tokenizerPath
	}
	return f.modelPath
}

// deferralAllowed refuses --kt-max-deferred-experts-per-token d where kt
// does not implement it: deferral splits the routed experts' CPU task, so
// it needs the CPU expert engine (a cgo build) and, on the GPU, the hybrid
// step (--kt-method). On --device cpu the engine (or, where its shapes do
// not fit, the backend's reference op) runs it.
func deferralAllowed(d int, device, experts string) error {
	const flag = "--kt-max-deferred-experts-per-token"
	switch {
	case d < 0:
		return fmt.Errorf("%s %d: must not be negative", flag, d)
	case d == 0:
		return nil
	case len(cpuExpertMethods()) == 0:
		return fmt.Errorf("%s: this kt has no CPU expert engine (it needs a cgo build for linux/amd64), so there is no CPU task to defer", flag)
	case device == "cuda" && (experts == "auto" || experts == "backend"):
		return fmt.Errorf("%s: on the GPU, deferral applies to routed experts on the CPU expert engine: give --kt-method (the hybrid step)", flag)
	}
	return nil
}

// layerwiseAllowed checks --kt-gpu-prefill-token-threshold t and
// --kt-enable-dynamic-expert-update: both belong to the hybrid step (a GPU
// in use and --kt-method), and the update runs only inside layerwise
// prefill, so it needs the threshold (as SGLang's server arguments say).
func layerwiseAllowed(t int, dynamic bool, device, experts string) error {
	const flag = "--kt-gpu-prefill-token-threshold"
	switch {
	case t < 0:
		return fmt.Errorf("%s %d: must not be negative", flag, t)
	case dynamic && t == 0:
		return errors.New("--kt-enable-dynamic-expert-update works only inside layerwise GPU prefill; set --kt-gpu-prefill-token-threshold too")
	case t == 0:
		return nil
	case device == "cpu":
		return fmt.Errorf("%s: layerwise GPU prefill needs a GPU; --device cpu runs every expert on the CPU", flag)
	case experts == "auto" || experts == "backend":
		return fmt.Errorf("%s: layerwise GPU prefill belongs to the hybrid step: give --kt-method (on the GPU alone every expert is already there)", flag)
	case len(cpuExpertMethods()) == 0:
		return fmt.Errorf("%s: this kt has no CPU expert engine (it needs a cgo build for linux/amd64), so there is no hybrid step", flag)
	}
	return nil
}
