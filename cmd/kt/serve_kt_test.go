//go:build linux && amd64 && cgo

package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/qwen3moe"
	"github.com/ktserve/kt/generate"
	"github.com/ktserve/kt/serveconfig"
)

// ktTestShape is a synthetic Qwen3-MoE whose shapes the CPU expert engine
// serves (hidden 128; intermediate 64 fits BF16, AMXBF16 and AMXINT8 but
// not the int4 methods).
var ktTestShape = qwen3moe.SynthShape{Layers: 2, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 32,
	Experts: 8, TopK: 2, MoEInter: 64, Vocab: 300, Exp: 123}

var ktPrompts = [][]int32{{5, 17, 250, 3, 99, 42}, {7}, {200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210}}

const ktNewTokens = 12

// generateIDs posts greedy /generate requests for ktPrompts.
func generateIDs(t *testing.T, url string) [][]int32 {
	t.Helper()
	var all [][]int32
	for _, p := range ktPrompts {
		body, _ := json.Marshal(map[string]any{"input_ids": p,
			"sampling_params": map[string]any{"max_new_tokens": ktNewTokens, "temperature": 0, "ignore_eos": true}})
		code, raw, err := postJSON(url+"/generate", body)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			OutputIDs []int32 `json:"output_ids"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || code != 200 {
			t.Fatalf("/generate: %d %s", code, raw)
		}
		all = append(all, out.OutputIDs)
	}
	return all
}

// TestServeKTMethods serves a synthetic model with the --kt-* flags and
// checks the answers: --kt-method BF16 gives exactly the greedy ids of the
// backend's reference MoE op; AMXINT8 from a kt quant directory gives
// exactly what AMXINT8 quantized at load gives; the startup log says where
// the experts run; methods and weights that cannot serve are refused at
// startup saying why and what would work.
func TestServeKTMethods(t *testing.T) {
	dir := t.TempDir()
	if err := qwen3moe.WriteSynthetic(dir, ktTestShape, 5); err != nil {
		t.Fatal(err)
	}
	// The reference: the backend's MoE op, in process.
	ref := backendReference(t, dir, 0, 16)

	common := []string{"--model-path", dir, "--skip-tokenizer-init", "--max-running-requests", "2", "--max-total-tokens", "256",
		"--chunked-prefill-size", "8", "--kt-cpuinfer", "2", "--kt-num-gpu-experts", "0", "--kt-max-deferred-experts-per-token", "0"}
	url, logs := startServeLogs(t, append(common, "--kt-weight-path", dir, "--kt-method", "BF16", "--kt-threadpool-count", "1", "--kt-numa-nodes", "0")...)
	if got := generateIDs(t, url); !slices.EqualFunc(got, ref, slices.Equal) {
		t.Errorf("--kt-method BF16: %v\nreference op: %v", got, ref)
	}
	for _, want := range []string{"routed experts", "cpuexperts BF16", "2 threads in 1 pool(s)", "weights from the checkpoint"} {
		if !strings.Contains(logs(), want) {
			t.Errorf("startup log lacks %q:\n%s", want, logs())
		}
	}

	qdir := filepath.Join(t.TempDir(), "int8")
	if err := runQuant(dir, quantOpts{output: qdir, method: "int8", pools: 1, noProg: true}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	url, logs = startServeLogs(t, append(common, "--kt-weight-path", qdir, "--kt-method", "AMXINT8")...)
	fromQuant := generateIDs(t, url)
	if !strings.Contains(logs(), "kt quant weights in "+qdir) {
		t.Errorf("startup log does not name the kt quant directory:\n%s", logs())
	}
	url, _ = startServeLogs(t, append(common, "--kt-weight-path", dir, "--kt-method", "AMXINT8")...)
	if atLoad := generateIDs(t, url); !slices.EqualFunc(fromQuant, atLoad, slices.Equal) {
		t.Errorf("AMXINT8 from kt quant: %v\nquantized at load: %v", fromQuant, atLoad)
	}

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--kt-weight-path", dir, "--kt-method", "AMXINT4"},
			[]string{"AMXINT4 needs each pool's intermediate slice (64 = 64 / 1 pools) to be a multiple of 128", "methods that fit: BF16, AMXBF16, AMXINT8"}},
		{[]string{"--kt-weight-path", qdir, "--kt-method", "BF16"},
			[]string{"holds AMXINT8 weights", "--kt-method AMXINT8"}},
		{[]string{"--kt-weight-path", qdir, "--kt-method", "AMXINT8", "--kt-threadpool-count", "2"},
			[]string{"converted for 1 thread pools but --kt-threadpool-count is 2"}},
		{[]string{"--kt-weight-path", t.TempDir(), "--kt-method", "BF16"},
			[]string{"not a kt quant output", "not the model directory"}},
		{[]string{"--kt-weight-path", dir, "--kt-method", "GPTQ_INT4"},
			[]string{"--kt-method: GPTQ_INT4 is not implemented yet in kt"}},
	} {
		err := runServe(context.Background(), append(append([]string{"--port", "0"}, common...), c.args...), io.Discard, io.Discard, nil)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %v, want %q", c.args, err, w)
			}
		}
	}
	// --kt-weight-path keeps the device asked for (the hybrid step on the
	// GPU) and hands the method and weights to the experts.
	for _, dev := range []string{"auto", "cpu", "cuda"} {
		cfg, err := serveconfig.Parse([]string{"--model-path", dir, "--kt-weight-path", dir, "--kt-method", "BF16", "--device", dev})
		if err != nil {
			t.Fatal(err)
		}
		var o arch.Options
		o.Device = cfg.Device
		err = ktExpertOptions(cfg, &o, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil || o.Device != dev || o.Experts != "BF16" || o.ExpertWeightPath != dir {
			t.Errorf("--device %s: %v, options %+v", dev, err, o)
		}
	}
}

// TestGenerateKTFlags: kt generate takes serve's --kt-* flags; BF16 on the
// engine prints the reference op's ids, and stderr says where experts ran.
func TestGenerateKTFlags(t *testing.T) {
	dir := t.TempDir()
	if err := qwen3moe.WriteSynthetic(dir, ktTestShape, 5); err != nil {
		t.Fatal(err)
	}
	args := []string{"generate", "--model-path", dir, "--input-ids", "5,17,250,3,99,42", "--max-new-tokens", "12", "--device", "cpu"}
	ref, refErr, err := runKT(t, append(args, "--experts", "backend")...)
	if err != nil {
		t.Fatal(err)
	}
	got, gotErr, err := runKT(t, append(args, "--kt-method", "BF16", "--kt-weight-path", dir, "--kt-cpuinfer", "2", "--kt-threadpool-count", "1", "--kt-numa-nodes", "0")...)
	if err != nil {
		t.Fatal(err)
	}
	if got != ref {
		t.Errorf("--kt-method BF16: %s, reference op: %s", got, ref)
	}
	if !strings.Contains(refErr, "routed experts: backend MoE op") || !strings.Contains(gotErr, "routed experts: cpuexperts BF16") {
		t.Errorf("stderr does not say where experts ran:\n%s\n%s", refErr, gotErr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--kt-weight-path", dir}, "--kt-weight-path needs --kt-method"},
		{[]string{"--kt-method", "AMXINT8", "--experts", "BF16"}, "disagree"},
		{[]string{"--kt-method", "AMXINT4"}, "methods that fit: BF16, AMXBF16, AMXINT8"},
	} {
		if _, _, err := runKT(t, append(args, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
}

// backendReference generates ktPrompts from the model in dir with the
// backend's MoE op (the engine's reference) in process, with expert deferral
// D and prefill chunks of chunk tokens, and returns the output ids.
func backendReference(t *testing.T, dir string, deferral, chunk int) [][]int32 {
	t.Helper()
	r, err := arch.Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 16, Threads: 2, Experts: "backend", Device: "cpu", ExpertDeferral: deferral})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ref [][]int32
	for _, p := range ktPrompts {
		res, err := generate.Run(r, p, generate.Params{MaxNewTokens: ktNewTokens, IgnoreEOS: true, ChunkSize: chunk})
		if err != nil {
			t.Fatal(err)
		}
		ref = append(ref, res.OutputIDs())
	}
	return ref
}

// TestPackedDefaultMethod: --kt-weight-path without --kt-method runs a
// pack-quantized INT4 checkpoint's experts on their own codes (RAWINT4);
// a named method, a bf16 checkpoint or no --kt-weight-path keep theirs.
func TestPackedDefaultMethod(t *testing.T) {
	for _, c := range []struct {
		args  []string
		group int
		want  string
	}{
		{[]string{"--kt-weight-path", "/m"}, 32, "RAWINT4"},
		{[]string{"--kt-weight-path", "/m", "--kt-method", "AMXINT4"}, 32, "AMXINT4"},
		{[]string{"--kt-weight-path", "/m"}, 0, "AMXINT4"},
		{nil, 32, ""},
	} {
		cfg, err := serveconfig.Parse(append([]string{"--model-path", "/m"}, c.args...))
		if err != nil {
			t.Fatal(err)
		}
		var o arch.Options
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		if err := ktExpertOptions(cfg, &o, log); err != nil {
			t.Fatal(err)
		}
		packedDefaultMethod(cfg, modelSummary{Int4Group: c.group}, &o, log)
		if o.Experts != c.want {
			t.Errorf("%v, groups of %d: method %q, want %q", c.args, c.group, o.Experts, c.want)
		}
	}
}
