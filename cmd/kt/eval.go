package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/perplexity"
	"github.com/ktserve/kt/tokenizer"
)

func init() { addCommand(newEvalCmd) }

type evalFlags struct {
	loadFlags
	kind    string
	data    string
	ctx     int
	chunk   int
	jsonOut bool
}

func newEvalCmd() *cobra.Command {
	var f evalFlags
	c := &cobra.Command{
		Use:   "eval --type perplexity --model-path DIR --data FILE",
		Short: "Measure a model offline: the perplexity of a text file",
		Long: `eval --type perplexity tokenizes FILE with the model's tokenizer (as one
string, no special tokens added), cuts the ids from the start into
non-overlapping windows of --ctx tokens (the last may be shorter), runs each
window from an empty context and scores every token of a window but its
first, given the window's tokens before it. It prints the scored tokens, the
mean negative log-likelihood (nats per token), the perplexity exp(NLL) and
the time; --json prints them as JSON. This is the held-out evaluation of
tools/train/train_moe.py (train_report.json's heldout_nll_f32 is the same
measure in float32 by transformers). The model loads as kt generate loads
it: --device, --kt-method and --kt-weight-path choose the backend and the
routed experts' engine.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runEval(cmd, &f) },
	}
	fl := c.Flags()
	f.register(fl)
	fl.StringVar(&f.kind, "type", "perplexity", "what to measure: perplexity")
	fl.StringVar(&f.data, "data", "", "UTF-8 text file to score")
	fl.IntVar(&f.ctx, "ctx", 512, "window in tokens; windows do not overlap")
	fl.IntVar(&f.chunk, "chunked-prefill-size", 512, "prefill chunk size in tokens")
	fl.BoolVar(&f.jsonOut, "json", false, "print the result as JSON")
	return c
}

func runEval(cmd *cobra.Command, f *evalFlags) error {
	if f.kind != "perplexity" {
		return fmt.Errorf("eval: --type %q: want perplexity", f.kind)
	}
	opts, err := f.options(cmd)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if f.data == "" {
		return errors.New("eval: --data is required")
	}
	if f.ctx < 2 || f.chunk <= 0 {
		return errors.New("eval: --ctx must be at least 2 and --chunked-prefill-size positive")
	}
	text, err := os.ReadFile(f.data)
	if err != nil {
		return fmt.Errorf("eval: --data: %w", err)
	}
	tokDir := f.tokenizerDir()
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		return fmt.Errorf("eval: the model's tokenizer (%s; or give --tokenizer-path): %w", tokDir, err)
	}
	t0 := time.Now()
	ids := tok.Encode(string(text))
	encodeSec := time.Since(t0).Seconds()
	if len(ids) < 2 {
		return fmt.Errorf("eval: %s encodes to %d tokens: %w", f.data, len(ids), perplexity.ErrNothingToScore)
	}
	ctx := min(f.ctx, len(ids))
	opts.MaxSeqs, opts.MaxTotalTokens, opts.MaxBatchTokens = 1, ctx+16, min(f.chunk, ctx)
	opts.Notify = func(msg string) { fmt.Fprintln(cmd.ErrOrStderr(), "eval:", msg) }
	t0 = time.Now()
	r, err := arch.Load(f.modelPath, opts)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	defer r.Close()
	loadSec := time.Since(t0).Seconds()
	if p := arch.ExpertPath(r); p != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), "eval: routed experts:", p)
	}
	res, err := perplexity.Score(r, ids, perplexity.Options{Ctx: f.ctx, Chunk: opts.MaxBatchTokens})
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	w := cmd.OutOrStdout()
	if f.jsonOut {
		out := struct {
			Type string `json:"type"`
			Data string `json:"data"`
			perplexity.Result
			TokensPerSecond float64 `json:"tokens_per_second"`
			EncodeSeconds   float64 `json:"encode_seconds"`
			LoadSeconds     float64 `json:"load_seconds"`
		}{f.kind, f.data, res, float64(res.InputTokens) / res.Seconds, encodeSec, loadSec}
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		return enc.Encode(out)
	}
	fmt.Fprintf(w, "tokens %d (scored %d in %d windows of up to %d)\nnll %.6f\nperplexity %.4f\ntime %.2fs (%.0f tokens/s; load %.2fs, tokenize %.2fs)\n",
		res.InputTokens, res.Tokens, res.Windows, res.Ctx, res.NLL, res.Perplexity, res.Seconds, float64(res.InputTokens)/res.Seconds, loadSec, encodeSec)
	return nil
}
