package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/servebench"
)

// benchOptions holds the flags of kt bench --type serve and --type load.
type benchOptions struct {
	// --type serve and --type load: the server under test.
	baseURL string
	apiKey  string
	vocab   int

	// --type serve (sglang.bench_serving's flag names).
	backend          string
	model            string
	dataset          string
	numPrompts       int
	inputLen         int
	outputLen        int
	rangeRatio       float64
	requestRate      string
	maxConcurrency   int
	seed             uint64
	disableIgnoreEOS bool
	warmup           int
	outputFile       string
	flushCache       bool
	extraBody        string
	gsp              servebench.SharedPrefixConfig

	// --type load.
	clients   int
	duration  time.Duration
	maxTokens int
	chat      bool
	attackers int
}

var serveBenchOpts, loadBenchOpts benchOptions

func init() {
	addBenchType("serve", benchType{
		short: "a running server (--base-url) under random or shared-prefix prompts: TTFT, TPOT, ITL, latency, throughput, prefix cache hits, as sglang.bench_serving",
		flags: func(cmd *cobra.Command) {
			o := &serveBenchOpts
			f := cmd.Flags()
			f.StringVar(&o.baseURL, "base-url", "http://127.0.0.1:30000", "serve, load: base URL of the running server")
			f.StringVar(&o.apiKey, "api-key", "", "serve, load: the server's --api-key")
			f.IntVar(&o.vocab, "vocab", 0, "serve, load: random prompt ids are drawn below this (default: vocab_size from the server's /get_model_info)")
			f.StringVar(&o.backend, "backend", "sglang", "serve: sglang (streaming /generate with input_ids) or sglang-oai (streaming /v1/completions)")
			f.StringVar(&o.model, "served-model-name", "", "serve: model name sent by the sglang-oai backend (default: the server's)")
			f.StringVar(&o.dataset, "dataset-name", "random", "serve: prompt dataset: random (random token ids) or generated-shared-prefix (groups of random-id prompts sharing a system prompt; --gsp-*)")
			f.IntVar(&o.numPrompts, "num-prompts", 1000, "serve: number of requests")
			f.IntVar(&o.inputLen, "random-input-len", 1024, "serve: largest prompt length in tokens")
			f.IntVar(&o.outputLen, "random-output-len", 1024, "serve: largest output length in tokens")
			f.Float64Var(&o.rangeRatio, "random-range-ratio", 0, "serve: lengths are drawn uniformly from [len*ratio, len]")
			f.StringVar(&o.requestRate, "request-rate", "inf", "serve: mean requests per second (Poisson arrivals), or inf to send all at once")
			f.IntVar(&o.maxConcurrency, "max-concurrency", 0, "serve: most requests in flight (default: no bound)")
			f.Uint64Var(&o.seed, "seed", 1, "serve: random seed of prompts, lengths and arrivals")
			f.BoolVar(&o.disableIgnoreEOS, "disable-ignore-eos", false, "serve: let requests stop at EOS (by default they run to their output length)")
			f.IntVar(&o.warmup, "warmup-requests", 1, "serve: requests sent one at a time before the run (not counted)")
			f.StringVar(&o.outputFile, "output-file", "", "serve: append the result as one JSON line to this file")
			f.BoolVar(&o.flushCache, "flush-cache", false, "serve: empty the server's prefix cache (/flush_cache) after the warm-up")
			f.StringVar(&o.extraBody, "extra-request-body", "", `serve: a JSON object merged into every request (sampling settings such as {"temperature":0.7,"top_p":0.9}; with the sglang backend they go into sampling_params)`)
			d := servebench.DefaultSharedPrefix
			f.IntVar(&o.gsp.NumGroups, "gsp-num-groups", d.NumGroups, "serve, generated-shared-prefix: number of system prompts (groups)")
			f.IntVar(&o.gsp.PromptsPerGroup, "gsp-prompts-per-group", d.PromptsPerGroup, "serve, generated-shared-prefix: requests per group (--num-prompts is unused)")
			f.IntVar(&o.gsp.SystemPromptLen, "gsp-system-prompt-len", d.SystemPromptLen, "serve, generated-shared-prefix: system prompt length in tokens")
			f.IntVar(&o.gsp.QuestionLen, "gsp-question-len", d.QuestionLen, "serve, generated-shared-prefix: question length in tokens")
			f.IntVar(&o.gsp.OutputLen, "gsp-output-len", d.OutputLen, "serve, generated-shared-prefix: output length in tokens")
			f.Float64Var(&o.gsp.RangeRatio, "gsp-range-ratio", d.RangeRatio, "serve, generated-shared-prefix: lengths are drawn uniformly from [len*ratio, len]")
			f.BoolVar(&o.gsp.Ordered, "gsp-ordered", false, "serve, generated-shared-prefix: send the requests group by group instead of shuffled")
		},
		run: func(cmd *cobra.Command, out io.Writer) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			return runServeBench(ctx, &serveBenchOpts, out)
		},
	})
	addBenchType("load", benchType{
		short: "a running server (--base-url) under many clients for a while: errors, disconnects, memory before and after",
		flags: func(cmd *cobra.Command) {
			o := &loadBenchOpts
			f := cmd.Flags()
			f.IntVar(&o.clients, "clients", 32, "load: concurrent clients")
			f.DurationVar(&o.duration, "duration", time.Minute, "load: how long to run")
			f.IntVar(&o.maxTokens, "max-tokens", 64, "load: most output tokens per request")
			f.BoolVar(&o.chat, "chat", false, "load: also send chat requests (the server needs a tokenizer and chat template)")
			f.IntVar(&o.attackers, "attackers", 0, "load: clients sending hostile requests beside the others (oversized schemas and batches, malformed JSON, slow and idle connections); each must be refused or cut")
		},
		run: func(cmd *cobra.Command, out io.Writer) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			// --base-url, --api-key and --vocab are registered once, by serve.
			o := loadBenchOpts
			o.baseURL, o.apiKey, o.vocab = serveBenchOpts.baseURL, serveBenchOpts.apiKey, serveBenchOpts.vocab
			return runLoadBench(ctx, &o, out)
		},
	})
}

func runServeBench(ctx context.Context, o *benchOptions, out io.Writer) error {
	if o.dataset != servebench.DatasetRandom && o.dataset != servebench.DatasetSharedPrefix {
		return fmt.Errorf("--dataset-name %q: only random and generated-shared-prefix are supported in kt bench (no datasets are bundled)", o.dataset)
	}
	rate, err := parseRate(o.requestRate)
	if err != nil {
		return err
	}
	var extra map[string]any
	if o.extraBody != "" {
		if err := json.Unmarshal([]byte(o.extraBody), &extra); err != nil || extra == nil {
			return fmt.Errorf("--extra-request-body: want a JSON object: %q", o.extraBody)
		}
	}
	res, err := servebench.Bench(ctx, servebench.BenchConfig{
		ExtraBody: extra,
		BaseURL:   o.baseURL, APIKey: o.apiKey, Backend: o.backend, Model: o.model,
		NumPrompts: o.numPrompts, InputLen: o.inputLen, OutputLen: o.outputLen, RangeRatio: o.rangeRatio,
		RequestRate: rate, MaxConcurrency: o.maxConcurrency, Vocab: o.vocab, Seed: o.seed,
		DisableIgnoreEOS: o.disableIgnoreEOS, Warmup: o.warmup,
		Dataset: o.dataset, SharedPrefix: o.gsp, FlushCache: o.flushCache,
	})
	if err != nil {
		return err
	}
	res.Write(out)
	if o.outputFile != "" {
		line, err := json.Marshal(res)
		if err != nil {
			return err
		}
		f, err := os.OpenFile(o.outputFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("--output-file: %w", err)
		}
		_, werr := f.Write(append(line, '\n'))
		if err := f.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return fmt.Errorf("--output-file: %w", werr)
		}
	}
	if res.Failed > 0 {
		return fmt.Errorf("%d of %d requests failed", res.Failed, res.Failed+res.Completed)
	}
	return nil
}

// parseRate reads --request-rate: a positive number or inf.
func parseRate(s string) (float64, error) {
	if strings.EqualFold(s, "inf") {
		return math.Inf(1), nil
	}
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || r <= 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return 0, fmt.Errorf("--request-rate %q: want a positive number of requests per second, or inf", s)
	}
	return r, nil
}

func runLoadBench(ctx context.Context, o *benchOptions, out io.Writer) error {
	res, err := servebench.Load(ctx, servebench.LoadConfig{
		BaseURL: o.baseURL, APIKey: o.apiKey, Clients: o.clients, Duration: o.duration,
		MaxTokens: o.maxTokens, Vocab: o.vocab, Chat: o.chat, Attackers: o.attackers,
	})
	if err != nil {
		return err
	}
	res.Write(out)
	if res.Errors > 0 {
		return fmt.Errorf("%d requests failed", res.Errors)
	}
	for _, a := range res.Attacks {
		if a.Accepted+a.Failed > 0 {
			return fmt.Errorf("attack %q: %d accepted, %d failed (%s)", a.Name, a.Accepted, a.Failed, a.FirstFailure)
		}
	}
	return nil
}
