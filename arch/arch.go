// Package arch chooses a model definition for a Hugging Face checkpoint
// directory by the "architectures" field of its config.json. Architectures
// register a loader from an init function (arch/qwen3moe, ...); import
// arch/all to get every one.
package arch

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/lora"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/moe/placement"
	"github.com/ktserve/kt/tp"
)

// Options size a runner's buffers and choose where it runs.
type Options struct {
	MaxSeqs        int // sequence slots (--max-running-requests); default 8
	MaxTotalTokens int // KV budget over all slots (--max-total-tokens); default 16384
	MaxBatchTokens int // tokens in one forward step (--chunked-prefill-size); default 2048
	PageSize       int // KV page size in tokens; default 16
	Threads        int // CPU threads; 0 = all
	// Backend runs the ops; nil means Load opens one as Device says.
	Backend backend.Backend
	// Experts chooses what computes routed experts when the backend is
	// the CPU: "auto" (default: the CPU expert engine with bf16 weights in
	// place when it supports the shapes, else the backend's MoE op),
	// "backend" (always the backend's op, the reference), or a CPU expert
	// method name (BF16, AMXINT8, ...; an error if it cannot run).
	Experts string
	// ExpertThreads is the CPU expert engine's worker count
	// (--kt-cpuinfer); 0 means Threads.
	ExpertThreads int
	// ExpertPools is the engine's thread-pool count, one per NUMA node
	// (--kt-threadpool-count); 0 means the pool count ExpertWeightPath
	// was converted for, else 1.
	ExpertPools int
	// ExpertNUMANodes are the pools' NUMA nodes (--kt-numa-nodes); nil
	// means 0..ExpertPools-1.
	ExpertNUMANodes []int
	// ExpertWeightPath is where the engine's weights come from
	// (--kt-weight-path): "" or the model directory (the checkpoint's
	// routed experts, used in place or quantized at load), or a kt quant
	// output directory (AMXINT8/AMXINT4, loaded as converted).
	ExpertWeightPath string
	// GPUExperts says which routed experts stay on the GPU in the hybrid
	// step (--kt-num-gpu-experts, --kt-gpu-experts-ratio,
	// --kt-expert-placement-strategy); the zero value (PerLayer 0) keeps
	// every routed expert on the CPU expert engine.
	GPUExperts placement.Request
	// ExpertDeferral is --kt-max-deferred-experts-per-token: per token,
	// the routed experts outside the k−D highest-weight ones (unless
	// another token of the step protects them) run as a second CPU task
	// whose output is added to the next MoE layer's, so it may finish
	// while the GPU runs that layer's attention (SGLang-KT's deferred
	// experts; package hybrid). 0 (default) is off; the last MoE
	// layer never defers.
	ExpertDeferral int
	// GPUPrefillThreshold is --kt-gpu-prefill-token-threshold: in the
	// hybrid step, a forward pass of at least this many tokens runs every
	// MoE layer's routed experts on the GPU, the layer's weights streamed
	// from host memory into one shared device layer buffer (layerwise
	// prefill; package hybrid). 0 (default) is off. Decode steps
	// on the CUDA graph path never take it.
	GPUPrefillThreshold int
	// DynamicExpertUpdate is --kt-enable-dynamic-expert-update: after a
	// layer's layerwise-prefill compute, the layer's GPU expert slots are
	// refilled with the step's most picked experts (the count per layer
	// unchanged) and the CPU engine skips those instead. Needs
	// GPUPrefillThreshold and GPU experts (GPUExperts).
	DynamicExpertUpdate bool
	// ExpertRecorder, when set and recording, receives the router's
	// expert picks of every MoE layer (--expert-distribution-recorder-mode
	// stat; moe/expertdist.Recorder). Steps run op by op while it records.
	ExpertRecorder ExpertRecorder

	// Device picks the backend Load opens when Backend is nil: "" or
	// "cpu" (a CPU backend with Threads), "cuda" (the GPU or an error),
	// "auto" (the GPU when one is usable and the model fits, else the CPU,
	// saying why through Notify). --device.
	Device string
	// BaseGPUID is the GPU among those CUDA_VISIBLE_DEVICES leaves
	// (--base-gpu-id).
	BaseGPUID int
	// MemFractionStatic is the fraction of GPU memory for weights, KV
	// cache and activations; 0 means the CUDA backend's default
	// (--mem-fraction-static).
	MemFractionStatic float64
	// Notify, when set, receives one line saying where the model runs
	// and, for "auto", why not on the GPU, and one line for each part of
	// the checkpoint the model skips (DeepSeek-V3's multi-token-prediction
	// layers).
	Notify func(msg string)
	// DisableCUDAGraph runs every step op by op (--disable-cuda-graph).
	// Otherwise, on a backend that can record graphs (the GPU), decode
	// steps of up to CUDAGraphMaxBS sequences are captured once per batch
	// size bucket and replayed.
	DisableCUDAGraph bool
	// CUDAGraphMaxBS is the largest decode batch replayed as a graph
	// (--cuda-graph-max-bs); 0 means MaxSeqs.
	CUDAGraphMaxBS int
	// EagerGraphSteps pads decode steps to their graph bucket exactly as
	// the graph path does but runs them op by op: the reference the tests
	// hold graph replays to, bit for bit.
	EagerGraphSteps bool
	// PrefixSnapshots is the number of recurrent-state snapshots the
	// prefix cache may keep for a model with linear-attention layers
	// (kvcache/radix); each takes one sequence's state of memory, and the
	// model then keeps one more state per slot (its latest page-aligned
	// state). 0: such a model reuses no cached prefix. Models without
	// recurrent state ignore it.
	PrefixSnapshots int
	// LoRA are the adapters to serve (--lora-paths, --kt-lora-path,
	// --kt-expert-lora-path); nil serves the base model.
	LoRA *lora.Set

	// TensorParallel is --tensor-parallel-size: Load splits the model over
	// that many ranks (package tp), each with its own backend: GPUs
	// BaseGPUID.. on the GPU, on the CPU a share of Threads each. 0 or 1:
	// one rank.
	TensorParallel int
	// TP is, for one rank of a tensor-parallel model, its communicator
	// (set by Load for each rank's loader); nil for a whole model.
	TP tp.Comm
}

// ExpertRecorder counts routed-expert picks (moe/expertdist.Recorder).
type ExpertRecorder interface {
	// Recording reports whether picks are being counted now.
	Recording() bool
	// Add counts layer's picks, row-major [tokens, top-k] expert ids.
	Add(layer int, ids []int32)
}

// WithDefaults fills zero fields with defaults.
func (o Options) WithDefaults() Options {
	if o.MaxSeqs <= 0 {
		o.MaxSeqs = 8
	}
	if o.MaxTotalTokens <= 0 {
		o.MaxTotalTokens = 16384
	}
	if o.MaxBatchTokens <= 0 {
		o.MaxBatchTokens = 2048
	}
	if o.PageSize <= 0 {
		o.PageSize = 16
	}
	if o.Experts == "" {
		o.Experts = "auto"
	}
	return o
}

// LoadFunc loads a checkpoint directory whose config.json names an
// architecture the function registered for.
type LoadFunc func(dir string, o Options) (model.Runner, error)

// registry is written only from init functions (Register) and read after.
var (
	mu       sync.RWMutex
	registry = map[string]LoadFunc{}
)

// Register makes Load use fn for the HF architecture name arch (e.g.
// "Qwen3MoeForCausalLM"). Call it from init.
func Register(arch string, fn LoadFunc) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[arch]; dup {
		panic("models: architecture " + arch + " registered twice")
	}
	registry[arch] = fn
}

// Architectures lists the registered architecture names, sorted.
func Architectures() []string {
	mu.RLock()
	defer mu.RUnlock()
	var a []string
	for k := range registry {
		a = append(a, k)
	}
	sort.Strings(a)
	return a
}

// Architecture reads the "architectures" field of dir/config.json.
func Architecture(dir string) ([]string, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model directory: %w", err)
	}
	var c struct {
		Architectures []string `json:"architectures"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(c.Architectures) == 0 {
		return nil, fmt.Errorf("%s: no \"architectures\" field", path)
	}
	return c.Architectures, nil
}

// Load opens the checkpoint in dir with the loader registered for its
// architecture, on o.Backend or on the backend o.Device picks.
func Load(dir string, o Options) (model.Runner, error) {
	fn, err := loaderFor(dir)
	if err != nil {
		return nil, err
	}
	o = o.WithDefaults()
	if o.TensorParallel > 1 {
		return loadTP(dir, fn, o)
	}
	if o.Backend != nil {
		return fn(dir, o)
	}
	return loadOnDevice(dir, fn, o)
}

// loaderFor returns the loader registered for dir's architecture.
func loaderFor(dir string) (LoadFunc, error) {
	archs, err := Architecture(dir)
	if err != nil {
		return nil, err
	}
	mu.RLock()
	var fn LoadFunc
	for _, a := range archs {
		if fn = registry[a]; fn != nil {
			break
		}
	}
	mu.RUnlock()
	if fn == nil {
		return nil, fmt.Errorf("%s: architecture %s is not supported (supported: %s)", filepath.Join(dir, "config.json"), strings.Join(archs, ", "), strings.Join(Architectures(), ", "))
	}
	return fn, nil
}
