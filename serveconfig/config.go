// Package serveconfig is the one place that parses and validates the flags of
// `kt serve`. Flag names, meanings and defaults follow
// `python -m sglang.launch_server` and its KTransformers `--kt-*` arguments,
// so a launch line written for SGLang-KT carries over unchanged.
//
// Every flag has one of three statuses: it works; it is accepted for
// compatibility and has no effect in kt (the help text and the startup log
// say why); or its feature does not exist in this build and using it is
// refused with a message that says so. Nothing is silently ignored.
package serveconfig

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Config holds the parsed `kt serve` flags.
type Config struct {
	// Server.
	Host            string
	Port            int
	APIKey          string
	ServedModelName string
	LogLevel        string
	LogLevelHTTP    string
	WatchdogTimeout time.Duration
	// StreamOutput makes streamed /generate chunks incremental: each
	// carries only what is new since the previous chunk.
	StreamOutput bool

	// Limits per client (see docs/CONFIG.md, Limits).
	MaxConnections        int
	HTTPReadHeaderTimeout time.Duration
	HTTPReadTimeout       time.Duration // request body
	HTTPWriteTimeout      time.Duration // one non-streaming response or stream event
	HTTPIdleTimeout       time.Duration
	MaxRequestBodyBytes   int64
	MaxPromptBytes        int   // 0: 16 bytes per token of the context length
	MaxBatchSequences     int   // prompts times n in one request
	MaxResponseBytes      int64 // estimated response size of one request

	// Model and tokenizer.
	ModelPath         string
	TokenizerPath     string
	ChatTemplate      string // a Jinja file; "": the tokenizer's own template
	TrustRemoteCode   bool
	SkipTokenizerInit bool
	ContextLength     int // 0: from the model
	ReasoningParser   string
	ToolCallParser    string
	Device            string
	RandomSeed        int64
	RandomSeedSet     bool

	// Engine.
	MemFractionStatic  float64 // 0: auto
	ChunkedPrefillSize int     // -1 disables chunking
	MaxPrefillTokens   int
	MaxRunningRequests int // 0: auto
	MaxTotalTokens     int // 0: auto (from memory)
	EnableMixedChunk   bool
	DisableRadixCache  bool   // no prefix cache: every prompt prefilled from its first token
	EnableCacheReport  bool   // usage.prompt_tokens_details.cached_tokens in OpenAI answers
	RadixEviction      string // --radix-eviction-policy: "lru"

	// GPU-side SGLang flags.
	TensorParallelSize         int
	BaseGPUID                  int // first GPU used, among those CUDA_VISIBLE_DEVICES leaves
	AttentionBackend           string
	DisableCUDAGraph           bool // decode steps op by op instead of replayed CUDA graphs
	CUDAGraphMaxBS             int  // largest decode batch replayed as a CUDA graph; 0: --max-running-requests
	EnableP2PCheck             bool
	DisableCustomAllReduce     bool
	DisableSharedExpertsFusion bool

	// KTransformers.
	KTWeightPath                  string
	KTMethod                      string
	KTCPUInfer                    int // 0: unset
	KTThreadpoolCount             int
	KTNumaNodes                   []int
	KTNumGPUExperts               int // -1: unset
	KTGPUExpertsRatio             float64
	KTGPUExpertsRatioSet          bool
	KTMaxDeferredExpertsPerToken  int
	KTGPUPrefillTokenThreshold    int
	KTEnableDynamicExpertUpdate   bool
	KTExpertPlacementStrategy     string
	RecordKTGPUExpertDistribution bool
	KTLoRAPath                    string
	KTExpertLoRAPath              string
	InitExpertLocation            string
	// ExpertDistributionRecorderMode is "" (off) or "stat".
	ExpertDistributionRecorderMode       string
	ExpertDistributionRecorderBufferSize int // passes kept; -1 a running sum

	// LoRA.
	EnableLoRA        bool
	LoRAPaths         []LoRAPath
	LoRABackend       string
	MaxLoRARank       int
	LoRATargetModules []string
	MaxLoRAsPerBatch  int

	// Set lists the flags given on the command line (canonical names).
	Set map[string]bool

	fs *pflag.FlagSet // the parsed flags, bound to the fields above
}

// LoRAPath is one `--lora-paths name=dir` entry.
type LoRAPath struct {
	Name string
	Path string
}

// KTMethods lists every `--kt-method` name SGLang-KT accepts.
var KTMethods = []string{"AMXINT4", "AMXINT8", "RAWINT4", "FP8", "BF16", "FP8_PERCHANNEL",
	"GPTQ_INT4", "SYCL_GPTQ_INT4", "MXFP4", "MXFP8", "LLAMAFILE", "MOE_INT4", "MOE_INT8"}

// KTOwnMethods lists the `--kt-method` names kt's CPU expert engine adds
// to SGLang-KT's: AMXBF16 (bf16 repacked for AMX tiles) and INT4_KGROUP
// (int4 with a scale per 128-column group).
var KTOwnMethods = []string{"AMXBF16", "INT4_KGROUP"}

// PlacementStrategies lists the `--kt-expert-placement-strategy` values.
var PlacementStrategies = []string{"uniform", "frequency", "front-loading", "random"}

// AttentionBackends lists the `--attention-backend` names SGLang accepts.
var AttentionBackends = []string{"triton", "torch_native", "flex_attention", "flashinfer", "fa3",
	"fa4", "flashmla", "cutlass_mla", "trtllm_mla", "trtllm_mha", "aiter", "wave", "ascend",
	"intel_amx", "dual_chunk_flash_attn", "hybrid_linear_attn", "nsa"}

// ReasoningParsers lists the `--reasoning-parser` values kt implements.
var ReasoningParsers = []string{"auto", "none", "qwen3", "deepseek-r1", "deepseek-v3", "kimi", "kimi_k2"}

// ToolCallParsers lists the `--tool-call-parser` values kt implements.
var ToolCallParsers = []string{"auto", "none", "qwen", "qwen25", "qwen3_coder", "deepseekv3", "deepseekv31", "kimi_k2"}

// LogLevels lists the `--log-level` values.
var LogLevels = []string{"debug", "info", "warning", "error", "critical"}

// multiValue lists flags that take one or more values after them, like
// argparse's nargs="+"; Parse turns `--flag a b` into repeated flags.
var multiValue = map[string]bool{"kt-numa-nodes": true, "lora-paths": true, "lora-target-modules": true}

// aliases maps SGLang's alternative spellings to the canonical flag name.
var aliases = map[string]string{
	"model":   "model-path",
	"tp-size": "tensor-parallel-size",
	"tp":      "tensor-parallel-size",
	// SGLang's newer name for --stream-output.
	"incremental-streaming-output": "stream-output",
}

// The HTTP timeout flags, in seconds.
const (
	flagReadHeaderTimeout = "http-read-header-timeout"
	flagReadTimeout       = "http-read-timeout"
	flagWriteTimeout      = "http-write-timeout"
	flagIdleTimeout       = "http-idle-timeout"
)

// flagSet builds the pflag set bound to c, with SGLang's defaults.
func flagSet(c *Config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("kt serve", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(io.Discard)
	// Server.
	fs.StringVar(&c.Host, "host", "127.0.0.1", "address to listen on (0.0.0.0 for every interface)")
	fs.IntVar(&c.Port, "port", 30000, "port to listen on")
	fs.StringVar(&c.APIKey, "api-key", "", "require `Authorization: Bearer KEY` on every route except /health")
	fs.StringVar(&c.ServedModelName, "served-model-name", "", "model name the API reports and requests must use (default: the model path)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warning, error, critical")
	fs.StringVar(&c.LogLevelHTTP, "log-level-http", "", "log level of the HTTP access log (default: --log-level; warning hides per-request lines)")
	fs.Float64("watchdog-timeout", 300, "seconds a single forward step may take before the scheduler is declared hung and the server exits")
	fs.BoolVar(&c.StreamOutput, "stream-output", false, "streamed /generate chunks carry only what is new since the previous chunk (text, output_ids, logprobs) instead of everything so far; alias --incremental-streaming-output")

	// Limits.
	fs.IntVar(&c.MaxConnections, "max-connections", 256, "most client connections open at once; more wait for one to close (keep it below ulimit -n)")
	fs.Float64(flagReadHeaderTimeout, 10, "seconds a client may take to send a request's headers")
	fs.Float64(flagReadTimeout, 60, "seconds a client may take to send a request's body")
	fs.Float64(flagWriteTimeout, 30, "seconds a client may take to read a non-streaming response or one event of a stream")
	fs.Float64(flagIdleTimeout, 30, "seconds a keep-alive connection may stay idle before it is closed")
	fs.Int64Var(&c.MaxRequestBodyBytes, "max-request-body-bytes", 32<<20, "largest request body, in bytes (413 above)")
	fs.IntVar(&c.MaxPromptBytes, "max-prompt-bytes", 0, "largest prompt text, in bytes, checked before tokenizing (400 above); 0: 16 bytes per token of the context length")
	fs.IntVar(&c.MaxBatchSequences, "max-batch-sequences", 256, "most sequences (prompts times n) one request may run (400 above)")
	fs.Int64Var(&c.MaxResponseBytes, "max-response-bytes", 256<<20, "largest estimated response of one request, in bytes, from its sequences, token budgets and logprobs (400 above)")

	// Model.
	fs.StringVar(&c.ModelPath, "model-path", "", "model directory (Hugging Face layout: config.json + safetensors); alias --model")
	fs.StringVar(&c.TokenizerPath, "tokenizer-path", "", "tokenizer directory (default: the model path)")
	fs.StringVar(&c.ChatTemplate, "chat-template", "", "Jinja chat template file for the chat API (default: the tokenizer's chat_template.jinja or tokenizer_config.json chat_template); SGLang's built-in template names are not supported")
	fs.BoolVar(&c.TrustRemoteCode, "trust-remote-code", false, "accepted for compatibility: kt never runs code from a model directory; every architecture is built in")
	fs.BoolVar(&c.SkipTokenizerInit, "skip-tokenizer-init", false, "load no tokenizer: /generate takes input_ids and returns output_ids only; text routes answer 400")
	fs.IntVar(&c.ContextLength, "context-length", 0, "maximum tokens per request, prompt plus output (default: the model's max_position_embeddings)")
	fs.StringVar(&c.ReasoningParser, "reasoning-parser", "auto", "split the think block into reasoning_content: auto (from the chat template), none, qwen3, deepseek-r1 (always thinking), deepseek-v3 (DeepSeek-V3.1: thinking when chat_template_kwargs thinking is true), kimi (◁think▷), kimi_k2 (Kimi-K2-Thinking: thinking unless thinking is false)")
	fs.StringVar(&c.ToolCallParser, "tool-call-parser", "auto", "parse tool calls from the output: auto (from the chat template), none, qwen25 (<tool_call>{json}</tool_call>), qwen3_coder (<function=...> XML), deepseekv3 (DeepSeek-V3/R1, ```json arguments), deepseekv31 (DeepSeek-V3.1), kimi_k2 (Kimi-K2, functions.NAME:IDX); forced tool_choice calls are written in this format")
	fs.StringVar(&c.Device, "device", "auto", "where dense layers and attention run: auto (GPU when one is usable), cuda, cpu")
	fs.Int64("random-seed", 0, "seed of the sampler for requests that give no seed (default: random)")

	// Engine.
	fs.Float64Var(&c.MemFractionStatic, "mem-fraction-static", 0, "fraction of GPU memory for weights and KV cache (default: auto); used only when a GPU is in use")
	fs.IntVar(&c.ChunkedPrefillSize, "chunked-prefill-size", 4096, "most prompt tokens prefilled in one step; long prompts are split into chunks (-1 disables chunking)")
	fs.IntVar(&c.MaxPrefillTokens, "max-prefill-tokens", 16384, "most prompt tokens in one prefill batch")
	fs.IntVar(&c.MaxRunningRequests, "max-running-requests", 0, "most requests decoding at once; more wait in the queue (default: auto, 32)")
	fs.IntVar(&c.MaxTotalTokens, "max-total-tokens", 0, "KV cache budget in tokens over all running requests (default: auto from memory)")
	fs.BoolVar(&c.EnableMixedChunk, "enable-mixed-chunk", false, "mix prefill chunks and decode tokens in one step (otherwise a step is all prefill or all decode)")
	fs.BoolVar(&c.DisableRadixCache, "disable-radix-cache", false, "keep no prefix cache: every prompt is prefilled from its first token (by default the KV of ended requests is kept and reused by prompts that start with the same tokens)")
	fs.BoolVar(&c.EnableCacheReport, "enable-cache-report", false, "report the prompt tokens served from the prefix cache in usage.prompt_tokens_details.cached_tokens (/generate's meta_info always has cached_tokens)")
	fs.StringVar(&c.RadixEviction, "radix-eviction-policy", "lru", "which cached prefixes go first when the KV budget is needed: lru (kt implements lru only)")

	// GPU-side.
	fs.IntVar(&c.TensorParallelSize, "tensor-parallel-size", 1, "ranks to split attention, dense layers and the vocabulary over: GPUs from --base-gpu-id (NCCL), or CPU thread groups without a GPU; alias --tp-size")
	fs.IntVar(&c.BaseGPUID, "base-gpu-id", 0, "first GPU to use, counted among those CUDA_VISIBLE_DEVICES leaves visible")
	fs.StringVar(&c.AttentionBackend, "attention-backend", "", "SGLang attention kernel name; accepted for compatibility: kt uses its own attention kernels on each backend")
	fs.BoolVar(&c.DisableCUDAGraph, "disable-cuda-graph", false, "run GPU decode steps op by op instead of capturing them as CUDA graphs")
	fs.IntVar(&c.CUDAGraphMaxBS, "cuda-graph-max-bs", 0, "largest decode batch captured as a CUDA graph (batches are padded to 1, 2, 4, 8, 16, 24, ...); 0: --max-running-requests")
	fs.BoolVar(&c.EnableP2PCheck, "enable-p2p-check", false, "accepted for compatibility: kt checks peer access itself when it uses several GPUs")
	fs.BoolVar(&c.DisableCustomAllReduce, "disable-custom-all-reduce", false, "accepted for compatibility: kt uses NCCL's all-reduce only")
	fs.BoolVar(&c.DisableSharedExpertsFusion, "disable-shared-experts-fusion", false, "keep shared experts apart from routed ones; kt always does (KT forces this in SGLang too)")

	// KTransformers.
	fs.StringVar(&c.KTWeightPath, "kt-weight-path", "", "CPU expert weights: the model directory (BF16/FP8, or AMXINT8/AMXINT4/INT4_KGROUP/AMXBF16 converted at load) a kt quant output, or a KTransformers-converted directory (AMXINT8/AMXINT4); enables KT")
	fs.StringVar(&c.KTMethod, "kt-method", "AMXINT4", "CPU expert backend and weight format: "+strings.Join(KTMethods, ", ")+"; kt also has "+strings.Join(KTOwnMethods, ", "))
	fs.IntVar(&c.KTCPUInfer, "kt-cpuinfer", 0, "CPU expert threads (start from the number of physical cores)")
	fs.IntVar(&c.KTThreadpoolCount, "kt-threadpool-count", 2, "CPU expert thread pools, one per NUMA node (shown default is SGLang's; when the flag is not given kt uses the pool count a kt quant directory was converted for, else 1)")
	fs.IntSlice("kt-numa-nodes", nil, "NUMA node of each thread pool, e.g. --kt-numa-nodes 0 1 (count must equal --kt-threadpool-count)")
	fs.IntVar(&c.KTNumGPUExperts, "kt-num-gpu-experts", -1, "routed experts per MoE layer kept on the GPU")
	fs.Float64Var(&c.KTGPUExpertsRatio, "kt-gpu-experts-ratio", 0, "fraction of all routed experts kept on the GPU; overrides --kt-num-gpu-experts")
	fs.IntVar(&c.KTMaxDeferredExpertsPerToken, "kt-max-deferred-experts-per-token", 0, "routed experts per token whose CPU work may finish during the next layer (0 off, 1-4 recommended)")
	fs.IntVar(&c.KTGPUPrefillTokenThreshold, "kt-gpu-prefill-token-threshold", 0, "prefill batches of at least this many tokens run every expert on the GPU, layer by layer (0 off)")
	fs.BoolVar(&c.KTEnableDynamicExpertUpdate, "kt-enable-dynamic-expert-update", false, "re-pick the GPU experts from the routing of large prefill batches (needs the threshold above)")
	fs.StringVar(&c.KTExpertPlacementStrategy, "kt-expert-placement-strategy", "uniform", "initial GPU expert placement: "+strings.Join(PlacementStrategies, ", "))
	fs.BoolVar(&c.RecordKTGPUExpertDistribution, "record-kt-gpu-expert-distribution", false, "record which experts ran on the GPU each step")
	fs.StringVar(&c.KTLoRAPath, "kt-lora-path", "", "KT LoRA adapter: expert LoRA on the CPU plus static non-expert LoRA")
	fs.StringVar(&c.KTExpertLoRAPath, "kt-expert-lora-path", "", "expert-only LoRA adapter for the CPU experts (manual split serving)")
	fs.StringVar(&c.ExpertDistributionRecorderMode, "expert-distribution-recorder-mode", "", "record routed-expert picks: stat (per-pass counts, dumped by /dump_expert_distribution_record to $SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR as the .pt that --init-expert-location reads); stat_approx, per_pass, per_token are SGLang's other modes")
	fs.IntVar(&c.ExpertDistributionRecorderBufferSize, "expert-distribution-recorder-buffer-size", 1000, "forward passes the stat recorder keeps (-1: one running sum of all)")
	fs.StringVar(&c.InitExpertLocation, "init-expert-location", "trivial", "expert statistics (SGLang's torch.save file, FILE.pt: a dict with logical_count [buffer, layers, experts]) for --kt-expert-placement-strategy frequency")

	// LoRA.
	fs.BoolVar(&c.EnableLoRA, "enable-lora", false, "serve LoRA adapters (requests pick one with model=NAME:ADAPTER)")
	fs.StringArray("lora-paths", nil, "adapters as NAME=DIR, several allowed: --lora-paths a=/x b=/y")
	fs.StringVar(&c.LoRABackend, "lora-backend", "triton", "LoRA kernel name; accepted for compatibility: kt has its own LoRA kernels")
	fs.IntVar(&c.MaxLoRARank, "max-lora-rank", 0, "largest adapter rank (default: from the adapters)")
	fs.StringSlice("lora-target-modules", nil, "modules adapters may touch (default: from the adapters)")
	fs.IntVar(&c.MaxLoRAsPerBatch, "max-loras-per-batch", 8, "most distinct adapters in one batch")
	return fs
}

// Parse parses the `kt serve` arguments. It understands SGLang's spellings:
// `--flag value`, `--flag=value`, aliases such as --model and --tp-size, and
// flags that take several values (`--kt-numa-nodes 0 1`). It returns
// ErrHelp when --help or -h was given. Parse does not check that features
// exist; call Validate for that.
func Parse(args []string) (*Config, error) {
	c := &Config{Set: map[string]bool{}}
	fs := flagSet(c)
	norm, err := normalize(args)
	if err != nil {
		return nil, err
	}
	for _, a := range norm {
		if a == "-h" || a == "--help" {
			return nil, ErrHelp
		}
	}
	if err := fs.Parse(norm); err != nil {
		return nil, fmt.Errorf("kt serve: %w", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("kt serve: unexpected argument %q (every option is a --flag; the model goes in --model-path)", fs.Arg(0))
	}
	fs.Visit(func(f *pflag.Flag) { c.Set[f.Name] = true })

	w, _ := fs.GetFloat64("watchdog-timeout")
	if w <= 0 {
		return nil, fmt.Errorf("--watchdog-timeout: must be positive, got %v", w)
	}
	c.WatchdogTimeout = time.Duration(w * float64(time.Second))
	for _, t := range []struct {
		flag string
		d    *time.Duration
	}{
		{flagReadHeaderTimeout, &c.HTTPReadHeaderTimeout}, {flagReadTimeout, &c.HTTPReadTimeout},
		{flagWriteTimeout, &c.HTTPWriteTimeout}, {flagIdleTimeout, &c.HTTPIdleTimeout},
	} {
		sec, _ := fs.GetFloat64(t.flag)
		if sec <= 0 {
			return nil, fmt.Errorf("--%s: must be positive, got %v", t.flag, sec)
		}
		*t.d = time.Duration(sec * float64(time.Second))
	}
	c.RandomSeed, _ = fs.GetInt64("random-seed")
	c.RandomSeedSet = c.Set["random-seed"]
	c.KTNumaNodes, _ = fs.GetIntSlice("kt-numa-nodes")
	c.LoRATargetModules, _ = fs.GetStringSlice("lora-target-modules")
	c.KTGPUExpertsRatioSet = c.Set["kt-gpu-experts-ratio"]
	lp, _ := fs.GetStringArray("lora-paths")
	for _, s := range lp {
		p, err := parseLoRAPath(s)
		if err != nil {
			return nil, err
		}
		c.LoRAPaths = append(c.LoRAPaths, p)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	c.fillDefaults()
	c.fs = fs
	return c, nil
}

// sglangArgNames maps flags whose SGLang ServerArgs field is not the flag
// name in snake_case.
var sglangArgNames = map[string]string{"tensor-parallel-size": "tp_size"}

// ServerArgs returns every flag's value after defaults under SGLang's
// ServerArgs field name (the flag in snake_case; tp_size for
// --tensor-parallel-size), as /get_server_info reports them. The API key
// is left out. It is nil for a Config that Parse did not return.
func (c *Config) ServerArgs() map[string]any {
	if c.fs == nil {
		return nil
	}
	out := map[string]any{}
	c.fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "api-key" {
			return
		}
		key, ok := sglangArgNames[f.Name]
		if !ok {
			key = strings.ReplaceAll(f.Name, "-", "_")
		}
		var v any
		var err error
		switch f.Value.Type() {
		case "bool":
			v, err = c.fs.GetBool(f.Name)
		case "int":
			v, err = c.fs.GetInt(f.Name)
		case "int64":
			v, err = c.fs.GetInt64(f.Name)
		case "float64":
			v, err = c.fs.GetFloat64(f.Name)
		case "intSlice":
			v, err = c.fs.GetIntSlice(f.Name)
		case "stringSlice":
			v, err = c.fs.GetStringSlice(f.Name)
		default:
			v = f.Value.String()
		}
		if err != nil {
			v = f.Value.String()
		}
		out[key] = v
	})
	paths := map[string]string{}
	for _, p := range c.LoRAPaths {
		paths[p.Name] = p.Path
	}
	out["lora_paths"] = paths
	return out
}

// ErrHelp is returned by Parse when help was asked for.
var ErrHelp = pflag.ErrHelp

func parseLoRAPath(s string) (LoRAPath, error) {
	name, path, ok := strings.Cut(s, "=")
	if !ok {
		// SGLang also accepts a bare path, named after itself.
		name, path = s, s
	}
	if name == "" || path == "" {
		return LoRAPath{}, fmt.Errorf("--lora-paths: %q: want NAME=DIR", s)
	}
	if strings.Contains(name, ":") {
		return LoRAPath{}, fmt.Errorf("--lora-paths: adapter name %q must not contain ':' (requests use model=SERVED:NAME)", name)
	}
	return LoRAPath{Name: name, Path: path}, nil
}

// normalize rewrites aliases to canonical names and expands nargs+ flags
// into repeated flags.
func normalize(args []string) ([]string, error) {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") || a == "--" {
			out = append(out, a)
			continue
		}
		name, val, hasVal := strings.Cut(a[2:], "=")
		name = strings.ReplaceAll(name, "_", "-") // argparse accepts neither, but users write both
		if c, ok := aliases[name]; ok {
			name = c
		}
		if !multiValue[name] {
			if hasVal {
				out = append(out, "--"+name+"="+val)
			} else {
				out = append(out, "--"+name)
			}
			continue
		}
		if hasVal {
			out = append(out, "--"+name+"="+val)
			continue
		}
		n := 0
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			i++
			out = append(out, "--"+name+"="+args[i])
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("--%s: needs at least one value", name)
		}
	}
	return out, nil
}

// check validates values on their own (ranges, names, combinations),
// independently of which features this build has.
func (c *Config) check() error {
	var errs []string
	bad := func(flag, format string, a ...any) {
		errs = append(errs, "--"+flag+": "+fmt.Sprintf(format, a...))
	}
	if c.ModelPath == "" {
		bad("model-path", "required (the model directory)")
	}
	if c.Port < 0 || c.Port > 65535 {
		bad("port", "%d is not a TCP port", c.Port)
	}
	if !slices.Contains(LogLevels, strings.ToLower(c.LogLevel)) {
		bad("log-level", "%q is not one of %s", c.LogLevel, strings.Join(LogLevels, ", "))
	}
	if c.LogLevelHTTP != "" && !slices.Contains(LogLevels, strings.ToLower(c.LogLevelHTTP)) {
		bad("log-level-http", "%q is not one of %s", c.LogLevelHTTP, strings.Join(LogLevels, ", "))
	}
	if c.MaxConnections < 1 {
		bad("max-connections", "must be at least 1, got %d", c.MaxConnections)
	}
	if c.MaxRequestBodyBytes < 1 {
		bad("max-request-body-bytes", "must be positive, got %d", c.MaxRequestBodyBytes)
	}
	if c.MaxBatchSequences < 1 {
		bad("max-batch-sequences", "must be at least 1, got %d", c.MaxBatchSequences)
	}
	if c.MaxResponseBytes < 1 {
		bad("max-response-bytes", "must be positive, got %d", c.MaxResponseBytes)
	}
	if c.MaxPromptBytes < 0 {
		bad("max-prompt-bytes", "must not be negative, got %d", c.MaxPromptBytes)
	}
	if c.ContextLength < 0 {
		bad("context-length", "must not be negative, got %d", c.ContextLength)
	}
	if !slices.Contains(ReasoningParsers, c.ReasoningParser) {
		bad("reasoning-parser", "%q is not one of %s", c.ReasoningParser, strings.Join(ReasoningParsers, ", "))
	}
	if !slices.Contains(ToolCallParsers, c.ToolCallParser) {
		bad("tool-call-parser", "%q is not one of %s", c.ToolCallParser, strings.Join(ToolCallParsers, ", "))
	}
	if !slices.Contains([]string{"auto", "cuda", "cpu"}, c.Device) {
		bad("device", "%q is not one of auto, cuda, cpu", c.Device)
	}
	if c.BaseGPUID < 0 {
		bad("base-gpu-id", "must not be negative, got %d", c.BaseGPUID)
	}
	if c.MemFractionStatic < 0 || c.MemFractionStatic > 1 {
		bad("mem-fraction-static", "must be in (0, 1], got %v", c.MemFractionStatic)
	}
	if c.ChunkedPrefillSize == 0 || c.ChunkedPrefillSize < -1 {
		bad("chunked-prefill-size", "must be positive or -1 (no chunking), got %d", c.ChunkedPrefillSize)
	}
	if c.MaxPrefillTokens <= 0 {
		bad("max-prefill-tokens", "must be positive, got %d", c.MaxPrefillTokens)
	}
	if c.CUDAGraphMaxBS < 0 {
		bad("cuda-graph-max-bs", "must not be negative, got %d", c.CUDAGraphMaxBS)
	}
	if c.MaxRunningRequests < 0 {
		bad("max-running-requests", "must be positive, got %d", c.MaxRunningRequests)
	}
	if c.MaxTotalTokens < 0 {
		bad("max-total-tokens", "must be positive, got %d", c.MaxTotalTokens)
	}
	if c.TensorParallelSize < 1 {
		bad("tensor-parallel-size", "must be at least 1, got %d", c.TensorParallelSize)
	}
	if c.AttentionBackend != "" && !slices.Contains(AttentionBackends, c.AttentionBackend) {
		bad("attention-backend", "%q is not one of SGLang's backends (%s)", c.AttentionBackend, strings.Join(AttentionBackends, ", "))
	}
	if !slices.Contains(KTMethods, c.KTMethod) && !slices.Contains(KTOwnMethods, c.KTMethod) {
		bad("kt-method", "%q is not one of %s", c.KTMethod, strings.Join(append(slices.Clone(KTMethods), KTOwnMethods...), ", "))
	}
	if c.KTCPUInfer < 0 {
		bad("kt-cpuinfer", "must be positive, got %d", c.KTCPUInfer)
	}
	if c.KTThreadpoolCount < 1 {
		bad("kt-threadpool-count", "must be at least 1, got %d", c.KTThreadpoolCount)
	}
	if c.Set["kt-numa-nodes"] {
		if len(c.KTNumaNodes) != c.KTThreadpoolCount {
			bad("kt-numa-nodes", "gives %d nodes but --kt-threadpool-count is %d; give one node per thread pool", len(c.KTNumaNodes), c.KTThreadpoolCount)
		}
		for _, n := range c.KTNumaNodes {
			if n < 0 {
				bad("kt-numa-nodes", "node %d is negative", n)
			}
		}
	}
	if c.Set["kt-num-gpu-experts"] && c.KTNumGPUExperts < 0 {
		bad("kt-num-gpu-experts", "must not be negative, got %d", c.KTNumGPUExperts)
	}
	if c.KTGPUExpertsRatioSet && (c.KTGPUExpertsRatio < 0 || c.KTGPUExpertsRatio > 1) {
		bad("kt-gpu-experts-ratio", "must be in [0, 1], got %v", c.KTGPUExpertsRatio)
	}
	if c.KTMaxDeferredExpertsPerToken < 0 {
		bad("kt-max-deferred-experts-per-token", "must not be negative, got %d", c.KTMaxDeferredExpertsPerToken)
	}
	if c.KTGPUPrefillTokenThreshold < 0 {
		bad("kt-gpu-prefill-token-threshold", "must not be negative, got %d", c.KTGPUPrefillTokenThreshold)
	}
	if c.KTEnableDynamicExpertUpdate && c.KTGPUPrefillTokenThreshold == 0 {
		bad("kt-enable-dynamic-expert-update", "works only inside layerwise GPU prefill; set --kt-gpu-prefill-token-threshold too")
	}
	if !slices.Contains(PlacementStrategies, c.KTExpertPlacementStrategy) {
		bad("kt-expert-placement-strategy", "%q is not one of %s", c.KTExpertPlacementStrategy, strings.Join(PlacementStrategies, ", "))
	}
	if len(c.LoRAPaths) > 0 && !c.EnableLoRA {
		bad("lora-paths", "needs --enable-lora")
	}
	seen := map[string]bool{}
	for _, p := range c.LoRAPaths {
		if seen[p.Name] {
			bad("lora-paths", "adapter name %q given twice", p.Name)
		}
		seen[p.Name] = true
	}
	if c.MaxLoRARank < 0 {
		bad("max-lora-rank", "must not be negative, got %d", c.MaxLoRARank)
	}
	if c.MaxLoRAsPerBatch < 1 {
		bad("max-loras-per-batch", "must be at least 1, got %d", c.MaxLoRAsPerBatch)
	}
	if len(errs) > 0 {
		return fmt.Errorf("kt serve: invalid flags:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

func (c *Config) fillDefaults() {
	if c.TokenizerPath == "" {
		c.TokenizerPath = c.ModelPath
	}
	if c.ServedModelName == "" {
		c.ServedModelName = c.ModelPath
	}
	if c.LogLevelHTTP == "" {
		c.LogLevelHTTP = c.LogLevel
	}
	c.LogLevel = strings.ToLower(c.LogLevel)
	c.LogLevelHTTP = strings.ToLower(c.LogLevelHTTP)
}

// Addr is host:port for net.Listen.
func (c *Config) Addr() string {
	return c.Host + ":" + strconv.Itoa(c.Port)
}

// ModelName is the served model name with a trailing path separator removed.
func (c *Config) ModelName() string {
	if c.ServedModelName == c.ModelPath {
		return filepath.Clean(c.ModelPath)
	}
	return c.ServedModelName
}

// Usage returns the help text: every flag with its default and meaning.
func Usage() string {
	var c Config
	fs := flagSet(&c)
	var b strings.Builder
	b.WriteString("Usage: kt serve --model-path DIR [flags]\n\n")
	b.WriteString("Serve a model over HTTP with SGLang's API (OpenAI /v1/* and native /generate).\n")
	b.WriteString("Flags use python -m sglang.launch_server's names, so an SGLang-KT launch line works as is.\n")
	b.WriteString("Aliases: --model = --model-path, --tp-size = --tensor-parallel-size.\n")
	b.WriteString("Flags marked as for compatibility are accepted and have no effect in kt; flags whose\n")
	b.WriteString("feature this build lacks are refused at startup with a message that says so.\n\n")
	groups := []struct {
		title string
		first string
	}{
		{"Server", "host"}, {"Model", "model-path"}, {"Scheduler and memory", "mem-fraction-static"},
		{"GPU (SGLang compatibility)", "tensor-parallel-size"}, {"KTransformers CPU experts", "kt-weight-path"},
		{"LoRA", "enable-lora"},
	}
	gi := 0
	fs.VisitAll(func(f *pflag.Flag) {
		if gi < len(groups) && f.Name == groups[gi].first {
			b.WriteString(groups[gi].title + ":\n")
			gi++
		}
		typ := f.Value.Type()
		arg := ""
		switch typ {
		case "bool":
		case "intSlice":
			arg = " N [N ...]"
		case "stringArray":
			arg = " NAME=DIR [NAME=DIR ...]"
		case "stringSlice":
			arg = " NAME [NAME ...]"
		case "float64":
			arg = " F"
		case "int", "int64":
			arg = " N"
		default:
			arg = " S"
		}
		def := f.DefValue
		switch {
		case typ == "bool" || def == "" || def == "[]" || def == "0" && f.Name != "kt-max-deferred-experts-per-token" && f.Name != "kt-gpu-prefill-token-threshold" || def == "-1" && f.Name == "kt-num-gpu-experts":
			def = ""
		default:
			def = " (default " + def + ")"
		}
		fmt.Fprintf(&b, "  --%s%s\n      %s%s\n", f.Name, arg, f.Usage, def)
	})
	return b.String()
}
