package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/arch"
	_ "github.com/ktserve/kt/arch/all" // register every architecture
	"github.com/ktserve/kt/generate"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/tokenizer"
)

func init() { addCommand(newGenerateCmd) }

type generateFlags struct {
	loadFlags
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
	maxTotal       int
	chunk          int
	cpuProfile     string
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
	f.register(fl)
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
	fl.IntVar(&f.maxTotal, "max-total-tokens", 0, "KV cache budget in tokens (default: prompt + new tokens)")
	fl.IntVar(&f.chunk, "chunked-prefill-size", 512, "prefill chunk size in tokens")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the generation (prefill and decode, not the load) to this file (go tool pprof)")
	return c
}

// runGenerate is kt generate: check the flags, read the prompt, load the
// model, run the prompt on the engine and print the result.
func runGenerate(cmd *cobra.Command, f *generateFlags) error {
	opts, err := f.validate(cmd)
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
	opts.MaxSeqs, opts.MaxTotalTokens, opts.MaxBatchTokens = 1, total, f.chunk
	opts.Notify = func(msg string) { fmt.Fprintln(stderr, "generate:", msg) }
	r, err := arch.Load(f.modelPath, opts)
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

// validate checks the flags, before anything is loaded, and returns the
// model-loading options they give.
func (f *generateFlags) validate(cmd *cobra.Command) (arch.Options, error) {
	opts, err := f.options(cmd)
	if err != nil {
		return opts, fmt.Errorf("generate: %w", err)
	}
	if (f.prompt == "") == (f.inputIDs == "") {
		return opts, errors.New("generate: give exactly one of --prompt and --input-ids")
	}
	if f.chunk <= 0 || f.maxNew < 0 {
		return opts, errors.New("generate: --chunked-prefill-size must be positive and --max-new-tokens non-negative")
	}
	return opts, nil
}

// promptIDs is the prompt's token ids (--prompt encoded, or --input-ids)
// and the tokenizer, nil where the tokenizer directory has none.
func (f *generateFlags) promptIDs() ([]int32, *tokenizer.Tokenizer, error) {
	var tok *tokenizer.Tokenizer
	tokDir := f.tokenizerDir()
	if tokenizer.FileIn(tokDir) != "" {
		var err error
		if tok, err = tokenizer.Load(tokDir); err != nil {
			return nil, nil, fmt.Errorf("generate: %w", err)
		}
	}
	if f.prompt != "" {
		if tok == nil {
			return nil, nil, fmt.Errorf("generate: --prompt needs %s or %s (or --tokenizer-path); use --input-ids", filepath.Join(tokDir, "tokenizer.json"), tokenizer.TiktokenFile)
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
