package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/chattemplate"
	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/models"
	_ "github.com/ktserve/kt/models/all" // register every architecture
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

// serveFeatures says what this build can do. Runners run on the CPU
// backend; the KT CPU expert engine, GPU placement and LoRA serving are not
// wired into kt serve yet, so their flags are refused by name.
func serveFeatures() serveconfig.Features {
	return serveconfig.Features{}
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
	maxRunning := cfg.MaxRunningRequests
	if maxRunning == 0 {
		maxRunning = 32
	}
	mcfg, err := readModelConfig(cfg.ModelPath)
	if err != nil {
		return err
	}
	ctxLen := mcfg.MaxPositions
	if cfg.ContextLength > 0 {
		if ctxLen > 0 && cfg.ContextLength > ctxLen {
			return fmt.Errorf("--context-length %d exceeds the model's max_position_embeddings %d (%s)", cfg.ContextLength, ctxLen, filepath.Join(cfg.ModelPath, "config.json"))
		}
		ctxLen = cfg.ContextLength
	}
	maxTotal := cfg.MaxTotalTokens
	if maxTotal == 0 {
		// No memory model for the CPU runners yet: room for every slot to
		// hold a 2K-token sequence, at most the context length each.
		maxTotal = maxRunning * min(max(ctxLen, 1), 2048)
	}
	batchTokens := cfg.ChunkedPrefillSize
	if batchTokens <= 0 {
		batchTokens = max(ctxLen, 1)
	}
	batchTokens += maxRunning // decode tokens in mixed steps
	threads := cfg.KTCPUInfer
	if threads == 0 {
		threads = runtime.NumCPU()
	}

	t0 := time.Now()
	where := ""
	runner, err := models.Load(cfg.ModelPath, models.Options{MaxSeqs: maxRunning, MaxTotalTokens: maxTotal, MaxBatchTokens: batchTokens, Threads: threads,
		Device: cfg.Device, BaseGPUID: cfg.BaseGPUID, MemFractionStatic: cfg.MemFractionStatic, Notify: func(m string) { where = m }})
	if err != nil {
		return fmt.Errorf("loading %s: %w", cfg.ModelPath, err)
	}
	defer runner.Close()
	info := runner.Info()
	log.Info("model loaded", "path", cfg.ModelPath, "architecture", info.Architecture, "vocab", info.VocabSize,
		"context_length", info.ContextLen, "layers", mcfg.Layers, "experts", mcfg.Experts, "dtype", mcfg.DType,
		"seconds", time.Since(t0).Round(time.Millisecond).Seconds())
	log.Info("placement", "whole_model", where, "threads", threads)
	log.Info("memory budget", "kv_tokens", runner.FreeTokens(), "max_running_requests", maxRunning,
		"chunked_prefill_size", cfg.ChunkedPrefillSize, "mixed_chunk", cfg.EnableMixedChunk,
		"weights_bytes", mcfg.WeightBytes)

	// Tokenizer and chat template.
	var tok server.Tokenizer
	var tmpl server.ChatTemplate
	tmplSource := ""
	eos := mcfg.EOS
	if !cfg.SkipTokenizerInit {
		t, err := tokenizer.Load(cfg.TokenizerPath)
		if err != nil {
			return fmt.Errorf("loading the tokenizer from %s: %w (give --tokenizer-path DIR, or --skip-tokenizer-init to serve token ids only)", cfg.TokenizerPath, err)
		}
		if t.VocabSize() > info.VocabSize {
			log.Warn("the tokenizer has more tokens than the model's vocabulary; prompts with those tokens are refused",
				"tokenizer_vocab", t.VocabSize(), "model_vocab", info.VocabSize)
		}
		tok = t
		log.Info("tokenizer loaded", "path", cfg.TokenizerPath, "vocab", t.VocabSize())
		special, err := chattemplate.LoadSpecialTokens(cfg.TokenizerPath)
		if err != nil {
			return err
		}
		if special.EOS != "" {
			if id, ok := t.TokenID(special.EOS); ok {
				eos = append(eos, id)
			}
		}
		jt, err := loadChatTemplate(cfg)
		switch {
		case err == nil:
			tmpl, tmplSource = jt, jt.Source
			source := cfg.ChatTemplate
			if source == "" {
				source = cfg.TokenizerPath
			}
			log.Info("chat template", "source", source)
		case errors.Is(err, chattemplate.ErrNoTemplate):
			// As SGLang: no template, no chat API (it would be a guess).
			log.Warn("no chat template: /v1/chat/completions will answer 400; give --chat-template FILE.jinja", "looked_in", cfg.TokenizerPath)
		default:
			return fmt.Errorf("%w (give --chat-template FILE.jinja to use another template)", err)
		}
	} else {
		log.Info("no tokenizer (--skip-tokenizer-init): /generate takes and returns token ids only")
	}
	reasoning, tools := cfg.ReasoningParser, cfg.ToolCallParser
	if reasoning == "auto" {
		reasoning = "none"
		if strings.Contains(tmplSource, "<think>") {
			reasoning = "qwen3"
		}
	}
	if tools == "auto" {
		tools = "none"
		if strings.Contains(tmplSource, "<tool_call>") || strings.Contains(tmplSource, "<function=") {
			tools = "qwen25"
		}
	}
	log.Info("output parsers", "reasoning", reasoning, "tool_calls", tools)

	seed := uint64(0)
	if cfg.RandomSeedSet {
		seed = uint64(cfg.RandomSeed)
	}
	eng, err := engine.New(runner, engine.Config{
		MaxRunningRequests: maxRunning, ChunkedPrefillSize: cfg.ChunkedPrefillSize, MaxPrefillTokens: cfg.MaxPrefillTokens,
		EnableMixedChunk: cfg.EnableMixedChunk, ContextLength: ctxLen, EOSTokenIDs: eos, Seed: seed, RandomSeed: !cfg.RandomSeedSet,
		WatchdogTimeout: cfg.WatchdogTimeout, Logger: log,
		OnHang: func(d time.Duration) {
			log.Error("watchdog: a forward step has run longer than --watchdog-timeout; exiting", "elapsed", d, "timeout", cfg.WatchdogTimeout)
			os.Exit(2)
		},
	})
	if err != nil {
		return err
	}
	srv, err := server.New(server.Options{
		Engine: eng, ModelName: cfg.ModelName(), ModelPath: cfg.ModelPath, Tokenizer: tok, TokenizerPath: cfg.TokenizerPath,
		Template: tmpl, ReasoningParser: reasoning, ToolCallParser: tools, APIKey: cfg.APIKey, ServerArgs: cfg,
		Version: version, Logger: log, AccessLog: logLevel(cfg.LogLevelHTTP) <= slog.LevelInfo,
	})
	if err != nil {
		return err
	}

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
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
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

// modelSummary is what serve logs and needs from config.json and
// generation_config.json.
type modelSummary struct {
	MaxPositions int
	Layers       int
	Experts      int
	DType        string
	EOS          []int32
	WeightBytes  int64
}

func readModelConfig(dir string) (modelSummary, error) {
	var s modelSummary
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("model directory: %w", err)
	}
	var c struct {
		MaxPositions int             `json:"max_position_embeddings"`
		Layers       int             `json:"num_hidden_layers"`
		Experts      int             `json:"num_experts"`
		LocalExperts int             `json:"num_local_experts"`
		DType        string          `json:"dtype"`
		TorchDType   string          `json:"torch_dtype"`
		EOS          json.RawMessage `json:"eos_token_id"`
		Text         *struct {
			MaxPositions int             `json:"max_position_embeddings"`
			Layers       int             `json:"num_hidden_layers"`
			Experts      int             `json:"num_experts"`
			EOS          json.RawMessage `json:"eos_token_id"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	s.MaxPositions, s.Layers, s.Experts, s.DType = c.MaxPositions, c.Layers, max(c.Experts, c.LocalExperts), c.DType
	if s.DType == "" {
		s.DType = c.TorchDType
	}
	s.EOS = parseEOS(c.EOS)
	if t := c.Text; t != nil {
		s.MaxPositions = max(s.MaxPositions, t.MaxPositions)
		s.Layers = max(s.Layers, t.Layers)
		s.Experts = max(s.Experts, t.Experts)
		s.EOS = append(s.EOS, parseEOS(t.EOS)...)
	}
	// generation_config.json's eos_token_id is what SGLang stops on.
	if data, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil {
		var g struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		if json.Unmarshal(data, &g) == nil {
			s.EOS = append(s.EOS, parseEOS(g.EOS)...)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			s.WeightBytes += st.Size()
		}
	}
	return s, nil
}

// parseEOS reads an id or a list of ids.
func parseEOS(raw json.RawMessage) []int32 {
	var one int32
	if json.Unmarshal(raw, &one) == nil {
		return []int32{one}
	}
	var many []int32
	_ = json.Unmarshal(raw, &many)
	return many
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
