package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/servebench"
)

func TestBenchFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--type", "nope"}, `unknown bench type "nope"`},
		{[]string{"--type", "serve", "--dataset-name", "sharegpt"}, "only random and generated-shared-prefix"},
		{[]string{"--type", "serve", "--request-rate", "0"}, "--request-rate"},
		{[]string{"--type", "serve", "--request-rate", "fast"}, "--request-rate"},
		{[]string{"--type", "serve", "--extra-request-body", "[1]"}, "--extra-request-body: want a JSON object"},
		{[]string{"--type", "serve", "--extra-request-body", "{bad"}, "--extra-request-body: want a JSON object"},
		{[]string{"--type", "serve", "--extra-request-body", "null"}, "--extra-request-body: want a JSON object"},
		{[]string{"--type", "serve", "--base-url", "http://127.0.0.1:1"}, "get_model_info"},
		{[]string{"--type", "load", "--base-url", "http://127.0.0.1:1", "--vocab", "10", "--duration", "1s"}, "/metrics"},
	} {
		cmd := newBenchCmd()
		cmd.SetArgs(c.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestBenchServeTinyModel runs kt bench --type serve against kt serve on
// the tiny checkpoint (token ids only) and checks the report and the JSON
// line.
func TestBenchServeTinyModel(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "models", "qwen3moe-a")
	if _, err := os.Stat(filepath.Join(model, "config.json")); err != nil {
		t.Skipf("no tiny model: %v", err)
	}
	url := startServe(t, "--model-path", model, "--skip-tokenizer-init", "--log-level", "warning", "--max-running-requests", "4")
	out := filepath.Join(t.TempDir(), "bench.jsonl")
	var report strings.Builder
	o := &benchOptions{baseURL: url, backend: "sglang", dataset: "random", numPrompts: 8, inputLen: 32, outputLen: 8,
		rangeRatio: 1, requestRate: "inf", maxConcurrency: 4, seed: 1, warmup: 1, outputFile: out}
	if err := runServeBench(context.Background(), o, &report); err != nil {
		t.Fatalf("%v\n%s", err, report.String())
	}
	for _, s := range []string{"Successful requests:                     8", "Total input tokens:                      256", "Total generated tokens:                  64", "Mean TPOT (ms):"} {
		if !strings.Contains(report.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, report.String())
		}
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var r struct {
		Completed   int    `json:"completed"`
		TotalOutput int    `json:"total_output_tokens"`
		Rate        string `json:"request_rate"`
		TTFT        struct {
			Mean float64 `json:"mean_ms"`
		} `json:"ttft"`
	}
	if !sc.Scan() || json.Unmarshal(sc.Bytes(), &r) != nil || r.Completed != 8 || r.TotalOutput != 64 || r.Rate != "inf" || r.TTFT.Mean <= 0 {
		t.Errorf("output file: %s", sc.Bytes())
	}
	o.clients, o.duration, o.maxTokens = 4, 300e6, 8
	report.Reset()
	if err := runLoadBench(context.Background(), o, &report); err != nil || !strings.Contains(report.String(), " 0 errors") {
		t.Errorf("load: %v\n%s", err, report.String())
	}
}

// TestBenchServeSharedPrefix runs the generated-shared-prefix workload
// against kt serve on the tiny checkpoint with the prefix cache on and
// with --disable-radix-cache: only the cache reports cached tokens, and it
// prefills fewer tokens, by exactly the cached ones.
func TestBenchServeSharedPrefix(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "models", "qwen3moe-a")
	if _, err := os.Stat(filepath.Join(model, "config.json")); err != nil {
		t.Skipf("no tiny model: %v", err)
	}
	args := []string{"--model-path", model, "--log-level", "warning", "--max-running-requests", "4"}
	// sglang-oai counts chunks that carry text, so it needs the tokenizer.
	tok := filepath.Join("..", "..", "testdata", "tokenizers", "qwen3-tiny1000")
	run := func(backend string, extra ...string) (*servebench.BenchResult, string) {
		url := startServe(t, append(slices.Clone(args), extra...)...)
		o := &benchOptions{baseURL: url, backend: backend, dataset: servebench.DatasetSharedPrefix, requestRate: "inf", maxConcurrency: 2,
			seed: 1, warmup: 1, flushCache: true,
			gsp: servebench.SharedPrefixConfig{NumGroups: 2, PromptsPerGroup: 4, SystemPromptLen: 64, QuestionLen: 16, OutputLen: 4, RangeRatio: 1}}
		out := filepath.Join(t.TempDir(), "bench.jsonl")
		o.outputFile = out
		var report strings.Builder
		if err := runServeBench(context.Background(), o, &report); err != nil {
			t.Fatalf("%v\n%s", err, report.String())
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var res servebench.BenchResult
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatalf("output file %s: %v", b, err)
		}
		return &res, report.String()
	}
	on, onReport := run("sglang", "--skip-tokenizer-init")
	off, offReport := run("sglang", "--skip-tokenizer-init", "--disable-radix-cache")
	for _, r := range []*servebench.BenchResult{on, off} {
		if r.Completed != 8 || r.TotalInput != 8*80 || r.TotalOutput != 8*4 || r.CachedTokens == nil || r.PrefillTokens == nil || r.ServerCacheHitRate == nil {
			t.Fatalf("result %+v", r)
		}
	}
	t.Logf("cache on: cached %d, prefill %d; off: cached %d, prefill %d", *on.CachedTokens, *on.PrefillTokens, *off.CachedTokens, *off.PrefillTokens)
	if *off.CachedTokens != 0 || *off.PrefillTokens != off.TotalInput || *off.ServerCacheHitRate != 0 {
		t.Errorf("cache off: cached %d, prefill %d of %d, server hit rate %v", *off.CachedTokens, *off.PrefillTokens, off.TotalInput, *off.ServerCacheHitRate)
	}
	// At most 2 requests run at once, so each group's later requests find
	// its 64-token system prompt (4 full pages) in the cache.
	if *on.CachedTokens <= 0 || *on.CachedTokens%16 != 0 || *on.PrefillTokens >= *off.PrefillTokens ||
		*on.PrefillTokens != on.TotalInput-*on.CachedTokens || *on.ServerCacheHitRate <= 0 {
		t.Errorf("cache on: cached %d, prefill %d of %d (off: %d), server hit rate %v", *on.CachedTokens, *on.PrefillTokens, on.TotalInput, *off.PrefillTokens, *on.ServerCacheHitRate)
	}
	if !strings.Contains(onReport, "Groups x prompts per group:              2 x 4") || !strings.Contains(offReport, "Cached prompt tokens:                    0 ") {
		t.Errorf("reports:\n%s\n%s", onReport, offReport)
	}
	// The OpenAI route reports cached tokens only with
	// --enable-cache-report (as SGLang); without it the report says n/a.
	oai, _ := run("sglang-oai", "--tokenizer-path", tok, "--enable-cache-report")
	if oai.Completed != 8 || oai.CachedTokens == nil || *oai.CachedTokens <= 0 || *oai.PrefillTokens != oai.TotalInput-*oai.CachedTokens {
		t.Errorf("sglang-oai with --enable-cache-report: %+v", oai)
	}
	quiet, quietReport := run("sglang-oai", "--tokenizer-path", tok)
	if quiet.Completed != 8 || quiet.CachedTokens != nil || *quiet.PrefillTokens >= quiet.TotalInput || !strings.Contains(quietReport, "Cached prompt tokens:                    n/a") {
		t.Errorf("sglang-oai without --enable-cache-report: %+v\n%s", quiet, quietReport)
	}
}
