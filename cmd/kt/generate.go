package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/arch"
	_ "github.com/ktserve/kt/arch/all" // register every architecture
	"github.com/ktserve/kt/generate"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/moe/placement"
	"github.com/ktserve/kt/tokenizer"
)

func init() { addCommand(newGenerateCmd) }

type generateFlags struct {
	modelPath      string
	prompt         string
	inputIDs       string
	maxNew         int
	temperature    float64
	topP           float64
	topK           int
	seed           uint64
	jsonOut        bool
	topLogprobs    int
	promptLogprobs bool
	ignoreEOS      bool
	threads        int
	maxTotal       int
	chunk          int
	tokenizerPath  string
	experts        string
	ktMethod       string
	ktWeightPath   string
	ktCPUInfer     int
	ktPools        int
	ktNUMANodes    []int
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
	memFraction       float64
	noGraph           bool
	cpuProfile        string
}

func newGenerateCmd() *cobra.Command {
	var f generateFlags
	c := &cobra.Command{
		Use:   "generate --model-path DIR (--prompt TEXT | --input-ids 1,2,3)",
		Short: "Generate from a prompt offline, without a server (check a model before serving it)",
		Long: `generate loads a Hugging Face checkpoint directory, runs the prompt and
prints the continuation. Greedy by default; --temperature > 0 samples (with
--top-k, --top-p, --seed). --json prints output ids, per-token logprobs and
--top-logprobs alternatives, plus timings.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runGenerate(cmd, &f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.modelPath, "model-path", "", "checkpoint directory (config.json + *.safetensors)")
	fl.StringVar(&f.prompt, "prompt", "", "prompt text (needs a tokenizer in the model directory)")
	fl.StringVar(&f.inputIDs, "input-ids", "", "prompt as comma-separated token ids")
	fl.IntVar(&f.maxNew, "max-new-tokens", 32, "tokens to generate")
	fl.Float64Var(&f.temperature, "temperature", 0, "sampling temperature; 0 = greedy")
	fl.Float64Var(&f.topP, "top-p", 1, "nucleus sampling mass")
	fl.IntVar(&f.topK, "top-k", 0, "sample among the k most likely tokens; 0 = all")
	fl.Uint64Var(&f.seed, "seed", 0, "random seed for sampling")
	fl.BoolVar(&f.jsonOut, "json", false, "print ids, logprobs and timings as JSON")
	fl.IntVar(&f.topLogprobs, "top-logprobs", 0, "alternatives with logprobs per output token (--json)")
	fl.BoolVar(&f.promptLogprobs, "prompt-logprobs", false, "also score every prompt token (--json)")
	fl.BoolVar(&f.ignoreEOS, "ignore-eos", false, "do not stop at an end-of-sequence token")
	fl.IntVar(&f.threads, "threads", 0, "CPU threads (0 = all cores)")
	fl.IntVar(&f.maxTotal, "max-total-tokens", 0, "KV cache budget in tokens (default: prompt + new tokens)")
	fl.IntVar(&f.chunk, "chunked-prefill-size", 512, "prefill chunk size in tokens")
	fl.StringVar(&f.tokenizerPath, "tokenizer-path", "", "directory with tokenizer.json (default: --model-path)")
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
	fl.IntVar(&f.baseGPUID, "base-gpu-id", 0, "GPU to use, among those CUDA_VISIBLE_DEVICES leaves")
	fl.Float64Var(&f.memFraction, "mem-fraction-static", 0, "fraction of GPU memory for weights, KV cache and activations (0: default 0.88)")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the generation (prefill and decode, not the load) to this file (go tool pprof)")
	fl.BoolVar(&f.noGraph, "disable-cuda-graph", false, "run GPU decode steps op by op instead of replaying a captured CUDA graph")
	return c
}

// runGenerate is kt generate: check the flags, read the prompt, load the
// model, run the prompt on the engine and print the result.
func runGenerate(cmd *cobra.Command, f *generateFlags) error {
	experts, gpuExperts, err := f.validate(cmd.Flags().Changed)
	if err != nil {
		return err
	}
	ids, tok, err := f.promptIDs()
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	total := f.maxTotal
	if total <= 0 {
		total = len(ids) + f.maxNew + 16
	}
	t0 := time.Now()
	r, err := arch.Load(f.modelPath, arch.Options{MaxSeqs: 1, MaxTotalTokens: total, MaxBatchTokens: f.chunk, Threads: f.threads, Experts: experts,
		ExpertWeightPath: f.ktWeightPath, ExpertThreads: f.ktCPUInfer, ExpertPools: f.ktPools, ExpertNUMANodes: f.ktNUMANodes,
		GPUExperts: gpuExperts, ExpertDeferral: f.ktDeferred, GPUPrefillThreshold: f.ktPrefillThresh, DynamicExpertUpdate: f.ktDynamicUpdate, Device: f.device, BaseGPUID: f.baseGPUID, MemFractionStatic: f.memFraction,
		DisableCUDAGraph: f.noGraph,
		Notify:           func(msg string) { fmt.Fprintln(stderr, "generate:", msg) }})
	if err != nil {
		return err
	}
	defer r.Close()
	loadSec := time.Since(t0).Seconds()
	if p := arch.ExpertPath(r); p != "" {
		fmt.Fprintln(stderr, "generate: routed experts:", p)
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	res, err := generate.Run(r, ids, generate.Params{
		MaxNewTokens: f.maxNew, Temperature: f.temperature, TopP: f.topP, TopK: f.topK, Seed: f.seed,
		TopLogprobs: f.topLogprobs, PromptLogprobs: f.promptLogprobs, IgnoreEOS: f.ignoreEOS, ChunkSize: f.chunk,
		NoLogprobs: !f.jsonOut, // printed only with --json
	})
	stopProfile()
	if err != nil {
		return err
	}
	printRunnerSummary(stderr, r, res)
	if f.jsonOut {
		return writeGenerateJSON(cmd.OutOrStdout(), res, tok, loadSec)
	}
	printGenerateText(cmd.OutOrStdout(), stderr, res, tok, loadSec)
	return nil
}

// validate checks the flags and resolves the routed experts' method
// (--experts or --kt-method) and the GPU experts request. changed reports
// whether a flag was given.
func (f *generateFlags) validate(changed func(string) bool) (string, placement.Request, error) {
	var none placement.Request
	if f.modelPath == "" {
		return "", none, errors.New("generate: --model-path is required")
	}
	if (f.prompt == "") == (f.inputIDs == "") {
		return "", none, errors.New("generate: give exactly one of --prompt and --input-ids")
	}
	if f.chunk <= 0 || f.maxNew < 0 {
		return "", none, errors.New("generate: --chunked-prefill-size must be positive and --max-new-tokens non-negative")
	}
	if !slices.Contains(arch.Devices, f.device) {
		return "", none, fmt.Errorf("generate: --device %q: want one of %s", f.device, strings.Join(arch.Devices, ", "))
	}
	if f.memFraction < 0 || f.memFraction > 1 {
		return "", none, fmt.Errorf("generate: --mem-fraction-static %v outside (0, 1]", f.memFraction)
	}
	experts := f.experts
	switch {
	case f.ktMethod != "" && changed("experts") && !strings.EqualFold(f.ktMethod, f.experts):
		return "", none, fmt.Errorf("generate: --kt-method %s and --experts %s disagree; give one", f.ktMethod, f.experts)
	case f.ktMethod != "":
		experts = f.ktMethod
	case f.ktWeightPath != "":
		return "", none, errors.New("generate: --kt-weight-path needs --kt-method (BF16, AMXINT8, ...)")
	}
	if f.ktCPUInfer < 0 || f.ktPools < 0 {
		return "", none, errors.New("generate: --kt-cpuinfer and --kt-threadpool-count must not be negative")
	}
	gpuExperts := gpuExpertRequest(f.ktNumGPUExperts, f.ktGPUExpertsRatio, changed("kt-gpu-experts-ratio"), f.ktPlacement, f.initExpertLoc)
	if gpuExperts.Active() && (f.device == "cpu" || experts == "auto" || experts == "backend") {
		return "", none, errors.New("generate: GPU experts (--kt-num-gpu-experts, --kt-gpu-experts-ratio) belong to the hybrid step: give --device cuda (or auto) and --kt-method")
	}
	if err := deferralAllowed(f.ktDeferred, f.device, experts); err != nil {
		return "", none, err
	}
	if err := layerwiseAllowed(f.ktPrefillThresh, f.ktDynamicUpdate, f.device, experts); err != nil {
		return "", none, err
	}
	return experts, gpuExperts, nil
}

// promptIDs is the prompt's token ids (--prompt encoded, or --input-ids)
// and the tokenizer, nil where the tokenizer directory has none.
func (f *generateFlags) promptIDs() ([]int32, *tokenizer.Tokenizer, error) {
	var tok *tokenizer.Tokenizer
	tokDir := f.tokenizerPath
	if tokDir == "" {
		tokDir = f.modelPath
	}
	if _, err := os.Stat(filepath.Join(tokDir, "tokenizer.json")); err == nil {
		if tok, err = tokenizer.Load(tokDir); err != nil {
			return nil, nil, fmt.Errorf("generate: %w", err)
		}
	}
	if f.prompt != "" {
		if tok == nil {
			return nil, nil, fmt.Errorf("generate: --prompt needs %s (or --tokenizer-path); use --input-ids", filepath.Join(tokDir, "tokenizer.json"))
		}
		ids := tok.Encode(f.prompt)
		if len(ids) == 0 {
			return nil, nil, errors.New("generate: --prompt encodes to no tokens")
		}
		return ids, tok, nil
	}
	ids, err := parseIDs(f.inputIDs)
	if err != nil {
		return nil, nil, fmt.Errorf("--input-ids: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil, errors.New("--input-ids: no ids")
	}
	return ids, tok, nil
}

// startCPUProfile starts --cpuprofile's profile (none for "") and returns
// its stop.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	pf, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		pf.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		pf.Close()
	}, nil
}

// printRunnerSummary prints what the runner reports after a generation:
// its decode graphs, the hybrid step's timing (KT_HYBRID_TIMING=1), the
// layerwise prefill and the decode's time per token.
func printRunnerSummary(w io.Writer, r model.Runner, res *generate.Result) {
	if s, ok := arch.GraphStatsOf(r); ok {
		fmt.Fprintln(w, "generate: decode CUDA graphs:", s)
	}
	if s := arch.HybridTiming(r); s != "" {
		fmt.Fprintln(w, "generate:", s)
	}
	if s := arch.LayerwiseSummary(r); s != "" {
		fmt.Fprintln(w, "generate:", s)
	}
	if n := len(res.Output) - 1; n > 0 {
		fmt.Fprintf(w, "generate: decode %.3f ms per token, of which %.3f ms on the host outside Forward (scheduling, picking the token, logprobs)\n",
			res.DecodeSeconds*1e3/float64(n), res.DecodeHostSeconds*1e3/float64(n))
	}
}

// decodeRate is the decode's tokens per second (the first token is the
// prefill's).
func decodeRate(res *generate.Result) float64 {
	if n := len(res.Output) - 1; n > 0 && res.DecodeSeconds > 0 {
		return float64(n) / res.DecodeSeconds
	}
	return 0
}

// writeGenerateJSON prints --json's answer: the result with its text,
// memory, load time and rates.
func writeGenerateJSON(w io.Writer, res *generate.Result, tok *tokenizer.Tokenizer, loadSec float64) error {
	text := ""
	if tok != nil {
		text = tok.Decode(res.OutputIDs())
	}
	out := struct {
		OutputIDs []int32 `json:"output_ids"`
		Text      string  `json:"text,omitempty"`
		*generate.Result
		Memory          map[string]int64 `json:"memory_kib,omitempty"`
		LoadSeconds     float64          `json:"load_seconds"`
		PrefillTokPerS  float64          `json:"prefill_tokens_per_second"`
		DecodeTokPerSec float64          `json:"decode_tokens_per_second"`
	}{res.OutputIDs(), text, res, procMemory(), loadSec, float64(len(res.PromptIDs)) / res.PrefillSeconds, decodeRate(res)}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(out)
}

// printGenerateText prints the continuation (text, or ids without a
// tokenizer) on stdout and the timing and memory lines on stderr.
func printGenerateText(stdout, stderr io.Writer, res *generate.Result, tok *tokenizer.Tokenizer, loadSec float64) {
	if tok != nil {
		fmt.Fprintln(stdout, tok.Decode(res.OutputIDs()))
	} else {
		parts := make([]string, len(res.Output))
		for i, t := range res.Output {
			parts[i] = strconv.Itoa(int(t.ID))
		}
		fmt.Fprintln(stdout, strings.Join(parts, ","))
	}
	n := len(res.PromptIDs)
	fmt.Fprintf(stderr, "%d prompt tokens in %.3fs (%.1f tok/s), %d new tokens, decode %.2f tok/s, finish %s, load %.2fs\n",
		n, res.PrefillSeconds, float64(n)/res.PrefillSeconds, len(res.Output), decodeRate(res), res.Finish, loadSec)
	if m := procMemory(); m != nil {
		fmt.Fprintf(stderr, "memory: peak RSS %d MiB (now: anonymous %d MiB, file-backed %d MiB)\n", m["VmHWM"]/1024, m["RssAnon"]/1024, m["RssFile"]/1024)
	}
}

// procMemory reads the process's peak and current resident memory (KiB)
// from /proc/self/status: RssFile is the mmapped checkpoint pages touched,
// RssAnon everything the process allocated. Nil where /proc is missing.
func procMemory() map[string]int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	m := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "VmHWM", "VmRSS", "RssAnon", "RssFile":
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				m[k] = n
			}
		}
	}
	return m
}

// deferralAllowed refuses --kt-max-deferred-experts-per-token d where kt
// does not implement it: deferral splits the routed experts' CPU task, so
// it needs the CPU expert engine (a cgo build) and, on the GPU, the hybrid
// step (--kt-method). On --device cpu the engine (or, where its shapes do
// not fit, the backend's reference op) runs it.
func deferralAllowed(d int, device, experts string) error {
	const flag = "generate: --kt-max-deferred-experts-per-token"
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
	const flag = "generate: --kt-gpu-prefill-token-threshold"
	switch {
	case t < 0:
		return fmt.Errorf("%s %d: must not be negative", flag, t)
	case dynamic && t == 0:
		return errors.New("generate: --kt-enable-dynamic-expert-update works only inside layerwise GPU prefill; set --kt-gpu-prefill-token-threshold too")
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
