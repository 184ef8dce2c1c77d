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

func init() { addCommand(newBenchCmd) }

// benchOptions holds the flags of every benchmark type; each type reads
// its own.
type benchOptions struct {
	typ string

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

	// --type load.
	clients   int
	duration  time.Duration
	maxTokens int
	chat      bool
}

// benchTypes lists the --type values, each with what it measures.
var benchTypes = []struct{ name, what string }{
	{"serve", "a running server under random prompts: TTFT, TPOT, ITL, latency, throughput (as sglang.bench_serving)"},
	{"load", "a running server under many clients for a while: errors, disconnects, memory before and after"},
}

func newBenchCmd() *cobra.Command {
	o := &benchOptions{}
	var types []string
	for _, t := range benchTypes {
		types = append(types, fmt.Sprintf("  %-6s %s", t.name, t.what))
	}
	cmd := &cobra.Command{
		Use:   "bench --type TYPE [flags]",
		Short: "Benchmarks: serving (TTFT/TPOT/ITL against a running server), load/soak tests",
		Long: "Runs a benchmark. Types:\n" + strings.Join(types, "\n") + `

Serving benchmark, like python -m sglang.bench_serving --dataset-name random:
  kt bench --type serve --base-url http://127.0.0.1:30000 --num-prompts 200 \
    --random-input-len 256 --random-output-len 64 --max-concurrency 16
Prompts are random token ids (sent as input_ids, so it also works against a
server started with --skip-tokenizer-init); requests ignore EOS and run to
their output length unless --disable-ignore-eos.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			return runBench(ctx, o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.typ, "type", "", "benchmark type: serve, load")
	f.StringVar(&o.baseURL, "base-url", "http://127.0.0.1:30000", "serve, load: base URL of the running server")
	f.StringVar(&o.apiKey, "api-key", "", "serve, load: the server's --api-key")
	f.IntVar(&o.vocab, "vocab", 0, "serve, load: random prompt ids are drawn below this (default: vocab_size from the server's /get_model_info)")
	f.StringVar(&o.backend, "backend", "sglang", "serve: sglang (streaming /generate) or sglang-oai (streaming /v1/completions)")
	f.StringVar(&o.model, "model", "", "serve: model name sent by sglang-oai (default: the server's)")
	f.StringVar(&o.dataset, "dataset-name", "random", "serve: prompt dataset; only random is supported")
	f.IntVar(&o.numPrompts, "num-prompts", 1000, "serve: number of requests")
	f.IntVar(&o.inputLen, "random-input-len", 1024, "serve: largest prompt length in tokens")
	f.IntVar(&o.outputLen, "random-output-len", 1024, "serve: largest output length in tokens")
	f.Float64Var(&o.rangeRatio, "random-range-ratio", 0, "serve: lengths are drawn uniformly from [len*ratio, len]")
	f.StringVar(&o.requestRate, "request-rate", "inf", "serve: mean requests per second (Poisson arrivals), or inf to send all at once")
	f.IntVar(&o.maxConcurrency, "max-concurrency", 0, "serve: most requests in flight (default: no bound)")
	f.Uint64Var(&o.seed, "seed", 1, "serve: random seed of prompts, lengths and arrivals")
	f.BoolVar(&o.disableIgnoreEOS, "disable-ignore-eos", false, "serve: let requests stop at EOS")
	f.IntVar(&o.warmup, "warmup-requests", 1, "serve: requests sent one at a time before the run (not counted)")
	f.StringVar(&o.outputFile, "output-file", "", "serve: append the result as one JSON line to this file")
	f.IntVar(&o.clients, "clients", 32, "load: concurrent clients")
	f.DurationVar(&o.duration, "duration", time.Minute, "load: how long to run")
	f.IntVar(&o.maxTokens, "max-tokens", 64, "load: most output tokens per request")
	f.BoolVar(&o.chat, "chat", false, "load: also send chat requests (the server needs a tokenizer and chat template)")
	return cmd
}

func runBench(ctx context.Context, o *benchOptions, out io.Writer) error {
	switch o.typ {
	case "serve":
		return runServeBench(ctx, o, out)
	case "load":
		return runLoadBench(ctx, o, out)
	case "":
		return fmt.Errorf("--type: required (serve, load)")
	default:
		return fmt.Errorf("--type %q: not a benchmark type (serve, load)", o.typ)
	}
}

func runServeBench(ctx context.Context, o *benchOptions, out io.Writer) error {
	if o.dataset != "random" {
		return fmt.Errorf("--dataset-name %q: only random is supported in kt bench (no datasets are bundled)", o.dataset)
	}
	rate, err := parseRate(o.requestRate)
	if err != nil {
		return err
	}
	res, err := servebench.Bench(ctx, servebench.BenchConfig{
		BaseURL: o.baseURL, APIKey: o.apiKey, Backend: o.backend, Model: o.model,
		NumPrompts: o.numPrompts, InputLen: o.inputLen, OutputLen: o.outputLen, RangeRatio: o.rangeRatio,
		RequestRate: rate, MaxConcurrency: o.maxConcurrency, Vocab: o.vocab, Seed: o.seed,
		DisableIgnoreEOS: o.disableIgnoreEOS, Warmup: o.warmup,
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
		MaxTokens: o.maxTokens, Vocab: o.vocab, Chat: o.chat,
	})
	if err != nil {
		return err
	}
	res.Write(out)
	if res.Errors > 0 {
		return fmt.Errorf("%d requests failed", res.Errors)
	}
	return nil
}
