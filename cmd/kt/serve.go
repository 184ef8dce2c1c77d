package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/arch"
	_ "github.com/ktserve/kt/arch/all" // register every architecture
	"github.com/ktserve/kt/chattemplate"
	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/lora"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/expertdist"
	"github.com/ktserve/kt/moe/placement"
	"github.com/ktserve/kt/serveconfig"
	"github.com/ktserve/kt/server"
	"github.com/ktserve/kt/tokenizer"
)

func init() { addCommand(newServeCmd) }

func newServeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "serve --model-path DIR [flags]",
		Short: "Serve a model over HTTP with SGLang's flags and API (OpenAI /v1/*, /generate)",
		Long:  serveconfig.Usage(),
		// serveconfig parses the flags itself: SGLang's flags take several
		// values (--kt-numa-nodes 0 1) and have aliases pflag cannot express.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, args, cmd.OutOrStdout(), cmd.ErrOrStderr(), nil)
		},
	}
}

// serveFeatures says what this build can do. The model runs wholly on the
// CPU or one GPU, or split over several ranks (--tensor-parallel-size: GPUs
// through NCCL, or CPU thread groups); with --kt-weight-path its routed experts run on the KT
// CPU expert engine (the methods cpuExpertMethods lists; none in a build
// without cgo), with expert deferral wherever the engine runs, and with
// LoRA; every feature works with tensor parallelism. What a build or
// machine lacks is refused by name.
func serveFeatures() serveconfig.Features {
	methods := cpuExpertMethods()
	gpus := arch.GPUCount()
	maxTP, whyTP := arch.GPUTensorParallel()
	return serveconfig.Features{GPUs: gpus, CPUExpertMethods: methods,
		// tensor parallelism: over the GPUs through NCCL, or CPU ranks;
		// every feature below works with it (arch.Load, hybrid.Plan)
		MaxTensorParallel: maxTP, TensorParallelWhy: whyTP,
		// GPU experts are the hybrid step's: a GPU and the CPU expert engine
		GPUExperts: gpus > 0 && len(methods) > 0, PlacementStrategies: placementStrategies,
		// layerwise prefill and dynamic update are the hybrid step's too
		LayerwisePrefill: gpus > 0 && len(methods) > 0, DynamicExpertUpdate: gpus > 0 && len(methods) > 0,
		// deferral splits the CPU expert engine's task (CPU path and hybrid step)
		Deferral:                len(methods) > 0,
		ExpertDistributionModes: []string{"stat"},
		// one merged adapter (non-expert LoRA per request, expert LoRA on
		// the CPU experts); KT expert LoRA needs the CPU expert engine or
		// the CPU backend's MoE op
		LoRA: true, KTLoRA: true}
}

// logLevel maps SGLang's level names to slog's.
func logLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warning":
		return slog.LevelWarn
	case "error", "critical":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// runServe starts the server and blocks until ctx ends. ready, when set, is
// called with the listening address once requests are accepted.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addr string)) error {
	cfg, err := serveconfig.Parse(args)
	if errors.Is(err, serveconfig.ErrHelp) {
		fmt.Fprint(stdout, serveconfig.Usage())
		return nil
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel(cfg.LogLevel)}))
	notes, err := cfg.Validate(serveFeatures())
	if err != nil {
		return err
	}
	for _, n := range notes {
		log.Info("flag accepted without effect", "flag", "--"+n.Flag, "why", n.Message)
	}
	mcfg, err := readModelConfig(cfg.ModelPath)
	if err != nil {
		return err
	}
	sz, err := servingSizes(cfg, mcfg)
	if err != nil {
		return err
	}
	m, err := loadServedModel(ctx, cfg, mcfg, sz, log)
	if err != nil {
		return err
	}
	defer m.runner.Close()
	text, err := loadTextInput(cfg, m.runner.Info(), mcfg.EOS, log)
	if err != nil {
		return err
	}
	reasoning, tools := outputParsers(cfg, text.templateSource)
	log.Info("output parsers", "reasoning", reasoning, "tool_calls", tools)
	eng, err := newServeEngine(cfg, m.runner, sz, text.eos, log)
	if err != nil {
		return err
	}
	serverArgs := cfg.ServerArgs()
	serverArgs["max_running_requests"] = sz.maxRunning // the flag's 0 is "auto"
	sopt := server.Options{
		Engine: eng, ModelName: cfg.ModelName(), ModelPath: cfg.ModelPath, Tokenizer: text.tok, TokenizerPath: cfg.TokenizerPath,
		Template: text.template, ReasoningParser: reasoning, ToolCallParser: tools, APIKey: cfg.APIKey, ServerArgs: serverArgs,
		StreamOutput: cfg.StreamOutput, PageSize: m.pageSize, TPSize: cfg.TensorParallelSize,
		Version: version, Logger: log, AccessLog: logLevel(cfg.LogLevelHTTP) <= slog.LevelInfo,
		LoRANames: m.loras.Names(), CacheReport: cfg.EnableCacheReport,
		Limits: server.Limits{MaxConnections: cfg.MaxConnections, ReadHeaderTimeout: cfg.HTTPReadHeaderTimeout,
			ReadTimeout: cfg.HTTPReadTimeout, WriteTimeout: cfg.HTTPWriteTimeout, IdleTimeout: cfg.HTTPIdleTimeout,
			MaxBodyBytes: cfg.MaxRequestBodyBytes, MaxPromptBytes: cfg.MaxPromptBytes,
			MaxBatchSequences: cfg.MaxBatchSequences, MaxResponseBytes: cfg.MaxResponseBytes},
	}
	sopt.LoRAPaths = m.loras.Paths() // /v1/models lists each adapter with its path
	if m.recorder != nil {
		sopt.Experts = m.recorder
	}
	srv, err := server.New(sopt)
	if err != nil {
		return err
	}
	if err := serveHTTP(ctx, cfg, srv, eng, log, ready); err != nil {
		return err
	}
	if t := arch.HybridTiming(m.runner); t != "" {
		log.Info("hybrid step", "timing", t) // KT_HYBRID_TIMING=1
	}
	return nil
}

// serveSizes are the scheduler's and the runner's sizes, from the flags
// and the model's config.
type serveSizes struct {
	maxRunning  int // sequences in flight
	ctxLen      int // context length served
	maxTotal    int // KV budget in tokens
	batchTokens int // tokens of one forward step
	threads     int // CPU threads
}

// servingSizes works out the sizes the flags leave to kt and checks
// --context-length against the model's.
func servingSizes(cfg *serveconfig.Config, mcfg modelSummary) (serveSizes, error) {
	sz := serveSizes{maxRunning: cfg.MaxRunningRequests, ctxLen: mcfg.MaxPositions, maxTotal: cfg.MaxTotalTokens, threads: cfg.KTCPUInfer}
	if sz.maxRunning == 0 {
		sz.maxRunning = 32
	}
	if cfg.ContextLength > 0 {
		if sz.ctxLen > 0 && cfg.ContextLength > sz.ctxLen {
			return sz, fmt.Errorf("--context-length %d exceeds the model's max_position_embeddings %d (%s)", cfg.ContextLength, sz.ctxLen, filepath.Join(cfg.ModelPath, "config.json"))
		}
		sz.ctxLen = cfg.ContextLength
	}
	if sz.maxTotal == 0 {
		// No memory model for the CPU runners yet: room for every slot to
		// hold a 2K-token sequence, at most the context length each.
		sz.maxTotal = sz.maxRunning * min(max(sz.ctxLen, 1), 2048)
	}
	sz.batchTokens = cfg.ChunkedPrefillSize
	if sz.batchTokens <= 0 {
		sz.batchTokens = max(sz.ctxLen, 1)
	}
	sz.batchTokens += sz.maxRunning // decode tokens in mixed steps
	if sz.threads == 0 {
		sz.threads = runtime.NumCPU()
	}
	return sz, nil
}

// servedModel is the loaded model with what was loaded beside it.
type servedModel struct {
	runner   model.Runner
	loras    *lora.Set
	recorder *expertdist.Recorder // nil: not recording
	pageSize int                  // KV page in tokens
}

// loadInterruptible loads the model in dir and returns once it is loaded or
// ctx ends (SIGINT or SIGTERM), so that a load blocked on a file (a FIFO in
// place of a weight file, a hung mount) cannot keep kt serve from exiting.
// An abandoned load goes on until the process exits; a model it still
// finishes loading is closed.
func loadInterruptible(ctx context.Context, dir string, opts arch.Options) (model.Runner, error) {
	type loaded struct {
		r   model.Runner
		err error
	}
	done := make(chan loaded, 1)
	go func() {
		r, err := arch.Load(dir, opts)
		done <- loaded{r, err}
	}()
	select {
	case l := <-done:
		return l.r, l.err
	case <-ctx.Done():
		go func() {
			if l := <-done; l.r != nil {
				l.r.Close()
			}
		}()
		return nil, fmt.Errorf("interrupted while loading: %w", context.Cause(ctx))
	}
}

// loadServedModel loads the model with its LoRA adapters and expert
// recorder as the flags ask, and logs where it runs.
func loadServedModel(ctx context.Context, cfg *serveconfig.Config, mcfg modelSummary, sz serveSizes, log *slog.Logger) (*servedModel, error) {
	opts := arch.Options{MaxSeqs: sz.maxRunning, MaxTotalTokens: sz.maxTotal, MaxBatchTokens: sz.batchTokens, Threads: sz.threads,
		Device: cfg.Device, BaseGPUID: cfg.BaseGPUID, MemFractionStatic: cfg.MemFractionStatic,
		DisableCUDAGraph: cfg.DisableCUDAGraph, CUDAGraphMaxBS: cfg.CUDAGraphMaxBS, TensorParallel: cfg.TensorParallelSize}
	if !cfg.DisableRadixCache {
		// hybrid models: recurrent-state snapshots the prefix cache keeps
		// (plus one rolling state per slot)
		opts.PrefixSnapshots = min(sz.maxRunning, 8)
	}
	if err := ktExpertOptions(cfg, &opts, log); err != nil {
		return nil, err
	}
	packedDefaultMethod(cfg, mcfg, &opts, log)
	m := &servedModel{pageSize: opts.WithDefaults().PageSize}
	var err error
	if m.loras, err = openLoRA(cfg, log); err != nil {
		return nil, err
	}
	opts.LoRA = m.loras
	if cfg.ExpertDistributionRecorderMode == "stat" {
		if mcfg.Experts == 0 {
			return nil, fmt.Errorf("--expert-distribution-recorder-mode: %s has no routed experts to record", cfg.ModelPath)
		}
		if m.recorder, err = expertdist.New(mcfg.Layers, mcfg.Experts, cfg.ExpertDistributionRecorderBufferSize, ""); err != nil {
			return nil, fmt.Errorf("--expert-distribution-recorder-mode: %w", err)
		}
		opts.ExpertRecorder = m.recorder
	}
	t0 := time.Now()
	where := ""
	opts.Notify = func(m string) { where = m }
	if m.runner, err = loadInterruptible(ctx, cfg.ModelPath, opts); err != nil {
		return nil, fmt.Errorf("loading %s: %w", cfg.ModelPath, err)
	}
	info := m.runner.Info()
	log.Info("model loaded", "path", cfg.ModelPath, "architecture", info.Architecture, "vocab", info.VocabSize,
		"context_length", info.ContextLen, "layers", mcfg.Layers, "experts", mcfg.Experts, "dtype", mcfg.DType,
		"seconds", time.Since(t0).Round(time.Millisecond).Seconds())
	log.Info("placement", "whole_model", where, "threads", sz.threads)
	if p := arch.ExpertPath(m.runner); p != "" {
		log.Info("routed experts", "where", p)
	}
	log.Info("memory budget", "kv_tokens", m.runner.FreeTokens(), "max_running_requests", sz.maxRunning,
		"chunked_prefill_size", cfg.ChunkedPrefillSize, "mixed_chunk", cfg.EnableMixedChunk,
		"weights_bytes", mcfg.WeightBytes)
	return m, nil
}

// textInput is the tokenizer side of the server: none with
// --skip-tokenizer-init, and the chat template only when one is found.
type textInput struct {
	tok            server.Tokenizer
	template       server.ChatTemplate
	templateSource string
	eos            []int32 // the model's stop ids and the tokenizer's EOS
}

// loadTextInput loads the tokenizer, its EOS token and the chat template.
func loadTextInput(cfg *serveconfig.Config, info model.Info, eos []int32, log *slog.Logger) (textInput, error) {
	in := textInput{eos: eos}
	if cfg.SkipTokenizerInit {
		log.Info("no tokenizer (--skip-tokenizer-init): /generate takes and returns token ids only")
		return in, nil
	}
	t, err := tokenizer.Load(cfg.TokenizerPath)
	if err != nil {
		return in, fmt.Errorf("loading the tokenizer from %s: %w (give --tokenizer-path DIR, or --skip-tokenizer-init to serve token ids only)", cfg.TokenizerPath, err)
	}
	if t.VocabSize() > info.VocabSize {
		log.Warn("the tokenizer has more tokens than the model's vocabulary; prompts with those tokens are refused",
			"tokenizer_vocab", t.VocabSize(), "model_vocab", info.VocabSize)
	}
	in.tok = t
	log.Info("tokenizer loaded", "path", cfg.TokenizerPath, "vocab", t.VocabSize())
	special, err := chattemplate.LoadSpecialTokens(cfg.TokenizerPath)
	if err != nil {
		return in, err
	}
	if special.EOS != "" {
		if id, ok := t.TokenID(special.EOS); ok {
			in.eos = append(in.eos, id)
		}
	}
	jt, err := loadChatTemplate(cfg)
	switch {
	case err == nil:
		in.template, in.templateSource = jt, jt.Source
		source := cfg.ChatTemplate
		if source == "" {
			source = cfg.TokenizerPath
		}
		log.Info("chat template", "source", source)
	case errors.Is(err, chattemplate.ErrNoTemplate):
		// As SGLang: no template, no chat API (it would be a guess).
		log.Warn("no chat template: /v1/chat/completions will answer 400; give --chat-template FILE.jinja", "looked_in", cfg.TokenizerPath)
	default:
		return in, fmt.Errorf("%w (give --chat-template FILE.jinja to use another template)", err)
	}
	return in, nil
}

// outputParsers resolves --reasoning-parser and --tool-call-parser auto
// from the chat template's source: Kimi's (<|im_assistant|>) with a think
// block is Kimi-K2-Thinking's (kimi_k2); DeepSeek's (<｜Assistant｜>) with a
// think block is DeepSeek-V3.1's when it has the thinking switch
// (deepseek-v3), else R1's (deepseek-r1); ◁think▷ is kimi; another <think>
// is qwen3. Tool calls by their markers: Kimi-K2's section, DeepSeek's with
// ```json arguments (deepseekv3) or bare ones (deepseekv31), Qwen's XML or
// JSON.
func outputParsers(cfg *serveconfig.Config, templateSource string) (reasoning, tools string) {
	reasoning, tools = cfg.ReasoningParser, cfg.ToolCallParser
	src := templateSource
	think := strings.Contains(src, "<think>") || strings.Contains(src, "</think>")
	if reasoning == "auto" {
		switch {
		case strings.Contains(src, "<|im_assistant|>"):
			reasoning = "none"
			if think {
				reasoning = "kimi_k2"
			}
		case strings.Contains(src, "<｜Assistant｜>"):
			switch {
			case !think:
				reasoning = "none"
			case thinkingSwitch.MatchString(src):
				reasoning = "deepseek-v3"
			default:
				reasoning = "deepseek-r1"
			}
		case strings.Contains(src, "◁think▷"):
			reasoning = "kimi"
		case strings.Contains(src, "<think>"):
			reasoning = "qwen3"
		default:
			reasoning = "none"
		}
	}
	if tools == "auto" {
		// Both Qwen formats are parsed either way; the name picks the format
		// that forced tool calls (tool_choice required) are written in.
		switch {
		case strings.Contains(src, "<|tool_calls_section_begin|>"):
			tools = "kimi_k2"
		case strings.Contains(src, "<｜tool▁calls▁begin｜>") && strings.Contains(src, "```json"):
			tools = "deepseekv3"
		case strings.Contains(src, "<｜tool▁calls▁begin｜>"):
			tools = "deepseekv31"
		case strings.Contains(src, "<function="):
			tools = "qwen3_coder"
		case strings.Contains(src, "<tool_call>"):
			tools = "qwen25"
		default:
			tools = "none"
		}
	}
	return reasoning, tools
}

// thinkingSwitch finds a template variable named thinking (DeepSeek-V3.1's
// switch; not enable_thinking).
var thinkingSwitch = regexp.MustCompile(`\bthinking\b`)

// newServeEngine makes the scheduler with the flags' settings; its
// watchdog exits the process.
func newServeEngine(cfg *serveconfig.Config, runner model.Runner, sz serveSizes, eos []int32, log *slog.Logger) (*engine.Engine, error) {
	seed := uint64(0)
	if cfg.RandomSeedSet {
		seed = uint64(cfg.RandomSeed)
	}
	return engine.New(runner, engine.Config{
		MaxRunningRequests: sz.maxRunning, ChunkedPrefillSize: cfg.ChunkedPrefillSize, MaxPrefillTokens: cfg.MaxPrefillTokens,
		EnableMixedChunk: cfg.EnableMixedChunk, ContextLength: sz.ctxLen, EOSTokenIDs: eos, Seed: seed, RandomSeed: !cfg.RandomSeedSet,
		WatchdogTimeout: cfg.WatchdogTimeout, Logger: log, DisableRadixCache: cfg.DisableRadixCache,
		OnHang: func(d time.Duration) {
			log.Error("watchdog: a forward step has run longer than --watchdog-timeout; exiting", "elapsed", d, "timeout", cfg.WatchdogTimeout)
			os.Exit(2)
		},
	})
}

// serveHTTP runs the engine and answers HTTP requests until ctx ends (then
// it stops both), the listener fails or the engine stops.
func serveHTTP(ctx context.Context, cfg *serveconfig.Config, srv *server.Server, eng *engine.Engine, log *slog.Logger, ready func(addr string)) error {
	engCtx, stopEngine := context.WithCancel(context.Background())
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(engCtx) }()
	defer func() {
		stopEngine()
		<-engDone
	}()

	ln, err := net.Listen("tcp", cfg.Addr())
	if err != nil {
		return fmt.Errorf("--host/--port: %w", err)
	}
	hs := srv.HTTPServer()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(srv.Listener(ln)) }()
	addr := ln.Addr().String()
	log.Info("serving", "url", "http://"+addr, "model", cfg.ModelName(), "api_key", cfg.APIKey != "", "context_length", eng.ContextLength(),
		"max_total_tokens", eng.MaxTotalTokens())
	if ready != nil {
		ready(addr)
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	case err := <-engDone:
		engDone <- err
		if err == nil {
			err = errors.New("stopped")
		}
		_ = hs.Close()
		return fmt.Errorf("engine: %w", err)
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stopEngine() // ends running streams so their handlers return
	if err := hs.Shutdown(shutCtx); err != nil {
		_ = hs.Close()
	}
	return nil
}

// ktExpertOptions maps the --kt-* flags onto o. Without --kt-weight-path
// the routed experts take the default path (the CPU expert engine with the
// checkpoint's bf16 weights in place when the model runs on the CPU and it
// serves the shapes, else the backend's MoE op); with it, the engine runs
// --kt-method or startup fails saying why. On the GPU (--device cuda, or
// auto with a usable GPU) that is the hybrid step: routed experts on the
// CPU engine, everything else on the GPU.
func ktExpertOptions(cfg *serveconfig.Config, o *arch.Options, log *slog.Logger) error {
	if cfg.KTWeightPath == "" {
		return nil
	}
	if cfg.Device != "cpu" {
		log.Info("--kt-weight-path: routed experts on the CPU expert engine, the rest of the model on the GPU when one is used (hybrid step)", "device", cfg.Device)
	}
	o.Experts = cfg.KTMethod
	o.ExpertWeightPath = cfg.KTWeightPath
	o.ExpertThreads = cfg.KTCPUInfer
	if cfg.Set["kt-threadpool-count"] {
		o.ExpertPools = cfg.KTThreadpoolCount
	}
	if cfg.Set["kt-numa-nodes"] {
		o.ExpertNUMANodes = cfg.KTNumaNodes
	}
	o.GPUExperts = gpuExpertRequest(cfg.KTNumGPUExperts, cfg.KTGPUExpertsRatio, cfg.KTGPUExpertsRatioSet, cfg.KTExpertPlacementStrategy, cfg.InitExpertLocation)
	o.ExpertDeferral = cfg.KTMaxDeferredExpertsPerToken
	o.GPUPrefillThreshold = cfg.KTGPUPrefillTokenThreshold
	o.DynamicExpertUpdate = cfg.KTEnableDynamicExpertUpdate
	return nil
}

// packedDefaultMethod runs the routed experts of a pack-quantized INT4
// checkpoint (Kimi-K2-Thinking's) on their own codes (RAWINT4) when
// --kt-weight-path is given without --kt-method, whose SGLang default,
// AMXINT4, would quantize them again at load.
func packedDefaultMethod(cfg *serveconfig.Config, s modelSummary, o *arch.Options, log *slog.Logger) {
	if cfg.KTWeightPath == "" || cfg.Set["kt-method"] || s.Int4Group == 0 {
		return
	}
	o.Experts = "RAWINT4"
	log.Info("--kt-method not given: the checkpoint's routed experts are pack-quantized INT4 and run on their own codes", "kt_method", o.Experts)
}

// placementStrategies are the --kt-expert-placement-strategy values kt
// implements (frequency reads SGLang's statistics, --init-expert-location
// FILE.pt).
var placementStrategies = []string{string(placement.Uniform), string(placement.FrontLoading), string(placement.Random), string(placement.Frequency)}

// gpuExpertRequest turns --kt-num-gpu-experts (< 0 unset),
// --kt-gpu-experts-ratio (when ratioSet), --kt-expert-placement-strategy
// and --init-expert-location ("trivial" or "": none) into the hybrid
// step's placement request.
func gpuExpertRequest(perLayer int, ratio float64, ratioSet bool, strategy, stats string) placement.Request {
	if stats == "trivial" {
		stats = ""
	}
	return placement.Request{PerLayer: perLayer, Ratio: ratio, RatioSet: ratioSet, Strategy: placement.Strategy(strategy), StatsPath: stats}
}

// modelSummary is what serve logs and needs from config.json and
// generation_config.json.
type modelSummary struct {
	MaxPositions int
	Layers       int
	Experts      int
	Int4Group    int // compressed-tensors pack-quantized INT4 routed experts' group size; 0 = none
	DType        string
	EOS          []int32
	WeightBytes  int64
}

// readModelConfig reads dir's config.json and generation_config.json
// through modelconfig (the one parser); the stop ids are both files'
// eos_token_id (generation_config.json's is what SGLang stops on).
func readModelConfig(dir string) (modelSummary, error) {
	var s modelSummary
	c, err := modelconfig.Load(dir)
	if err != nil {
		return s, fmt.Errorf("model directory: %w", err)
	}
	s.MaxPositions, s.Layers, s.Experts, s.DType = c.MaxPositionEmbeddings, c.NumLayers, c.NumExperts, c.DType
	s.Int4Group = c.Int4GroupSize
	eos := c.EOSTokenIDs
	// a malformed generation_config.json only loses its stop ids, as before
	if g, ok, err := modelconfig.LoadGeneration(dir); err == nil && ok {
		eos = append(eos, g.EOSTokenIDs...)
	}
	for _, id := range eos {
		s.EOS = append(s.EOS, int32(id))
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			s.WeightBytes += st.Size()
		}
	}
	return s, nil
}

// loadChatTemplate reads --chat-template when given, else the tokenizer
// directory's own template.
func loadChatTemplate(cfg *serveconfig.Config) (*chattemplate.Template, error) {
	if cfg.ChatTemplate == "" {
		return chattemplate.Load(cfg.TokenizerPath)
	}
	if _, err := os.Stat(cfg.ChatTemplate); err != nil && !strings.ContainsAny(cfg.ChatTemplate, "/.") {
		return nil, fmt.Errorf("--chat-template %s: no such file; SGLang's built-in template names are not supported in kt, give a Jinja file", cfg.ChatTemplate)
	}
	t, err := chattemplate.LoadFile(cfg.ChatTemplate, cfg.TokenizerPath)
	if err != nil {
		return nil, fmt.Errorf("--chat-template: %w", err)
	}
	return t, nil
}
